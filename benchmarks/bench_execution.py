"""The linear template's execution side by side: KV reuse on/off, hops by tau.

kv: with and without KV reuse, the order alternating per question. tau: one run at the highest tau, lower
taus' hop counts read off its terminator scores (`hops_at`). Parallel vs one-at-a-time trees are now the
`parallel` ablation (`make ablation-parallel`); the tree table renders this script's earlier records.
"""

import statistics as st
import time
from collections import Counter
from pathlib import Path

from nlqo.eval.datasets import QuestionSet
from nlqo.eval.experiment import DATA, Block, Experiment, Option, main
from nlqo.eval.metrics import exact_match
from nlqo.eval.workspace import open_index
from nlqo.execution.linear import LinearExecutor
from nlqo.execution.terminator import hops_at
from nlqo.runtime.models import load_transformers

TAUS = (0.8, 0.85, 0.9)
STATS = ("generated_tokens", "prompt_tokens", "cached_prompt_tokens", "hops", "llm_calls")


def cases(args) -> list[dict]:
    qs = QuestionSet.load(args.questions, limit=max(args.limit, args.tau_limit)).questions
    kv = [{"part": "kv", "question": q.id, "variant": v} for i, q in enumerate(qs[: args.limit]) for v in ("kv_on", "kv_off")[:: 1 - 2 * (i % 2)]]  # fmt: skip
    return kv + [{"part": "tau", "question": q.id, "tau": t} for q in qs[: args.tau_limit] for t in TAUS]


def setup(args) -> dict:
    """One executor per variant, kept for the run (as `nlqo ask` keeps its scaffold prefilled once)."""
    index = open_index(args.out, corpus=str(args.corpus))[0]  # OUT/index, reused while the corpus is the same
    questions = {q.id: q for q in QuestionSet.load(args.questions).questions}
    linear = dict(llm=load_transformers(args.model, quantize=args.quantize), retriever=index.retriever("hybrid"), embedder=index.embedder)  # fmt: skip
    executors = {"kv_on": LinearExecutor(**linear), "kv_off": LinearExecutor(**linear, kv_reuse=False), "tau": LinearExecutor(**linear, tau=max(TAUS))}  # fmt: skip
    return {**executors, "questions": questions, "runs": {}}


def measure(context: dict, case: dict, model: str) -> dict:
    q = context["questions"][case["question"]]
    started = time.perf_counter()
    if case["part"] == "kv":
        r = context[case["variant"]].run(q.question)
        seconds, s = time.perf_counter() - started, r.stats()
        return {"seconds": seconds, "em": exact_match(r.answer, q.answers), "answer": r.answer, **{k: s[k] for k in STATS}}  # fmt: skip
    if q.id not in context["runs"]:
        r = context["tau"].run(q.question)
        context["runs"][q.id] = r, [s.terminator_score for s in r.trace if s.kind in ("retrieve", "stop") and s.terminator_score is not None]  # fmt: skip
    (r, scores), top = context["runs"][q.id], case["tau"] == max(TAUS)
    return {"hops": r.hops if top else hops_at(scores, case["tau"], r.hops), "measured": top, "em": exact_match(r.answer, q.answers) if top else None, "scores": scores}  # fmt: skip


