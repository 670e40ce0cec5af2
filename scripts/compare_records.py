"""Answers of one run's records against another's, question by question (issue 51's check that the
restructure kept behaviour): `python scripts/compare_records.py NEW_DIR OLD_DIR [--as NEW=OLD ...]`.

Prints, per strategy, how many of the questions both answered got the same answer, and each difference.
"""

import argparse
from collections import Counter
from pathlib import Path

from nlqo.eval.records import read_records


def records(folder: Path) -> list[dict]:
    return read_records(folder / "records.jsonl", repair=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("new", type=Path)
    parser.add_argument("old", type=Path)
    parser.add_argument("--as", dest="rename", nargs="*", default=[], help="NEW=OLD strategy names")
    args = parser.parse_args()
    rename = dict(pair.split("=", 1) for pair in args.rename)
    old = {(r["qid"], r["strategy"]): r for r in records(args.old)}
    same, seen = Counter(), Counter()
    for r in records(args.new):
        o = old.get((r["qid"], rename.get(r["strategy"], r["strategy"])))
        if o is None:
            continue
        seen[r["strategy"]] += 1
        if o["answer"] == r["answer"]:
            same[r["strategy"]] += 1
        else:
            print(
                f"differs: {r['strategy']} #{r['index']}: {o['answer']!r} (em {o['em']}) -> {r['answer']!r} (em {r['em']})"
            )
    for strategy in sorted(seen):
        print(f"{strategy}: {same[strategy]} of {seen[strategy]} answers the same")
    print(f"all: {sum(same.values())} of {sum(seen.values())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
