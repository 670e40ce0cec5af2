"""One configuration value for the engine, and the one place every default lives: the CLI's
options, the bench's ablation flags, the executors and the Python API all take theirs from the
fields of :class:`EngineConfig`. Build an engine from it with :meth:`nlqo.Engine.from_config` (or
the parts with :mod:`nlqo.main.builder`); :mod:`nlqo.cli.options` turns the fields into command-line
flags, so a new option is one field.

>>> config = EngineConfig(cost_model="structural", params={"alpha": 5})
>>> config.param_dict
{'alpha': 5.0}
>>> config.with_options(tau=0.8, alpha=2, cost_model="shallow").params
(('alpha', 2.0),)
>>> default("tau"), sorted({section(f.name) for f in attrs.fields(EngineConfig)})
(0.85, ['execute', 'lower', 'model', 'optimize', 'parse', 'retrieve', 'statistics'])
"""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Literal, Mapping

import attrs

from nlqo.errors import ConfigError
from nlqo.kinds import AUTO, QUANTIZATIONS, Operator, Policy, RetrievalMode, Runtime, TreeQuery

SECTIONS = ("model", "retrieve", "parse", "optimize", "lower", "execute", "statistics")
"""The sections of the configuration, in the order the CLI's help and docs/architecture.md list them."""

OPERATOR_GROUP = "nlqo.operators"
"""The entry-point group an installed package registers an operator under (docs/architecture.md)."""
OPERATOR_NAMES = tuple(dict.fromkeys((*Operator.values(), *(ep.name for ep in entry_points(group=OPERATOR_GROUP)))))
"""Every operator's name: the built-ins, then the entry points' (not imported: ``OPERATORS`` loads them)."""
STRATEGIES = (AUTO, *OPERATOR_NAMES)
"""``auto`` (the policy chooses an operator by statistics) or one operator forced."""
SIMPLE_PLANS = (Operator.LINEAR.value, Operator.RETRIEVE.value)
"""What ``auto`` may run for a single-atom plan or a question that did not parse."""
RUNTIMES = Runtime.values()
POLICIES = Policy.values()
RETRIEVAL_MODES = RetrievalMode.values()
TREE_QUERIES = TreeQuery.values()

Style = Literal["value", "on-off", "switch", "negate", "list"]
"""How a field is written on the command line: ``value`` (``--tau 0.8``), ``on-off`` (``--hold-options
off``), ``switch`` (``--plan-steps`` sets it), ``negate`` (``--no-kv-reuse`` clears it), ``list``
(``--param``/``--path``, repeatable)."""


@attrs.frozen
class Flag:
    """How one field appears on the command line (:mod:`nlqo.cli.options` builds the argument)."""

    names: tuple[str, ...]
    style: Style = "value"
    metavar: str | None = None
    ablation: bool = False
    """``nlqo bench`` also takes a comma-separated list of values, each a variant of linear, tree and auto."""

    @property
    def dest(self) -> str:
        """The argparse attribute: the first long name, as argparse derives it."""
        name = next((n for n in self.names if n.startswith("--")), self.names[0])
        return name.lstrip("-").replace("-", "_")


def _setting(
    default: Any,
    section: str,
    help: str,
    flag: Flag | None = None,
    *,
    choices: tuple[str, ...] | None = None,
    converter: Any = None,
) -> Any:
    """A field with its default, section, help text, command-line flag and allowed values."""
    assert section in SECTIONS, section
    metadata = {"section": section, "help": help, "flag": flag, "choices": choices}
    validator = attrs.validators.in_(choices) if choices else None
    return attrs.field(default=default, validator=validator, converter=converter, metadata=metadata)


def sentence_count(value: Any) -> int:
    """A count of sentences: a whole number >= 0 (``compress``).

    >>> sentence_count("2"), sentence_count(0)
    (2, 0)
    """
    text = str(value).strip()
    if isinstance(value, bool) or not (text.isascii() and text.isdigit()):
        raise ValueError(f"compress must be a whole number of sentences >= 0, not {value!r}")
    return int(text)


