"""Helpers the side-by-side benchmarks share: the docs block writer, durable record appends, and
per-set tables over the questions every mode has done."""

import json
import os
from pathlib import Path
from typing import Callable, Iterable, Sequence

from nlqo.docblocks import write_block

__all__ = ["append_record", "paired_by_set", "write_block"]


def append_record(path: Path, record: dict) -> None:
    """Append one JSON line and sync it to disk, so a killed run resumes after it."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def paired_by_set(
    records: Iterable[dict], sets: Sequence[str], modes: Iterable[str], row: Callable[[list[dict]], dict]
) -> dict:
    """``{set or "all": {mode: row(records)}}`` over the questions done in every mode."""
    modes = list(modes)
    by = {(r["set"], r["qid"], r["mode"]): r for r in records}
    paired = {(s, q) for s, q, _ in by if all((s, q, m) in by for m in modes)}
    out = {}
    for name in [*sets, "all"]:
        keys = sorted(k for k in paired if name in ("all", k[0]))
        if keys:
            out[name] = {mode: row([by[(s, q, mode)] for s, q in keys]) for mode in modes}
    return out
