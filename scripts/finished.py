"""How many questions of a result folder every strategy of its records has finished.

    python scripts/finished.py benchmarks/results/runs/hotpotqa_dev_199
    python scripts/finished.py benchmarks/results/runs/hotpotqa_dev_199 ../shared/data/hotpotqa_dev_199.jsonl.gz 200

The first prints how many questions every strategy has finished; the second how many of the
question file's first 200 (all 199 of HotpotQA's) are still to run. ``make bench-staged`` asks
the second before each run, and skips a run with none left: it would still build its index
(minutes on a new machine, where the folders come from a clone without their indexes) and load
the model. Only the standard library, so that any checkout's Python can run it.
"""

from __future__ import annotations

import gzip
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


def first_question_ids(questions: Path, limit: int) -> list[str]:
    """The ids of the first ``limit`` questions of a JSON Lines question file, gzipped or not."""
    opener = gzip.open if questions.suffix == ".gz" else open
    ids: list[str] = []
    with opener(questions, "rt", encoding="utf-8") as fh:
        for line in fh:
            if len(ids) >= limit:
                break
            if line.strip():
                ids.append(str(json.loads(line)["id"]))
    return ids


if __name__ == "__main__":
    if len(sys.argv) not in (2, 4):
        sys.exit(f"usage: {sys.argv[0]} RESULT_FOLDER [QUESTION_FILE LIMIT]")
    done = finished_questions(read_records(Path(sys.argv[1])))
    if len(sys.argv) == 2:
        print(len(done))
    else:
        try:
            ids = first_question_ids(Path(sys.argv[2]), int(sys.argv[3]))
        except (OSError, ValueError, KeyError, TypeError) as exc:  # nlqo bench then names the bad file and line
            sys.exit(f"{sys.argv[0]}: cannot read the question ids of {sys.argv[2]}: {exc!r}")
        print(len(set(ids) - done))
