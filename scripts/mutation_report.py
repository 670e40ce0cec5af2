#!/usr/bin/env python3
"""The mutation report docs/testing.md quotes: mutmut's verdicts per module, with the equivalent
mutants of tests/mutation_equivalent.txt set apart, the command and its wall time.

    python scripts/mutation_report.py [--mutants mutants] [--seconds N] [--docs docs/testing.md]
    python scripts/mutation_report.py --restore          # before mutmut: resume from the committed verdicts
    python scripts/mutation_report.py --save --seconds N # after it: commit-able verdicts, and the report
    python scripts/mutation_report.py --survivors        # what is left to triage, with each change
    python scripts/mutation_report.py --change NAME...   # 'NAME | fingerprint | change' lines

Reads mutmut's result files (``mutants/<path>.meta``, one per mutated source file). The score is
killed (timeouts count as killed, as mutmut counts them) over the mutants checked that are not
equivalent; a run still going (or stopped) shows how many are not checked yet.

A full run takes longer than one sitting on 2 cores, and ``mutants/`` does not outlive the machine;
so the verdicts are kept in ``benchmarks/results/mutation/verdicts.json`` with mutmut's hash of each
function, and ``--restore`` puts them back before mutmut runs: mutmut then tests only the mutants of
functions that changed or were not reached (its own rule for a kept ``mutants/``), and skips the
recorded equivalents (mutmut's "skipped").

A mutant's name holds its number within its function, and mutmut numbers again when the function
changes; so each equivalent entry carries a fingerprint of the change it was judged on, and an
entry whose mutant now makes another change is stale: it counts by its verdict until re-triaged.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import difflib
import hashlib
import json
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from nlqo.common.docblocks import write_block  # noqa: E402

VERDICTS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 36: "timeout", 24: "timeout",
            -24: "timeout", 152: "timeout", 255: "timeout", None: "not checked", 37: "caught by type check",
            34: "not checked"}  # fmt: skip
"""mutmut 3.8's exit codes, as its ``stats.status_by_exit_code`` reads them (other codes: suspicious)."""
COMMAND = "make mutation"
SAVED = REPO / "benchmarks" / "results" / "mutation" / "verdicts.json"
SKIPPED = 34
"""mutmut's exit code for a mutant it was told not to test."""
EQUIVALENT = REPO / "tests" / "mutation_equivalent.txt"


def equivalent(path: Path = EQUIVALENT) -> dict[str, tuple[str, str]]:
    """Mutant name -> (fingerprint of its change, why the change cannot alter behaviour), from
    ``name | fingerprint | why`` lines."""
    out = {}
    if path.exists():
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip() and not line.startswith("#"):
                fields = [f.strip() for f in line.split(" | ", 2)]
                if len(fields) < 3 or not all(fields):
                    raise SystemExit(f"{path}:{n}: write 'mutant name | fingerprint | why it is equivalent'")
                out[fields[0]] = (fields[1], fields[2])
    return out


