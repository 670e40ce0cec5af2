"""The closed vocabularies of the engine, as enums: relation kinds, their sources, trace step
kinds, physical operators and EXPLAIN output formats.

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
    """Physical operators a logical plan is lowered to."""

    LINEAR = "linear"
    TREE = "tree"
    RETRIEVE = "retrieve"
    """One retrieval with the question and one answer (standard RAG): for single-atom plans."""


class OutputFormat(_Word):
    """What ``nlqo plan`` and ``nlqo explain`` print (:mod:`nlqo.formats` renders each)."""

    TEXT = "text"
    JSON = "json"
    DOT = "dot"
    HTML = "html"
    """One self-contained page (:mod:`nlqo.explain_html`)."""
