"""How sure the model was of a reply, from the logits the decoder already computed: no extra call.

At each token the model chooses (sampled or argmax; not the tokens a grammar forces, which are
appended without a choice), a backend reads the distribution once (:func:`read`: one log-sum-exp
over the vocabulary) and keeps three figures: the chosen token's log-probability, the entropy of
the distribution (nats), and the chosen token's margin over the best other token (log-probability
difference: >= 0 when the choice is the argmax, as greedy decoding makes it). A :class:`Tally`
holds them for one reply; a :class:`Confidence` is their summary, for the whole reply and, when
the reply has a distinguishable answer, for the tokens of that answer (:meth:`Confidence.with_answer`).

Under constrained decoding (:mod:`nlqo.runtime.llm.constrain`) the figures are those of the
model's **unconstrained** distribution, read before the grammar's mask: the log-probability is not
renormalised over the allowed tokens, the entropy counts the tokens the grammar forbids, and the
margin is negative when the grammar rejected the model's own choice. So a reply's figures mean the
same with and without a grammar, and reading them costs no mask.

OpenAI-compatible servers report only the top few log-probabilities of each token: the entropy is
then computed over those, the rest of the probability counted as one more outcome (a lower bound of
the true entropy), and :attr:`Confidence.basis` says so (``top-5``).

>>> import numpy as np
>>> tally = Tally()
>>> token = tally.choose(np.log(np.array([0.5, 0.25, 0.25], dtype=np.float32)), position=0)
>>> token, [round(x, 4) for x in (tally.logprobs[0], tally.entropies[0], tally.margins[0])]
(0, [-0.6931, 1.0397, 0.6931])
"""

from __future__ import annotations

import codecs
import math
import re
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import attrs
import numpy as np


class Reading(NamedTuple):
    """The distribution at one position, as :func:`read` finds it."""

    log_total: float
    """log-sum-exp of the logits: a token's log-probability is its logit minus this."""
    entropy: float
    """Entropy of the softmax of the logits, in nats."""
    top: int
    """The argmax (lowest id on ties)."""
    best: float
    """The largest logit."""
    runner_up: float
    """The largest logit of the other tokens (-inf for a one-token vocabulary)."""


def read(logits: np.ndarray, scratch: np.ndarray | None = None) -> Reading:
    """Read one position's ``logits`` (a 1-D float array): a few passes over the vocabulary, no copy
    of the logits, the temporaries written into ``scratch`` (two rows of the vocabulary's size)
    when given. Logits of ``-inf`` (tokens masked out) have probability 0.

    >>> r = read(np.array([2.0, 1.0, 0.0, 1.0], dtype=np.float32))
    >>> r.top, r.best, r.runner_up, round(r.log_total, 4), round(r.entropy, 4)
    (0, 2.0, 1.0, 2.6265, 1.1644)
    >>> round(read(np.zeros(8, dtype=np.float32)).entropy, 4) == round(math.log(8), 4)
    True
    >>> round(read(np.array([0.0, -np.inf, 0.0], dtype=np.float32)).entropy, 4) == round(math.log(2), 4)
    True
    """
    top = int(np.argmax(logits))
    best = float(logits[top])
    runner_up = max(
        float(logits[:top].max()) if top > 0 else -math.inf,
        float(logits[top + 1 :].max()) if top + 1 < len(logits) else -math.inf,
    )
    if scratch is None or scratch.shape != (2, len(logits)):
        scratch = np.empty((2, len(logits)), dtype=np.float32)
    shifted, weights = scratch[0], scratch[1]
    np.subtract(logits, best, out=shifted)  # <= 0: exp cannot overflow
    np.exp(shifted, out=weights)
    total = float(weights.sum())
    if math.isfinite(float(shifted.min())):
        spread = float(np.dot(weights, shifted))  # sum of p * (x - best), times total
    else:  # masked tokens weigh nothing (0 * -inf would be NaN)
        spread = float(np.dot(weights, np.where(weights > 0, shifted, 0.0)))
    entropy = max(0.0, math.log(total) - spread / total)
    return Reading(best + math.log(total), entropy, top, best, runner_up)


