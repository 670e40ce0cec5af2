"""The closed vocabularies of the engine, as enums, in one module: relation kinds, their sources,
trace step kinds, physical operators, policies, question classes, runtimes, quantizations,
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


class Operator(_Word):
    """Physical operators: every way the engine answers a question (:mod:`nlqo.operators` holds
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
    """RETRIEVE, escalated to ITERATE and then to the plan when an answer is not supported."""


class Policy(_Word):
    """How ``auto`` trades estimated quality against estimated time (:mod:`nlqo.statistics.policy`)."""

    QUALITY = "quality"
    """The best estimated exact match."""
    BALANCED = "balanced"
    """The fastest operator whose estimate lies within the best one's interval."""
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
    """What ``nlqo plan`` and ``nlqo explain`` print (:mod:`nlqo.formats` renders each)."""

    TEXT = "text"
    JSON = "json"
    DOT = "dot"
    HTML = "html"
    """One self-contained page (:mod:`nlqo.explain_html`)."""


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
    """How a tree node's question is made (:class:`nlqo.execute.tree.TreeExecutor`)."""

    REWRITE = "rewrite"
    """The LLM rewrites the node's atom with its children's answers."""
    SUBSTITUTE = "substitute"
    """The children's answers are substituted into the atom (the rewrite only where that fails)."""
