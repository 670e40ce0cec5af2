"""Options shared by several commands, and the one way they become an :class:`EngineConfig`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nlqo.config import (
    DEFAULT_MODEL,
    POLICIES,
    RETRIEVAL_MODES,
    RUNTIMES,
    SIMPLE_PLANS,
    STRATEGIES,
    TREE_QUERIES,
    EngineConfig,
)
from nlqo.errors import ConfigError
from nlqo.llm.backends import load_llm
from nlqo.execute.trace import progress_line

__all__ = [
    "DEFAULT_MODEL",
    "add_engine_options",
    "add_planning_options",
    "config_from_args",
    "load_llm",
    "parse_params",
]
# load_llm lives in nlqo.llm.backends (backends are packages, entry points nlqo.backends); it is
# re-exported here for callers of the old path. nlqo.builder.load_model is its one caller.


def add_planning_options(parser: argparse.ArgumentParser, *, variants: bool = False) -> None:
    """--cost-model, --param, --rules, --path and the search limits (``variants``: the bench's comma lists)."""
    group = parser.add_argument_group("planning")
    if variants:
        group.add_argument(
            "--cost-model",
            metavar="LIST",
            help="cost models (names or .cost files), comma-separated: each is a variant of linear, tree and auto, e.g. structural,shallow (default: default)",
        )
    else:
        group.add_argument(
            "--cost-model",
            default="default",
            metavar="NAME|PATH",
            help="cost model name or .cost file (default: %(default)s; 'structural' needs no embedder)",
        )
    group.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a cost-model parameter, e.g. --param alpha=5 (repeatable)",
    )
    group.add_argument(
        "--rules",
        default="default",
        metavar="NAME|PATH",
        help="rewrite-rule list (default: %(default)s; 'none' runs no rules)",
    )
    group.add_argument(
        "--path",
        action="append",
        default=[],
        metavar="DIR",
        help="extra folder searched for cost models and rule lists (also: NLQO_PATH)",
    )
    group.add_argument(
        "--budget",
        type=int,
        default=50_000,
        help="sub-plan pairs the DP may consider before falling back to greedy (default: %(default)s)",
    )
    group.add_argument("--beam", type=int, default=32, help="sub-plans kept per DP frontier (default: %(default)s)")
    group.add_argument(
        "--max-atoms", type=int, default=1000, metavar="N", help="refuse queries with more atoms (default: %(default)s)"
    )
    group.add_argument(
        "--relations-cache",
        type=Path,
        metavar="FILE",
        help="JSON file keeping LLM answers about atom pairs across runs (safe with several processes)",
    )


def add_quantize_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    from nlqo.kinds import QUANTIZATIONS

    parser.add_argument(
        "--quantize",
        choices=QUANTIZATIONS,
        default="none",
        help="transformers only: int8 swaps linear layers for dynamically quantized ones, faster but LOSSY (it halved the default model's EM, docs/models.md); not for benchmarks (default: %(default)s)",
    )


def on_off(text: str) -> bool:
    """``on`` or ``off`` as a bool (an argparse type).

    >>> on_off("on"), on_off("off")
    (True, False)
    """
    if text not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"expected on or off, not {text!r}")
    return text == "on"


