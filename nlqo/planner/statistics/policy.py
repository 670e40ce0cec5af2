"""Choosing an operator from estimates of quality and time, as a planner chooses a join method.

* ``quality``: the best estimated exact match (the faster on a tie);
* ``balanced`` (default): the fastest operator whose estimated EM is within a stated margin of the
  best one's (``em_margin``, 0.01 = one EM point by default; the edge counts as within);
* ``fast``: the fastest.

A time budget first drops operators estimated to take longer (all but the fastest when none fits).
No policy picks an operator that another one dominates (at least as good and at least as fast,
better in one): ties on time go to the better estimate. An unmeasured operator (n=0) ranks below any measured.

>>> cands = [Candidate("retrieve", 0.40, 0.30, 0.50, 50, 8.0), Candidate("iterate", 0.44, 0.34, 0.54, 50, 13.0),
...          Candidate("linear", 0.435, 0.30, 0.57, 50, 11.0), Candidate("tree", 0.30, 0.20, 0.40, 50, 28.0)]
>>> [choose(cands, p).operator for p in ("quality", "balanced", "fast")]
['iterate', 'linear', 'retrieve']
>>> choose(cands, "balanced", em_margin=0.05).operator, choose(cands, "balanced", em_margin=0).operator
('retrieve', 'iterate')
>>> choose(cands, "quality", time_budget=10).operator
'retrieve'
"""

from __future__ import annotations

from typing import Sequence

import attrs

from nlqo.config import default
from nlqo.errors import ConfigError
from nlqo.kinds import Policy

WITHIN = 1e-9
"""Slack of the margin comparison, so that an estimate at its edge (0.44 - 0.01) counts as within."""


@attrs.frozen
class Candidate:
    """One operator's estimates for a question."""

    operator: str
    em: float
    em_low: float
    em_high: float
    n: int
    seconds: float
    basis: str = "all"
    """The statistics the estimate comes from: a question class, or ``all``."""
    escalated_seconds: float | None = None
    """The cascade's: mean seconds of a question it escalates (``seconds`` is the mix's mean)."""

    @property
    def ranked_em(self) -> float:
        """The EM it is ranked by: unknown (never measured, n=0) is below every measured estimate."""
        return self.em if self.n else -1.0


@attrs.frozen
class Choice:
    operator: str
    policy: str
    candidates: tuple[Candidate, ...]
    reason: str
    question_class: str = ""
    statistics: str = ""
    """Where the statistics come from (EXPLAIN prints it)."""
    skipped: str = ""
    """Work the choice made unnecessary (e.g. no parse)."""

    @property
    def chosen(self) -> Candidate:
        return next(c for c in self.candidates if c.operator == self.operator)


def points(margin: float) -> str:
    """A margin of exact match in EM points.

    >>> points(0.01), points(0.025), points(0)
    ('1 EM point', '2.5 EM points', '0 EM points')
    """
    n = round(margin * 100, 6)
    return f"{n:g} EM point{'' if n == 1 else 's'}"


def _speed(c: Candidate) -> tuple[float, float, str]:
    return (c.seconds, -c.ranked_em, c.operator)


def choose(
    candidates: Sequence[Candidate],
    policy: str = default("policy"),
    *,
    time_budget: float | None = None,
    em_margin: float | None = None,
) -> Choice:
    """The operator ``policy`` picks among ``candidates``, and why; ``em_margin`` is the balanced
    policy's margin (None: the configuration's default)."""
    if not candidates:
        raise ConfigError("no operator to choose from: the statistics measure none of the available operators")
    policy = Policy(policy)
    if policy == Policy.STRUCTURAL:
        raise ConfigError("the structural policy chooses on the parsed plan, not from statistics")
    pool = list(candidates)
    note = ""
    if time_budget is not None:
        within = [c for c in pool if c.seconds <= time_budget]
        pool = within or [min(pool, key=_speed)]
        note = f"; time budget {time_budget:g} s" + ("" if within else ": none fits, the fastest runs")
    best = max(pool, key=lambda c: (c.ranked_em, -c.seconds, c.operator))
    if policy == Policy.QUALITY:
        pick, why = best, f"best estimated EM {best.em:.1%}"
    elif policy == Policy.FAST:
        pick = min(pool, key=_speed)
        why = f"fastest, est. {pick.seconds:.1f} s"
    else:
        margin = default("em_margin") if em_margin is None else em_margin
        if margin < 0:
            raise ConfigError(f"the EM margin must not be negative, not {margin:g}")
        eligible = [c for c in pool if c.ranked_em >= best.ranked_em - margin - WITHIN]
        pick = min(eligible, key=_speed)
        why = (
            f"fastest (est. {pick.seconds:.1f} s) whose EM {pick.em:.1%} is within the margin of {points(margin)} "
            f"of the best ({best.operator} {best.em:.1%}, n={best.n})"
        )
    return Choice(pick.operator, str(policy), tuple(candidates), why + note)
