"""``nlqo bench``: run strategies side by side on a question file; ``--report`` writes docs/benchmarks.md."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from nlqo.cli.common import add_planning_options, add_runtime_options, config_from_args
from nlqo.cli.options import add_ablation_options, add_config_options
from nlqo.cli.repairs import shown_repairs
from nlqo.config import DEFAULT_MODEL, STRATEGIES, default
from nlqo.errors import ConfigError

if TYPE_CHECKING:
    from nlqo.eval.strategy import Strategy

ABLATIONS = (
    "tau",
    "alpha",
    "relation_cache",
    "parallel",
    "kv_reuse",
    "stable_rounds",
    "compress",
    "ir_cleanup",
    "plan_hints",
    "plan_escalations",
    "guard_rewrites",
    "tree_queries",
    "plan_steps",
    "question_first",
    "hold_options",
    "simple_plans",
    "cost_model",
    "constrained",
)
"""Ablation flags, passed as options to the linear, tree and auto builders."""

EPILOG = """\
output folder (--out DIR):
  run.json         what ran: question file (and its SHA-256), model, embedder, retrieval, k,
                   machine, dates and the command line that reproduces the run
  records.jsonl    one record per (question, strategy): answer, scores, cost, trace; appended as
                   the run goes, so running the same command again resumes where it stopped
  summary.json     per-strategy EM/F1/Acc, time, tokens, hops, evidence recall, and paired
                   bootstrap 95% intervals on EM differences
  results.md       the table; em_vs_seconds.png, tokens_per_question.png, hops_histogram.png
  answers.md       every question with its gold answer and each strategy's answer
  index/           the index built from --corpus (reused while the corpus and embedder match)

strategies run interleaved: each question goes through every strategy (the order rotating per
question) before the next question starts, so machine noise hits all strategies alike.

ablations: each list expands linear, tree and auto into variants, e.g. --tau 0.8,0.9 runs
linear[tau=0.8] and linear[tau=0.9], and --cost-model structural,mine.cost runs
tree[cost_model=structural] and tree[cost_model=mine.cost]; variants can also be named directly:
--strategies 'auto,linear[tau=0.8,kv_reuse=off]'. --param, --rules, --budget and --beam apply
to every variant.

