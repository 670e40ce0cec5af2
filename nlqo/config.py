"""One configuration value for the engine: what the CLI's options, the bench's variants and the
Python API all describe, with one set of defaults. Build an engine from it with
:meth:`nlqo.Engine.from_config` (or the parts with :mod:`nlqo.builder`).

>>> config = EngineConfig(cost_model="structural", params={"alpha": 5})
>>> config.param_dict
{'alpha': 5.0}
>>> config.with_options(tau=0.8, alpha=2, cost_model="shallow").params
(('alpha', 2.0),)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import attrs

from nlqo.errors import ConfigError
from nlqo.ir_grammar import MAX_ATOMS
from nlqo.kinds import Operator, Policy

DEFAULT_MODEL = "qwen2.5-coder-1.5b"
"""The bundled model ``nlqo ask`` uses unless told otherwise; chosen by measurement (docs/models.md)."""

RUNTIMES = ("auto", "llama-cpp", "transformers")
STRATEGIES = ("auto", *Operator.values())
"""``auto`` (the policy chooses an operator by statistics) or one operator forced."""
POLICIES = Policy.values()
SIMPLE_PLANS = ("linear", "retrieve")
"""What ``auto`` may run for a single-atom plan or a question that did not parse."""
TREE_QUERIES = ("rewrite", "substitute")
"""How a tree node's question is made (:class:`nlqo.execute.tree.TreeExecutor`)."""
RETRIEVAL_MODES = ("dense", "bm25", "hybrid")


