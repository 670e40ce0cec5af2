"""Issue 50's calibration check for every operator: AUROC of each confidence feature on held-back questions.

A question is held back when its index in its set is STAT_SAMPLE (50) or later: the bundled calibration
is fitted on each set's first 50. Reads every record that carries the decoder's confidence, one answer
per question and operator, the first source's:

1. the benchmark of record (benchmarks/results/runs/SET: every strategy, where the run recorded
   confidence: StrategyQA's, which started after issue 50; the other sets' runs are older);
2. the out-of-the-box check (benchmarks/results/auto-heldout/SET: iter-retgen, standard-rag where
   that run has it, and auto's answers by what auto ran: the template's on the questions auto sent to
   it, retrieve's from the cascade's first round, whose `answer.*` features are the reply's where the
   cascade escalated, as in the `auto-heldout-auroc` block);
3. the confidence runs (benchmarks/results/confidence/SET: retrieve and linear);
4. the held-back operator runs (benchmarks/results/heldout-operators/SET: linear and tree on the
   held-back questions, `make heldout-operators`).

Runs no model. Writes the block `heldout-operator-auroc` of docs/statistics.md and docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from auto_heldout import P_RIGHT, SETS, auroc_body, first_round  # scripts/, beside this script
from confidence import texts_of
from nlqo.common.docblocks import write_block
from nlqo.eval.collect import calibration_row, operator_name
from nlqo.eval.records import operator_of, read_records
from nlqo.execution.operators.support import SUPPORTED
from nlqo.planner.statistics.calibration import FEATURES
from nlqo.planner.statistics.store import BUNDLED, load

HELD_BACK_FROM = 50
"""The calibration sample's size (the Makefile's STAT_SAMPLE): questions from this index on are held back."""
SOURCES = (
    Path("benchmarks/results/runs"),
    Path("benchmarks/results/auto-heldout"),
    Path("benchmarks/results/confidence"),
    Path("benchmarks/results/heldout-operators"),
)
OPERATORS = ("retrieve", "iterate", "linear", "tree")
BLOCK = "heldout-operator-auroc"


def held_back(dataset: str, sources: tuple[Path, ...] = SOURCES) -> dict[str, dict[str, dict]]:
    """Per operator, per question id: the first source's held-back record that carries confidence."""
    out: dict[str, dict[str, dict]] = defaultdict(dict)
    for source in sources:
        run = source / dataset
        if not (run / "records.jsonl").is_file():
            continue
        skip = json.loads((run / "run.json").read_text(encoding="utf-8")).get("skip", 0)
        for r in read_records(run / "records.jsonl", repair=False):
            op, answer = operator_answer(r)
            if answer is not None and answer.get("confidence") and skip + r["index"] >= HELD_BACK_FROM:
                out[op].setdefault(r["qid"], answer)
    return out


def operator_answer(record: dict) -> tuple[str, dict | None]:
    """The operator a record answers for, and its answer as that operator's record (None: none of ours).

    >>> operator_answer({"strategy": "iter-retgen"})[0]
    'iterate'
    >>> operator_answer({"strategy": "ircot"})
    ('ircot', None)
    """
    if record["strategy"] != "auto":
        op = operator_name(record)
        return op, record if op in OPERATORS else None
    ran = operator_of(record) or "?"
    if ran in OPERATORS:
        return ran, record
    return "retrieve", first_round(record)


def table(by_set: dict[str, dict[str, dict[str, dict]]], texts: dict[str, dict[str, str]]) -> str:
    cal = load(BUNDLED, bundled=True).calibration
    columns = (*FEATURES, SUPPORTED, P_RIGHT)
    out = [
        f"AUROC for exact match on each set's held-back questions (index {HELD_BACK_FROM} on; the bundled "
        "calibration is fitted on the first 50), every operator whose answers there carry the decoder's "
        "confidence, 95% interval by stratified bootstrap; n = answers (right ones); `-` where every answer "
        "has the same value or there is no mapping; an answer the engine held to an offered option carries no "
        f"confidence and is left out. `{P_RIGHT}`: the bundled calibration's probability. "
        "Written by `python scripts/operator_auroc.py` from the records it names (operators missing from a "
        "set have no held-back run with confidence yet: `make heldout-operators`).",
    ]
    groups = [
        (
            dataset,
            op,
            [(calibration_row(r, texts[dataset].get), op) for r in sorted(ops.get(op, {}).values(), key=_qid)],
        )
        for dataset, ops in by_set.items()
        for op in OPERATORS
    ]
    return "\n".join(out + auroc_body(groups, cal, columns))


def _qid(record: dict) -> str:
    return record["qid"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--docs", type=Path, nargs="*", default=[Path("docs/statistics.md"), Path("docs/benchmarks.md")]
    )
    args = parser.parse_args()
    by_set = {s: held_back(s) for s in SETS}
    text = table(by_set, {s: texts_of(s) for s in SETS})
    print(text)
    for path in args.docs:
        write_block(path, BLOCK, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
