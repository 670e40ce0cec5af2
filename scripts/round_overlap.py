"""How often iter-retgen's rounds retrieve the passages of the round before (issue 54, stable rounds):
per set of the benchmark of record, the share of round pairs with the same passages, with the same
passages in the same order, and the share of the rounds' prompt tokens served from the KV cache."""

import argparse
import json
from pathlib import Path


def overlap(records: Path, strategy: str) -> tuple[int, float, float, float]:
    pairs = same = ordered = cached = prompt = 0
    with records.open(encoding="utf-8") as fh:
        for r in map(json.loads, fh):
            if r["strategy"] != strategy:
                continue
            rounds = [[p["id"] for p in s["passages"]] for s in r["trace"] if s["kind"] == "retrieve"]
            for a, b in zip(rounds, rounds[1:]):
                pairs, same, ordered = pairs + 1, same + (set(a) == set(b)), ordered + (a == b)
            cached, prompt = cached + r["cached_prompt_tokens"], prompt + r["prompt_tokens"]
    return pairs, same / max(pairs, 1), ordered / max(pairs, 1), cached / max(prompt, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="*", type=Path, help="result folders (default: the benchmark of record's)")
    parser.add_argument("--strategy", default="iter-retgen")
    args = parser.parse_args()
    runs = args.runs or sorted(p for p in Path("benchmarks/results/runs").iterdir() if not p.name.endswith("baselines"))
    print("| run | round pairs | same passages | same order | prompt tokens from cache |")
    print("|---|---:|---:|---:|---:|")
    for run in runs:
        pairs, same, ordered, cached = overlap(run / "records.jsonl", args.strategy)
        print(f"| {run.name} | {pairs} | {same:.0%} | {ordered:.0%} | {cached:.0%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
