"""The closed vocabularies of the engine, as enums, in one module: relation kinds, their sources,
trace step kinds, stop reasons, physical operators, policies, question classes, runtimes, quantizations,
retrieval modes, tree-node questions and EXPLAIN output formats.

Members are strings (``RelationKind.PARENT == "parent"``), so JSON, records and older callers
that compare with plain strings keep working; ``str()`` and f-strings give the bare value.

>>> RelationKind("parent").flip()
<RelationKind.CHILD: 'child'>
>>> f"{StepKind.LLM}", json.dumps([Operator.TREE])
('llm', '["tree"]')
"""

from __future__ import annotations

import enum
import json  # noqa: F401  (used by the doctest)


class _Word(str, enum.Enum):
    """A string enum whose text is its value (also under Python 3.11's enum formatting)."""

    def __str__(self) -> str:
        return str(self.value)

    @classmethod
    def values(cls) -> tuple[str, ...]:
        return tuple(m.value for m in cls)


class RelationKind(_Word):
    """How two atoms relate, seen from the first: ``parent`` means the second's answer feeds the first."""

    PARENT = "parent"
    CHILD = "child"
    SIBLING = "sibling"
    NONE = "none"

    def flip(self) -> "RelationKind":
        """The same relation seen from the other atom."""
        return {RelationKind.PARENT: RelationKind.CHILD, RelationKind.CHILD: RelationKind.PARENT}.get(self, self)


PINNABLE = (RelationKind.PARENT, RelationKind.SIBLING, RelationKind.NONE)
"""Kinds an IR ``relation`` statement may pin (``child`` is written as ``parent`` the other way round)."""


class RelationSource(_Word):
    """Who decided a pair's relation."""

    PINNED = "pinned"
    INFERRED = "inferred"
    CACHE = "cache"
    LLM = "llm"
    DEFAULT = "default"


class StepKind(_Word):
    """What one trace step was."""

    LLM = "llm"
    RETRIEVE = "retrieve"
    STOP = "stop"


class StopReason(_Word):
    """Why a run stopped. A result's ``stop_reason`` is one of these, or several joined by
    ``"; "`` (:func:`stop_reasons`) when a later stage adds its own, e.g.
    ``parse_failed; terminator; fallback_answer``."""

    ANSWER = "answer"
    """The model gave its answer."""
    MAX_ROUNDS = "max_rounds"
    """A round-based strategy reached its round cap."""
    FIXED_POINT = "fixed_point"
    """Iterate's round retrieved the passages of the round before (``stable_rounds``): every later
    round would repeat its answer."""
    EMPTY = "empty"
    """The model generated nothing to continue with."""
    MAX_HOPS = "max_hops"
    """The linear template reached its hop cap."""
    TERMINATOR = "terminator"
    """TSSS's terminator: the new sub-question repeated an earlier one (similarity >= tau)."""
    EMPTY_QUESTION = "empty_question"
    """The linear template's model proposed an empty sub-question."""
    ROOT_ANSWERED = "root_answered"
    """The tree answered its root."""
    PARSE_FAILED = "parse_failed"
    """The question could not be parsed; the linear template answered without hints."""
    FALLBACK_ANSWER = "fallback_answer"
    """The answer was empty and was asked again from the passages (:mod:`nlqo.execution.fallback`)."""
    NO_ANSWER = "no_answer"
    """No answer even from the passages."""
    HELD_TO_OPTIONS = "held_to_options"
    """A choice question's answer was asked again among its options (:mod:`nlqo.execution.choice`)."""
    CASCADE_RETRIEVE = "cascade: retrieve"
    """The cascade stopped after one retrieval: its answer was supported (and, with calibration, confident)."""
    CASCADE_ITERATE = "cascade: iterate"
    """The cascade stopped after iterating: the answer was supported and the rounds agreed."""
    CASCADE_PLAN = "cascade: plan"
    """The cascade escalated to the plan."""
    CASCADE_ESCALATED = "cascade: escalated"
    """The cascade escalated a doubtful answer by calibrated confidence and kept the escalated
    operator's answer (whose own reasons follow)."""
    CASCADE_KEPT_FIRST = "cascade: kept first"
    """The cascade escalated a doubtful answer by calibrated confidence but kept the first answer:
    the calibration trusted it more."""
    ERROR = "error"
    """The run raised (benchmark records only)."""