def _params(value: Mapping[str, float] | tuple[tuple[str, float], ...]) -> tuple[tuple[str, float], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    return tuple(sorted((str(k), float(v)) for k, v in items))


def _optional_path(value: str | Path | None) -> Path | None:
    return None if value is None else Path(value)


_in = attrs.validators.in_


@attrs.frozen
class EngineConfig:
    """How nlqo plans and answers. Every field has the one default the CLI, the bench and the API share."""

    model: str | None = DEFAULT_MODEL
    """LLM: a bundled name, a local folder or .gguf, ``openai:MODEL@URL``, or ``BACKEND:SPEC`` of an
    installed backend package (entry points ``nlqo.backends``). ``None``: planning without an LLM."""
    runtime: str = attrs.field(default="auto", validator=_in(RUNTIMES))
    """Local models: which runtime loads them."""
    quantize: str = "none"
    """Local models: ``int8`` quantizes the linear layers (docs/models.md)."""
    threads: int | None = None
    """CPU threads for the local model and the embedder (``None``: the runtime's own choice)."""

    index: Path | None = attrs.field(default=None, converter=_optional_path)
    """Index folder built by ``nlqo index`` (needed to answer, not to plan)."""
    retrieval: str = attrs.field(default="hybrid", validator=_in(RETRIEVAL_MODES))
    k: int = 3
    """Passages retrieved per step."""
    embedder: str | None = None
    """Embedder for the ``similarity`` metric; ``None``: the index's own, else all-minilm-l6-v2."""

    cost_model: str = "default"
    """Cost model name (searched on ``path`` and ``NLQO_PATH``) or ``.cost`` file."""
    params: tuple[tuple[str, float], ...] = attrs.field(default=(), converter=_params)
    """Cost-model parameter overrides, e.g. ``{"alpha": 5}``."""
    rules: str = "default"
    """Rewrite-rule list name or ``.rules`` file; ``none`` runs no rule."""
    path: tuple[str, ...] = attrs.field(default=(), converter=lambda p: tuple(str(x) for x in p))
    """Extra folders searched for cost models and rule lists."""
    budget: int = 50_000
    """Sub-plan pairs the DP may consider before the greedy fallback."""
    beam: int = 32
    """Sub-plans the DP keeps per frontier."""
    max_atoms: int = 1000
    """Queries with more atoms are refused."""
    relation_cache: bool = True
    """Keep the LLM's answers about atom pairs across questions (in memory)."""
    relations_cache: Path | None = attrs.field(default=None, converter=_optional_path)
    """Also persist them in this JSON file (safe with several processes)."""
    context_merge: bool = False
    """Confirm LLM-decided edges with the partial plan in the prompt."""

    strategy: str = attrs.field(default="auto", validator=_in(STRATEGIES))
    tau: float = 0.85
    max_hops: int = 10
    kv_reuse: bool = True
    parallel: bool = True
    workers: int | None = None
    ir_cleanup: bool = False
    plan_hints: bool = True
    plan_steps: bool = False
    """A plan lowered to the linear template: its atoms are the hops' questions (not generated)."""
    question_first: bool = False
    """The linear template's first hop retrieves with the question itself, before any sub-question
    (its own demonstrations: :data:`nlqo.prompts.execution.LINEAR_QUESTION_FIRST`)."""
    hold_options: bool = True
    """A choice question's answer (``Which ..., A or B?``) that names no option, or both, is asked
    again among the options (:mod:`nlqo.execute.choice`)."""
    simple_plans: str = attrs.field(default="retrieve", validator=_in(SIMPLE_PLANS))
    """``auto`` on a single-atom plan or an unparsed question: the linear template, or (``retrieve``)
    one retrieval and one answer where its estimate is the cheapest."""
    guard_rewrites: bool = True
    tree_queries: str = attrs.field(default="substitute", validator=_in(TREE_QUERIES))
    """Tree nodes' questions: the LLM rewrites each atom, or children's answers are substituted into it."""
    repairs: int = 2
    """Times invalid IR is sent back to the LLM with its error."""
    constrained: bool = True
    """Parse the question, classify relations and check merges under grammars where the LLM can
    apply one (docs/ir.md: constrained parsing); off asks freely and repairs after the fact."""
    parse_atoms: int = MAX_ATOMS
    """Atoms a constrained parse may write."""
    anchored: bool = False
    """A constrained parse's first atom names a constant of the question (the generation grammar;
    measured, not kept: docs/ir.md, anchoring)."""
    span_constants: bool = False
    """A constrained parse's constants are runs of the question's words (off: strings containing a
    word of the question; measured with ``anchored``, not kept)."""
    anchor_repairs: int = 0
    """Times valid IR with atoms linked to no entity of the question is sent back to the LLM (if no
    repair anchors them, the first such IR is kept with a warning, as it is at once with 0)."""
    policy: str = attrs.field(default=Policy.BALANCED.value, validator=_in(POLICIES))
    """How ``auto`` trades estimated quality for time (:mod:`nlqo.statistics.policy`)."""
    time_budget: float | None = None
    """``auto`` drops operators estimated to take more seconds than this (``None``: no budget)."""
    statistics: Path | None = attrs.field(default=None, converter=_optional_path)
    """Statistics file ``auto`` chooses by; ``None``: ``statistics.json`` beside the index, else the bundled defaults."""
    measure_costs: bool | None = None
    """Time the backend's per-token costs once for the lowering; ``None``: only for ``strategy="auto"``."""
    max_question_chars: int = 2000
    """Longer questions are refused with a message (prompts and retrieval have no use for more)."""

    @property
    def param_dict(self) -> dict[str, float]:
        return dict(self.params)

    def with_options(self, **options: Any) -> "EngineConfig":
        """This config changed by option names as the bench writes them (``alpha`` sets that cost-model parameter).

        >>> EngineConfig().with_options(speed=2)
        Traceback (most recent call last):
        ...
        nlqo.errors.ConfigError: unknown engine option 'speed' (options: alpha, anchor_repairs, anchored, ...)
        """
        changes: dict[str, Any] = {}
        params = self.param_dict
        known = {f.name for f in attrs.fields(EngineConfig)}
        for name, value in options.items():
            if name == "alpha":
                params["alpha"] = float(value)
            elif name in ("params", "param"):
                params.update(dict(value))
            elif name in known:
                changes[name] = value
            else:
                shown = ", ".join(sorted(known | {"alpha"})[:3])
                raise ConfigError(f"unknown engine option {name!r} (options: {shown}, ...)")
        try:
            return attrs.evolve(self, params=params, **changes)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"bad engine option: {exc}") from None
