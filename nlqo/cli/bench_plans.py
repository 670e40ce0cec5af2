"""``nlqo bench-plans``: plans scored against gold decompositions (parse once with the LLM, then score in seconds)."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import attrs

from nlqo.cli.common import add_constrained_options, add_runtime_options, config_from_args
from nlqo.cli.options import add_config_options
from nlqo.config import default

EPILOG = """\
steps:
  parse   each question is parsed once with the LLM, and the LLM is asked about the atom pairs
          the triples leave undecided; each parse is one JSON file in --parses (default OUT/parses),
          named by a digest of the question, the model and the parser's settings and prompts.
          Cached questions are skipped, so a stopped run resumes; --parse-only stops here
          (run it in the background: it is the only step that needs the LLM).
  score   every cached parse is planned under each cost model x rule list x search and the plan
          scored against the gold (nlqo.testing.plan_score); no LLM, seconds. --score-only scores
          what is cached and says how many questions are not.

output folder (--out DIR):
  records.jsonl    one record per (question, variant): counts, figures, the plan, the matching
  summary.json     per set and variant, and per hop count and question type: every figure with
                   its 95% interval (Wilson for shares, bootstrap for the mean plan score)
  results.md       the tables; --docs FILE also writes them between <!-- BEGIN plan-bench -->
                   and <!-- END plan-bench --> in FILE (docs/benchmarks.md)
  run.json         what ran, with the parse and scoring times

The embedder's vectors of every text scored are kept in $NLQO_CACHE/plan-bench (default
~/.cache/nlqo), so scoring again embeds only new texts.

