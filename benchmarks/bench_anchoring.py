"""Anchored parsing, side by side: do the parse's atoms name the question's entities? (docs/ir.md)

As bench_parse.py, constrained, in four modes: the default, the first atom naming a constant, that with IR
with loose atoms (``nlqo.parser.unanchored``) sent back once, that with constants runs of the question's
words. The table counts loose atoms and constants not in the question (invented ones).
"""

import bench_parse  # beside this script

from nlqo.eval.experiment import main
from nlqo.ir import Const
from nlqo.syntax import parse

MODES = {
    "unanchored": {"anchored": False, "anchor_repairs": 0, "spans": False},
    "first-atom": {"anchored": True, "anchor_repairs": 0, "spans": False},
    "first-atom+repair": {"anchored": True, "anchor_repairs": 1, "spans": False},
    "first-atom+spans": {"anchored": True, "anchor_repairs": 0, "spans": True},
}


def invented(record: dict) -> tuple[int, int]:
    """(constants, constants not in the question) of a valid record's IR, case and whitespace aside."""
    squeeze = lambda text: " ".join(text.lower().split())  # noqa: E731
    constants = [t.text for a in parse(record["ir"]).atoms for t in (a.subject, a.object) if isinstance(t, Const)]
    return len(constants), sum(squeeze(c) not in squeeze(record["question"]) for c in constants)


def row(name: str, mode: str, rs: list[dict]) -> str:
    n, valid = len(rs), [r for r in rs if r["valid"]]
    counts, atoms = [invented(r) for r in valid], sum(r["atoms"] for r in valid)
    per = lambda field, digits: round(sum(r[field] for r in rs) / n, digits)  # noqa: E731
    return (
        f"| {name} | {mode} | {n} | {len(valid)} | {sum(bool(r['loose']) for r in valid)} "
        f"| {sum(len(r['loose']) for r in valid)} / {atoms} | {sum(i for _, i in counts)} / {sum(c for c, _ in counts)} "
        f"| {per('llm_calls', 2):.2f} | {per('generated_tokens', 1):.1f} | {per('seconds', 2):.1f} |"
    )


def table(records: list[dict], run: dict) -> str:
    out = ["| set | mode | questions | valid IR | IR with a loose atom | loose atoms / atoms | constants not in the question | LLM calls / parse | generated / parse | s / parse |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    out += [row(name, m, rs) for name, modes in bench_parse.paired(records, MODES).items() for m, rs in modes.items()]
    return "\n".join(out) + (
        f"\n\n{run['model']}, constrained parsing, repairs={run['repairs']}; a loose atom is linked through shared "
        f"variables to no atom naming a constant. `python benchmarks/bench_anchoring.py` ({run['started']})."
    )


EXPERIMENT = bench_parse.experiment("parse-anchoring", "bench-anchoring", MODES, table, limit=25)

if __name__ == "__main__":
    raise SystemExit(main(EXPERIMENT))