examples:
  nlqo bench --questions ../shared/data/hotpotqa_dev_199.jsonl.gz \\
      --corpus ../shared/data/hotpotqa_dev_199_corpus.jsonl.gz --limit 50 --out results/hotpotqa
  nlqo bench --questions q.jsonl --index idx/ --strategies standard-rag,auto --tau 0.8,0.85,0.9 --out results/tau
  nlqo bench --report results/hotpotqa results/2wiki results/musique
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench",
        help="benchmark strategies side by side on a question file (or write docs/benchmarks.md)",
        description="Run every strategy on the same questions with the same model, index and top-k, "
        "one question at a time, writing resumable per-question records, a summary, a table and plots.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    data = p.add_argument_group("data")
    data.add_argument(
        "--questions", metavar="FILE", help="question file (.jsonl or .jsonl.gz, see ../shared/data/README.md)"
    )
    source = data.add_mutually_exclusive_group()
    source.add_argument("--corpus", metavar="FILE", help="corpus to index into OUT/index (reused while it matches)")
    source.add_argument("--index", metavar="DIR", help="an index built by 'nlqo index'")
    data.add_argument("--limit", type=int, metavar="N", help="first N questions (default: all)")
    data.add_argument(
        "--skip",
        type=int,
        default=0,
        metavar="N",
        help="leave out the first N of them, e.g. the sample 'nlqo analyze' measured (default: 0)",
    )
    data.add_argument("--out", metavar="DIR", help="result folder; running again into it resumes")
    runs = p.add_argument_group("run")
    runs.add_argument(
        "--strategies",
        metavar="LIST",
        help="comma-separated strategies, options in brackets (default: every baseline, linear, tree and auto)",
    )
    add_config_options(runs, names=("model", "embedder", "retrieval", "k"))
    add_runtime_options(runs)
    runs.add_argument(
        "--seed", type=int, default=0, metavar="S", help="seed of the bootstrap intervals (default: %(default)s)"
    )
    runs.add_argument(
        "--llm-cache", metavar="DIR", help="on-disk LLM response cache (off by default: timing runs should not use it)"
    )
    runs.add_argument(
        "--jobs", type=int, default=1, metavar="N", help="questions run at once in threads (default: 1, for timing)"
    )
    runs.add_argument(
        "--cluster",
        metavar="local:N|tcp://HOST:PORT",
        help="run the questions on Dask workers: N local worker processes, or a running scheduler; each worker loads the model and index once, this process writes the records (docs/scale-out.md)",
    )
    add_config_options(runs, sections=("statistics",))
    runs.add_argument("--judge", metavar="NAME", help="also grade answers with this LLM (same names as --model)")
    runs.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    ablation = p.add_argument_group("ablations (linear, tree, auto)")
    add_ablation_options(ablation, [name for name in ABLATIONS if name != "alpha"])
    ablation.add_argument("--alpha", metavar="LIST", help="similarity scales of the cost model, e.g. 1,5,10,20")
    add_planning_options(p, variants=True)
    report = p.add_argument_group("report")
    report.add_argument(
        "--report",
        nargs="*",
        metavar="DIR",
        help="write the benchmark report from these result folders (none: only the baselines section) and exit",
    )
    report.add_argument(
        "--report-file", default="docs/benchmarks.md", metavar="FILE", help="report to write (default: %(default)s)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.report is not None:
        from nlqo.eval.report import write_report

        print(f"wrote {write_report(args.report, args.report_file)}")
        return 0
    missing = [flag for flag, value in (("--questions", args.questions), ("--out", args.out)) if not value]
    if not (args.corpus or args.index):
        missing.append("--corpus or --index")
    if missing:
        raise ConfigError(f"bench needs {', '.join(missing)} (or --report DIR...)")
    if not args.strategies:
        from nlqo.eval.strategy import BENCH

        args.strategies = ",".join(BENCH)
    specs = expand_ablations(args.strategies, {name: getattr(args, name) for name in ABLATIONS})
    return _bench(args, specs)


def expand_ablations(strategies: str, ablations: dict[str, str | None]) -> list[str]:
    """Strategy names with each ablation list expanded over linear, tree and auto.

    >>> expand_ablations("ircot,linear", {"tau": "0.8,0.9", "kv_reuse": "off"})
    ['ircot', 'linear[tau=0.8,kv_reuse=off]', 'linear[tau=0.9,kv_reuse=off]']
    """
    from nlqo.eval.strategy import parse_spec, parse_value, spec_name, split_specs

    lists = {k: [parse_value(v) for v in text.split(",") if v.strip()] for k, text in ablations.items() if text}
    out: list[str] = []
    for spec in split_specs(strategies):
        base, options = parse_spec(spec)
        if base not in STRATEGIES or not lists:
            out.append(spec_name(base, options))
            continue
        for combo in itertools.product(*lists.values()):
            out.append(spec_name(base, {**options, **dict(zip(lists, combo))}))
    if len(set(out)) != len(out):
        raise ConfigError(f"strategy list names a strategy twice: {', '.join(out)}")
    return out


def command_line(args: argparse.Namespace, model: str) -> list[str]:
    """The ``nlqo bench`` command that reproduces this run (paths as given)."""
    cmd = ["nlqo", "bench", "--questions", args.questions]
    cmd += ["--corpus", args.corpus] if args.corpus else ["--index", args.index]
    if args.limit is not None:
        cmd += ["--limit", str(args.limit)]
    if getattr(args, "skip", 0):
        cmd += ["--skip", str(args.skip)]
    cmd += [
        "--out",
        args.out,
        "--strategies",
        args.strategies,
        "--model",
        model,
        "--retrieval",
        args.retrieval,
        "--k",
        str(args.k),
        "--seed",
        str(args.seed),
    ]
    for flag in ("embedder", "judge", "llm_cache", *ABLATIONS):
        if getattr(args, flag):
            cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    if args.jobs != 1:
        cmd += ["--jobs", str(args.jobs)]
    if getattr(args, "cluster", None):
        cmd += ["--cluster", args.cluster]
    if getattr(args, "runtime", "auto") != "auto":
        cmd += ["--runtime", args.runtime]
    if getattr(args, "quantize", "none") != "none":
        cmd += ["--quantize", args.quantize]
    if getattr(args, "threads", None):
        cmd += ["--threads", str(args.threads)]
    for item in getattr(args, "param", None) or ():
        cmd += ["--param", item]
    for flag in ("rules", "budget", "beam", "max_atoms"):
        if getattr(args, flag, default(flag)) != default(flag):
            cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    for flag in ("policy", "em_margin", "time_budget", "statistics"):
        if getattr(args, flag, None) not in (None, default(flag)):
            cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    for folder in getattr(args, "path", None) or ():
        cmd += ["--path", folder]
    return cmd


def bench_config(args: argparse.Namespace, model: str):
    """The :class:`~nlqo.config.EngineConfig` every strategy of the run starts from."""
    import attrs

    engine_args = argparse.Namespace(**{k: v for k, v in vars(args).items() if k not in ABLATIONS})
    return attrs.evolve(config_from_args(engine_args), model=model, cost_model=default("cost_model"), embedder=None)


def _bench(args: argparse.Namespace, specs: list[str]) -> int:
    from nlqo.eval.datasets import QuestionSet
    from nlqo.eval.summary import markdown_table
    from nlqo.eval.workspace import open_index

    out = Path(args.out)
    questions = QuestionSet.load(args.questions, limit=args.limit, skip=args.skip)
    model = args.model or DEFAULT_MODEL
    with shown_repairs():
        if getattr(args, "cluster", None):
            summary = _bench_on_cluster(args, specs, questions, bench_config(args, model))
        else:
            index, source = open_index(
                out, corpus=args.corpus, index=args.index, embedder=args.embedder, progress=not args.quiet
            )
            summary = _bench_here(args, specs, questions, bench_config(args, model), index, source)
    print(markdown_table(summary), end="")
    print(f"n={summary['n']} questions ({summary['pending']} pending); results in {out}", file=sys.stderr)
    return 0


def _meta(args: argparse.Namespace, model: str, index, source: dict[str, Any], runtime: str, threads) -> dict[str, Any]:
    return {
        "model": model,
        "runtime": runtime,
        "quantize": args.quantize,
        "threads": threads,
        "embedder": index.manifest.embedder,
        "retrieval": args.retrieval,
        "k": args.k,
        "skip": getattr(args, "skip", 0),
        "llm_cache": args.llm_cache,
        "command": command_line(args, model),
        **source,
    }


def _bench_here(
    args: argparse.Namespace, specs: list[str], questions, config, index, source: dict[str, Any]
) -> dict[str, Any]:
    """The run in this process (``--jobs`` threads)."""
    import attrs

    from nlqo.main.builder import load_model
    from nlqo.eval.judge import LLMJudge
    from nlqo.eval.runner import Bench
    from nlqo.runtime.llm.backends import runtime_of
    from nlqo.runtime.llm.base import close_part
    from nlqo.runtime.llm.cache import with_cache
    from nlqo.eval.strategy import build_strategies

    with contextlib.ExitStack() as loaded:  # the models are freed when the run ends (also in process)
        backend = load_model(config)
        loaded.callback(close_part, backend)
        llm = with_cache(backend, args.llm_cache)
        strategies = build_strategies(specs, llm, index, retrieval=args.retrieval, k=args.k, config=config)
        judge = None
        if args.judge:
            judge_model = load_model(attrs.evolve(config, model=args.judge))
            loaded.callback(close_part, judge_model)
            judge = LLMJudge(with_cache(judge_model, args.llm_cache))
        meta = _meta(args, config.model, index, source, runtime_of(backend), getattr(backend, "threads", args.threads))
        bench = Bench(
            questions,
            strategies,
            Path(args.out),
            meta=meta,
            seed=args.seed,
            jobs=args.jobs,
            judge=judge,
            progress=not args.quiet,
        )
        return bench.run()


def _bench_on_cluster(args: argparse.Namespace, specs: list[str], questions, config) -> dict[str, Any]:
    """The same run with the questions answered on Dask workers (Dask is imported only here)."""
    from nlqo.runtime.cluster import ClusterSpec, connect
    from nlqo.eval.cluster import ClusterRun, Recipe
    from nlqo.eval.runner import Bench
    from nlqo.eval.workspace import open_index
    from nlqo.planner.statistics.store import index_digest

    if args.jobs != 1:
        raise ConfigError(
            "--jobs runs questions in threads of this process; with --cluster every worker runs one question at a time (start more workers instead)"
        )
    out = Path(args.out)
    with connect(ClusterSpec.parse(args.cluster)) as connection:
        index, source = open_index(
            out,
            corpus=args.corpus,
            index=args.index,
            embedder=args.embedder,
            progress=not args.quiet,
            cluster=connection,
        )
        recipe = Recipe(
            config=config, index=source["index"], index_digest=index_digest(index.manifest), strategies=tuple(specs),
            embedder=args.embedder, retrieval=args.retrieval, k=args.k,
            llm_cache=str(Path(args.llm_cache).absolute()) if args.llm_cache else None, judge=args.judge,
        )  # fmt: skip
        run = ClusterRun.start(connection, recipe)
        described = run.meta()
        meta = {
            **_meta(args, config.model, index, source, described.pop("runtime"), described.pop("threads")),
            **described,
        }
        # the strategies live on the workers: this process needs only their names
        names = cast("dict[str, Strategy]", dict.fromkeys(specs))
        bench = Bench(questions, names, out, meta=meta, seed=args.seed, progress=not args.quiet, executor=run)
        return bench.run()
