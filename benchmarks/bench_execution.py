"""Execution measured side by side, one run: KV reuse on/off, parallel vs one-at-a-time trees, tau.

    python benchmarks/bench_execution.py [--model qwen2.5-coder-0.5b] [--limit 30] [--parts kv tree tau]

- kv: the linear template with and without KV reuse on the same questions, interleaved per
  question: seconds, generated tokens, prompt tokens computed vs served from cache, hops, EM.
- tree: the same logical trees executed in parallel and one node at a time, on the local backend
  and, when llama-cpp-python's server is installed, on an OpenAI-compatible server on loopback
  serving the same GGUF model.
- tau: hop-count distribution of the linear template at tau 0.8 / 0.85 / 0.9.

Writes benchmarks/results/execution.json, benchmarks/results/execution_kv.png and the tables in
docs/execution.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import write_block  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
RESULTS = REPO / "benchmarks" / "results"


def build_or_open_index(corpus: Path, out: Path):
    from nlqo.index import Index, build_index
    from nlqo.embed import SentenceEmbedder

    if not (out / "manifest.json").exists():
        build_index(corpus, out, SentenceEmbedder.load())
    return Index.open(out)


def em(prediction: str, golds) -> float:
    from nlqo.eval.metrics import exact_match

    return exact_match(prediction, golds)


def keep(row: dict) -> dict:
    """Append a measured row to results/execution_rows.jsonl at once, so an interrupted run keeps it."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(RESULTS / "execution_rows.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")
    return row


def part_kv(engine, questions, log) -> list[dict]:
    from nlqo.execute.linear import LinearExecutor

    rows = []
    cold = LinearExecutor(engine.llm, engine.linear.retriever, engine.embedder, k=engine.k, kv_reuse=False)
    for i, q in enumerate(questions, 1):
        for label, executor in (
            (("kv_on", engine.linear), ("kv_off", cold)) if i % 2 else (("kv_off", cold), ("kv_on", engine.linear))
        ):
            started = time.perf_counter()
            r = executor.run(q.question)
            s = r.stats()
            rows.append(
                keep(
                    {
                        "part": "kv",
                        "question": q.id,
                        "variant": label,
                        "seconds": time.perf_counter() - started,
                        "em": em(r.answer, q.answers),
                        "answer": r.answer,
                        **{
                            k: s[k]
                            for k in ("generated_tokens", "prompt_tokens", "cached_prompt_tokens", "hops", "llm_calls")
                        },
                        "stop_reason": r.stop_reason,
                    }
                )
            )
            log(
                f"kv {i}/{len(questions)} {label}: {rows[-1]['seconds']:.1f}s hops={s['hops']} cached={s['cached_prompt_tokens']}/{s['prompt_tokens']} answer={r.answer!r} gold={q.answers[0]!r}"
            )
    return rows


def part_tree(engine, questions, log, server_llm=None) -> list[dict]:
    from nlqo.execute.tree import TreeExecutor

    rows = []
    backends = [("local", engine.llm)] + ([("server", server_llm)] if server_llm is not None else [])
    for i, q in enumerate(questions, 1):
        planned = engine.plan(q.question, strategy="tree")
        if planned.plan is None:
            log(f"tree {i}: no plan ({planned.error.splitlines()[0] if planned.error else ''})")
            continue
        plan = planned.plan
        width = max(len(w) for w in plan.tree.levels())
        order = (("parallel", True), ("sequential", False))
        for backend, llm in backends:
            # alternate which variant goes first: the first run of a backend fills its prefix cache
            for label, parallel in order if i % 2 else order[::-1]:
                if hasattr(llm, "clear_prefix_cache"):
                    llm.clear_prefix_cache()  # else the second run finds the first run's prompts cached
                executor = TreeExecutor(
                    llm,
                    engine.linear.retriever,
                    k=engine.k,
                    parallel=parallel,
                    workers=max(2, width) if parallel else None,
                )
                started = time.perf_counter()
                r = executor.run(plan)
                rows.append(
                    keep(
                        {
                            "part": "tree",
                            "question": q.id,
                            "backend": backend,
                            "variant": label,
                            "seconds": time.perf_counter() - started,
                            "nodes": len(plan.tree.nodes),
                            "widest_wave": width,
                            "em": em(r.answer, q.answers),
                            "first": label == (order if i % 2 else order[::-1])[0][0],
                        }
                    )
                )
                log(
                    f"tree {i} {backend} {label}: {rows[-1]['seconds']:.1f}s nodes={len(plan.tree.nodes)} widest={width}"
                )
    return rows