def kv_table(kv: list[dict]) -> list[str]:
    out = ["", "**Linear template, KV reuse on vs off** (same questions, interleaved):", "", "| variant | n | s / question | generated tokens | prompt tokens | computed | from cache | share from cache | hops | EM |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    share, mean = {}, {}
    for v in ("kv_on", "kv_off"):
        rs = [r for r in kv if r["variant"] == v]
        m = mean[v] = {k: st.mean(r[k] for r in rs) for k in ("seconds", *STATS, "em")}
        share[v] = sum(r["cached_prompt_tokens"] for r in rs) / max(1, sum(r["prompt_tokens"] for r in rs))
        out.append(f"| {v} | {len(rs)} | {m['seconds']:.1f} | {m['generated_tokens']:.0f} | {m['prompt_tokens']:.0f} | {m['prompt_tokens'] - m['cached_prompt_tokens']:.0f} | {m['cached_prompt_tokens']:.0f} | {share[v]:.0%} | {m['hops']:.2f} | {m['em']:.2f} |")  # fmt: skip
    pairs = [p for p in ({v: r for r in kv for v in [r["variant"]] if r["question"] == q} for q in {r["question"]: 0 for r in kv}) if len(p) == 2]  # fmt: skip
    same = [p for p in pairs if p["kv_on"]["hops"] == p["kv_off"]["hops"]]
    per_hop = {v: sum(p[v]["seconds"] for p in pairs) / max(1, sum(max(1, p[v]["hops"]) for p in pairs)) for v in mean}
    sh = f"{sum(p['kv_off']['seconds'] for p in same) / sum(p['kv_on']['seconds'] for p in same):.2f}x" if same else "n/a"  # fmt: skip
    n, answer = len(pairs), sum(p["kv_on"]["answer"] == p["kv_off"]["answer"] for p in pairs)
    return out + ["", f"KV reuse: {share['kv_on']:.0%} of prompt tokens served from cache (target at least 60%); time per question {mean['kv_off']['seconds'] / mean['kv_on']['seconds']:.2f}x faster with reuse.", "", f"Per question: faster with reuse on {sum(p['kv_on']['seconds'] < p['kv_off']['seconds'] for p in pairs)} of {n}; same answer on {answer} of {n}; same hop count on {len(same)} of {n} (on those, {sh} faster with reuse); seconds per hop {per_hop['kv_on']:.1f} with reuse vs {per_hop['kv_off']:.1f} without."]  # fmt: skip


def tree_table(tree: list[dict]) -> list[str]:
    out = ["", "**Parallel tree vs one node at a time** (same trees, each timed in both orders: a second run of a tree can find its prompts in the backend's cache; trees timed in one order only are left out):", "", "| backend | trees | timed pairs | parallel s | one-at-a-time s | speedup |", "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for backend in sorted({r["backend"] for r in tree}):
        firsts = Counter((r["question"], r["variant"]) for r in tree if r["backend"] == backend and r["first"])
        both = {q for q, _ in firsts if len({v for p, v in firsts if p == q}) == 2}
        by = {v: [r["seconds"] for r in tree if r["backend"] == backend and r["question"] in both and r["variant"] == v] for v in ("parallel", "sequential")}  # fmt: skip
        out.append(f"| {backend} | {len(both)} | {len(by['parallel'])} | {st.mean(by['parallel']):.1f} | {st.mean(by['sequential']):.1f} | {sum(by['sequential']) / sum(by['parallel']):.2f}x |")  # fmt: skip
    return out


def tau_table(tau: list[dict], kv: list[dict]) -> list[str]:
    out = ["", "**Terminator: hops per question by tau** (hop count: questions; one run at the highest tau, lower taus read off its terminator scores, see `nlqo.execution.terminator.hops_at`):", "", "| tau | n | mean hops | hop counts | EM |", "|---:|---:|---:|---|---:|"]  # fmt: skip
    for t in sorted({r["tau"] for r in tau}):
        rs, ems = [r for r in tau if r["tau"] == t], [r["em"] for r in tau if r["tau"] == t and r["em"] is not None]
        counts = ", ".join(f"{h}: {c}" for h, c in sorted(Counter(r["hops"] for r in rs).items()))
        out.append(f"| {t} | {len(rs)} | {st.mean(r['hops'] for r in rs):.2f} | {counts} | {f'{st.mean(ems):.2f}' if ems else 'not run'} |")  # fmt: skip
    kv_on = {r["question"]: r["hops"] for r in kv if r["variant"] == "kv_on"}
    if derived := [r for r in tau if not r["measured"] and r["tau"] == 0.85 and r["question"] in kv_on]:
        agree = sum(r["hops"] == kv_on[r["question"]] for r in derived)
        out += ["", f"Check of the read-off: at tau 0.85 it gives the hop count the KV-reuse runs (made at 0.85) measured on {agree} of {len(derived)} questions."]  # fmt: skip
    return out


def table(rows: list[dict], run: dict) -> str:
    part = {p: [r for r in rows if r["part"] == p] for p in ("kv", "tree", "tau")}
    model = run["model"] + ("" if run["quantize"] == "none" else f" ({run['quantize']})")
    head = f"Measured {run['started'][:10]} on {run['machine']}, {run['cpus']} cores, model `{model}`, {Path(run['questions']).name.split('.')[0]} with its corpus, k=3, hybrid retrieval (`python benchmarks/bench_execution.py`)."  # fmt: skip
    return "\n".join([head, *(kv_table(part["kv"]) if part["kv"] else []), *(tree_table(part["tree"]) if part["tree"] else []), *(tau_table(part["tau"], part["kv"]) if part["tau"] else [])])  # fmt: skip


EXPERIMENT = Experiment(
    name="execution",
    blocks=(Block("docs/execution.md", "execution-benchmark", table),),
    cases=cases,
    configs=lambda args: [args.model],
    config_field="model",
    setup=setup,
    measure=measure,
    options=(
        Option.of("--model", default="qwen2.5-coder-0.5b"),
        Option.of("--quantize", choices=("none", "int8"), default="none", help="the local model's linear layers"),
        Option.of("--questions", type=Path, default=DATA / "hotpotqa_dev_199.jsonl.gz"),
        Option.of("--corpus", type=Path, default=DATA / "hotpotqa_dev_199_corpus.jsonl.gz"),
        Option.of("--limit", type=int, default=30, help="questions for the KV comparison"),
        Option.of("--tau-limit", type=int, default=10, help="questions for the tau comparison"),
    ),
)

if __name__ == "__main__":
    raise SystemExit(main(EXPERIMENT))
