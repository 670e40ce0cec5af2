"""Seed an ``nlqo analyze`` records folder with the issue-17 benchmark's records of operators whose
code has not changed since, so analyze measures only the rest (it skips (question, operator)
pairs that have records, as the bench resumes).

Reused: ``linear`` and ``tree``, the engine's own strategies, run at 98bc659 on the same model,
runtime, embedder, k and retrieval. Their code paths are the same since; only the fallback for an
answer that copies a prompt demonstration (ceebe7a) is new, and it touched no linear or tree record
of the first 50 questions. Not reused: ``retrieve`` and ``iterate`` (the engine runs them with its
empty-answer fallback and choice hold, which the standard-rag and iter-retgen baselines lack) and
``cascade`` (new).

    python benchmarks/seed_analyze.py SET --out FOLDER [--sample 50]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REUSED = ("linear", "tree")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("set", help="a dev set's run folder name under benchmarks/results/runs, e.g. hotpotqa_dev_199")
    parser.add_argument("--out", type=Path, required=True, help="the analyze records folder (nlqo analyze --records)")
    parser.add_argument("--sample", type=int, default=50)
    args = parser.parse_args(argv)
    records = args.out / "records.jsonl"
    if records.exists():
        print(f"{records} exists: nothing seeded")
        return 0
    source = HERE / "results" / "runs" / args.set / "records.jsonl"
    seeded = [
        line for line in source.read_text(encoding="utf-8").splitlines() if _wanted(json.loads(line), args.sample)
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    records.write_text("".join(line + "\n" for line in seeded), encoding="utf-8")
    (args.out / "reused.json").write_text(
        json.dumps(
            {
                "from": str(source.relative_to(HERE.parent)),
                "commit": "98bc659",
                "operators": list(REUSED),
                "records": len(seeded),
            },
            indent=2,
        )
        + "\n"
    )
    print(f"seeded {records} with {len(seeded)} records of {', '.join(REUSED)} from {source}")
    return 0


def _wanted(record: dict, sample: int) -> bool:
    return record["strategy"] in REUSED and record["index"] < sample


if __name__ == "__main__":
    sys.exit(main())
