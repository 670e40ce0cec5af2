"""What the balanced policy picks for each question class from a statistics file, with every
candidate's estimated EM and seconds (the cascade as the mix its calibration replays): run it on two
files to see whether a refit changed any choice (issue 50), e.g.

    git show HEAD~1:nlqo/planner/statistics/default.json > /tmp/before.json
    python scripts/class_choices.py /tmp/before.json nlqo/planner/statistics/default.json
"""

import argparse

from nlqo.config import EngineConfig
from nlqo.execution.operators import OPERATORS
from nlqo.parser.questions import QuestionClass
from nlqo.planner.statistics.candidates import measured_candidate
from nlqo.planner.statistics.policy import choose
from nlqo.planner.statistics.store import load


def candidates(stats, kind) -> list:
    """The candidates ``Engine.choose`` weighs for a question of class ``kind`` (seconds unscaled,
    escalations parsed and planned as the default configuration does)."""
    trust = None if stats.calibration is None else stats.calibration.trust()
    plan = EngineConfig().plan_escalations
    found = (measured_candidate(stats, op, kind, trust, plan_escalations=plan) for op in OPERATORS)
    return [c for c in found if c is not None]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "files", nargs="+", help="statistics files (the bundled one: nlqo/planner/statistics/default.json)"
    )
    parser.add_argument("--policy", default="balanced")
    args = parser.parse_args()
    print("| file | class | choice | candidates (EM, seconds) |\n|---|---|---|---|")
    for path in args.files:
        stats = load(path, bundled=True)
        for kind in QuestionClass:
            pool = candidates(stats, kind)
            picked = choose(pool, args.policy).operator
            shown = ", ".join(f"{c.operator} {c.em:.1%} {c.seconds:.1f} s" for c in pool)
            print(f"| {path} | {kind} | {picked} | {shown} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
