"""Calibration: how well the model's confidence in an answer tells a right answer from a wrong one,
per operator, measured on ``nlqo analyze``'s sample; and the cascade's escalation, fitted from it.

Every generation carries the decoder's confidence (:mod:`nlqo.runtime.llm.confidence`). Its
**features** (:data:`FEATURES`), each oriented so that higher means more confident, are read over
the answer's own tokens (``answer.*``; the whole reply when the answer's span is not known) and
over the whole reply (``reply.*``): the mean and the minimum log-probability, minus the mean and
minus the maximum entropy, and the first token's margin. Beside them, 0/1 **signals**
(:data:`SIGNALS`): whether the answer is supported by its passages
(:mod:`nlqo.execution.operators.support`), whether the question asks yes or no (an answer then
picks one of two), and, for iterate, whether its rounds agree.

* For each operator and feature, :func:`auroc` measures how well the feature ranks right answers
  above wrong ones (exact match; 0.5 is chance, 1 perfect), with a 95% interval from a stratified
  bootstrap (:func:`auroc_interval`).
* The operator's **best** feature (the highest AUROC) and its signals are mapped to the probability
  that its answer is right by a logistic regression (:class:`Logistic`).
* The **escalation table** (:class:`LowConfidence`): for each operator X, each operator's EM on the
  questions where X's best feature is in its lowest third, or half.
* The **cascade plan** (:class:`CascadePlan`): retrieve's answer is doubtful when its best feature
  is below a threshold or it is unsupported; for a few shares of doubtful questions
  (:data:`SHARES`) the threshold is that share's quantile and the escalation goes to the operator
  with the best EM on those questions; the cascade is then replayed on the sample as it runs
  (the answer the calibration trusts more is kept) and the fastest share whose replayed EM is
  within :data:`SHARE_MARGIN` of the best is kept, with the replayed EM and seconds as the
  cascade's estimate. An escalation to the template
  parses and plans the question first (``plan_escalations``), which the template's own records
  do not count: the replay prices it apart (:attr:`Mix.planning`) at the tree's planning seconds on
  the same question (the tree's records carry the parse and the plan).

Everything is fitted on the analyze sample only, and carries its sample counts.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import attrs
import numpy as np

from nlqo.execution.operators.support import SIGNALS, SUPPORTED
from nlqo.kinds import Operator
from nlqo.planner.statistics.intervals import wilson
from nlqo.runtime.llm.confidence import Confidence

FIGURES = ("mean_logprob", "min_logprob", "-mean_entropy", "-max_entropy", "first_margin")
"""The confidence figures, oriented so that higher is more confident (``-``: negated)."""
SCOPES = ("answer", "reply")
FEATURES = tuple(f"{scope}.{figure}" for scope in SCOPES for figure in FIGURES)
"""Every confidence feature: a scope (the answer's tokens, the whole reply) and a figure."""
BOOTSTRAP = 2000
"""Resamples of the stratified bootstrap behind an AUROC's 95% interval."""
SEED = 0
"""The bootstrap's random seed (fixed: the same records give the same intervals)."""
MIN_CALIBRATION = 20
"""Sample answers with a confidence an operator needs before its mapping to P(right) is fitted."""
RIDGE = 1.0
"""L2 penalty of the logistic regression's weights (on centred and scaled inputs)."""
SHARES = (0.0, 0.25, 1 / 3, 0.5)
"""Shares of retrieve's least confident sample questions a cascade plan may escalate, besides the
unsupported ones (0: the unsupported only)."""
SHARE_MARGIN = 0.01
"""How far below the best replayed EM a share's may be and still be kept for being faster (one EM
point, the balanced policy's default margin: a share escalating more must gain more than one
question in a hundred on the sample)."""
PARTS = (("third", 1 / 3), ("half", 0.5))
"""The escalation table's parts: an operator's least confident third and half of the sample."""
TARGETS = tuple(op for op in Operator.values() if op not in (Operator.RETRIEVE, Operator.CASCADE))
"""The operators a cascade may escalate to (not its first, not itself)."""
ALL = "all"
"""The class key of figures over every question (as in :mod:`nlqo.planner.statistics.store`)."""
METHOD = (
    f"AUROC interval: stratified bootstrap ({BOOTSTRAP} resamples, seed {SEED}, percentiles 2.5/97.5); "
    f"P(right): logistic regression on the best feature and the 0/1 signals (ridge {RIDGE:g})"
)


def feature(confidence: Confidence | None, name: str) -> float | None:
    """Feature ``name`` (one of :data:`FEATURES`) of a confidence, higher meaning more confident;
    None when unknown (no confidence, or a figure that is not finite).

    >>> c = Confidence(3, -0.2, -0.9, 0.4, 1.1, 2.0, answer=Confidence(1, -0.5, -0.5, 0.7, 0.7, 1.5))
    >>> feature(c, "answer.mean_logprob"), feature(c, "reply.-max_entropy"), feature(c, "answer.first_margin")
    (-0.5, -1.1, 1.5)
    >>> feature(attrs.evolve(c, answer=None), "answer.mean_logprob"), feature(None, "reply.min_logprob")
    (-0.2, None)
    """
    if confidence is None:
        return None
    scope, _, figure = name.partition(".")
    source = confidence.answer if scope == "answer" and confidence.answer is not None else confidence
    value = float(getattr(source, figure.lstrip("-")))
    value = -value if figure.startswith("-") else value
    return value if math.isfinite(value) else None


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """The area under the ROC curve of ``scores`` for ``labels``: the probability that a right
    answer (label True) scores above a wrong one, ties counted 1/2 (the Mann-Whitney U over the
    product of the counts, from mid-ranks); None without both right and wrong answers.

    >>> auroc([0.9, 0.8, 0.3, 0.1], [True, True, False, False])
    1.0
    >>> auroc([0.1, 0.2], [True, False])
    0.0
    >>> auroc([1, 2, 3, 4], [False, True, False, True])
    0.75
    >>> auroc([0.5, 0.5, 0.5], [True, False, False])
    0.5
    >>> auroc([1.0, 2.0], [True, True]) is None
    True
    """
    n = len(scores)
    if len(labels) != n:
        raise ValueError(f"{n} scores but {len(labels)} labels")
    right = sum(1 for y in labels if y)
    wrong = n - right
    if not right or not wrong:
        return None
    order = sorted(range(n), key=lambda i: scores[i])
    ranks = [0.0] * n
    i = 0
    while i < n:
        j = i
        while j + 1 < n and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for t in range(i, j + 1):
            ranks[order[t]] = (i + j) / 2 + 1
        i = j + 1
    rank_sum = math.fsum(r for r, y in zip(ranks, labels) if y)
    return (rank_sum - right * (right + 1) / 2) / (right * wrong)


def auroc_interval(
    scores: Sequence[float], labels: Sequence[bool], *, resamples: int = BOOTSTRAP, seed: int = SEED
) -> tuple[float, float]:
    """A 95% interval of :func:`auroc`: a stratified bootstrap (the right and the wrong answers
    resampled apart, so every resample has both), percentiles 2.5 and 97.5, with a fixed seed;
    (0, 1) without both right and wrong answers.

    >>> auroc_interval([0.9, 0.8, 0.7, 0.3, 0.2, 0.1], [True, True, True, False, False, False])
    (1.0, 1.0)
    >>> scores, labels = [1, 2, 3, 4, 5, 6, 7, 8], [False, True, False, False, True, True, False, True]
    >>> low, high = auroc_interval(scores, labels)
    >>> low < auroc(scores, labels) < high, (low, high) == auroc_interval(scores, labels)
    (True, True)
    """
    s, y = np.asarray(scores, dtype=float), np.asarray(labels, dtype=bool)
    right, wrong = s[y], s[~y]
    if not len(right) or not len(wrong):
        return 0.0, 1.0
    pairs = (right[:, None] > wrong[None, :]) + 0.5 * (right[:, None] == wrong[None, :])
    rng = np.random.default_rng(seed)
    a = rng.multinomial(len(right), np.full(len(right), 1 / len(right)), size=resamples)
    b = rng.multinomial(len(wrong), np.full(len(wrong), 1 / len(wrong)), size=resamples)
    values = ((a @ pairs) * b).sum(axis=1) / (len(right) * len(wrong))
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def _number(value: float | None) -> float | None:
    return None if value is None else float(value)


def _sigmoid(z: float) -> float:
    return 1 / (1 + math.exp(-z)) if z >= 0 else math.exp(z) / (1 + math.exp(z))


@attrs.frozen
class Logistic:
    """The probability that an operator's answer is right: a logistic regression on its best
    confidence feature and its 0/1 signals, each centred on the sample (the feature also scaled by
    its standard deviation); an input not known for an answer counts at its sample mean.

    >>> m = Logistic.fit(("reply.mean_logprob",), [{"reply.mean_logprob": v} for v in (-2, -1.5, -1, -0.5, -0.2, -0.1)],
    ...                  [False, False, True, False, True, True])
    >>> m.probability({"reply.mean_logprob": -0.1}) > 0.5 > m.probability({"reply.mean_logprob": -2.0}), m.n
    (True, 6)
    """

    inputs: tuple[str, ...]
    """What it reads: the feature first, then the signals."""
    centres: tuple[float, ...]
    scales: tuple[float, ...]
    weights: tuple[float, ...]
    intercept: float
    n: int
    """Sample answers it was fitted on."""

    def probability(self, values: Mapping[str, float | None]) -> float:
        z = self.intercept
        for name, centre, scale, weight in zip(self.inputs, self.centres, self.scales, self.weights):
            value = values.get(name)
            if value is not None:
                z += weight * (float(value) - centre) / scale
        return _sigmoid(z)

    @classmethod
    def fit(
        cls, inputs: Sequence[str], rows: Sequence[Mapping[str, float | None]], labels: Sequence[bool]
    ) -> "Logistic":
        """Fitted by Newton's method with an L2 penalty of :data:`RIDGE` on the weights (a tiny one on
        the intercept, so a sample of one label still gives finite figures)."""
        columns = [[_number(r.get(name)) for r in rows] for name in inputs]
        centres, scales = [], []
        for i, col in enumerate(columns):
            known = [v for v in col if v is not None]
            centre = math.fsum(known) / len(known) if known else 0.0
            spread = math.sqrt(math.fsum((v - centre) ** 2 for v in known) / len(known)) if known else 0.0
            centres.append(centre)
            scales.append(spread if i == 0 and spread > 0 else 1.0)
        x = np.ones((len(rows), len(inputs) + 1))
        for i, col in enumerate(columns):
            x[:, i + 1] = [0.0 if v is None else (v - centres[i]) / scales[i] for v in col]
        y = np.asarray(labels, dtype=float)
        penalty = np.full(len(inputs) + 1, RIDGE)
        penalty[0] = 1e-6
        beta = np.zeros(len(inputs) + 1)
        for _ in range(100):
            p = 1 / (1 + np.exp(-np.clip(x @ beta, -500, 500)))
            gradient = x.T @ (p - y) + penalty * beta
            hessian = x.T @ (x * (p * (1 - p))[:, None]) + np.diag(penalty)
            step = np.linalg.solve(hessian, gradient)
            beta = beta - step
            if float(np.max(np.abs(step))) < 1e-10:
                break
        return cls(
            inputs=tuple(inputs),
            centres=tuple(centres),
            scales=tuple(scales),
            weights=tuple(float(b) for b in beta[1:]),
            intercept=float(beta[0]),
            n=len(rows),
        )


def _numeric(cls: Any, fields: Mapping[str, Any]) -> Any:
    """``cls(**fields)`` read from a file, each field typed ``int`` or ``float`` made one (``em`` of a
    :class:`LowConfidence` too): a malformed file fails as it is read (TypeError, ValueError), not in
    the cascade's arithmetic (``"n": {}`` did, found by fuzzing the statistics file).

    >>> _numeric(Mix, {"n": "3", "em": 1, "em_low": 0, "em_high": 1, "seconds": 2, "escalated": 0, "kept_first": 1}).n
    3
    """
    out: dict[str, Any] = dict(fields)
    for field in attrs.fields(cls):
        kind = str(field.type)
        if field.name not in out or (out[field.name] is None and kind.endswith("| None")):
            continue
        value: Any = out[field.name]
        if kind in ("int", "float", "float | None"):
            out[field.name] = (int if kind == "int" else float)(value)
        elif kind == "Mapping[str, float]":
            out[field.name] = {str(k): float(v) for k, v in value.items()}
        elif kind in ("tuple[str, ...]", "tuple[float, ...]"):
            out[field.name] = tuple(map(str if "str" in kind else float, value))
    return cls(**out)


@attrs.frozen
class Discrimination:
    """How well one feature (or signal) ranks an operator's right answers above its wrong ones."""

    auroc: float | None
    """None when the answers it was known for are all right or all wrong."""
    low: float
    high: float
    n: int
    """Answers the feature was known for."""
    right: int
    """Of those, the right ones (exact match)."""


@attrs.frozen
class OperatorCalibration:
    """One operator's calibration: each feature's AUROC, its best feature, its mapping to P(right)."""

    n: int
    em: float
    features: Mapping[str, Discrimination]
    """Each of :data:`FEATURES`, and each signal measured."""
    best: str | None
    """The feature with the highest AUROC (the first of :data:`FEATURES` on a tie); None when none has one."""
    model: Logistic | None
    """P(right) from the best feature and the signals; None below :data:`MIN_CALIBRATION` answers
    or without both right and wrong ones."""

    def value(self, confidence: Confidence | None) -> float | None:
        """The best feature of ``confidence``."""
        return None if self.best is None else feature(confidence, self.best)

    def probability(self, confidence: Confidence | None, signals: Mapping[str, bool]) -> float | None:
        """P(right) of an answer with this ``confidence`` and these signals; None when not known."""
        value = self.value(confidence)
        if self.model is None or value is None or self.best is None:
            return None
        return self.model.probability({self.best: value, **{k: float(v) for k, v in signals.items()}})


@attrs.frozen
class LowConfidence:
    """One row of the escalation table: the sample questions where an operator's best feature is in
    its lowest ``part`` (below ``threshold``), and every operator's EM on them."""

    part: str
    threshold: float
    n: int
    em: Mapping[str, float]
    """Operator -> EM on these questions (the operator itself included)."""


@attrs.frozen
class Mix:
    """The cascade as a plan runs it, replayed on the sample's questions (of one class, or all)."""

    n: int
    em: float
    em_low: float
    em_high: float
    seconds: float
    """Mean seconds a question, the escalations' parse and plan not counted (:attr:`planning`)."""
    escalated: float
    """Share of the questions escalated."""
    kept_first: float
    """Share of the questions escalated whose first answer was kept (trusted more)."""
    planning: float = 0.0
    """Mean seconds a question that escalations to the template spend parsing and planning first
    (``plan_escalations``; 0 for iterate and the tree, whose records count their own)."""
    escalated_seconds: float = 0.0
    """Mean seconds of an escalated question, its parse and plan not counted (0 when none escalated)."""

    def mean_seconds(self, planned: bool) -> float:
        """Mean seconds a question, with the escalations' parse and plan when ``planned``."""
        return self.seconds + (self.planning if planned else 0.0)

    def seconds_escalated(self, planned: bool) -> float:
        """Mean seconds of an escalated question, with its parse and plan when ``planned``."""
        extra = self.planning / self.escalated if planned and self.escalated else 0.0
        return self.escalated_seconds + extra


@attrs.frozen
class Option:
    """One share of doubtful questions a plan was fitted over, and what the replay gave."""

    share: float
    threshold: float | None
    target: str
    target_em: float
    """The target's EM on the doubtful questions (why it was the target)."""
    escalated: float
    em: float
    seconds: float
    """Mean seconds a question, the escalations' parse and plan included."""


@attrs.frozen
class CascadePlan:
    """How the cascade escalates: retrieve's answer is doubtful when its ``feature`` is below
    ``threshold`` (None: never by confidence) or it is unsupported; doubtful answers go to ``target``."""

    feature: str
    threshold: float | None
    target: str = attrs.field()
    share: float
    """The share of least confident questions the threshold was fitted to (besides the unsupported)."""
    n: int
    """Sample questions the plan was fitted and replayed on."""
    mixes: Mapping[str, Mix]
    """Question class (and ``all``) -> the replayed cascade."""
    options: tuple[Option, ...] = ()

    @target.validator
    def _escalates(self, _attribute: Any, value: str) -> None:
        if value not in TARGETS:
            raise ValueError(f"a cascade escalates to one of {', '.join(TARGETS)}, not {value!r}")

    def mix(self, question_class: str, min_class: int) -> tuple[Mix, str]:
        """The replayed cascade of a class, or over all questions when the class has fewer than ``min_class``."""
        own = self.mixes.get(str(question_class))
        if own is not None and own.n >= min_class:
            return own, str(question_class)
        return self.mixes[ALL], ALL


@attrs.frozen
class Trust:
    """What a cascade escalates by (:class:`nlqo.execution.operators.base.Calibrated`): the plan,
    and every operator's mapping to P(right)."""

    plan: CascadePlan
    operators: Mapping[str, OperatorCalibration]

    @property
    def target(self) -> str:
        return self.plan.target

    @property
    def feature(self) -> str:
        return self.plan.feature

    @property
    def threshold(self) -> float | None:
        return self.plan.threshold

    def feature_of(self, operator: str) -> str | None:
        cal = self.operators.get(str(operator))
        return None if cal is None else cal.best

    def value(self, operator: str, confidence: Confidence | None) -> float | None:
        cal = self.operators.get(str(operator))
        return None if cal is None else cal.value(confidence)

    def probability(self, operator: str, confidence: Confidence | None, signals: Mapping[str, bool]) -> float | None:
        cal = self.operators.get(str(operator))
        return None if cal is None else cal.probability(confidence, signals)


@attrs.frozen
class Calibration:
    """Every operator's calibration, the escalation table and the cascade plan (None when the
    sample cannot fit one: no calibrated retrieve, or no calibrated operator to escalate to)."""

    operators: Mapping[str, OperatorCalibration]
    escalation: Mapping[str, tuple[LowConfidence, ...]]
    cascade: CascadePlan | None = None
    n: int = 0
    """Sample questions."""
    method: str = METHOD

    def trust(self) -> Trust | None:
        """What the cascade escalates by, when there is a plan."""
        return None if self.cascade is None else Trust(self.cascade, self.operators)

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Calibration":
        """What :meth:`to_dict` wrote; a malformed one raises KeyError, TypeError or ValueError.

        >>> cal = fit({"retrieve": [Row(str(i), "other", float(i % 2), 1.0, None) for i in range(4)]})
        >>> Calibration.from_dict(cal.to_dict()) == cal
        True
        """

        def operator(d: Mapping[str, Any]) -> OperatorCalibration:
            model = None if d["model"] is None else _numeric(Logistic, d["model"])
            features = {k: _numeric(Discrimination, v) for k, v in d["features"].items()}
            return _numeric(OperatorCalibration, {**d, "features": features, "model": model})

        plan = data.get("cascade")
        return cls(
            operators={op: operator(d) for op, d in data["operators"].items()},
            escalation={op: tuple(_numeric(LowConfidence, r) for r in rows) for op, rows in data["escalation"].items()},
            cascade=None
            if plan is None
            else _numeric(
                CascadePlan,
                {
                    **plan,
                    "mixes": {c: _numeric(Mix, m) for c, m in plan["mixes"].items()},
                    "options": tuple(_numeric(Option, o) for o in plan.get("options", ())),
                },
            ),
            n=int(data.get("n", 0)),
            method=str(data.get("method", METHOD)),
        )


@attrs.frozen
class Row:
    """One operator's answer to one sample question, as calibration reads it."""

    key: str
    """The question (the same key for every operator's answer to it)."""
    question_class: str
    em: float
    seconds: float
    confidence: Confidence | None
    signals: Mapping[str, bool] = attrs.field(factory=dict)
    """:data:`SIGNALS` known for the answer."""
    answered: bool = True
    """Whether there was an answer (an empty one never replaces a first answer)."""
    planning_seconds: float = 0.0
    """Of :attr:`seconds`, those spent parsing and planning (the tree's; 0 for an operator that does not plan)."""

    @property
    def right(self) -> bool:
        return self.em >= 0.5


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else 0.0


def discrimination(scores: Sequence[float], labels: Sequence[bool]) -> Discrimination:
    low, high = auroc_interval(scores, labels)
    return Discrimination(auroc(scores, labels), low, high, len(scores), sum(1 for y in labels if y))


def calibrate_operator(rows: Sequence[Row]) -> OperatorCalibration:
    """AUROC of every feature and signal, the best feature, and the mapping to P(right)."""
    features = {}
    for name in FEATURES:
        known = [(v, r.right) for r in rows if (v := feature(r.confidence, name)) is not None]
        features[name] = discrimination([v for v, _ in known], [y for _, y in known])
    for name in SIGNALS:
        flags = [(float(r.signals[name]), r.right) for r in rows if name in r.signals]
        if flags:
            features[name] = discrimination([v for v, _ in flags], [y for _, y in flags])
    measured = [(name, a) for name in FEATURES if (a := features[name].auroc) is not None]
    best = max(measured, key=lambda t: t[1])[0] if measured else None
    model = None
    if best is not None:
        data = [(r, v) for r in rows if (v := feature(r.confidence, best)) is not None]
        labels = [r.right for r, _ in data]
        if len(data) >= MIN_CALIBRATION and any(labels) and not all(labels):
            signals = [s for s in SIGNALS if len({r.signals[s] for r, _ in data if s in r.signals}) == 2]
            inputs = [{best: v, **{s: float(r.signals[s]) for s in signals if s in r.signals}} for r, v in data]
            model = Logistic.fit((best, *signals), inputs, labels)
    return OperatorCalibration(n=len(rows), em=_mean([r.em for r in rows]), features=features, best=best, model=model)


def quantile_threshold(values: Sequence[float], share: float) -> float:
    """The value below which about ``share`` of ``values`` lie (fewer on ties): the sorted values'
    entry at ``floor(share * n)``.

    >>> quantile_threshold([5, 1, 4, 2, 3, 6], 1 / 3), quantile_threshold([1, 2, 3, 4], 0.5)
    (3, 3)
    """
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.floor(share * len(ordered) + 1e-9))]


