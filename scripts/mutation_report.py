#!/usr/bin/env python3
"""The mutation report docs/testing.md quotes: mutmut's verdicts per module, with the equivalent
mutants of tests/mutation_equivalent.txt set apart, the command and its wall time.

    python scripts/mutation_report.py [--mutants mutants] [--seconds N] [--docs docs/testing.md]

Reads mutmut's result files (``mutants/<path>.meta``, one per mutated source file). The score is
killed (timeouts count as killed, as mutmut counts them) over the mutants checked that are not
equivalent; a run still going (or stopped) shows how many are not checked yet.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from nlqo.docblocks import write_block  # noqa: E402

VERDICTS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 36: "timeout", 24: "timeout",
            -24: "timeout", 152: "timeout", 255: "timeout", None: "not checked", 37: "caught by type check"}  # fmt: skip
"""mutmut 3.8's exit codes, as its ``stats.status_by_exit_code`` reads them (other codes: suspicious)."""
COMMAND = "make mutation"
EQUIVALENT = REPO / "tests" / "mutation_equivalent.txt"


def equivalent(path: Path = EQUIVALENT) -> dict[str, str]:
    """Mutant name -> why the change cannot alter behaviour (``name | reason`` lines)."""
    out = {}
    if path.exists():
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip() and not line.startswith("#"):
                name, sep, why = line.partition(" | ")
                if not sep or not why.strip():
                    raise SystemExit(f"{path}:{n}: write 'mutant name | why it is equivalent'")
                out[name.strip()] = why.strip()
    return out


def verdicts(mutants: Path) -> dict[str, dict[str, str]]:
    """Module -> mutant name -> verdict."""
    out: dict[str, dict[str, str]] = {}
    for meta in sorted(mutants.rglob("*.py.meta")):
        module = meta.relative_to(mutants).as_posix().removesuffix(".meta")
        codes = json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"]
        out[module] = {name: VERDICTS.get(code, "suspicious") for name, code in codes.items()}
    return out


def report(mutants: Path, seconds: float | None) -> str:
    found = verdicts(mutants)
    known = equivalent()
    rows = [
        "| module | mutants | not checked | killed | timeout | survived | no tests | equivalent | score |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    total: Counter[str] = Counter()
    for module, by_name in found.items():
        counts = Counter("equivalent" if name in known else v for name, v in by_name.items())
        counts["mutants"] = len(by_name)
        total.update(counts)
        rows.append(_row(f"`{module}`", counts))
    rows.append(_row("**all**", total))
    wall = f", {seconds / 60:.0f} minutes wall time on this machine" if seconds else ""
    survivors = total["survived"] + total["no tests"]
    partial = f" **Partial**: {total['not checked']} mutants not checked yet." if total["not checked"] else ""
    return "\n".join(
        [
            f"`{COMMAND}` (mutmut 3.8.1{wall}); score = (killed + timeout) / (mutants checked - equivalent).{partial}",
            "",
            *rows,
            "",
            f"{survivors} survived (or had no test) when last checked; {total['equivalent']} mutants recorded as equivalent in "
            "tests/mutation_equivalent.txt, each with its reason.",
        ]
    )


def _row(name: str, c: Counter[str]) -> str:
    live = c["mutants"] - c["not checked"] - c["equivalent"]
    score = f"{100 * (c['killed'] + c['timeout']) / live:.1f}%" if live else "-"
    return (
        f"| {name} | {c['mutants']} | {c['not checked']} | {c['killed']} | {c['timeout']} | {c['survived']} | "
        f"{c['no tests']} | {c['equivalent']} | {score} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mutants", type=Path, default=REPO / "mutants", help="mutmut's work folder")
    parser.add_argument("--seconds", type=float, help="wall time of the run, for the report")
    parser.add_argument("--docs", type=Path, help="write the report between the mutation-report markers of this file")
    args = parser.parse_args(argv)
    if not args.mutants.is_dir():
        print(f"{args.mutants}: no mutmut results here; run make mutation", file=sys.stderr)
        return 2
    text = report(args.mutants, args.seconds)
    if args.docs:
        write_block(args.docs, "mutation-report", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
