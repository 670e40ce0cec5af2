"""The balanced policy's choice on the bundled statistics' figures over all questions, margin by margin
(docs/statistics.md, "The balanced margin"). Runs no model.

    python scripts/margin_table.py
"""

from nlqo.planner.statistics.policy import Candidate, choose
from nlqo.planner.statistics.store import ALL, BUNDLED, load

MARGINS = (0.01, 0.03, 0.05, 0.07, 0.08, 0.09, 0.10)


def main() -> int:
    stats = load(BUNDLED, bundled=True)
    candidates = [
        Candidate(op, s.em, s.em_low, s.em_high, s.n, s.seconds, ALL)
        for op, classes in stats.operators.items()
        if (s := classes.get(ALL)) is not None
    ]
    for c in sorted(candidates, key=lambda c: -c.em):
        print(f"{c.operator}: {c.em:.1%} [{c.em_low:.1%}, {c.em_high:.1%}] in {c.seconds:.1f} s, n={c.n}")
    print("\n| --em-margin | balanced takes |\n|---|---|")
    for margin in MARGINS:
        chosen = choose(candidates, "balanced", em_margin=margin).chosen
        print(f"| {margin:.2f} | `{chosen.operator}` ({chosen.em:.1%}, {chosen.seconds:.1f} s) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
