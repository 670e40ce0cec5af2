"""The bundled operator statistics (nlqo/statistics/default.json): what ``auto`` chooses by until
``nlqo analyze`` has measured the user's own questions.

Made from the issue-17 benchmark's records on the bundled default model (llama.cpp, hybrid
retrieval, k=3), over the **first 50 questions** of each shared dev set only (the calibration
samples; the rest stay held back for evaluation). RETRIEVE and ITERATE are measured by the
standard-rag and iter-retgen records (the same prompts and calls), TEMPLATE by linear's, TREE by
tree's. CASCADE is replayed from those records, step by step as nlqo.operators.cascade runs it:
RETRIEVE's answer checked against its passages, then ITERATE's (continuing from RETRIEVE's round,
so its seconds are ITERATE's), then the planned run (auto's record at that commit, which parsed,
planned and lowered by cost). Greedy decoding makes the replayed answers the ones a run would give;
its seconds are the sums of the parts' measured seconds.

    python benchmarks/bundle_statistics.py [--data ../shared/data] [--sample 50]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from nlqo.answers import short_answer  # noqa: E402
from nlqo.operators.support import support  # noqa: E402
from nlqo.statistics.collect import collect, passage_ids  # noqa: E402
from nlqo.statistics.store import BUNDLED, save  # noqa: E402

SETS = ("hotpotqa_dev_199", "2wiki_dev_300", "musique_dev_200")
RUNS = HERE / "results" / "runs"
OPERATORS = ("standard-rag", "iter-retgen", "linear", "tree")


def read_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def round_answers(record: dict) -> list[str]:
    """Each round's answer of an iter-retgen record (its LLM steps, in order)."""
    return [short_answer(s["text"], record["question"]) for s in record["trace"] if s["kind"] == "llm"]


def cascade(by: dict[str, dict], text) -> dict:
    """The cascade's record for one question, replayed from its parts' records."""
    first, iterate, planned = by["standard-rag"], by["iter-retgen"], by["auto"]
    question = first["question"]
    if support(first["answer"], question, [text(i) for i in passage_ids(first)]).supported:
        return {**first, "strategy": "cascade"}
    rounds = round_answers(iterate)
    if (
        support(iterate["answer"], question, [text(i) for i in passage_ids(iterate)]).supported
        and len(set(rounds)) == 1
    ):
        return {**iterate, "strategy": "cascade"}
    merged = {
        key: iterate.get(key, 0) + planned.get(key, 0)
        for key in ("seconds", "prompt_tokens", "generated_tokens", "llm_calls")
    }
    return {**planned, **merged, "strategy": "cascade", "trace": iterate["trace"] + planned["trace"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=HERE.parent.parent / "shared" / "data")
    parser.add_argument("--sample", type=int, default=50, help="first N questions of each set (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=BUNDLED)
    args = parser.parse_args(argv)
    records, ids, texts = [], {}, {}
    for name in SETS:
        for passage in read_jsonl(args.data / f"{name}_corpus.jsonl.gz"):
            texts[passage["id"]] = f"{passage.get('title', '')} {passage.get('text', '')}"
        by_question: dict[int, dict[str, dict]] = {}
        for r in read_jsonl(RUNS / name / "records.jsonl"):
            if r["index"] < args.sample:
                by_question.setdefault(r["index"], {})[r["strategy"]] = r
        for index in sorted(by_question):
            by = by_question[index]
            records += [by[s] for s in OPERATORS] + [cascade(by, lambda i: texts.get(i, ""))]
        ids[name] = [by_question[i]["auto"]["qid"] for i in sorted(by_question)]
    meta = json.loads((RUNS / SETS[0] / "run.json").read_text())
    stats = collect(
        records,
        measured_on={key: meta[key] for key in ("model", "runtime", "embedder", "k", "retrieval")},
        sample={"sets": list(SETS), "first": args.sample, "ids": ids},
        source=f"bundled: the first {args.sample} questions of each shared dev set (HotpotQA, 2Wiki, MuSiQue), issue-17 records",
        texts=lambda i: texts.get(i, ""),
    )
    save(stats, args.out)
    for op, classes in stats.operators.items():
        s = classes["all"]
        print(
            f"{op:10} n={s.n} EM {s.em:.1%} [{s.em_low:.1%}, {s.em_high:.1%}] supported {s.supported:.1%} {s.seconds:.1f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