@attrs.frozen(eq=False)
class TokenScores:
    """The figures of each chosen token of one reply, and where its text is in the reply's text
    (character offsets; a token past the text, as an end token or a stop string, starts at or
    after its end). Kept in memory for answer spans; records hold only the summaries."""

    logprobs: tuple[float, ...]
    entropies: tuple[float, ...]
    margins: tuple[float, ...]
    starts: tuple[int, ...]
    ends: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.logprobs)

    def summary(self, basis: str, indices: Sequence[int] | None = None) -> "Confidence | None":
        """The :class:`Confidence` of the tokens at ``indices`` (all by default); None for none."""
        picked = range(len(self)) if indices is None else indices
        if not picked:
            return None
        lp = [self.logprobs[i] for i in picked]
        h = [self.entropies[i] for i in picked]
        return Confidence(
            tokens=len(lp),
            mean_logprob=math.fsum(lp) / len(lp),
            min_logprob=min(lp),
            mean_entropy=math.fsum(h) / len(h),
            max_entropy=max(h),
            first_margin=self.margins[picked[0]],
            basis=basis,
            detail=self if indices is None else None,
        )

    def to_dict(self) -> dict[str, list]:
        return {f.name: list(getattr(self, f.name)) for f in attrs.fields(TokenScores)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TokenScores":
        return cls(**{f.name: tuple(data[f.name]) for f in attrs.fields(TokenScores)})


def _number(x: float) -> float | None:
    """``x`` for JSON: None when it is not finite (an unknown margin)."""
    return x if math.isfinite(x) else None


FIGURES = ("mean_logprob", "min_logprob", "mean_entropy", "max_entropy", "first_margin")
"""The figures of a :class:`Confidence` besides its token count."""


@attrs.frozen
class Confidence:
    """How sure the model was of a reply (or of a part of it): summaries of its chosen tokens.

    >>> c = Confidence(tokens=3, mean_logprob=-0.2, min_logprob=-0.5, mean_entropy=0.4, max_entropy=0.9, first_margin=1.5)
    >>> round(c.probability, 3), c.describe()
    (0.819, 'logprob mean -0.20 min -0.50, entropy mean 0.40 max 0.90, first margin 1.50, 3 tokens')
    """

    tokens: int
    """Chosen tokens summarised (a reply's end token and stop string included; forced tokens not)."""
    mean_logprob: float
    """Mean log-probability of the chosen tokens (natural log; 0 is certain)."""
    min_logprob: float
    """Log-probability of the least likely chosen token."""
    mean_entropy: float
    """Mean entropy of the distributions the tokens were chosen from (nats; 0 is certain)."""
    max_entropy: float
    """Largest of those entropies."""
    first_margin: float
    """The first token's log-probability minus that of the best other token (>= 0 when it was the
    argmax; NaN when a server reported no other token)."""
    basis: str = "logits"
    """``logits``: the full distribution; ``top-N``: a server's N most likely tokens per position
    (the entropy is then a lower bound)."""
    answer: "Confidence | None" = None
    """The same figures over the tokens of the answer the reply gives (:meth:`with_answer`), when known."""
    detail: TokenScores | None = attrs.field(default=None, eq=False, repr=False)
    """Each token's figures and place in the text, for :meth:`span` (None once summarised)."""

    @property
    def probability(self) -> float:
        """The geometric mean of the tokens' probabilities, ``exp(mean_logprob)``."""
        return math.exp(self.mean_logprob)

    def span(self, start: int, end: int) -> "Confidence | None":
        """The confidence of the chosen tokens whose text overlaps characters ``start:end`` of the
        reply; None without :attr:`detail` or when no chosen token does (a grammar forced them).

        >>> scores = TokenScores((-0.1, -1.0, -0.3), (0.2, 2.0, 0.6), (3.0, 0.5, 1.0), (0, 3, 9), (3, 9, 9))
        >>> scores.summary("logits").span(4, 9).mean_logprob
        -1.0
        >>> scores.summary("logits").span(9, 9) is None
        True
        """
        d = self.detail
        if d is None:
            return None
        picked = [i for i in range(len(d)) if d.starts[i] < end and d.ends[i] > start]
        return d.summary(self.basis, picked)

    def with_answer(self, text: str, answer: str) -> "Confidence":
        """This confidence with :attr:`answer` set to that of the first place ``answer`` appears in
        the reply ``text`` as whole words (else anywhere), ignoring case, as a short answer may be
        lower-cased (``yes``); itself when ``answer`` is empty, not in ``text``, or the tokens are
        not kept.

        >>> scores = TokenScores((-0.1, -1.0, -0.3), (0.2, 2.0, 0.6), (3.0, 0.5, 1.0), (0, 4, 9), (4, 9, 10))
        >>> c = scores.summary("logits").with_answer("The Rush.", "rush")
        >>> c.answer.tokens, c.answer.mean_logprob, c.answer.first_margin
        (1, -1.0, 0.5)
        """
        if not answer.strip() or self.detail is None:
            return self
        found = re.search(rf"(?<!\w){re.escape(answer)}(?!\w)", text, re.IGNORECASE) or re.search(
            re.escape(answer), text, re.IGNORECASE
        )
        if found is None:
            return self
        return attrs.evolve(self, answer=self.span(found.start(), found.end()))

    def to_dict(self) -> dict[str, Any]:
        """The summaries as JSON (non-finite figures as null), the answer's nested.

        >>> Confidence(1, -0.5, -0.5, 0.1, 0.1, float("nan"), basis="top-5").to_dict()["first_margin"] is None
        True
        """
        return {
            "tokens": self.tokens,
            **{name: _number(getattr(self, name)) for name in FIGURES},
            "basis": self.basis,
            "answer": None if self.answer is None else self.answer.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], detail: Mapping[str, Any] | None = None) -> "Confidence":
        """The confidence :meth:`to_dict` wrote (with ``detail`` from :meth:`TokenScores.to_dict`).

        >>> c = Confidence(2, -0.1, -0.2, 0.3, 0.4, 0.5, answer=Confidence(1, -0.2, -0.2, 0.4, 0.4, 0.5))
        >>> Confidence.from_dict(c.to_dict()) == c
        True
        """

        figures: dict[str, Any] = {k: math.nan if data.get(k) is None else float(data[k]) for k in FIGURES}
        return cls(
            tokens=int(data["tokens"]),
            **figures,
            basis=str(data.get("basis", "logits")),
            answer=None if data.get("answer") is None else cls.from_dict(data["answer"]),
            detail=None if detail is None else TokenScores.from_dict(detail),
        )

    def describe(self) -> str:
        """One line for EXPLAIN: the figures, two decimals."""
        return (
            f"logprob mean {self.mean_logprob:.2f} min {self.min_logprob:.2f}, entropy mean {self.mean_entropy:.2f} "
            f"max {self.max_entropy:.2f}, first margin {self.first_margin:.2f}, {self.tokens} token{'' if self.tokens == 1 else 's'}"
            + ("" if self.basis == "logits" else f" ({self.basis})")
        )


