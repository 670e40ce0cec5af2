"""What the balanced policy picks for each question class from a statistics file, with every
candidate's estimated EM and seconds (the cascade as the mix its calibration replays): run it on two
files to see whether a refit changed any choice (issue 50), e.g.

    git show HEAD~1:nlqo/planner/statistics/default.json > /tmp/before.json
    python scripts/class_choices.py /tmp/before.json nlqo/planner/statistics/default.json
"""

import argparse

from nlqo.execution.operators import OPERATORS
from nlqo.kinds import Operator
from nlqo.parser.questions import QuestionClass
from nlqo.planner.statistics.policy import Candidate, choose
from nlqo.planner.statistics.store import MIN_CLASS, load


def candidates(stats, kind) -> list[Candidate]:
    """The candidates ``Engine.choose`` weighs for a question of class ``kind`` (seconds unscaled)."""
    out, trust = [], None if stats.calibration is None else stats.calibration.trust()
    for operator in OPERATORS:
        got = stats.get(operator, kind)
        if operator == Operator.CASCADE and trust is not None:
            mix, basis = trust.plan.mix(str(kind), MIN_CLASS)
            out.append(Candidate(str(operator), mix.em, mix.em_low, mix.em_high, mix.n, mix.seconds, basis))
        elif got is not None:
            s, basis = got
            out.append(Candidate(str(operator), s.em, s.em_low, s.em_high, s.n, s.seconds, basis))
    return out


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