def part_tau(engine, questions, log, taus=(0.8, 0.85, 0.9)) -> list[dict]:
    """Run at the highest tau once per question; the hop counts at lower taus follow from its scores."""
    from nlqo.execute.linear import LinearExecutor
    from nlqo.execute.terminator import hops_at

    rows = []
    top = max(taus)
    executor = LinearExecutor(engine.llm, engine.linear.retriever, engine.embedder, k=engine.k, tau=top)
    for i, q in enumerate(questions, 1):
        r = executor.run(q.question)
        scores = [
            s.terminator_score for s in r.trace if s.kind in ("retrieve", "stop") and s.terminator_score is not None
        ]
        for tau in taus:
            measured = tau == top
            rows.append(
                keep(
                    {
                        "part": "tau",
                        "question": q.id,
                        "tau": tau,
                        "hops": r.hops if measured else hops_at(scores, tau, r.hops),
                        "measured": measured,
                        "stop_reason": r.stop_reason if measured else None,
                        "em": em(r.answer, q.answers) if measured else None,
                        "scores": scores,
                    }
                )
            )
        hops = ", ".join(f"{row['tau']}={row['hops']}" for row in rows[-len(taus) :])
        log(f"tau {i}: hops at {hops}; scores {[round(x, 2) for x in scores]}")
    return rows


def start_server(model_name: str):
    """llama-cpp-python's OpenAI-compatible server on loopback with the bundled GGUF; None if not installed."""
    import importlib.util
    import socket
    import urllib.request

    if importlib.util.find_spec("llama_cpp") is None:
        return None, None
    from nlqo.llm.openai_compat import OpenAICompatLLM
    from nlqo.models import get_bundled
    from nlqo.models.parts import assemble

    folder = Path(tempfile.mkdtemp(prefix="nlqo-gguf-"))
    gguf = assemble(get_bundled(model_name), folder)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(gguf),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "4096",
            "--n_threads",
            str(os.cpu_count() or 1),
            "--n_threads_batch",
            str(os.cpu_count() or 1),
            "--model_alias",
            model_name,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/v1"
    for _ in range(240):
        try:
            urllib.request.urlopen(url + "/models", timeout=2)
            break
        except OSError:
            time.sleep(0.5)
    return proc, OpenAICompatLLM(url, model_name)