examples:
  nlqo bench-plans --questions ../shared/data/musique_dev_200.jsonl.gz --out results/plans --parse-only
  nlqo bench-plans --questions ../shared/data/musique_dev_200.jsonl.gz --out results/plans --score-only \\
      --cost-models structural,mine.cost --search dp,greedy
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench-plans",
        help="score plans against gold decompositions (MuSiQue, StrategyQA, 2Wiki shapes)",
        description="Parse each question once (cached on disk), plan it under every cost model, rule list and "
        "search, and score the plans against the gold decompositions: atom precision and coverage, gold edges "
        "found, relation accuracy, linear degeneration, depth and shape, with 95% intervals.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    data = p.add_argument_group("data")
    data.add_argument(
        "--questions",
        nargs="+",
        required=True,
        metavar="FILE",
        help="question files with gold decompositions (../shared/data: musique_dev_200, strategyqa_229, 2wiki_dev_300)",
    )
    data.add_argument("--limit", type=int, metavar="N", help="first N questions of each file (default: all)")
    data.add_argument("--out", required=True, type=Path, metavar="DIR", help="result folder")
    data.add_argument(
        "--parses", type=Path, metavar="DIR", help="the parse cache (default: OUT/parses; share it between runs)"
    )
    steps = p.add_mutually_exclusive_group()
    steps.add_argument("--parse-only", action="store_true", help="parse what is not cached yet, score nothing")
    steps.add_argument("--score-only", action="store_true", help="score cached parses only; never load the LLM")
    variants = p.add_argument_group("variants")
    variants.add_argument(
        "--cost-models",
        metavar="LIST",
        help="comma-separated cost model names or .cost files (default: every model in nlqo's cost_models/)",
    )
    variants.add_argument(
        "--rules",
        dest="rule_lists",
        default=default("rules"),
        metavar="LIST",
        help="comma-separated rule lists or .rules files; 'none' runs no rule (default: %(default)s)",
    )
    variants.add_argument(
        "--search",
        default="dp,greedy",
        metavar="LIST",
        help="dp (the Selinger DP within --budget) and/or greedy (the greedy search alone) (default: %(default)s)",
    )
    add_config_options(variants, names=("params", "path", "budget", "beam", "max_atoms"))
    parsing = p.add_argument_group("parsing (the cache key)")
    add_config_options(parsing, names=("model", "repairs", "ir_cleanup", "max_question_chars"))
    add_constrained_options(parsing)
    add_runtime_options(parsing)
    scoring = p.add_argument_group("scoring")
    add_config_options(scoring, names=("embedder",))
    scoring.add_argument(
        "--threshold",
        type=float,
        metavar="X",
        help="least score of an atom matched to a gold step (default: 0.5, nlqo.testing.plan_score.THRESHOLD)",
    )
    scoring.add_argument(
        "--seed", type=int, default=0, metavar="S", help="seed of the bootstrap intervals (default: %(default)s)"
    )
    scoring.add_argument("--docs", type=Path, metavar="FILE", help="also write the tables into FILE's plan-bench block")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from nlqo.common.paths import cache_root
    from nlqo.eval import plan_bench as pb
    from nlqo.main.builder import DEFAULT_EMBEDDER, load_embedder, load_model, set_threads
    from nlqo.optimizer.cost import load_cost_model
    from nlqo.optimizer.rewrite import load_rules
    from nlqo.testing.gold import load_gold
    from nlqo.testing.plan_score import ENTITY_WEIGHT, THRESHOLD

    config = config_from_args(args)
    golds = [g for path in args.questions for g in load_gold(path, limit=args.limit)]
    cache = pb.ParseCache(args.parses or args.out / "parses", config)
    say = None if args.quiet else pb.say
    run_info: dict = {"command": command_line(args), "questions": len(golds), "sets": [str(p) for p in args.questions]}
    if not args.score_only:
        report = pb.parse_all(golds, cache, lambda: load_model(config), progress=say)
        run_info["parse"] = attrs.asdict(report)
        print(
            f"parses: {report.questions} questions, {report.cached} were cached, {report.parsed} parsed now "
            f"({report.failed} failed) in {report.seconds:.1f} s; cache: {cache.folder}",
            file=sys.stderr,
        )
        if args.parse_only:
            return 0
    threshold = THRESHOLD if args.threshold is None else args.threshold
    names = args.cost_models.split(",") if args.cost_models else pb.shipped_cost_models()
    variants = pb.variants(names, args.rule_lists.split(","), args.search.split(","))
    models = {n: load_cost_model(n, path=config.path) for n in names}  # a bad name fails before the embedder loads
    for rules in {v.rules for v in variants} - {"none"}:
        load_rules(rules, config.path)
    set_threads(config.threads)
    started = time.perf_counter()
    embedder = pb.MemoEmbedder.open(load_embedder(config.embedder or DEFAULT_EMBEDDER), cache_root() / "plan-bench")
    loaded = time.perf_counter()
    planners = [pb.Planner.load(v, config, embedder, models) for v in variants]
    records, missing = pb.score_all(golds, cache, planners, embedder, threshold=threshold)
    finished = time.perf_counter()
    embedder.save()
    if missing:
        print(
            f"nlqo: {len(missing)} of {len(golds)} questions have no cached parse and were not scored "
            "(run without --score-only to parse them)",
            file=sys.stderr,
        )
    run_info |= pb.run_facts(config, embedder, threshold, ENTITY_WEIGHT, args.seed) | {
        "plans": len(records),
        "unparsed": len(missing),
        "embedder_load_seconds": round(loaded - started, 2),
        "score_seconds": round(finished - loaded, 2),
        "embed_seconds": round(embedder.seconds, 2),
    }
    rows = pb.write_results(args.out, records, run_info, seed=args.seed, docs=args.docs)
    summary = {(r["dataset"], r["variant"]): r for r in rows if r["group"] == "all"}
    for (dataset, variant), row in summary.items():
        score = row["figures"]["overall"]
        shown = "-" if score is None else f"{score['value']:.2f}"
        print(f"{dataset:20s} {variant:36s} {row['questions']:4d} questions, plan score {shown}")
    print(
        f"scored {len(records)} plans in {finished - loaded:.1f} s (embedder loaded in {loaded - started:.1f} s); "
        f"{args.out / 'results.md'}",
        file=sys.stderr,
    )
    return 0


def command_line(args: argparse.Namespace) -> str:
    """The command that scores this run again from the cache (paths as given)."""
    cmd = ["nlqo", "bench-plans", "--questions", *map(str, args.questions), "--out", str(args.out)]
    cmd += ["--score-only"] if args.score_only else []
    for flag, value in (
        ("--parses", args.parses),
        ("--limit", args.limit),
        ("--cost-models", args.cost_models),
        ("--rules", args.rule_lists),
        ("--search", args.search),
        ("--model", args.model),
        ("--embedder", args.embedder),
        ("--threshold", args.threshold),
        ("--seed", args.seed),
        ("--docs", args.docs),
    ):
        if value is not None:
            cmd += [flag, str(value)]
    return shlex.join(cmd)
