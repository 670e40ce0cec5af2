"""Issue 54's question before a passage-KV cache is built: how many computed prompt tokens are passages already read?

Reads the benchmark of record's traces (benchmarks/results/runs/SET/records.jsonl): every LLM call's
prompt and cached tokens, and the passages it read (the latest retrieval of its own node before it in
the trace). Runs no model: passages and questions are tokenized with the default model's vocabulary
alone.

Today's prefix cache computes a suffix of each prompt: the last passages, then the tail (the
question and the closing text). For each strategy the script counts, of those computed tokens, the
tokens of passages in the computed suffix that an earlier call read:

- *in this question* (a passage cache living for one question: iter-retgen's rounds, the tree's
  nodes, the cascade's escalation);
- *in this question or an earlier one of the run* (a cache shared across questions over one corpus,
  per strategy, as each strategy runs on its own handle).

It is an upper bound on what passage-KV reuse saves: it treats every such passage as free, which no
reuse reaches (a passage's states depend on what precedes it; CacheBlend recomputes about 15% of
its tokens, and llama.cpp's sequence API here can place another sequence's states only by
restoring a whole sequence). The seconds bound takes away those tokens at the run's own prefill
rate (median over standard-rag's calls of wall milliseconds per computed prompt token).
Writes the block `reuse-bound` of docs/models.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from collections import defaultdict
from pathlib import Path

from nlqo.common.docblocks import write_block
from nlqo.eval.records import read_records

RUNS = Path("benchmarks/results/runs")
DATA = Path("../shared/data")
SETS = ("hotpotqa_dev_199", "2wiki_dev_300", "musique_dev_200", "strategyqa_229")
STRATEGIES = ("standard-rag", "iter-retgen", "linear", "tree", "auto")
TAIL_EXTRA = 20
"""Tokens of a prompt's tail besides the question (the closing text and the chat template's turn marks)."""


def calls(record: dict):
    """Each LLM call of ``record`` with the passage ids it read (the latest retrieval of its node)."""
    latest: dict[str, list[str]] = {}
    for step in record.get("trace") or []:
        if step.get("kind") == "retrieve":
            latest[step["node"]] = [p["id"] for p in step.get("passages") or []]
        elif step.get("kind") == "llm":
            yield step, latest.pop(step["node"], [])


def computed_passages(ids: list[str], computed: int, tail: int, size) -> list[str]:
    """The passages inside the computed suffix: the last ones, as many as the suffix holds before its tail.

    >>> computed_passages(["a", "b", "c"], computed=150, tail=30, size=lambda i: 100)
    ['b', 'c']
    >>> computed_passages(["a", "b"], computed=20, tail=30, size=lambda i: 100)
    []
    """
    budget, inside = computed - tail, []
    for pid in reversed(ids):
        if budget <= 0:
            break
        inside.append(pid)
        budget -= size(pid)
    return inside[::-1]


def measure(dataset: str, tokens) -> dict[str, dict]:
    with gzip.open(DATA / f"{dataset}_corpus.jsonl.gz", "rt", encoding="utf-8") as fh:
        texts = {p["id"]: f"(Title: {p.get('title', '')}) {p['text']}" for p in map(json.loads, fh)}
    size_cache: dict[str, int] = {}

    def size(pid: str) -> int:
        if pid not in size_cache:
            size_cache[pid] = len(tokens(texts.get(pid, "")))
        return size_cache[pid]

    by_strategy: dict[str, list[dict]] = defaultdict(list)
    for r in read_records(RUNS / dataset / "records.jsonl", repair=False):
        by_strategy[r["strategy"]].append(r)
    rate = statistics.median(
        s["wall_ms"] / (s["prompt_tokens"] - s["cached_prompt_tokens"])
        for r in by_strategy["standard-rag"]
        for s, _ in calls(r)
        if s["prompt_tokens"] > s["cached_prompt_tokens"]
    )
    out = {}
    for strategy in STRATEGIES:
        records = sorted(by_strategy.get(strategy, []), key=lambda r: r["index"])
        if not records:
            continue
        run_seen: set[str] = set()
        computed = passage = within = across = 0
        for r in records:
            tail = len(tokens(r["question"])) + TAIL_EXTRA
            seen: set[str] = set()
            for step, ids in calls(r):
                n = step["prompt_tokens"] - step["cached_prompt_tokens"]
                computed += n
                inside = computed_passages(ids, n, tail, size)
                passage += min(n, sum(size(p) for p in inside))
                within += min(n, sum(size(p) for p in inside if p in seen))
                across += min(n, sum(size(p) for p in inside if p in seen or p in run_seen))
                seen.update(ids)
            run_seen |= seen
        seconds = sum(r["seconds"] for r in records)
        n = len(records)
        out[strategy] = {
            "n": n,
            "computed": computed / n,
            "passage": passage / n,
            "within": within / n,
            "across": across / n,
            "seconds": seconds / n,
            "rate_ms": rate,
        }
    return out


def table(results: dict[str, dict[str, dict]]) -> str:
    out = [
        "Upper bound on what a passage-KV cache saves, from the benchmark of record's traces (`python "
        "scripts/reuse_bound.py`; no model run): per question, the prompt tokens computed today (not served "
        "by the prefix cache), how many of them are passage tokens, and how many are passages an earlier call "
        "read, in the same question or in any earlier question of the run; the seconds bound takes those "
        "tokens away at the run's prefill rate (ms per computed token, median of standard-rag's calls). "
        "Ratios are against today's computed tokens and seconds.",
        "",
        "| set | strategy | n | computed tokens | of them passages | read before, same question | "
        "read before, any question | tokens bound | s | prefill ms/token | seconds bound, same question "
        "| seconds bound, any question |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for dataset, strategies in results.items():
        for strategy, m in strategies.items():
            saved_q = m["within"] * m["rate_ms"] / 1000
            saved_all = m["across"] * m["rate_ms"] / 1000
            out.append(
                f"| {dataset} | {strategy} | {m['n']} | {m['computed']:.0f} | {m['passage']:.0f} | "
                f"{m['within']:.0f} | {m['across']:.0f} | {(m['computed'] - m['across']) / m['computed']:.2f}x | "
                f"{m['seconds']:.1f} | {m['rate_ms']:.1f} | {(m['seconds'] - saved_q) / m['seconds']:.2f}x | "
                f"{(m['seconds'] - saved_all) / m['seconds']:.2f}x |"
            )
    return "\n".join(out)


def vocabulary():
    """The default model's tokenizer (its vocabulary only: no weights are loaded)."""
    import llama_cpp

    from nlqo.runtime.models.gguf import find_gguf

    path = find_gguf("qwen2.5-coder-1.5b", progress=False)
    llm = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    return lambda text: llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=Path, default=Path("docs/models.md"))
    args = parser.parse_args()
    tokens = vocabulary()
    results = {s: measure(s, tokens) for s in SETS if (RUNS / s / "records.jsonl").is_file()}
    text = table(results)
    print(text)
    write_block(args.docs, "reuse-bound", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