def _params(value: Mapping[str, float] | tuple[tuple[str, float], ...]) -> tuple[tuple[str, float], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    return tuple(sorted((str(k), float(v)) for k, v in items))


def _optional_path(value: str | Path | None) -> Path | None:
    return None if value is None else Path(value)


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(x) for x in value)


@attrs.frozen
class EngineConfig:
    """How nlqo plans and answers. Every field has the one default the CLI, the bench, the
    executors and the API share; ``attrs.fields(EngineConfig).NAME.metadata`` holds its section,
    help text and flag."""

    # --- model ------------------------------------------------------------------------------------
    model: str | None = _setting(
        "qwen2.5-coder-1.5b",
        "model",
        "LLM: a bundled model name, a local model folder or .gguf, openai:MODEL@URL, or BACKEND:SPEC of an "
        "installed backend (None: planning without an LLM); the default was chosen by measurement (docs/models.md)",
        Flag(("--model",), metavar="NAME"),
    )
    runtime: str = _setting(
        Runtime.AUTO.value,
        "model",
        "local models: llama-cpp runs a GGUF model (bundled models are) as it is, in process; transformers runs "
        "Hugging Face folders and is the float32 reference; auto picks llama-cpp for GGUF models (docs/models.md)",
        Flag(("--runtime",)),
        choices=RUNTIMES,
    )
    quantize: str = _setting(
        "none",
        "model",
        "transformers only: int8 swaps linear layers for dynamically quantized ones, faster but LOSSY (it halved "
        "the default model's EM, docs/models.md); not for benchmarks",
        Flag(("--quantize",)),
        choices=QUANTIZATIONS,
    )
    threads: int | None = _setting(
        None,
        "model",
        "threads for the LLM (llama.cpp or torch) and the embedder (None: the machine's cores; two runs sharing a "
        "machine must split them)",
        Flag(("--threads",), metavar="N"),
    )

    # --- retrieve ---------------------------------------------------------------------------------
    index: Path | None = _setting(
        None, "retrieve", "index folder built by 'nlqo index' (needed to answer, not to plan)", converter=_optional_path
    )
    retrieval: str = _setting(
        RetrievalMode.HYBRID.value,
        "retrieve",
        "retrieval mode: dense, BM25, or both fused by reciprocal rank",
        Flag(("--retrieval", "--mode")),
        choices=RETRIEVAL_MODES,
    )
    k: int = _setting(3, "retrieve", "passages retrieved per step", Flag(("-k", "--k")))
    compress: int = _setting(
        0,
        "retrieve",
        "sentences kept of each retrieved passage, those matching the step's query best by the embedder and BM25, "
        "in their order (0: whole passages; nlqo.index.compress)",
        Flag(("--compress",), metavar="N", ablation=True),
        converter=sentence_count,
    )
    embedder: str | None = _setting(
        None,
        "retrieve",
        "embedder for retrieval and the similarity metric (None: the index's own, else all-minilm-l6-v2)",
        Flag(("--embedder",), metavar="NAME"),
    )

    # --- parse ------------------------------------------------------------------------------------
    repairs: int = _setting(
        2, "parse", "times invalid IR is sent back to the LLM with its error", Flag(("--repairs",), metavar="N")
    )
    ir_cleanup: bool = _setting(
        False,
        "parse",
        "unquote quoted variables, drop repeated atom lines and a cut-off last line of the LLM's IR before "
        "validating it",
        Flag(("--ir-cleanup",), "switch", ablation=True),
    )
    constrained: bool = _setting(
        True,
        "parse",
        "constrain the LLM's IR (and its relation and merge-check answers) with grammars, so the IR is valid by "
        "construction; off asks freely and repairs after the fact (docs/ir.md)",
        Flag(("--constrained",), "on-off", ablation=True),
    )
    parse_atoms: int = _setting(
        4, "parse", "atoms a constrained parse may write", Flag(("--parse-atoms",), metavar="N")
    )
    anchored: bool = _setting(
        False,
        "parse",
        "a constrained parse's first atom names an entity of the question (measured, not kept: docs/ir.md)",
        Flag(("--anchored",), "on-off"),
    )
    span_constants: bool = _setting(
        False,
        "parse",
        "a constrained parse's constants are runs of the question's words; off: strings containing a word of the "
        "question (measured with --anchored, not kept)",
        Flag(("--span-constants",), "on-off"),
    )
    anchor_repairs: int = _setting(
        0,
        "parse",
        "times IR whose atoms are linked to no entity of the question is sent back (if no repair anchors them, the "
        "first such IR is kept with a warning)",
        Flag(("--anchor-repairs",), metavar="N"),
    )
    max_question_chars: int = _setting(
        2000,
        "parse",
        "longer questions are refused with a message (prompts and retrieval have no use for more)",
        Flag(("--max-question-chars",), metavar="N"),
    )

    # --- optimize ---------------------------------------------------------------------------------
    cost_model: str = _setting(
        "default",
        "optimize",
        "cost model name (searched on --path and NLQO_PATH) or .cost file; 'structural' needs no embedder",
        Flag(("--cost-model",), metavar="NAME|PATH", ablation=True),
    )
    params: tuple[tuple[str, float], ...] = _setting(
        (),
        "optimize",
        "override a cost-model parameter, e.g. --param alpha=5 (repeatable)",
        Flag(("--param",), "list", metavar="NAME=VALUE"),
        converter=_params,
    )
    rules: str = _setting(
        "default",
        "optimize",
        "rewrite-rule list name or .rules file; 'none' runs no rule",
        Flag(("--rules",), metavar="NAME|PATH"),
    )
    path: tuple[str, ...] = _setting(
        (),
        "optimize",
        "extra folder searched for cost models and rule lists (repeatable; also: NLQO_PATH)",
        Flag(("--path",), "list", metavar="DIR"),
        converter=_strings,
    )
    budget: int = _setting(
        50_000, "optimize", "sub-plan pairs the DP may consider before falling back to greedy", Flag(("--budget",))
    )
    beam: int = _setting(32, "optimize", "sub-plans the DP keeps per frontier", Flag(("--beam",)))
    max_atoms: int = _setting(
        1000,
        "optimize",
        "queries with more atoms are refused (pair relations grow with the square of the count)",
        Flag(("--max-atoms",), metavar="N"),
    )
    relation_cache: bool = _setting(
        True,
        "optimize",
        "keep the LLM's answers about atom pairs across questions (in memory)",
        Flag(("--relation-cache",), "on-off", ablation=True),
    )
    relations_cache: Path | None = _setting(
        None,
        "optimize",
        "JSON file keeping LLM answers about atom pairs across runs (safe with several processes)",
        Flag(("--relations-cache",), metavar="FILE"),
        converter=_optional_path,
    )
    context_merge: bool = _setting(False, "optimize", "confirm LLM-decided edges with the partial plan in the prompt")

    # --- lower ------------------------------------------------------------------------------------
    strategy: str = _setting(
        AUTO,
        "lower",
        "auto: the policy chooses an operator by its statistics (docs/statistics.md); or force one operator: "
        + ", ".join(OPERATOR_NAMES)
        + " (docs/architecture.md lists them)",
        Flag(("--strategy",)),
        choices=STRATEGIES,
    )
    simple_plans: str = _setting(
        Operator.RETRIEVE.value,
        "lower",
        "auto (structural): a single-atom plan or an unparsed question runs the linear template, or one retrieval "
        "and one answer (retrieve) where its estimate is the cheapest",
        Flag(("--simple-plans",), ablation=True),
        choices=SIMPLE_PLANS,
    )
    measure_costs: bool | None = _setting(
        None, "lower", "time the backend's per-token costs once for the lowering (None: only for strategy auto)"
    )

    # --- execute ----------------------------------------------------------------------------------
    tau: float = _setting(
        0.85,
        "execute",
        "linear template: stop when a sub-question is this similar to an earlier one or the question",
        Flag(("--tau",), ablation=True),
    )
    max_hops: int = _setting(10, "execute", "linear template: hop cap", Flag(("--max-hops",)))
    kv_reuse: bool = _setting(
        True,
        "execute",
        "linear template: reuse the KV state of the template's prefix (off recomputes the whole prompt at every "
        "generation)",
        Flag(("--no-kv-reuse",), "negate", ablation=True),
    )
    stable_rounds: bool = _setting(
        False,
        "execute",
        "iterate and the cascade's iterate: list the passages the round before also had first, in its order, so a "
        "round's prompt extends the cached prefix; a round that retrieves the same passages ends the rounds (later "
        "ones would repeat its answer). Off lists each round's passages by rank",
        Flag(("--stable-rounds",), "switch", ablation=True),
    )
    plan_hints: bool = _setting(
        True,
        "execute",
        "linear template: show a lowered plan's atoms as plan-step hints",
        Flag(("--no-plan-hints",), "negate", ablation=True),
    )
    plan_escalations: bool = _setting(
        True,
        "execute",
        "cascade: a doubtful answer's escalation to the template or the tree parses and plans the question first "
        "(the template shows the plan's atoms as hints); off runs the template on the question alone",
        Flag(("--no-plan-escalations",), "negate", ablation=True),
    )
    plan_steps: bool = _setting(
        False,
        "execute",
        "linear template: a lowered plan's atoms are the hops' questions, appended instead of generated",
        Flag(("--plan-steps",), "switch", ablation=True),
    )
    question_first: bool = _setting(
        False,
        "execute",
        "linear template: the first hop retrieves with the question itself, before any sub-question",
        Flag(("--question-first",), "switch", ablation=True),
    )
    hold_options: bool = _setting(
        True,
        "execute",
        "a choice question's answer (Which ..., A or B?) that names no option, or both, is asked again among the "
        "options",
        Flag(("--hold-options",), "on-off", ablation=True),
    )
    parallel: bool = _setting(
        True, "execute", "tree: run independent nodes concurrently", Flag(("--sequential",), "negate", ablation=True)
    )
    workers: int | None = _setting(
        None, "execute", "tree: concurrent nodes (None: min(CPU count, widest wave))", Flag(("--workers",))
    )
    guard_rewrites: bool = _setting(
        True,
        "execute",
        "tree: use a node's atom when its rewritten question only repeats the main question",
        Flag(("--no-guard-rewrites",), "negate", ablation=True),
    )
    tree_queries: str = _setting(
        TreeQuery.SUBSTITUTE.value,
        "execute",
        "tree: each node's question is rewritten by the LLM, or made by substituting its children's answers into "
        "its atom (the rewrite only where that fails)",
        Flag(("--tree-queries",), ablation=True),
        choices=TREE_QUERIES,
    )

    # --- statistics -------------------------------------------------------------------------------
    policy: str = _setting(
        Policy.BALANCED.value,
        "statistics",
        "auto: quality takes the best estimated EM, balanced the fastest operator whose estimated EM is within "
        "--em-margin of the best, fast the fastest; structural plans first and lowers by estimated cost "
        "(docs/statistics.md)",
        Flag(("--policy",)),
        choices=POLICIES,
    )
    em_margin: float = _setting(
        0.01,
        "statistics",
        "auto, balanced policy: how far below the best estimated EM an operator may be and still be taken for "
        "being faster (a fraction: 0.01 is one EM point)",
        Flag(("--em-margin",), metavar="FRACTION"),
    )
    time_budget: float | None = _setting(
        None,
        "statistics",
        "auto: leave out operators estimated to take longer (seconds)",
        Flag(("--time-budget",), metavar="SECONDS"),
    )
    statistics: Path | None = _setting(
        None,
        "statistics",
        "auto: operator statistics from 'nlqo analyze' (None: statistics.json beside the index, else the bundled "
        "defaults)",
        Flag(("--statistics",), metavar="FILE"),
        converter=_optional_path,
    )

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
            return attrs.evolve(self, params=_params(params), **changes)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"bad engine option: {exc}") from None


def default(name: str) -> Any:
    """The default of field ``name``: what executors and the optimizer use when not told otherwise."""
    return getattr(attrs.fields(EngineConfig), name).default


def section(name: str) -> str:
    """The section of field ``name``."""
    return getattr(attrs.fields(EngineConfig), name).metadata["section"]


DEFAULT_MODEL: str = default("model")
"""The bundled model ``nlqo ask`` uses unless told otherwise; chosen by measurement (docs/models.md)."""
