"""What linking a choice answer to an option through the run's own text does, replayed on records.

    python benchmarks/replay_choice_links.py [RUN_FOLDER_OR_RECORDS ...]   (default: benchmarks/results/runs/*)

A choice question's answer that names no option used to be asked again among the options (an LLM
call, ``nlqo.execute.choice``). The engine now first reads the run's own text: when exactly one
option is named, in one node or hop, together with every word of the answer, that option is the
answer (``linked_options`` over ``node_texts``). Both are deterministic given the answer before the
choice step and the steps before it, which the records hold, so this computes exactly what the
link gives on every record where the choice step ran: per run and strategy, how many such records,
how many the link settles, and how many of those the LLM's choice and the link got right.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

from nlqo.eval.metrics import score
from nlqo.execute.choice import CHOICE_NODE, YES_NO, linked_options, named_options, node_texts, offered_options
from nlqo.execute.trace import Step

RUNS = Path(__file__).parent / "results" / "runs"
_BEFORE = re.compile(r"^the answer (['\"])(.*)\1 named (?:no option|both options)")


def replay(record: dict) -> dict | None:
    """The link's outcome on one record whose choice step asked the LLM, else None."""
    at = next((i for i, s in enumerate(record["trace"]) if s["node"] == CHOICE_NODE), None)
    if at is None or record["trace"][at]["kind"] != "llm":
        return None
    before = _BEFORE.match(record["trace"][at].get("note") or "")
    options = offered_options(record["question"])
    if before is None or options == YES_NO or named_options(before.group(2), options):
        return {"linked": None, "llm_right": record["em"]}
    steps = [Step(node=s["node"], kind=s["kind"], text=s.get("text") or "") for s in record["trace"][:at]]
    linked = linked_options(before.group(2), options, node_texts(steps))
    if len(linked) != 1:
        return {"linked": None, "llm_right": record["em"]}
    return {"linked": linked[0], "llm_right": record["em"], "link_right": score(linked[0], record["answers"]).em}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "paths", nargs="*", type=Path, help="run folders or records.jsonl files (default: benchmarks/results/runs/*)"
    )
    args = parser.parse_args()
    paths = args.paths or sorted(RUNS.iterdir())
    total: dict[str, list[dict]] = defaultdict(list)
    for path in paths:
        file = path / "records.jsonl" if path.is_dir() else path
        if not file.exists():
            continue
        by: dict[str, list[dict]] = defaultdict(list)
        for record in map(json.loads, file.open()):
            if (outcome := replay(record)) is not None:
                by[record["strategy"]].append(outcome)
                total[record["strategy"]].append(outcome)
        for strategy, outcomes in sorted(by.items()):
            print(f"{path}: {strategy}: {_line(outcomes)}")
    for strategy, outcomes in sorted(total.items()):
        print(f"all: {strategy}: {_line(outcomes)}")


def _line(outcomes: list[dict]) -> str:
    settled = [o for o in outcomes if o["linked"] is not None]
    return (
        f"{len(outcomes)} asked the LLM; the link settles {len(settled)}: right by the link {sum(o['link_right'] for o in settled):.0f}, "
        f"by the LLM's choice {sum(o['llm_right'] for o in settled):.0f}; EM change {sum(o['link_right'] - o['llm_right'] for o in settled):+.0f} answers"
    )


if __name__ == "__main__":
    main()