def summarise(kv, tree, tau) -> dict:
    out: dict = {}
    if kv:
        for variant in ("kv_on", "kv_off"):
            rows = [r for r in kv if r["variant"] == variant]
            out[variant] = {
                "n": len(rows),
                "seconds_mean": statistics.mean(r["seconds"] for r in rows),
                "generated_mean": statistics.mean(r["generated_tokens"] for r in rows),
                "prompt_mean": statistics.mean(r["prompt_tokens"] for r in rows),
                "cached_mean": statistics.mean(r["cached_prompt_tokens"] for r in rows),
                "computed_mean": statistics.mean(r["prompt_tokens"] - r["cached_prompt_tokens"] for r in rows),
                "cached_share": sum(r["cached_prompt_tokens"] for r in rows)
                / max(1, sum(r["prompt_tokens"] for r in rows)),
                "hops_mean": statistics.mean(r["hops"] for r in rows),
                "em": statistics.mean(r["em"] for r in rows),
            }
        out["kv_speedup"] = out["kv_off"]["seconds_mean"] / out["kv_on"]["seconds_mean"]
        by_q = {}
        for r in kv:
            by_q.setdefault(r["question"], {})[r["variant"]] = r
        pairs = [p for p in by_q.values() if len(p) == 2]
        same = [p for p in pairs if p["kv_on"]["hops"] == p["kv_off"]["hops"]]
        out["kv_pairs"] = {
            "n": len(pairs),
            "same_answer": sum(p["kv_on"]["answer"] == p["kv_off"]["answer"] for p in pairs),
            "same_hops": len(same),
            "faster_with_reuse": sum(p["kv_on"]["seconds"] < p["kv_off"]["seconds"] for p in pairs),
            "same_hops_speedup": sum(p["kv_off"]["seconds"] for p in same) / sum(p["kv_on"]["seconds"] for p in same)
            if same
            else None,
            "seconds_per_hop": {
                v: sum(p[v]["seconds"] for p in pairs) / max(1, sum(max(1, p[v]["hops"]) for p in pairs))
                for v in ("kv_on", "kv_off")
            },
        }
    if tree:
        for backend in sorted({r["backend"] for r in tree}):
            rows = [r for r in tree if r["backend"] == backend]
            # a tree counts when it was timed in both orders: the second run of a tree finds its prompts cached
            orders: dict[str, set] = {}
            for r in rows:
                if r.get("first"):
                    orders.setdefault(r["question"], set()).add(r["variant"])
            balanced = {q for q, firsts in orders.items() if len(firsts) == 2}
            rows = [r for r in rows if r["question"] in balanced] if balanced else rows
            by = {v: [r["seconds"] for r in rows if r["variant"] == v] for v in ("parallel", "sequential")}
            out[f"tree_{backend}"] = {
                "n": len(by["parallel"]),
                "trees": len({r["question"] for r in rows}),
                "unbalanced_trees_left_out": len(set(orders) - balanced) if balanced else 0,
                "parallel_mean": statistics.mean(by["parallel"]),
                "sequential_mean": statistics.mean(by["sequential"]),
                "speedup": sum(by["sequential"]) / sum(by["parallel"]),
            }
    if tau:
        out["tau"] = {}
        for t in sorted({r["tau"] for r in tau}):
            rows = [r for r in tau if r["tau"] == t]
            ems = [r["em"] for r in rows if r.get("em") is not None]
            out["tau"][str(t)] = {
                "n": len(rows),
                "hops": dict(sorted(Counter(r["hops"] for r in rows).items())),
                "em": statistics.mean(ems) if ems else None,
                "mean_hops": statistics.mean(r["hops"] for r in rows),
                "measured": all(r.get("measured", True) for r in rows),
            }
        kv_on = {r["question"]: r["hops"] for r in kv if r["variant"] == "kv_on"}
        derived = [r for r in tau if not r.get("measured", True) and r["tau"] == 0.85 and r["question"] in kv_on]
        if derived:
            out["tau_check"] = {"n": len(derived), "agree": sum(r["hops"] == kv_on[r["question"]] for r in derived)}
    return out