@attrs.define(eq=False)
class Tally:
    """The figures of one reply's chosen tokens as it is decoded (a backend keeps one per request).

    Call :meth:`choose` (or :func:`read`, the choice, then :meth:`add`) at every position where a
    token is chosen; :meth:`confidence` at the end.
    """

    logprobs: list[float] = attrs.Factory(list)
    entropies: list[float] = attrs.Factory(list)
    margins: list[float] = attrs.Factory(list)
    positions: list[int] = attrs.Factory(list)
    """Each chosen token's place among the reply's tokens (forced ones included)."""
    _scratch: np.ndarray | None = None

    def read(self, logits: np.ndarray) -> Reading:
        """:func:`read` with this tally's scratch rows (made once per reply)."""
        if self._scratch is None or self._scratch.shape[1] != len(logits):
            self._scratch = np.empty((2, len(logits)), dtype=np.float32)
        return read(logits, self._scratch)

    def add(self, reading: Reading, token: int, logit: float, position: int) -> None:
        """Keep the figures of ``token`` (whose logit is ``logit``) chosen where ``reading`` was read."""
        self.logprobs.append(logit - reading.log_total)
        self.entropies.append(reading.entropy)
        self.margins.append(logit - (reading.runner_up if token == reading.top else reading.best))
        self.positions.append(position)

    def choose(self, logits: np.ndarray, position: int, constrained: Callable[[np.ndarray], int] | None = None) -> int:
        """The greedy token at ``logits`` (``constrained(logits)`` when given, which may mask the
        logits in place: they are read before), kept as the reply's token number ``position``."""
        reading = self.read(logits)
        token = reading.top if constrained is None else constrained(logits)
        self.add(reading, token, reading.best if token == reading.top else float(logits[token]), position)
        return token

    def confidence(self, offsets: Sequence[tuple[int, int]] | None = None, basis: str = "logits") -> Confidence | None:
        """The reply's :class:`Confidence` (None when no token was chosen); ``offsets`` gives each
        reply token's ``(start, end)`` in the text (:func:`piece_offsets`), for answer spans."""
        if not self.logprobs:
            return None
        if offsets is None:
            starts = ends = tuple(0 for _ in self.positions)
        else:
            starts = tuple(offsets[p][0] if p < len(offsets) else 2**31 for p in self.positions)
            ends = tuple(offsets[p][1] if p < len(offsets) else 2**31 for p in self.positions)
        scores = TokenScores(tuple(self.logprobs), tuple(self.entropies), tuple(self.margins), starts, ends)
        return scores.summary(basis)


