"""Compare records run again under a change with the run's own records of the same questions.

    python benchmarks/compare_rerun.py benchmarks/results/tree-bare-leaves [--strategy tree]

Each ``<set>.jsonl`` in the folder holds re-run records; ``benchmarks/results/runs/<set>`` holds
the run they replace. Prints, per set: the questions run again, how many each answered right, the
strategy's EM over the whole run with the re-run records in place, mean seconds on the re-run
questions, and, for the tree, its leaves that name no entity (subject and object variables) and
how many of them were still retrieved with the bare atom (a rewrite the guard turned back).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

RUNS = Path(__file__).parent / "results" / "runs"


def _bare_leaves(record: dict) -> tuple[int, int]:
    nodes = {n["id"]: n for n in (record.get("plan") or {}).get("nodes", [])}
    bare = raw = 0
    for step in record["trace"]:
        node = nodes.get(step["node"])
        if step["kind"] == "retrieve" and node and node.get("triple") and not node["children"]:
            subject, _, object_ = node["triple"]
            if subject.startswith("?") and object_.startswith("?"):
                bare += 1
                raw += step["text"].startswith("?")
    return bare, raw


def compare(folder: Path, strategy: str) -> None:
    for path in sorted(folder.glob("*.jsonl")):
        new = {r["qid"]: r for r in map(json.loads, path.open()) if r["strategy"] == strategy}
        run = [r for r in map(json.loads, (RUNS / path.stem / "records.jsonl").open()) if r["strategy"] == strategy]
        old = {r["qid"]: r for r in run if r["qid"] in new}
        n = len(new)
        if not n:
            continue
        em_old, em_new = sum(r["em"] for r in old.values()), sum(r["em"] for r in new.values())
        whole_old = 100 * sum(r["em"] for r in run) / len(run)
        whole_new = 100 * (sum(r["em"] for r in run) - em_old + em_new) / len(run)
        s_old, s_new = (sum(r["seconds"] for r in d.values()) / n for d in (old, new))
        bare = [_bare_leaves(r) for r in new.values()]
        print(
            f"{path.stem}: {n} re-run; right {em_new:.0f} vs {em_old:.0f}; {strategy} EM over {len(run)} {whole_new:.1f} vs {whole_old:.1f}; "
            f"{s_new:.1f} vs {s_old:.1f} s; bare leaves {sum(b for b, _ in bare)}, retrieved as the bare atom {sum(r for _, r in bare)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="folder of <set>.jsonl re-run records")
    parser.add_argument("--strategy", default="tree", help="the strategy re-run (default: %(default)s)")
    args = parser.parse_args()
    compare(args.folder, args.strategy)


if __name__ == "__main__":
    main()
