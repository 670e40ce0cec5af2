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


def load_llm(name: str, **options):
    """A backend by model name: a bundled model, a local directory or GGUF, or ``openai:MODEL@URL``."""
    if name.startswith("openai:"):
        from nlqo.llm.openai_compat import OpenAICompatLLM

        model, _, url = name[len("openai:") :].partition("@")
        return OpenAICompatLLM.from_env(base_url=url or "http://127.0.0.1:8000/v1", model=model)
    from nlqo.models import load_local

    return load_local(name, **options)


def build_optimizer(args: argparse.Namespace, llm=None):
    from nlqo.optimizer import Optimizer
    from nlqo.relations import RelationCache
    from nlqo.rewrite import load_rules

    model = load_cost(args)
    embedder = load_embedder(args.embedder) if "similarity" in model.names else None
    cache = RelationCache.open(args.relations_cache) if args.relations_cache else None
    rules = () if args.rules == "none" else load_rules(args.rules, args.path)
    return Optimizer(cost_model=model, embedder=embedder, llm=llm, cache=cache, rules=rules, budget=args.budget, beam=args.beam)
