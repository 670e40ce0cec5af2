"""Scale-out on Dask: ``nlqo bench`` throughput and ``nlqo index`` speed, one process against a local cluster.

bench: the first ``--limit`` HotpotQA questions over an index of the first ``--passages`` corpus passages; index:
those passages. Each configuration is its own command, one after the other; each record keeps the load average
around it.
"""

import gzip
import itertools
import re
import shutil

from nlqo.eval.experiment import DATA, REPO, Block, Experiment, Option, load_average, main, run_nlqo
from nlqo.eval.records import read_records

WORK = REPO / ".nlqo" / "bench-cluster"
CONFIGS = {
    "1 process, 2 threads": ["--threads", "2"],
    "1 process, 1 thread": ["--threads", "1"],
    "local:1 (1 worker x 1 thread)": ["--cluster", "local:1"],
    "local:2 (2 workers x 1 thread)": ["--cluster", "local:2"],
}
PARTS = {"bench": [c for c in CONFIGS if c != "local:1 (1 worker x 1 thread)"], "index": list(CONFIGS)}
COLUMNS = {
    "bench": {"questions/min (run)": "questions_per_min", "questions/min (end to end)": "questions_per_min_end_to_end",
              "start-up s": "startup_s", "run s": "run_s", "mean s per record": "mean_record_s"},
    "index": {"passages/s (build)": "passages_per_s", "passages/s (end to end)": "passages_per_s_end_to_end",
              "build s": "build_s", "wall s": "wall_s"},
}  # fmt: skip


def load() -> str:
    return ", ".join(map(str, load_average()))


def measure(args, case: dict, config: str) -> dict:
    corpus, before = WORK / f"hotpotqa_corpus_{args.passages}.jsonl", load()
    if not corpus.is_file():
        WORK.mkdir(parents=True, exist_ok=True)
        with gzip.open(DATA / "hotpotqa_dev_199_corpus.jsonl.gz", "rt", encoding="utf-8") as source:
            corpus.write_text("".join(itertools.islice(source, args.passages)), encoding="utf-8")
    out, extra = WORK / case["part"] / re.sub(r"\W+", "-", case["configuration"]).strip("-"), CONFIGS[case["configuration"]]  # fmt: skip
    shutil.rmtree(out, ignore_errors=True)
    if case["part"] == "index":
        stdout, wall_s, _ = run_nlqo("index", str(corpus), "--out", str(out), "--quiet", *extra)
        count, build_s = re.search(r"indexed (\d+) passages in ([\d.]+) s", stdout).groups()
        count, build_s = int(count), float(build_s)
        return {"passages_per_s": round(count / build_s, 2), "passages_per_s_end_to_end": round(count / wall_s, 2),
                "build_s": build_s, "wall_s": wall_s, "load": f"{before} / {load()}"}  # fmt: skip
    index = WORK / f"index-{args.passages}"
    if not (index / "manifest.json").is_file():
        run_nlqo("index", str(corpus), "--out", str(index), "--quiet")
    _, wall_s, startup_s = run_nlqo("bench", "--questions", str(DATA / "hotpotqa_dev_199.jsonl.gz"), "--limit", str(args.limit), "--index", str(index), "--out", str(out),
                                "--model", args.model, "--strategies", args.strategies, "--quiet", *extra, wait_for=out / "run.json")  # fmt: skip
    records = read_records(out / "records.jsonl")
    return {
        "questions_per_min": round(args.limit / (wall_s - startup_s) * 60, 2),
        "questions_per_min_end_to_end": round(args.limit / wall_s * 60, 2),
        **{"startup_s": startup_s, "run_s": round(wall_s - startup_s, 2), "wall_s": wall_s},
        "mean_record_s": round(sum(r["seconds"] for r in records) / len(records), 2),
        "answers": {f"{r['qid']}|{r['strategy']}": r["answer"] for r in records},
        "load": f"{before} / {load()}",
    }


def table(records: list[dict], run: dict) -> str:
    lines = []
    for part, columns in COLUMNS.items():
        if not (rows := sorted((r for r in records if r["part"] == part), key=lambda r: list(CONFIGS).index(r["configuration"]))):  # fmt: skip
            continue
        s, same = rows[0], all(r.get("answers") == rows[0].get("answers") for r in rows)
        lines.append(
            f"**Bench throughput**: `nlqo bench` with `{s['model']}`, strategies `{s['strategies']}`, the first {s['limit']} "
            f"HotpotQA questions over an index of the first {s['passages']} corpus passages (`python benchmarks/bench_cluster.py --part bench`). "
            "Run = from `run.json` appearing (model loaded, workers started) to the end; start-up = before that. "
            f"Same answers in every configuration: {'yes' if same else 'NO'}."
            if part == "bench" else
            f"**Indexing**: `nlqo index` of the first {s['passages']} HotpotQA corpus passages with `all-minilm-l6-v2` "
            "(`python benchmarks/bench_cluster.py --part index`). Build = the time `nlqo index` reports (corpus, embedding, "
            "FAISS, BM25, atomic swap); end to end adds process start, cluster start and model loading."
        )  # fmt: skip
        lines += ["", f"| configuration | {' | '.join(columns)} | load before / after |", f"|---|{'---:|' * len(columns)}---|"]  # fmt: skip
        lines += [f"| {r['configuration']} | {' | '.join(str(r[f]) for f in columns.values())} | {r['load']} |" for r in rows]  # fmt: skip
        lines.append("")
    lines.append(f"Machine: {run['machine']}, {run['cpus']} cores, Python {run['python']}; every command under `nice -n 19`, the load averages around each run show what else ran.")  # fmt: skip
    return "\n".join(lines)


def cases(args) -> list[dict]:
    bench = {"limit": args.limit, "strategies": args.strategies, "model": args.model}
    return [{"part": p, "configuration": c, "passages": args.passages, **(bench if p == "bench" else {})}
            for p in (PARTS if args.part == "all" else [args.part]) for c in PARTS[p]]  # fmt: skip


EXPERIMENT = Experiment(
    name="cluster",
    blocks=(Block("docs/scale-out.md", "cluster-benchmark", table, title="Scale-out: Dask for batch work"),),
    cases=cases,
    measure=measure,
    options=(
        Option.of("--part", choices=("bench", "index", "all"), default="all"),
        Option.of("--limit", type=int, default=6, help="questions (default: %(default)s)"),
        Option.of("--passages", type=int, default=300, help="corpus passages (default: %(default)s)"),
        Option.of("--strategies", default="standard-rag,ircot"),
        Option.of("--model", default="smollm2-135m"),
    ),
)

if __name__ == "__main__":
    raise SystemExit(main(EXPERIMENT))