def low_confidence(
    operator: str, rows: Mapping[str, Sequence[Row]], cal: OperatorCalibration
) -> tuple[LowConfidence, ...]:
    """The escalation table's rows of ``operator``: every operator's EM on its least confident third and half."""
    values = {r.key: v for r in rows[operator] if (v := cal.value(r.confidence)) is not None}
    if not values:
        return ()
    by = {op: {r.key: r for r in rs} for op, rs in rows.items()}
    out = []
    for part, share in PARTS:
        threshold = quantile_threshold(list(values.values()), share)
        keys = [k for k, v in values.items() if v < threshold]
        em = {op: _mean([by[op][k].em for k in keys if k in by[op]]) for op in rows if any(k in by[op] for k in keys)}
        out.append(LowConfidence(part, float(threshold), len(keys), em))
    return tuple(out)


@attrs.frozen
class _Outcome:
    question_class: str
    em: float
    seconds: float
    escalated: bool
    kept_first: bool
    planning: float = 0.0


def _doubtful(first: Row, value: float | None, threshold: float | None) -> bool:
    """Whether the cascade escalates ``first`` (without a confidence it goes by support alone)."""
    low = value is not None and threshold is not None and value < threshold
    return low or first.signals.get(SUPPORTED) is False


def replay(
    firsts: Sequence[Row],
    threshold: float | None,
    target: str,
    by_target: Mapping[str, Row],
    first_cal: OperatorCalibration,
    target_cal: OperatorCalibration,
    planning: Mapping[str, float] | None = None,
) -> list[_Outcome]:
    """The cascade on each sample question as it runs: retrieve's answer, escalated when doubtful,
    the escalated answer kept unless the calibration trusts it less than the first (or it is empty).
    ``planning``: question -> seconds an escalation to ``target`` parses and plans first."""
    planning = planning or {}
    out = []
    for first in firsts:
        second = by_target.get(first.key)
        if second is None or not _doubtful(first, first_cal.value(first.confidence), threshold):
            out.append(_Outcome(first.question_class, first.em, first.seconds, False, False))
            continue
        p_first = first_cal.probability(first.confidence, first.signals)
        p_second = target_cal.probability(second.confidence, second.signals)
        keep_first = not second.answered or (p_first is not None and p_second is not None and p_second < p_first)
        extra = second.seconds - first.seconds if target == Operator.ITERATE else second.seconds  # iterate continues
        em = first.em if keep_first else second.em
        seconds = first.seconds + max(0.0, extra)
        out.append(_Outcome(first.question_class, em, seconds, True, keep_first, planning.get(first.key, 0.0)))
    return out


