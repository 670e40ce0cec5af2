"""What ``auto`` knows of an operator for a question class before anything runs: its measured EM and
seconds from the statistics, or, for the cascade with a trusted calibration, the mix of answers its
calibration replays (how many it escalates, and what their parse and plan add)."""

from __future__ import annotations

from nlqo.kinds import Operator
from nlqo.planner.statistics.calibration import Trust
from nlqo.planner.statistics.policy import Candidate
from nlqo.planner.statistics.store import MIN_CLASS, Statistics


def measured_candidate(
    stats: Statistics,
    operator: str,
    kind: str,
    trust: Trust | None,
    *,
    plan_escalations: bool,
    scale: float = 1.0,
) -> Candidate | None:
    """``operator``'s candidate for a question of class ``kind``, its seconds times ``scale`` (the
    backend's speed against the statistics'); None when the statistics never measured it.

    ``plan_escalations``: the cascade parses and plans the questions it escalates, so their seconds
    count the parse and the plan."""
    if operator == Operator.CASCADE and trust is not None:
        mix, basis = trust.plan.mix(str(kind), MIN_CLASS)
        basis = f"{basis}; calibrated mix: {mix.escalated:.0%} escalated to {trust.target}"
        if plan_escalations and mix.planning:
            basis += f", their parse and plan {mix.planning:.1f} s a question"
        seconds = mix.mean_seconds(plan_escalations) * scale
        escalated = mix.seconds_escalated(plan_escalations) * scale if mix.escalated else None
        return Candidate(str(operator), mix.em, mix.em_low, mix.em_high, mix.n, seconds, basis, escalated)
    got = stats.get(operator, kind)
    if got is None:
        return None
    s, basis = got
    return Candidate(str(operator), s.em, s.em_low, s.em_high, s.n, s.seconds * scale, basis)