def add_constrained_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--constrained on|off``, ``--parse-atoms``, ``--anchored on|off``, ``--span-constants on|off`` and ``--anchor-repairs``: how the question is parsed (docs/ir.md)."""
    base = EngineConfig()
    parser.add_argument(
        "--constrained",
        type=on_off,
        default=None,
        metavar="on|off",
        help="parsing: constrain the LLM's IR (and its relation and merge-check answers) with grammars, so the IR is valid by construction; off asks freely and repairs after the fact (default: on)",
    )
    parser.add_argument(
        "--parse-atoms",
        type=int,
        default=None,
        metavar="N",
        help=f"parsing: atoms a constrained reply may write (default: {base.parse_atoms})",
    )
    parser.add_argument(
        "--anchored",
        type=on_off,
        default=None,
        metavar="on|off",
        help="parsing: a constrained reply's first atom names an entity of the question (default: off; docs/ir.md)",
    )
    parser.add_argument(
        "--span-constants",
        type=on_off,
        default=None,
        metavar="on|off",
        help="parsing: a constrained reply's constants are runs of the question's words; off: strings containing a word of the question (default: off)",
    )
    parser.add_argument(
        "--anchor-repairs",
        type=int,
        default=None,
        metavar="N",
        help=f"parsing: times IR whose atoms are linked to no entity of the question is sent back (default: {base.anchor_repairs}; if no repair anchors them, the IR is kept with a warning)",
    )


def add_runtime_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--runtime",
        choices=RUNTIMES,
        default="auto",
        help="local models: llama-cpp runs a GGUF model (bundled models are) as it is, in process; transformers runs Hugging Face folders and is the float32 reference; auto picks llama-cpp for GGUF models (default: %(default)s; docs/models.md)",
    )
    add_quantize_option(parser)
    parser.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="threads for the LLM (llama.cpp or torch) and the embedder (default: the machine's cores; two runs sharing a machine must split them)",
    )


def add_engine_options(parser: argparse.ArgumentParser, *, ir: bool = True) -> None:
    parser.add_argument("--index", required=True, type=Path, metavar="DIR", help="index folder built by 'nlqo index'")
    parser.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        metavar="NAME",
        help="bundled model name, local model folder or .gguf, openai:MODEL@URL, or BACKEND:SPEC of an installed backend (default: %(default)s)",
    )
    if ir:
        parser.add_argument(
            "--ir",
            type=Path,
            metavar="FILE",
            help="use this IR file (e.g. from 'nlqo parse', or hand-written) instead of asking the LLM to parse the question",
        )
    parser.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default="auto",
        help="auto: the policy chooses an operator by its statistics (docs/statistics.md); or force one: retrieve, iterate, linear (the TSSS template), tree (PlanRAG's parallel tree), cascade (default: %(default)s)",
    )
    parser.add_argument(
        "--policy",
        choices=POLICIES,
        default=None,
        help="auto: quality takes the best estimated EM, balanced the fastest operator within the best one's interval, fast the fastest (default: balanced)",
    )
    parser.add_argument(
        "--time-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="auto: leave out operators estimated to take longer",
    )
    parser.add_argument(
        "--statistics",
        type=Path,
        default=None,
        metavar="FILE",
        help="auto: operator statistics from 'nlqo analyze' (default: statistics.json beside the index, else the bundled defaults)",
    )
    group = parser.add_argument_group("execution")
    group.add_argument("-k", type=int, default=3, help="passages retrieved per step (default: %(default)s)")
    group.add_argument(
        "--mode", choices=RETRIEVAL_MODES, default="hybrid", help="retrieval mode (default: %(default)s)"
    )
    group.add_argument(
        "--tau",
        type=float,
        default=0.85,
        help="linear template: stop when a sub-question is this similar to an earlier one (default: %(default)s)",
    )
    group.add_argument("--max-hops", type=int, default=10, help="linear template: hop cap (default: %(default)s)")
    group.add_argument(
        "--no-kv-reuse", action="store_true", help="linear template: recompute the whole prompt at every generation"
    )
    group.add_argument(
        "--ir-cleanup",
        action="store_true",
        help="parsing: unquote quoted variables, drop repeated atom lines and a cut-off last line of the LLM's IR before validating it",
    )
    add_constrained_options(group)
    group.add_argument(
        "--no-plan-hints",
        action="store_true",
        help="linear template: do not show a lowered plan's atoms as plan-step hints",
    )
    group.add_argument(
        "--plan-steps",
        action="store_true",
        help="linear template: a lowered plan's atoms are the hops' questions, appended instead of generated",
    )
    group.add_argument(
        "--question-first",
        action="store_true",
        help="linear template: the first hop retrieves with the question itself, before any sub-question",
    )
    group.add_argument(
        "--hold-options",
        type=on_off,
        default=None,
        metavar="on|off",
        help="a choice question's answer (Which ..., A or B?) that names no option, or both, is asked again among the options (default: on)",
    )
    group.add_argument(
        "--simple-plans",
        choices=SIMPLE_PLANS,
        default=None,
        help="auto: a single-atom plan or an unparsed question runs the linear template, or one retrieval and one answer (retrieve) (default: retrieve)",
    )
    group.add_argument("--workers", type=int, help="tree: concurrent nodes (default: min(CPU count, widest wave))")
    group.add_argument("--sequential", action="store_true", help="tree: run one node at a time")
    group.add_argument(
        "--no-guard-rewrites",
        action="store_true",
        help="tree: keep a node's rewritten question even when it only repeats the main question (by default the node's atom is used instead)",
    )
    group.add_argument(
        "--tree-queries",
        choices=TREE_QUERIES,
        default=None,
        help="tree: each node's question is rewritten by the LLM, or made by substituting its children's answers into its atom (the rewrite only where that fails) (default: substitute)",
    )
    group.add_argument(
        "--max-question-chars",
        type=int,
        default=2000,
        metavar="N",
        help="refuse longer questions (default: %(default)s)",
    )
    add_runtime_options(group)
    group.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    add_planning_options(parser)


def parse_params(items: list[str]) -> dict[str, float]:
    """``--param NAME=VALUE`` values as a dict.

    >>> parse_params(["alpha=5", "w = 0.5"])
    {'alpha': 5.0, 'w': 0.5}
    """
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise ConfigError(f"--param wants NAME=NUMBER, got {item!r}")
    return out


def config_from_args(args: argparse.Namespace) -> EngineConfig:
    """The :class:`EngineConfig` a command's options describe (options a command lacks keep their defaults)."""
    given = vars(args)

    def opt(name: str, default: object) -> object:
        value = given.get(name)
        return default if value is None else value

    base = EngineConfig()
    try:
        return EngineConfig(
            model=given.get("model", base.model),
            runtime=opt("runtime", base.runtime),  # type: ignore[arg-type]
            quantize=opt("quantize", base.quantize),  # type: ignore[arg-type]
            threads=given.get("threads"),
            index=given.get("index"),
            retrieval=opt("mode", base.retrieval),  # type: ignore[arg-type]
            k=opt("k", base.k),  # type: ignore[arg-type]
            embedder=given.get("embedder"),
            cost_model=opt("cost_model", base.cost_model),  # type: ignore[arg-type]
            params=parse_params(given.get("param") or []),
            rules=opt("rules", base.rules),  # type: ignore[arg-type]
            path=tuple(given.get("path") or ()),
            budget=opt("budget", base.budget),  # type: ignore[arg-type]
            beam=opt("beam", base.beam),  # type: ignore[arg-type]
            max_atoms=opt("max_atoms", base.max_atoms),  # type: ignore[arg-type]
            relations_cache=given.get("relations_cache"),
            context_merge=bool(given.get("context_merge", False)),
            strategy=opt("strategy", base.strategy),  # type: ignore[arg-type]
            tau=opt("tau", base.tau),  # type: ignore[arg-type]
            max_hops=opt("max_hops", base.max_hops),  # type: ignore[arg-type]
            kv_reuse=not given.get("no_kv_reuse", False),
            parallel=not given.get("sequential", False),
            workers=given.get("workers"),
            ir_cleanup=bool(given.get("ir_cleanup", False)),
            plan_hints=not given.get("no_plan_hints", False),
            plan_steps=bool(given.get("plan_steps", False)),
            question_first=bool(given.get("question_first", False)),
            hold_options=opt("hold_options", base.hold_options),  # type: ignore[arg-type]
            simple_plans=opt("simple_plans", base.simple_plans),  # type: ignore[arg-type]
            guard_rewrites=not given.get("no_guard_rewrites", False),
            tree_queries=opt("tree_queries", base.tree_queries),  # type: ignore[arg-type]
            repairs=opt("repairs", base.repairs),  # type: ignore[arg-type]
            constrained=opt("constrained", base.constrained),  # type: ignore[arg-type]
            parse_atoms=opt("parse_atoms", base.parse_atoms),  # type: ignore[arg-type]
            anchored=opt("anchored", base.anchored),  # type: ignore[arg-type]
            span_constants=opt("span_constants", base.span_constants),  # type: ignore[arg-type]
            anchor_repairs=opt("anchor_repairs", base.anchor_repairs),  # type: ignore[arg-type]
            max_question_chars=opt("max_question_chars", base.max_question_chars),  # type: ignore[arg-type]
            policy=opt("policy", base.policy),  # type: ignore[arg-type]
            time_budget=given.get("time_budget"),
            statistics=given.get("statistics"),
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def build_engine(args: argparse.Namespace):
    """The engine the command's options describe."""
    from nlqo.execute.engine import Engine

    return Engine.from_config(config_from_args(args), progress=not getattr(args, "quiet", False))


def read_ir(path: Path, question: str | None = None):
    """The query of an IR file (``-`` reads standard input), with ``question`` attached when it has none."""
    import attrs

    from nlqo.syntax import parse_bytes, read

    query = parse_bytes(sys.stdin.buffer.read(), source="<stdin>") if str(path) == "-" else read(path)
    if query.question is None and question is not None:
        query = attrs.evolve(query, question=question)
    return query


def plan_question(engine, args: argparse.Namespace, trace):
    """Plan from ``--ir`` when given, else parse the question with the LLM."""
    if args.ir is None:
        return engine.plan(args.question, strategy=args.strategy, trace=trace)
    return engine.plan_query(read_ir(args.ir, args.question), strategy=args.strategy, trace=trace)


def progress_printer(enabled: bool):
    """A trace callback printing one line per step to standard error."""

    def show(step) -> None:
        line = progress_line(step)
        if line is not None:
            print(line, file=sys.stderr, flush=True)

    return show if enabled else None