def mix(outcomes: Sequence[_Outcome]) -> Mix:
    n = len(outcomes)
    hits = math.fsum(o.em for o in outcomes)
    low, high = wilson(hits, n)
    escalated = sum(1 for o in outcomes if o.escalated)
    return Mix(
        n=n,
        em=hits / n if n else 0.0,
        em_low=low,
        em_high=high,
        seconds=_mean([o.seconds for o in outcomes]),
        escalated=escalated / n if n else 0.0,
        kept_first=sum(1 for o in outcomes if o.kept_first) / escalated if escalated else 0.0,
        planning=_mean([o.planning for o in outcomes]),
        escalated_seconds=_mean([o.seconds for o in outcomes if o.escalated]),
    )


def planning_seconds(rows: Mapping[str, Sequence[Row]], target: str) -> dict[str, float]:
    """Question -> the seconds an escalation to ``target`` parses and plans before it runs: for the
    template, the tree's planning on that question (its mean where the tree did not run it); none for
    iterate (it continues) or the tree (its records count their own).

    >>> tree = [Row("a", "other", 1.0, 30.0, None, planning_seconds=12.0), Row("b", "other", 0.0, 20.0, None, planning_seconds=8.0)]
    >>> rows = {"tree": tree, "linear": [Row(k, "other", 0.0, 9.0, None) for k in "abc"]}
    >>> planning_seconds(rows, "linear"), planning_seconds(rows, "tree")
    ({'a': 12.0, 'b': 8.0, 'c': 10.0}, {})
    """
    if target != Operator.LINEAR:
        return {}
    measured = {r.key: r.planning_seconds for r in rows.get(Operator.TREE.value, ()) if r.planning_seconds > 0}
    usual = _mean(list(measured.values()))
    return {r.key: measured.get(r.key, usual) for r in rows.get(target, ())}


