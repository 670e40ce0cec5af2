"""Options and loaders shared by several commands."""

from __future__ import annotations

import argparse
from pathlib import Path

from nlqo.errors import ConfigError


def add_cost_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cost model")
    group.add_argument("--cost-model", default="default", metavar="NAME|PATH", help="cost model name or .cost file (default: %(default)s; 'structural' needs no embedder)")
    group.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="override a cost-model parameter, e.g. --param alpha=5 (repeatable)")
    group.add_argument("--path", action="append", default=[], metavar="DIR", help="extra folder searched for cost models and rule lists (also: NLQO_PATH)")
    group.add_argument("--embedder", default="all-minilm-l6-v2", metavar="NAME|PATH", help="embedder for the similarity metric (default: %(default)s)")


def add_search_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("search")
    group.add_argument("--budget", type=int, default=50_000, help="sub-plan pairs the DP may consider before falling back to greedy (default: %(default)s)")
    group.add_argument("--beam", type=int, default=32, help="sub-plans kept per DP frontier (default: %(default)s)")
    group.add_argument("--relations-cache", type=Path, metavar="FILE", help="JSON file caching LLM answers about atom pairs across runs")
    group.add_argument("--rules", default="default", metavar="NAME|PATH", help="rewrite-rule list (default: %(default)s; 'none' runs no rules)")


def parse_params(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise ConfigError(f"--param wants NAME=NUMBER, got {item!r}")
    return out


def load_cost(args: argparse.Namespace):
    from nlqo.cost import load_cost_model

    model = load_cost_model(args.cost_model, path=args.path)
    params = parse_params(args.param)
    return model.with_params(**params) if params else model


def load_embedder(name: str):
    from nlqo.embed import SentenceEmbedder

    return SentenceEmbedder.load(name)


def on_off(text: str) -> bool:
    """``on`` or ``off`` as a bool (argparse type)."""
    if text not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"expected on or off, not {text!r}")
    return text == "on"


def add_constrained_options(parser) -> None:
    """``--constrained on|off`` and ``--max-atoms``: how the question is parsed (docs/ir.md)."""
    from nlqo.ir_grammar import MAX_ATOMS

    parser.add_argument("--constrained", type=on_off, default=True, metavar="on|off", help="parsing: constrain the LLM's IR (and its relation answers) with the IR's generation grammar, so it is valid by construction; off asks freely and repairs after the fact (default: on)")
    parser.add_argument("--max-atoms", type=int, default=MAX_ATOMS, metavar="N", help="parsing: atoms a constrained reply may write (default: %(default)s)")


def add_quantize_option(parser: argparse.ArgumentParser) -> None:
    """``--runtime`` and ``--quantize``: which runtime runs a local model, and how."""
    from nlqo.models import QUANTIZATIONS, RUNTIMES

    parser.add_argument("--runtime", choices=RUNTIMES, default="auto", help="local models: llama-cpp runs a GGUF model (bundled models are) as it is, in process; transformers runs Hugging Face folders and is the float32 reference; auto picks llama-cpp for GGUF models (default: %(default)s; docs/models.md)")
    parser.add_argument("--quantize", choices=QUANTIZATIONS, default="none", help="transformers only: int8 swaps linear layers for dynamically quantized ones, faster but LOSSY (it halved the default model's EM, docs/models.md); not for benchmarks (default: %(default)s)")


def apply_threads(args: argparse.Namespace) -> None:
    """Set torch's thread count when ``--threads`` asks for one (this process is a command-line run).

    The llama.cpp runtime gets the same count through :func:`load_llm`.
    """
    if getattr(args, "threads", None):
        import torch

        torch.set_num_threads(args.threads)


def load_llm(name: str, *, runtime: str = "auto", quantize: str = "none", threads: int | None = None, progress: bool = True):
    """A backend by model name: a bundled model, a local directory or GGUF, or ``openai:MODEL@URL``.

    Local models load through :func:`nlqo.models.load_llm` (``runtime``, ``quantize``,
    ``threads``); a server ignores those options.
    """
    if name.startswith("openai:"):
        from nlqo.llm.openai_compat import OpenAICompatLLM

        model, _, url = name[len("openai:") :].partition("@")
        return OpenAICompatLLM.from_env(base_url=url or "http://127.0.0.1:8000/v1", model=model)
    from nlqo import models

    return models.load_llm(name, runtime=runtime, quantize=quantize, threads=threads, progress=progress)


def runtime_of(llm) -> str:
    """Which runtime ``llm`` runs on: 'llama-cpp', 'transformers', 'server' or its class name."""
    kind = type(getattr(llm, "inner", llm)).__name__
    return {"LlamaCppLLM": "llama-cpp", "TransformersLLM": "transformers", "OpenAICompatLLM": "server"}.get(kind, kind)


def build_optimizer(args: argparse.Namespace, llm=None):
    from nlqo.optimizer import Optimizer
    from nlqo.relations import RelationCache
    from nlqo.rewrite import load_rules

    model = load_cost(args)
    embedder = load_embedder(args.embedder) if "similarity" in model.names else None
    cache = RelationCache.open(args.relations_cache) if args.relations_cache else None
    rules = () if args.rules == "none" else load_rules(args.rules, args.path)
    return Optimizer(cost_model=model, embedder=embedder, llm=llm, cache=cache, rules=rules, budget=args.budget, beam=args.beam)