def change(mutants: Path, name: str) -> str | None:
    """The lines mutant ``name`` changes in its function (``-`` old, ``+`` new), read from mutmut's
    mutated copy of the source; None if the mutant is not there.

    >>> change(Path("/nowhere"), "pkg.mod.x_f__mutmut_1") is None
    True
    """
    parts = name.split(".")
    at = next((i for i, p in enumerate(parts) if p.startswith(("x_", "xǁ"))), None)
    if at is None:
        return None
    base = Path(mutants, *parts[:at])
    path = next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)
    if path is None:
        return None
    source = path.read_text(encoding="utf-8")
    function, original = parts[at], parts[at].rsplit("__mutmut_", 1)[0] + "__mutmut_orig"
    bodies = {
        node.name: (ast.get_source_segment(source, node) or "").replace(node.name, "F", 1).splitlines()
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in (function, original)
    }
    if len(bodies) < 2:
        return None
    diff = difflib.unified_diff(bodies[original], bodies[function], lineterm="", n=0)
    return "\n".join(line.rstrip() for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---"))


def fingerprint(text: str) -> str:
    """A short digest of a mutant's change (whitespace inside lines ignored).

    >>> fingerprint("- a  +  b\n+ a + c") == fingerprint("- a + b\n+ a + c")
    True
    """
    return hashlib.sha256(" ".join(text.split()).encode("utf-8")).hexdigest()[:10]


def verdicts(mutants: Path) -> dict[str, dict[str, str]]:
    """Module -> mutant name -> verdict."""
    out: dict[str, dict[str, str]] = {}
    for meta in sorted(mutants.rglob("*.py.meta")):
        module = meta.relative_to(mutants).as_posix().removesuffix(".meta")
        codes = _read(meta)["exit_code_by_key"]
        out[module] = {name: VERDICTS.get(code, "suspicious") for name, code in codes.items()}
    return out


def judged(mutants: Path, found: dict[str, dict[str, str]], listed: Path = EQUIVALENT) -> tuple[set[str], list[str]]:
    """The equivalent entries of ``listed`` that hold for the mutants as they are now, and the stale
    ones (their mutant is gone or makes another change than the one judged)."""
    entries, names = equivalent(listed), {name for by_name in found.values() for name in by_name}
    held, stale = set(), []
    for name, (digest, _) in entries.items():
        now = change(mutants, name) if name in names else None
        if now is not None and fingerprint(now) == digest:
            held.add(name)
        else:
            stale.append(name)
    return held, sorted(stale)


def report(mutants: Path, seconds: float | None, listed: Path = EQUIVALENT) -> str:
    found = verdicts(mutants)
    known, stale = judged(mutants, found, listed)
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
    if total["suspicious"]:  # another exit code (a crash, a kill by hand): in no column, so said here
        partial += f" {total['suspicious']} mutants ended otherwise (mutmut: suspicious), counted in no column."
    return "\n".join(
        [
            f"`{COMMAND}` (mutmut 3.8.1{wall}); score = (killed + timeout) / (mutants checked - equivalent).{partial}",
            "",
            *rows,
            "",
            f"{survivors} survived (or had no test) when last checked; {total['equivalent']} mutants recorded as equivalent in "
            "tests/mutation_equivalent.txt, each with its reason"
            + (f"; {len(stale)} stale entries there (their mutant changed), counted by verdict: " if stale else ".")
            + ", ".join(f"`{n}`" for n in stale),
        ]
    )


def survivors(mutants: Path, listed: Path = EQUIVALENT) -> list[str]:
    """The survivors (and mutants with no test) not recorded as equivalent, each with its change."""
    found = verdicts(mutants)
    known, _ = judged(mutants, found, listed)
    left = [
        n for by_name in found.values() for n, v in by_name.items() if v in ("survived", "no tests") and n not in known
    ]
    return [f"{n}\n{change(mutants, n)}" for n in left]


def _row(name: str, c: Counter[str]) -> str:
    live = c["mutants"] - c["not checked"] - c["equivalent"]
    score = f"{100 * (c['killed'] + c['timeout']) / live:.1f}%" if live else "-"
    return (
        f"| {name} | {c['mutants']} | {c['not checked']} | {c['killed']} | {c['timeout']} | {c['survived']} | "
        f"{c['no tests']} | {c['equivalent']} | {score} |"
    )


def _read(meta: Path) -> dict:
    """A .meta file, read again if mutmut was writing it (it writes in place)."""
    for _ in range(20):
        try:
            return json.loads(meta.read_text(encoding="utf-8"))
        except ValueError:
            time.sleep(0.1)
    return json.loads(meta.read_text(encoding="utf-8"))


def save(mutants: Path, seconds: float | None, path: Path = SAVED) -> dict:
    """Keep mutmut's verdicts and function hashes (``mutants/<file>.meta``) in ``path``, adding this
    run's wall time to the runs recorded there if it changed a verdict."""
    kept = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"runs": []}
    before = {name: data["exit_code_by_key"] for name, data in kept.get("files", {}).items()}
    kept["files"] = {}
    for meta in sorted(mutants.rglob("*.py.meta")):
        data = _read(meta)
        kept["files"][meta.relative_to(mutants).as_posix().removesuffix(".meta")] = {
            "hash_by_function_name": data.get("hash_by_function_name", {}),
            "exit_code_by_key": data["exit_code_by_key"],
        }
    tested = {name: data["exit_code_by_key"] for name, data in kept["files"].items()} != before
    if seconds and tested:  # a run that tested nothing (all verdicts kept) adds no time to the report
        kept["runs"].append({"ended": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                             "seconds": round(seconds)})  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(kept, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    return kept


def restore(mutants: Path, path: Path = SAVED, listed: Path = EQUIVALENT) -> tuple[int, int]:
    """Before mutmut runs: write each saved file's verdicts where ``mutants/`` has none, and mark the
    equivalent mutants not yet tested as skipped where their change can be checked (and a skipped one
    whose entry is gone or stale as untested again). Returns (files restored, mutants marked skipped)."""
    restored = marked = 0
    if path.exists():
        for name, data in json.loads(path.read_text(encoding="utf-8"))["files"].items():
            meta = mutants / f"{name}.meta"
            if not meta.exists():  # mutmut's .meta layout, which it checks key by key
                meta.parent.mkdir(parents=True, exist_ok=True)
                empty = {"type_check_error_by_key": {}, "durations_by_key": {}, "estimated_durations_by_key": {}}
                meta.write_text(json.dumps({**data, **empty}), encoding="utf-8")
                restored += 1
    if mutants.is_dir():
        held, _ = judged(mutants, verdicts(mutants), listed)
        for meta in sorted(mutants.rglob("*.py.meta")):
            if not meta.with_suffix("").exists():  # not generated yet (a new machine): nothing to check against
                continue
            data = _read(meta)
            codes = data["exit_code_by_key"]
            skip = [n for n, code in codes.items() if code is None and n in held]
            unskip = [n for n, code in codes.items() if code == SKIPPED and n not in held]  # entry gone or stale
            if skip or unskip:
                codes.update({**dict.fromkeys(skip, SKIPPED), **dict.fromkeys(unskip)})
                meta.write_text(json.dumps(data), encoding="utf-8")
                marked += len(skip)
    return restored, marked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mutants", type=Path, default=REPO / "mutants", help="mutmut's work folder")
    parser.add_argument("--seconds", type=float, help="wall time of the run, for the report")
    parser.add_argument("--docs", type=Path, help="write the report between the mutation-report markers of this file")
    parser.add_argument("--survivors", action="store_true", help="list what is left to triage, with each change")
    parser.add_argument("--survivor-names", action="store_true", help="only their names (for mutmut run NAME...)")
    parser.add_argument("--change", nargs="+", metavar="NAME", help="print 'NAME | fingerprint | change' for mutants")
    parser.add_argument("--restore", action="store_true", help="resume from the saved verdicts (run before mutmut)")
    parser.add_argument("--save", action="store_true", help=f"keep the verdicts in {SAVED.relative_to(REPO)}")
    args = parser.parse_args(argv)
    if args.restore:
        restored, marked = restore(args.mutants)
        print(f"restored the verdicts of {restored} files; {marked} equivalent mutants marked skipped", file=sys.stderr)
        return 0
    if not args.mutants.is_dir():
        print(f"{args.mutants}: no mutmut results here; run make mutation", file=sys.stderr)
        return 2
    if args.survivor_names:
        print(" ".join(entry.split("\n", 1)[0] for entry in survivors(args.mutants)))
        return 0
    if args.change or args.survivors:
        for name in args.change or []:
            text = change(args.mutants, name)
            print(f"{name} | {fingerprint(text) if text is not None else '?'} | {text}")
        print("\n\n".join(survivors(args.mutants)) if args.survivors else "", end="")
        return 0
    seconds = args.seconds
    if args.save:
        seconds = sum(run["seconds"] for run in save(args.mutants, args.seconds)["runs"]) or None
    text = report(args.mutants, seconds)
    if args.docs:
        write_block(args.docs, "mutation-report", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