def piece_offsets(pieces: Sequence[bytes]) -> list[tuple[int, int]]:
    """Character ``(start, end)`` of each token's bytes in their UTF-8 decoding (a character split
    over tokens belongs to the token that completes it).

    >>> piece_offsets([b"Caf", b"\\xc3", b"\\xa9", b" au"])
    [(0, 3), (3, 3), (3, 4), (4, 7)]
    """
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    out, at = [], 0
    for piece in pieces:
        n = len(decoder.decode(piece))
        out.append((at, at + n))
        at += n
    return out


def from_top_logprobs(tokens: Sequence[tuple[str, float, Mapping[str, float]]], basis: str) -> Confidence | None:
    """The confidence of a reply a server reported token by token: ``(text, logprob, {alternative:
    logprob})`` each; the entropy is over the alternatives reported, the rest of the probability
    one more outcome (a lower bound); the margin NaN where no other token is reported.

    >>> c = from_top_logprobs([("Par", -0.1, {"Par": -0.1, "Lon": -2.5}), ("is", -0.01, {})], "top-2")
    >>> c.tokens, round(c.mean_logprob, 3), c.first_margin, c.detail.ends
    (2, -0.055, 2.4, (3, 5))
    """
    if not tokens:
        return None
    lp, h, margins, starts, ends = [], [], [], [], []
    at = 0
    for text, logprob, alternatives in tokens:
        probs = {t: math.exp(min(v, 0.0)) for t, v in alternatives.items() if math.isfinite(v)}
        probs.setdefault(text, math.exp(min(logprob, 0.0)))
        rest = max(0.0, 1.0 - math.fsum(probs.values()))
        outcomes = [*probs.values(), rest]
        h.append(max(0.0, -math.fsum(p * math.log(p) for p in outcomes if p > 0.0)))
        others = [v for t, v in alternatives.items() if t != text]
        margins.append(logprob - max(others) if others else math.nan)
        lp.append(logprob)
        starts.append(at)
        at += len(text)
        ends.append(at)
    return TokenScores(tuple(lp), tuple(h), tuple(margins), tuple(starts), tuple(ends)).summary(basis)