def plot(kv, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for variant, color in (("kv_on", "tab:blue"), ("kv_off", "tab:orange")):
        rows = [r for r in kv if r["variant"] == variant]
        axes[0].hist([r["seconds"] for r in rows], bins=12, alpha=0.6, label=variant, color=color)
    axes[0].set_xlabel("seconds per question")
    axes[0].set_ylabel("questions")
    axes[0].legend()
    labels = ["kv_on", "kv_off"]
    computed = [
        statistics.mean(r["prompt_tokens"] - r["cached_prompt_tokens"] for r in kv if r["variant"] == v) for v in labels
    ]
    cached = [statistics.mean(r["cached_prompt_tokens"] for r in kv if r["variant"] == v) for v in labels]
    axes[1].bar(labels, computed, label="prompt tokens computed")
    axes[1].bar(labels, cached, bottom=computed, label="prompt tokens from cache")
    axes[1].set_ylabel("tokens per question (mean)")
    axes[1].legend()
    fig.suptitle("Linear template: KV reuse on vs off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def tables(summary: dict, meta: dict) -> str:
    commit = f" at commit {meta['nlqo_commit']}" if meta.get("nlqo_commit") else ""
    lines = [
        f"Measured {meta['date']}{commit} on {meta['machine']}, model `{meta['model']}`, {meta['dataset']} with its corpus, k={meta['k']}, hybrid retrieval (`python benchmarks/bench_execution.py`)."
    ]
    if "kv_on" in summary:
        lines += [
            "",
            "**Linear template, KV reuse on vs off** (same questions, interleaved):",
            "",
            "| variant | n | s / question | generated tokens | prompt tokens | computed | from cache | share from cache | hops | EM |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for v in ("kv_on", "kv_off"):
            s = summary[v]
            lines.append(
                f"| {v} | {s['n']} | {s['seconds_mean']:.1f} | {s['generated_mean']:.0f} | {s['prompt_mean']:.0f} | {s['computed_mean']:.0f} | {s['cached_mean']:.0f} | {s['cached_share']:.0%} | {s['hops_mean']:.2f} | {s['em']:.2f} |"
            )
        lines += [
            "",
            f"KV reuse: {summary['kv_on']['cached_share']:.0%} of prompt tokens served from cache (target at least 60%); time per question {summary['kv_speedup']:.2f}x faster with reuse.",
        ]
        if "kv_pairs" in summary:
            p = summary["kv_pairs"]
            sh = f"{p['same_hops_speedup']:.2f}x" if p["same_hops_speedup"] else "n/a"
            lines += [
                "",
                f"Per question: faster with reuse on {p['faster_with_reuse']} of {p['n']}; same answer on {p['same_answer']} of {p['n']}; same hop count on {p['same_hops']} of {p['n']} (on those, {sh} faster with reuse); seconds per hop {p['seconds_per_hop']['kv_on']:.1f} with reuse vs {p['seconds_per_hop']['kv_off']:.1f} without.",
            ]
        lines += ["", "![KV reuse](../benchmarks/results/execution_kv.png)"]
    trees = [k for k in summary if k.startswith("tree_")]
    if trees:
        lines += [
            "",
            "**Parallel tree vs one node at a time** (same trees, each timed in both orders: a second run of a tree can find its prompts in the backend's cache; trees timed in one order only are left out):",
            "",
            "| backend | trees | timed pairs | parallel s | one-at-a-time s | speedup |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for k in trees:
            s = summary[k]
            lines.append(
                f"| {k[5:]} | {s.get('trees', s['n'])} | {s['n']} | {s['parallel_mean']:.1f} | {s['sequential_mean']:.1f} | {s['speedup']:.2f}x |"
            )
    if "tau" in summary:
        lines += [
            "",
            "**Terminator: hops per question by tau** (hop count: questions; one run at the highest tau, lower taus read off its terminator scores, see `nlqo.execute.terminator.hops_at`):",
            "",
            "| tau | n | mean hops | hop counts | EM |",
            "|---:|---:|---:|---|---:|",
        ]
        for t, s in summary["tau"].items():
            em_text = f"{s['em']:.2f}" if s["em"] is not None else "not run"
            lines.append(
                f"| {t} | {s['n']} | {s['mean_hops']:.2f} | {', '.join(f'{h}: {c}' for h, c in s['hops'].items())} | {em_text} |"
            )
        if "tau_check" in summary:
            c = summary["tau_check"]
            lines += [
                "",
                f"Check of the read-off: at tau 0.85 it gives the hop count the KV-reuse runs (made at 0.85) measured on {c['agree']} of {c['n']} questions.",
            ]
    return "\n".join(lines)


def run_meta(args: argparse.Namespace, k: int) -> dict:
    from nlqo.eval.runner import source_commit

    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "model": args.model + ("" if args.quantize == "none" else f" ({args.quantize})"),
        "dataset": args.questions.name.split(".")[0],
        "k": k,
        "nlqo_commit": source_commit(),
    }


def main() -> None:
    from nlqo.models import QUANTIZATIONS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--questions", type=Path, default=DATA / "hotpotqa_dev_199.jsonl.gz")
    parser.add_argument("--corpus", type=Path, default=DATA / "hotpotqa_dev_199_corpus.jsonl.gz")
    parser.add_argument("--index", type=Path, default=Path(tempfile.gettempdir()) / "nlqo-bench-hotpot-index")
    parser.add_argument("--limit", type=int, default=30, help="questions for the KV comparison")
    parser.add_argument("--tree-limit", type=int, default=8)
    parser.add_argument("--tau-limit", type=int, default=10)
    parser.add_argument("--parts", nargs="+", default=["kv", "tree", "tau"], choices=["kv", "tree", "tau"])
    parser.add_argument("--no-server", action="store_true")
    parser.add_argument(
        "--quantize",
        choices=QUANTIZATIONS,
        default="none",
        help="local model's linear layers (int8: about 2-4x faster on CPU)",
    )
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's own)")
    parser.add_argument(
        "--from-rows",
        action="store_true",
        help="measure nothing: rebuild execution.json and the docs from results/execution_rows.jsonl",
    )
    args = parser.parse_args()

    from nlqo.eval.datasets import QuestionSet
    from nlqo.config import EngineConfig
    from nlqo.execute.engine import Engine
    from nlqo.models import load_transformers

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.from_rows:
        rows = [
            json.loads(line) for line in (RESULTS / "execution_rows.jsonl").read_text().splitlines() if line.strip()
        ]
        previous = (
            json.loads((RESULTS / "execution.json").read_text()).get("meta")
            if (RESULTS / "execution.json").exists()
            else None
        )
        previous = previous or run_meta(args, k=3)
        by_part = {k: [r for r in rows if r["part"] == k] for k in ("kv", "tree", "tau")}
        summary = summarise(by_part["kv"], by_part["tree"], by_part["tau"])
        (RESULTS / "execution.json").write_text(json.dumps({"meta": previous, "summary": summary, **by_part}, indent=2))
        if by_part["kv"]:
            plot(by_part["kv"], RESULTS / "execution_kv.png")
        write_block(REPO / "docs" / "execution.md", "execution-benchmark", tables(summary, previous))
        return
    index = build_or_open_index(args.corpus, args.index)
    llm = load_transformers(args.model, quantize=args.quantize)
    engine = Engine.from_config(
        EngineConfig(measure_costs=False, relation_cache=False),
        llm=llm,
        retriever=index.retriever("hybrid"),
        embedder=index.embedder,
    )
    questions = QuestionSet.load(args.questions, limit=max(args.limit, args.tree_limit, args.tau_limit)).questions
    meta = run_meta(args, engine.k)
    RESULTS.mkdir(parents=True, exist_ok=True)
    parts: dict[str, list] = {"kv": [], "tree": [], "tau": []}

    def save() -> None:
        """Write what has been measured so far (each part lands as soon as it finishes)."""
        previous = json.loads((RESULTS / "execution.json").read_text()) if (RESULTS / "execution.json").exists() else {}
        rows = {k: parts[k] or previous.get(k, []) for k in parts}
        summary = summarise(rows["kv"], rows["tree"], rows["tau"])
        (RESULTS / "execution.json").write_text(json.dumps({"meta": meta, "summary": summary, **rows}, indent=2))
        if rows["kv"]:
            plot(rows["kv"], RESULTS / "execution_kv.png")
        write_block(REPO / "docs" / "execution.md", "execution-benchmark", tables(summary, meta))
        log("wrote benchmarks/results/execution.json and docs/execution.md")

    if "kv" in args.parts:
        parts["kv"] = part_kv(engine, questions[: args.limit], log)
        save()
    if "tree" in args.parts:
        proc, server = (None, None) if args.no_server else start_server(args.model)
        try:
            parts["tree"] = part_tree(engine, questions[: args.tree_limit], log, server)
        finally:
            if proc is not None:
                proc.terminate()
        save()
    if "tau" in args.parts:
        parts["tau"] = part_tau(engine, questions[: args.tau_limit], log)
        save()


if __name__ == "__main__":
    main()
