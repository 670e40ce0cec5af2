"""Answer metrics (EM, F1, Acc with SQuAD normalisation), bootstrap intervals and evidence recall.

Every answer metric takes the best score over all gold answers (the gold answer and its aliases).
For yes/no questions the prediction is first reduced to its first "yes" or "no".
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from typing import Iterable, Sequence

import attrs
import numpy as np

from nlqo.execution.answers import normalize_answer

_BINARY = ("yes", "no", "noanswer")


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when the normalised prediction equals a normalised gold answer.

    >>> exact_match("the Rush.", ["Rush"]), exact_match("Rush band", ["Rush"])
    (1.0, 0.0)
    >>> exact_match("NYC", ["New York City", "NYC"])
    1.0
    """
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in golds))


def f1_score(prediction: str, golds: Sequence[str]) -> float:
    """Best token-level F1 over the gold answers (SQuAD); yes/no/noanswer must match exactly.

    >>> round(f1_score("Neil Peart drummer", ["Neil Peart"]), 3)
    0.8
    >>> f1_score("yes", ["no"]), f1_score("no idea", ["no"])
    (0.0, 0.0)
    """
    pred = normalize_answer(prediction)
    best = 0.0
    for gold in golds:
        ref = normalize_answer(gold)
        if (pred in _BINARY or ref in _BINARY) and pred != ref:
            continue
        common = sum((Counter(pred.split()) & Counter(ref.split())).values())
        if common == 0:
            continue
        precision, recall = common / len(pred.split()), common / len(ref.split())
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


def accuracy(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when a normalised gold answer occurs in the normalised prediction as whole words.

    >>> accuracy("The band was Rush, from Canada", ["Rush"]), accuracy("Rushmore", ["Rush"])
    (1.0, 0.0)
    """
    pred = f" {normalize_answer(prediction)} "
    return float(any(normalize_answer(g) and f" {normalize_answer(g)} " in pred for g in golds))


def yes_no(prediction: str) -> str | None:
    """The first "yes" or "no" word of a prediction, or None.

    >>> yes_no("Yes, it would."), yes_no("No."), yes_no("Probably not")
    ('yes', 'no', None)
    """
    for word in normalize_answer(prediction).split():
        if word in ("yes", "no"):
            return word
    return None


def stray_yes_no(prediction: str, golds: Sequence[str]) -> bool:
    """A bare yes or no (or "yes/no") given to a question whose gold answers are neither.

    Small models copy the answer shape of a yes/no demonstration; this counts how often.

    >>> stray_yes_no("Yes/no", ["Jaws"]), stray_yes_no("no", ["no"]), stray_yes_no("Nolan", ["Jaws"])
    (True, False, False)
    """
    if any(normalize_answer(g) in ("yes", "no") for g in golds):
        return False
    return normalize_answer(prediction) in ("yes", "no", "yesno")


@attrs.frozen
class Scores:
    """The answer metrics of one prediction."""

    em: float
    f1: float
    acc: float


def score(prediction: str, golds: Sequence[str], *, yes_no_question: bool = False) -> Scores:
    """EM, F1 and Acc of ``prediction``; a yes/no question is scored on the prediction's first yes/no.

    >>> score("Yes, since 75,000 < 100,000", ["yes"], yes_no_question=True)
    Scores(em=1.0, f1=1.0, acc=1.0)
    >>> score("Yes, since 75,000 < 100,000", ["yes"])
    Scores(em=0.0, f1=0.0, acc=1.0)
    """
    if yes_no_question:
        prediction = yes_no(prediction) or prediction
    return Scores(exact_match(prediction, golds), f1_score(prediction, golds), accuracy(prediction, golds))


@attrs.frozen
class Interval:
    """A point estimate with a confidence interval."""

    mean: float
    low: float
    high: float


def bootstrap_diff(
    a: Sequence[float], b: Sequence[float], *, resamples: int = 2000, seed: int = 0, confidence: float = 0.95
) -> Interval:
    """Paired bootstrap interval of ``mean(a) - mean(b)`` over the same questions, seeded.

    >>> bootstrap_diff([1, 1, 0, 1], [0, 1, 0, 0], seed=1)
    Interval(mean=0.5, low=0.0, high=1.0)
    """
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"paired scores must be two equal-length lists, got {x.shape} and {y.shape}")
    if len(x) == 0:
        return Interval(0.0, 0.0, 0.0)
    diff = x - y
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(resamples, len(diff)))].mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return Interval(round(float(diff.mean()), 10), round(float(low), 10), round(float(high), 10))


T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
"""Student's t, 97.5th percentile, by degrees of freedom (1.96 beyond: a mean of more than 11 runs)."""


def t_interval(values: Sequence[float]) -> Interval:
    """The mean of repeated runs' measurements with its 95% Student-t interval (the mean alone for one run).

    >>> t_interval([1.0, 2.0, 3.0])
    Interval(mean=2.0, low=-0.4843382083, high=4.4843382083)
    >>> t_interval([0.25])
    Interval(mean=0.25, low=0.25, high=0.25)
    """
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Interval(mean, mean, mean)
    half = T_975.get(len(values) - 1, 1.96) * statistics.stdev(values) / len(values) ** 0.5
    return Interval(mean, round(mean - half, 10), round(mean + half, 10))


def wilson_interval(successes: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score 95% interval of a proportion (EM over ``n`` questions).

    >>> [round(x, 3) for x in wilson_interval(5, 50)]
    [0.043, 0.214]
    >>> wilson_interval(0, 0)
    (0.0, 1.0)
    """
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _title_key(title: str) -> str:
    return " ".join(title.casefold().split())


@attrs.frozen
class EvidenceRecall:
    """Which gold supporting passages a run retrieved (matched by title)."""

    found: int
    total: int

    @property
    def complete(self) -> bool:
        return self.found == self.total

    @property
    def share(self) -> float:
        return self.found / self.total


def evidence_recall(retrieved_titles: Iterable[str], gold_titles: Iterable[str]) -> EvidenceRecall | None:
    """How many distinct gold titles were among the retrieved titles; None without gold titles.

    >>> r = evidence_recall(["Neil Peart", "Rush (band)", "neil  peart"], ["Neil Peart", "Nobody's Hero"])
    >>> r.found, r.total, r.complete, r.share
    (1, 2, False, 0.5)
    >>> evidence_recall(["A"], []) is None
    True
    """
    gold = {_title_key(t) for t in gold_titles}
    if not gold:
        return None
    seen = {_title_key(t) for t in retrieved_titles}
    return EvidenceRecall(found=len(gold & seen), total=len(gold))