def plan_cascade(rows: Mapping[str, Sequence[Row]], operators: Mapping[str, OperatorCalibration]) -> CascadePlan | None:
    """The cascade's threshold and target fitted on the sample (module docstring); None without a
    calibrated retrieve or an operator with answers to escalate to."""
    first_cal = operators.get(Operator.RETRIEVE.value)
    if first_cal is None or first_cal.model is None or first_cal.best is None:
        return None
    # a target without a confidence of its own (records of a backend that read none) is still one:
    # its escalated answer is kept, as the cascade does when it has no probability to compare
    targets = [op for op in sorted(rows) if op in TARGETS and rows[op]]
    if not targets:
        return None
    firsts = list(rows[Operator.RETRIEVE.value])
    by = {op: {r.key: r for r in rows[op]} for op in targets}
    planning = {op: planning_seconds(rows, op) for op in targets}
    speed = {op: _mean([r.seconds for r in rows[op]]) + _mean(list(planning[op].values())) for op in targets}
    values = [first_cal.value(r.confidence) for r in firsts]
    known = [v for v in values if v is not None]
    options, replays = [], []
    for share in SHARES:
        threshold = None if share == 0 or not known else float(quantile_threshold(known, share))
        doubtful = [r.key for r, v in zip(firsts, values) if _doubtful(r, v, threshold)]
        em_on = {op: _mean([by[op][k].em for k in doubtful if k in by[op]]) for op in targets}
        target = max(targets, key=lambda op: (em_on[op], -speed[op]))
        outcomes = replay(firsts, threshold, target, by[target], first_cal, operators[target], planning[target])
        whole = mix(outcomes)
        options.append(
            Option(share, threshold, target, em_on[target], whole.escalated, whole.em, whole.mean_seconds(True))
        )
        replays.append(outcomes)
    top = max(o.em for o in options)
    near = [i for i, o in enumerate(options) if o.em >= top - SHARE_MARGIN - 1e-9]
    best = min(near, key=lambda i: (options[i].seconds, i))
    chosen, outcomes = options[best], replays[best]
    classes = sorted({o.question_class for o in outcomes})
    mixes = {ALL: mix(outcomes), **{c: mix([o for o in outcomes if o.question_class == c]) for c in classes}}
    return CascadePlan(
        feature=first_cal.best,
        threshold=chosen.threshold,
        target=chosen.target,
        share=chosen.share,
        n=len(firsts),
        mixes=mixes,
        options=tuple(options),
    )


def fit(rows: Mapping[str, Sequence[Row]]) -> Calibration:
    """The calibration of every operator's sample answers (operator -> its rows, one per question).

    >>> from nlqo.runtime.llm.scripted import word_confidence
    >>> rows = [Row(str(i), "other", float(i >= 10), 8.0, word_confidence("x", logprob=-2.0 + 0.1 * i)) for i in range(20)]
    >>> cal = fit({"retrieve": rows})
    >>> r = cal.operators["retrieve"]
    >>> r.features["reply.mean_logprob"].auroc, r.best, r.model.n, cal.cascade is None
    (1.0, 'answer.mean_logprob', 20, True)
    """
    operators = {op: calibrate_operator(rs) for op, rs in sorted(rows.items())}
    escalation = {op: low_confidence(op, rows, cal) for op, cal in operators.items() if cal.best is not None}
    keys = {r.key for rs in rows.values() for r in rs}
    return Calibration(operators, escalation, plan_cascade(rows, operators), n=len(keys))