DEFAULT_MODEL = "qwen2.5-coder-1.5b"
"""The bundled model `nlqo ask` uses unless told otherwise; chosen by measurement (docs/models.md)."""


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--index", required=True, type=Path, metavar="DIR", help="index folder built by 'nlqo index'")
    parser.add_argument("--model", default=DEFAULT_MODEL, metavar="NAME", help="bundled model name, local model folder or .gguf, or openai:MODEL@URL (default: %(default)s)")
    parser.add_argument("--ir", type=Path, metavar="FILE", help="use this IR file (e.g. from 'nlqo parse', or hand-written) instead of asking the LLM to parse the question")
    parser.add_argument("--strategy", choices=("auto", "linear", "tree"), default="auto", help="auto: plan, then lower by cost; linear: the TSSS template directly; tree: PlanRAG parallel tree (default: %(default)s)")
    group = parser.add_argument_group("execution")
    group.add_argument("-k", type=int, default=3, help="passages retrieved per step (default: %(default)s)")
    group.add_argument("--mode", choices=("dense", "bm25", "hybrid"), default="hybrid", help="retrieval mode (default: %(default)s)")
    group.add_argument("--tau", type=float, default=0.85, help="linear template: stop when a sub-question is this similar to an earlier one (default: %(default)s)")
    group.add_argument("--max-hops", type=int, default=10, help="linear template: hop cap (default: %(default)s)")
    group.add_argument("--no-kv-reuse", action="store_true", help="linear template: recompute the whole prompt at every generation")
    group.add_argument("--ir-cleanup", action="store_true", help="parsing: unquote quoted variables, drop repeated atom lines and a cut-off last line of the LLM's IR before validating it")
    add_constrained_options(group)
    group.add_argument("--no-plan-hints", action="store_true", help="linear template: do not show a lowered plan's atoms as plan-step hints")
    group.add_argument("--workers", type=int, help="tree: concurrent nodes (default: min(CPU count, widest wave))")
    group.add_argument("--sequential", action="store_true", help="tree: run one node at a time")
    group.add_argument("--guard-rewrites", action="store_true", help="tree: when a node's rewritten question only repeats the main question, use the node's atom instead")
    group.add_argument("--threads", type=int, metavar="N", help="threads for the LLM (llama.cpp or torch) and the embedder (default: the machine's cores; give each of two runs sharing a machine half)")
    add_quantize_option(group)
    group.add_argument("--quiet", "-q", action="store_true", help="no progress lines")


def build_engine(args: argparse.Namespace):
    """Load the index, the LLM and the optimizer named by the options."""
    import sys

    from nlqo.cost import load_cost_model
    from nlqo.execute.engine import Engine
    from nlqo.index import Index
    from nlqo.ir_grammar import MAX_ATOMS
    from nlqo.optimizer import Optimizer

    progress = not getattr(args, "quiet", False)
    apply_threads(args)
    if progress:
        print(f"nlqo: opening index {args.index} and loading {args.model} ...", file=sys.stderr, flush=True)
    index = Index.open(args.index)
    llm = load_llm(args.model, runtime=getattr(args, "runtime", "auto"), quantize=getattr(args, "quantize", "none"), threads=getattr(args, "threads", None), progress=progress)
    embedder = index.embedder
    model = load_cost_model(getattr(args, "cost_model", "default"), path=getattr(args, "path", ()))
    optimizer = Optimizer(cost_model=model, embedder=embedder if "similarity" in model.names else None, llm=llm, constrained=getattr(args, "constrained", True))
    measure_costs = getattr(args, "strategy", None) == "auto"
    if measure_costs and progress:
        print("nlqo: measuring the backend's per-token costs for the cost-based lowering ...", file=sys.stderr, flush=True)
    return Engine.create(
        llm,
        index.retriever(args.mode),
        embedder,
        optimizer=optimizer,
        k=args.k,
        tau=args.tau,
        max_hops=args.max_hops,
        kv_reuse=not args.no_kv_reuse,
        parallel=not args.sequential,
        workers=args.workers,
        measure_costs=measure_costs,
        ir_cleanup=getattr(args, "ir_cleanup", False),
        plan_hints=not getattr(args, "no_plan_hints", False),
        guard_rewrites=getattr(args, "guard_rewrites", False),
        constrained=getattr(args, "constrained", True),
        max_atoms=getattr(args, "max_atoms", MAX_ATOMS),
    )


def plan_question(engine, args: argparse.Namespace, trace):
    """Plan from ``--ir`` when given, else parse the question with the LLM."""
    if args.ir is None:
        return engine.plan(args.question, strategy=args.strategy, trace=trace)
    import attrs

    from nlqo.syntax import parse

    query = parse(args.ir.read_text(), source=str(args.ir))
    if query.question is None:
        query = attrs.evolve(query, question=args.question)
    return engine.plan_query(query, strategy=args.strategy, trace=trace)


def progress_printer(enabled: bool):
    """A trace callback printing one line per step to standard error."""
    import sys

    def show(step) -> None:
        if step.kind == "retrieve":
            titles = ", ".join(p.title for p in step.passages)
            print(f"  [{step.node}] retrieve {step.text!r} -> {titles}", file=sys.stderr, flush=True)
        elif step.kind == "llm":
            print(f"  [{step.node}] generated {step.generated_tokens} tokens in {step.wall_ms / 1000:.1f} s: {step.text.strip()[:100]!r}", file=sys.stderr, flush=True)
        elif step.kind == "stop":
            print(f"  [{step.node}] stop ({step.text}, similarity {step.terminator_score:.2f})", file=sys.stderr, flush=True)

    return show if enabled else None