def stop_reasons(*reasons: str) -> str:
    """Reasons joined in the order the stages added them.

    >>> stop_reasons(StopReason.PARSE_FAILED, "terminator")
    'parse_failed; terminator'
    """
    return "; ".join(str(r) for r in reasons if r)


def escalated(stop_reason: str) -> bool:
    """Whether a cascade's stop reasons say it went past its first answer (by confidence or by support).

    >>> escalated(stop_reasons(StopReason.CASCADE_ESCALATED, "terminator")), escalated(StopReason.CASCADE_RETRIEVE)
    (True, False)
    """
    return any(
        str(reason) in stop_reason
        for reason in (
            StopReason.CASCADE_ESCALATED,
            StopReason.CASCADE_KEPT_FIRST,
            StopReason.CASCADE_ITERATE,
            StopReason.CASCADE_PLAN,
        )
    )


class Operator(_Word):
    """Physical operators: every way the engine answers a question (:mod:`nlqo.execution.operators` holds
    one module each)."""

    LINEAR = "linear"
    """TEMPLATE: the TSSS linear template (a plan's atoms are its hints)."""
    TREE = "tree"
    """PlanRAG's parallel tree over the logical plan."""
    RETRIEVE = "retrieve"
    """One retrieval with the question and one answer (standard RAG)."""
    ITERATE = "iterate"
    """Rounds of retrieval and generation (iter-retgen)."""
    CASCADE = "cascade"
    """RETRIEVE, escalated when its answer is doubtful: by calibrated confidence to the operator the
    statistics favour, keeping the answer trusted more; without calibration, to ITERATE and then to
    the plan when an answer is not supported."""


AUTO = "auto"
"""The strategy that lets the policy choose the operator (:data:`nlqo.config.STRATEGIES`: it, or one operator forced)."""


class Policy(_Word):
    """How ``auto`` trades estimated quality against estimated time (:mod:`nlqo.planner.statistics.policy`)."""

    QUALITY = "quality"
    """The best estimated exact match."""
    BALANCED = "balanced"
    """The fastest operator whose estimated EM is within a margin (``em_margin``) of the best one's."""
    FAST = "fast"
    """The fastest operator."""
    STRUCTURAL = "structural"
    """No statistics: parse, plan, and lower the plan by its structural cost estimate (template,
    tree, or one retrieval for a one-atom plan): what ``auto`` did before statistics."""


class QuestionClass(_Word):
    """The form of a question, read from its words before anything runs."""

    YES_NO = "yes-no"
    CHOICE = "choice"
    """``Which ..., A or B?``: the answer is one of two offered options."""
    OTHER = "other"


class OutputFormat(_Word):
    """What ``nlqo plan`` and ``nlqo explain`` print (:mod:`nlqo.explain.formats` renders each)."""

    TEXT = "text"
    JSON = "json"
    DOT = "dot"
    HTML = "html"
    """One self-contained page (:mod:`nlqo.explain.html`)."""


class Runtime(_Word):
    """What loads a local model (docs/models.md)."""

    AUTO = "auto"
    """llama.cpp for GGUF models (bundled ones are), transformers for Hugging Face folders."""
    LLAMA_CPP = "llama-cpp"
    TRANSFORMERS = "transformers"


class Quantization(_Word):
    """What ``--quantize`` does to a transformers model (docs/models.md)."""

    NONE = "none"
    INT8 = "int8"
    """Dynamically quantized linear layers: faster, and lossy."""


QUANTIZATIONS = Quantization.values()


class RetrievalMode(_Word):
    """How an index is searched (docs/retrieval.md)."""

    DENSE = "dense"
    BM25 = "bm25"
    HYBRID = "hybrid"
    """Dense and BM25 rankings fused by reciprocal rank."""


class TreeQuery(_Word):
    """How a tree node's question is made (:class:`nlqo.execution.tree.TreeExecutor`)."""

    REWRITE = "rewrite"
    """The LLM rewrites the node's atom with its children's answers."""
    SUBSTITUTE = "substitute"
    """The children's answers are substituted into the atom (the rewrite only where that fails)."""
