"""Re-answer recorded engine runs with standard-rag's prompt over the passages each run gathered.

    python benchmarks/replay_final_answer.py RUN_FOLDER [RUN_FOLDER ...] [--strategies linear,tree,auto]
    python benchmarks/replay_final_answer.py --report

A lever measured without re-running the plans: the engine's strategies retrieve the gold passages
more often than they answer right, so this asks, for every record of the given strategies, one
more question: standard-rag's prompt (FlashRAG's) over every distinct passage the run retrieved, in
retrieval order. Planning and retrieval are the recorded ones; only the final answer differs. Each
run folder needs its index (``index/``, which the bench builds). Replies go to
``benchmarks/results/final-answer-replay/<run>.jsonl``, one line per record, and a second call
resumes; ``--report`` prints and writes ``results.md`` there: per set and strategy, EM recorded and
replayed, the paired 95 % interval, and how many answers the replay won and lost.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

from nlqo.answers import short_answer
from nlqo.eval.metrics import bootstrap_diff, score
from nlqo.execute.trace import Trace
from nlqo.index import Index
from nlqo.llm.backends import load_llm
from nlqo.passages import Hit
from nlqo.prompts.baselines import DOCS, STANDARD_RAG
from nlqo.strategies.calls import chat

OUT = Path(__file__).parent / "results" / "final-answer-replay"


def gathered(record: dict) -> list[str]:
    """The ids of every distinct passage ``record``'s run retrieved, in retrieval order."""
    ids: dict[str, None] = {}
    for step in record["trace"]:
        if step["kind"] == "retrieve":
            for passage in step["passages"]:
                ids.setdefault(passage["id"])
    return list(ids)


def replay(run: Path, strategies: set[str], model: str) -> None:
    out = OUT / f"{run.name}.jsonl"
    done = {(r["qid"], r["strategy"]) for r in map(json.loads, out.open())} if out.exists() else set()
    records = [r for r in map(json.loads, (run / "records.jsonl").open()) if r["strategy"] in strategies]
    todo = [r for r in records if (r["qid"], r["strategy"]) not in done]
    if not todo:
        return
    index, llm = Index.open(run / "index"), load_llm(model)
    OUT.mkdir(parents=True, exist_ok=True)
    with out.open("a") as sink:
        for record in todo:
            ids = gathered(record)
            hits = [Hit(index.get(i), 0.0, n) for n, i in enumerate(ids, 1)]
            started = time.perf_counter()
            text = chat(llm, STANDARD_RAG, Trace(), "final", reference=DOCS.render(hits), question=record["question"])
            answer = short_answer(text)
            row = {
                "qid": record["qid"],
                "index": record["index"],
                "strategy": record["strategy"],
                "operator": record["operator"],
                "passages": len(ids),
                "seconds": round(time.perf_counter() - started, 2),
                "recorded": record["answer"],
                "recorded_em": record["em"],
                "answer": answer,
                "em": score(answer, record["answers"]).em,
            }
            sink.write(json.dumps(row) + "\n")
            sink.flush()
            print(
                f"{run.name} {record['index']:>3} {record['strategy']:<6} {record['answer']!r} -> {answer!r} ({row['em']:.0f})",
                flush=True,
            )


def report() -> str:
    lines = [
        "# Final answer by standard-rag's prompt over the passages a run gathered (replayed)",
        "",
        "`python benchmarks/replay_final_answer.py --report`; EM in %, paired 95 % bootstrap interval of replayed minus recorded.",
        "",
        "| set | strategy | n | recorded EM | replayed EM | difference [95 %] | won | lost | passages | replay s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for path in sorted(OUT.glob("*.jsonl")):
        for row in map(json.loads, path.open()):
            groups[path.stem, row["strategy"]].append(row)
            groups["all sets", row["strategy"]].append(row)
    for (name, strategy), group in sorted(groups.items(), key=lambda item: (item[0][0] == "all sets", item[0])):
        new, old = [r["em"] for r in group], [r["recorded_em"] for r in group]
        diff = bootstrap_diff(new, old)
        won = sum(a > b for a, b in zip(new, old))
        lost = sum(a < b for a, b in zip(new, old))
        n = len(group)
        lines.append(
            f"| {name} | {strategy} | {n} | {100 * sum(old) / n:.1f} | {100 * sum(new) / n:.1f} "
            f"| {100 * diff.mean:+.1f} [{100 * diff.low:+.0f}, {100 * diff.high:+.0f}] | {won} | {lost} "
            f"| {sum(r['passages'] for r in group) / n:.1f} | {sum(r['seconds'] for r in group) / n:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", type=Path, help="bench run folders (with records.jsonl and index/)")
    parser.add_argument("--strategies", default="linear,tree,auto", help="records to replay (default: %(default)s)")
    parser.add_argument("--model", default="qwen2.5-coder-1.5b", help="the runs' model (default: %(default)s)")
    parser.add_argument("--report", action="store_true", help="print and write the table of every replay so far")
    args = parser.parse_args()
    for run in args.runs:
        replay(run, set(args.strategies.split(",")), args.model)
    if args.report or not args.runs:
        text = report()
        (OUT / "results.md").write_text(text)
        print(text, end="")


if __name__ == "__main__":
    main()
