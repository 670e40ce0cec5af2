"""Plan pages of a bench run: ``plans.html`` in the result folder, the EXPLAIN ANALYZE of every
record that ran a plan, one page for the whole run (``#plan=3-auto`` picks question 3's ``auto``).

Built from the records alone: each planned record keeps its plan with per-node actuals
(``plan``) and its trace. Records keep no prompts or passage texts, so the page shows the steps,
generated texts and passage titles but not the prompts.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any, Mapping, Sequence

from nlqo.explain import html

FILENAME = "plans.html"
_STATS = (
    "llm_calls",
    "prompt_tokens",
    "cached_prompt_tokens",
    "generated_tokens",
    "retrievals",
    "hops",
    "stop_reason",
    "planning_ms",
    "execution_ms",
)


def key(record: Mapping[str, Any]) -> str:
    """A record's plan id on the page: its question number (from 1) and strategy.

    >>> key({"index": 2, "strategy": "auto"})
    '3-auto'
    """
    return f"{record['index'] + 1}-{record['strategy']}"


def link(record: Mapping[str, Any]) -> str:
    """The address of a record's plan, relative to the result folder.

    >>> link({"index": 0, "strategy": "linear[tau=0.8]"})
    'plans.html#plan=1-linear%5Btau%3D0.8%5D'
    """
    return f"{FILENAME}#{urllib.parse.urlencode({'plan': key(record)})}"


def explain_of(record: Mapping[str, Any]) -> dict[str, Any]:
    """The EXPLAIN ANALYZE dict of a planned record, as ``nlqo explain --analyze --format json`` gives it."""
    return {
        **record["plan"],
        "analyze": {
            "question": record["question"],
            "answer": record["answer"],
            "strategy": record["strategy"],
            "supporting": record.get("supporting", []),
            "stats": {name: record.get(name) for name in _STATS},
            "trace": record.get("trace", []),
        },
    }


def write(folder: str | Path, records: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    """Write ``plans.html`` for the planned ``records`` into ``folder`` (removing a stale one when
    none ran a plan); return each planned record's link by (question id, strategy)."""
    path = Path(folder) / FILENAME
    planned = sorted((r for r in records if r.get("plan")), key=lambda r: (r["index"], r["strategy"]))
    if not planned:
        path.unlink(missing_ok=True)
        return {}
    entries = [
        html.entry(
            explain_of(r),
            id=key(r),
            title=f"#{r['index'] + 1} {r['strategy']}: {r['question']}",
            notes=[
                f"strategy {r['strategy']}; gold answer: {' / '.join(r.get('answers', []))}; EM {r.get('em')}; {r.get('seconds', 0.0):.1f} s"
            ],
        )
        for r in planned
    ]
    html.write(path, entries)
    return {(r["qid"], r["strategy"]): link(r) for r in planned}
