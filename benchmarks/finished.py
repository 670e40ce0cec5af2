"""How many questions of a result folder every strategy of its records has finished.

    python benchmarks/finished.py benchmarks/results/runs/hotpotqa_dev_199

``make bench-staged`` asks it before each run, and skips a run that already has its stage's
questions: a run that has nothing left to do would still build its index (minutes on a new
machine, where the folders come from a clone without their indexes) and load the model.
Only the standard library, so that any checkout's Python can run it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Iterable


def finished_questions(records: Iterable[dict]) -> set[str]:
    """The questions with a record of every strategy named in ``records``."""
    done: dict[str, set[str]] = {}
    for record in records:
        done.setdefault(record["qid"], set()).add(record["strategy"])
    names = set().union(*done.values())
    return {qid for qid, strategies in done.items() if strategies == names}


def read_records(folder: Path) -> list[dict]:
    """``folder``'s records (none without a records file), skipping a line that is not JSON."""
    path = folder / "records.jsonl"
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:  # blank, or the last line of an interrupted write: the bench redoes it
            continue
    return records


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} RESULT_FOLDER")
    print(len(finished_questions(read_records(Path(sys.argv[1])))))
