"""The local runtimes side by side on the default model: transformers float32, transformers int8
and llama.cpp (the same GGUF weights as they are).

    python benchmarks/bench_runtime.py                       # everything, resumes where it stopped
    python benchmarks/bench_runtime.py --part speed          # only the token-level figures
    python benchmarks/bench_runtime.py --part qa --limit 50  # only the questions
    python benchmarks/bench_runtime.py --part ceilings       # only the bare-loop ceilings, into speed.json

Two parts, each written to benchmarks/results/runtime/ and summarised in docs/models.md:

* **speed** (``speed.json``): prefill and decode tokens/s, time to first token after a warm
  scaffold (the linear template's prefix restored, a question appended), and total decode
  throughput of 1, 2 and 4 sequences sent at once. For llama.cpp, the decode rate is also compared
  with a bare low-level ``llama_decode`` loop on the same file (the ceiling any backend loop has).
* **qa** (``records.jsonl``, ``summary.json``): ``standard-rag`` and ``linear`` on the first
  ``--limit`` HotpotQA questions, every runtime on every question, interleaved question by question
  (so machine noise hits all runtimes alike), with EM, seconds per question, and how many answers
  are identical to float32's; paired bootstrap 95% intervals of each runtime's EM minus float32's.

All runtimes are loaded in this one process and run one at a time with the same thread count;
nothing else should run on the machine (llama.cpp slows badly when its threads share cores).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nlqo.eval.records import read_records  # noqa: E402  (a torn last line is cut off: that run goes again)

from _report import write_block  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "benchmarks" / "results" / "runtime"
RUNTIMES = {
    "float32": {"runtime": "transformers", "quantize": "none"},
    "int8": {"runtime": "transformers", "quantize": "int8"},
    "llama-cpp": {"runtime": "llama-cpp", "quantize": "none"},
}
REFERENCE = "float32"
FILLER = (
    "Barcelona hosted the 1992 Summer Olympics. Barcelona is the capital of Catalonia, an autonomous "
    "community of Spain. Madrid is the capital of Spain and the Manzanares river flows through it. "
)


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def load(label: str, model: str, threads: int):
    from nlqo.models import load_local

    spec = RUNTIMES[label]
    started = time.perf_counter()
    llm = load_local(model, runtime=spec["runtime"], quantize=spec["quantize"], threads=threads, progress=True)
    print(f"loaded {label} in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return llm


# --- speed ---------------------------------------------------------------------------------------


def median_of(values):
    return round(statistics.median(values), 3)


def speed(llm, *, prefill_tokens: int = 400, decode_tokens: int = 48, repeats: int = 3) -> dict:
    """Prefill and decode rates from uncached calls: a long prompt with one generated token, and
    a short prompt with ``decode_tokens`` (prefill time of the short prompt subtracted)."""
    filler_ids = llm.encode(FILLER * 40)[:prefill_tokens]
    filler = llm.decode(filler_ids)
    llm.complete("Warm-up:", max_tokens=2)
    prefill, decode = [], []
    for i in range(repeats):
        long = llm.complete(f"{i} {filler}", max_tokens=1).usage
        prefill.append(long.computed_prompt_tokens / (long.wall_ms / 1000))
        short_prompt = f"Rivers of Europe, part {i}:"
        first = llm.complete(short_prompt, max_tokens=1).usage
        many = llm.complete(short_prompt, max_tokens=decode_tokens, stop=()).usage
        steps = many.generated_tokens - first.generated_tokens
        decode.append(steps / max((many.wall_ms - first.wall_ms) / 1000, 1e-9))
    return {"prefill_tokens_per_s": median_of(prefill), "decode_tokens_per_s": median_of(decode)}


def first_token_after_warm_scaffold(llm, *, repeats: int = 3) -> dict:
    """Seconds to the first token of a question on the linear template's restored scaffold."""
    from nlqo.prompts.execution import LINEAR

    if not hasattr(llm, "session"):
        return {}
    llm = llm.fork() if hasattr(llm, "fork") else llm
    warm = llm.session(LINEAR.scaffold)
    warm.append(LINEAR.opening("Who wrote the novel on which the film Psycho was based?"))
    warm.generate(max_tokens=1)  # computes and saves the scaffold
    times, cached = [], []
    for i in range(repeats):
        session = llm.session(LINEAR.scaffold)
        session.append(LINEAR.opening(f"Question {i}: which country hosted the 1992 Summer Olympics?"))
        out = session.generate(max_tokens=1)
        times.append(out.usage.wall_ms / 1000)
        cached.append(out.usage.cached_prompt_tokens / out.usage.prompt_tokens)
    return {"ttft_warm_scaffold_s": median_of(times), "scaffold_cached_share": median_of(cached)}


def batched(llm, *, tokens: int = 32) -> dict:
    """Total decode throughput with 1, 2 and 4 requests sent at once (generated tokens per second)."""
    out = {}
    for n in (1, 2, 4):
        prompts = [f"Write a list of cities in country number {i + 1}:" for i in range(n)]
        handles = [llm.fork() if hasattr(llm, "fork") else llm for _ in prompts]
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=n) as pool:
            usages = list(
                pool.map(
                    lambda pair: pair[0].complete(pair[1], max_tokens=tokens, stop=()).usage, zip(handles, prompts)
                )
            )
        wall = time.perf_counter() - started
        out[str(n)] = round(sum(u.generated_tokens for u in usages) / wall, 2)
    out["speedup_4"] = round(out["4"] / out["1"], 3)
    out["speedup_2"] = round(out["2"] / out["1"], 3)
    return out


def low_level_decode(path: Path, threads: int, *, tokens: int = 48, seqs: int = 1) -> float:
    """Tokens/s of a bare greedy ``llama_decode`` loop (no bookkeeping): the ceiling of any backend.
    With ``seqs`` > 1, that many sequences decode together, one token each per ``llama_decode``
    (total tokens/s): the ceiling of batched decoding on this machine."""
    import ctypes

    import llama_cpp as ll
    import numpy as np

    from nlqo.llm.llamacpp import _init_backend

    _init_backend(ll)
    model = ll.llama_model_load_from_file(str(path).encode(), ll.llama_model_default_params())
    params = ll.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_threads, params.n_threads_batch = 2048, 512, threads, threads
    params.n_seq_max = seqs
    params.flash_attn_type = ll.LLAMA_FLASH_ATTN_TYPE_DISABLED
    ctx = ll.llama_init_from_model(model, params)
    vocab = ll.llama_model_get_vocab(model)
    n_vocab = ll.llama_vocab_n_tokens(vocab)
    text = b"Rivers of Europe:"
    buf = (ll.llama_token * 64)()
    n = ll.llama_tokenize(vocab, text, len(text), buf, 64, True, True)
    batch = ll.llama_batch_init(512, 0, 1)

    def logits(i):
        return int(np.argmax(np.ctypeslib.as_array(ll.llama_get_logits_ith(ctx, i), shape=(n_vocab,))))

    def prefill(toks, seq):
        for i, t in enumerate(toks):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = t, i, 1, i == len(toks) - 1
            batch.seq_id[i][0] = seq
        batch.n_tokens = len(toks)
        assert ll.llama_decode(ctx, batch) == 0
        return logits(len(toks) - 1)

    def step(toks, pos):  # one token for each sequence
        for i, t in enumerate(toks):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = t, pos, 1, True
            batch.seq_id[i][0] = i
        batch.n_tokens = len(toks)
        assert ll.llama_decode(ctx, batch) == 0
        return [logits(i) for i in range(len(toks))]

    next_tokens = [prefill(list(buf[:n]), s) for s in range(seqs)]
    started = time.perf_counter()
    for i in range(tokens):
        next_tokens = step(next_tokens, n + i)
    rate = seqs * tokens / (time.perf_counter() - started)
    ll.llama_batch_free(batch)
    ll.llama_free(ctx)
    ll.llama_model_free(model)
    del ctypes
    return round(rate, 2)


def decode_ceilings(path: Path, threads: int, *, repeats: int = 3) -> dict:
    """Why batching gains what it gains here: the bare loop's total tokens/s with 4 sequences in one
    batch (the most any backend's batching can reach) and with one thread instead of ``threads``
    (near 2x means decode is bound by arithmetic, not by reading the weights, so extra sequences in
    a batch cost almost as much as separate decodes). Medians of ``repeats`` runs: single runs of
    the bare loop varied by 30% on the shared 2-core machine."""
    one, four, single_thread = (
        statistics.median(low_level_decode(path, t, seqs=n) for _ in range(repeats))
        for t, n in ((threads, 1), (threads, 4), (1, 1))
    )
    return {
        "ceiling_repeats": repeats,
        "low_level_4_seqs_tokens_per_s": four,
        "low_level_batch_speedup_4": round(four / one, 3),
        "low_level_1_thread_tokens_per_s": single_thread,
        "thread_scaling": round(one / single_thread, 3),
    }


def run_speed(args, llms: dict) -> dict:
    result = {
        "date": now(),
        "model": args.model,
        "threads": args.threads,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "runtimes": {},
    }
    for label, llm in llms.items():
        print(f"speed: {label}", file=sys.stderr, flush=True)
        row = {**speed(llm), **first_token_after_warm_scaffold(llm)}
        row["batched_decode_tokens_per_s"] = batched(llm)
        if label == "llama-cpp":
            row["low_level_decode_tokens_per_s"] = low_level_decode(llm.runtime.path, args.threads)
            row["decode_vs_low_level"] = round(row["decode_tokens_per_s"] / row["low_level_decode_tokens_per_s"], 3)
            row.update(decode_ceilings(llm.runtime.path, args.threads))
        result["runtimes"][label] = row
        print(json.dumps(row), file=sys.stderr, flush=True)
    (args.out / "speed.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


# --- questions -----------------------------------------------------------------------------------


def run_qa(args, llms: dict) -> None:
    from nlqo.eval.datasets import QuestionSet
    from nlqo.eval.metrics import score
    from nlqo.eval.workspace import open_index
    from nlqo.strategies import build_strategy

    questions = QuestionSet.load(args.questions, limit=args.limit)
    index, _ = open_index(args.out, corpus=str(args.corpus), progress=True)
    retriever = index.retriever("hybrid")
    strategies = {
        (label, name): build_strategy(
            name, llm.fork() if hasattr(llm, "fork") else llm, retriever, embedder=index.embedder, k=3
        )
        for label, llm in llms.items()
        for name in args.strategies
    }
    path = args.out / "records.jsonl"
    done = {(r["qid"], r["runtime"], r["strategy"]) for r in read_records(path)}
    pairs = list(strategies)
    for i, question in enumerate(questions.questions):
        rotation = pairs[i % len(pairs) :] + pairs[: i % len(pairs)]
        for label, name in rotation:
            if (question.id, label, name) in done:
                continue
            started = time.perf_counter()
            result = strategies[(label, name)].run(question.question)
            seconds = time.perf_counter() - started
            stats = result.stats()
            record = {
                "qid": question.id,
                "index": i,
                "runtime": label,
                "strategy": name,
                "answer": result.answer,
                "em": score(result.answer, question.answers).em,
                "seconds": round(seconds, 3),
                "llm_calls": stats["llm_calls"],
                "prompt_tokens": stats["prompt_tokens"],
                "cached_prompt_tokens": stats["cached_prompt_tokens"],
                "generated_tokens": stats["generated_tokens"],
                "retrievals": stats["retrievals"],
            }
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
            print(
                f"[{i + 1}/{len(questions)}] {label:9} {name:12} {seconds:6.1f} s em={record['em']:.0f} {result.answer[:50]!r}",
                file=sys.stderr,
                flush=True,
            )


def prefill_share(records: list[dict], rate: dict) -> float:
    """The share of the model's time spent on prompt tokens, estimated from the records' token
    counts and the speed part's prefill and decode rates: where it is high, a runtime's speed-up
    per question is bounded by its prefill speed-up, however fast it decodes."""
    prefill = sum(r["prompt_tokens"] - r["cached_prompt_tokens"] for r in records) / rate["prefill_tokens_per_s"]
    decode = sum(r["generated_tokens"] for r in records) / rate["decode_tokens_per_s"]
    return round(prefill / max(prefill + decode, 1e-9), 3)


def summarize(args) -> dict:
    from nlqo.eval.metrics import bootstrap_diff

    records = read_records(args.out / "records.jsonl")
    by = {(r["qid"], r["runtime"], r["strategy"]): r for r in records}
    speed_path = args.out / "speed.json"
    rates = json.loads(speed_path.read_text())["runtimes"] if speed_path.exists() else {}
    summary = {"date": now(), "model": args.model, "threads": args.threads, "strategies": {}}
    for name in args.strategies:
        labels = [label for label in RUNTIMES if any(k[1] == label and k[2] == name for k in by)]
        qids = sorted({k[0] for k in by if k[2] == name and all((k[0], label, name) in by for label in labels)})
        rows = {}
        for label in labels:
            recs = [by[(q, label, name)] for q in qids]
            row = {
                "n": len(recs),
                "em": round(100 * sum(r["em"] for r in recs) / max(len(recs), 1), 1),
                "seconds_per_question": round(sum(r["seconds"] for r in recs) / max(len(recs), 1), 2),
                "retrievals_per_question": round(sum(r["retrievals"] for r in recs) / max(len(recs), 1), 2),
                "cached_prompt_share": round(
                    sum(r["cached_prompt_tokens"] for r in recs) / max(sum(r["prompt_tokens"] for r in recs), 1), 3
                ),
            }
            if label in rates:
                row["prefill_share"] = prefill_share(recs, rates[label])
            if label != REFERENCE and REFERENCE in labels:
                ref = [by[(q, REFERENCE, name)] for q in qids]
                same = sum(a["answer"].strip() == b["answer"].strip() for a, b in zip(recs, ref))
                interval = bootstrap_diff([r["em"] for r in recs], [r["em"] for r in ref], seed=0)
                row["answers_identical_to_float32"] = same
                row["em_minus_float32"] = [
                    round(100 * interval.mean, 1),
                    round(100 * interval.low, 1),
                    round(100 * interval.high, 1),
                ]
                row["right_to_wrong"] = sum(b["em"] > a["em"] for a, b in zip(recs, ref))
                row["wrong_to_right"] = sum(a["em"] > b["em"] for a, b in zip(recs, ref))
                row["speedup_vs_float32"] = round(
                    sum(r["seconds"] for r in ref) / max(sum(r["seconds"] for r in recs), 1e-9), 2
                )
            rows[label] = row
        summary["strategies"][name] = rows
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def report(args) -> str:
    """The markdown block docs/models.md shows."""
    lines = []
    speed_path = args.out / "speed.json"
    if speed_path.exists():
        sp = json.loads(speed_path.read_text())
        lines += [
            f"Token-level speed ({sp['model']}, {sp['threads']} threads, {sp['date'][:10]}; `benchmarks/results/runtime/speed.json`):",
            "",
            "| runtime | prefill tok/s | decode tok/s | first token after warm scaffold | scaffold served from cache | batched decode tok/s (1 / 2 / 4 seqs) | 4 seqs vs 1 |",
            "|---|---|---|---|---|---|---|",
        ]
        for label, row in sp["runtimes"].items():
            b = row["batched_decode_tokens_per_s"]
            ttft = f"{row['ttft_warm_scaffold_s']:.2f} s" if "ttft_warm_scaffold_s" in row else "-"
            share = f"{100 * row['scaffold_cached_share']:.0f}%" if "scaffold_cached_share" in row else "-"
            lines.append(
                f"| {label} | {row['prefill_tokens_per_s']:.1f} | {row['decode_tokens_per_s']:.1f} | {ttft} | {share} | "
                f"{b['1']:.1f} / {b['2']:.1f} / {b['4']:.1f} | {b['speedup_4']:.2f}x |"
            )
        ll = sp["runtimes"].get("llama-cpp", {})
        if "low_level_decode_tokens_per_s" in ll:
            lines += [
                "",
                f"llama.cpp decode through the backend: {ll['decode_tokens_per_s']:.1f} tok/s, "
                f"{100 * ll['decode_vs_low_level']:.0f}% of a bare `llama_decode` loop on the same file ({ll['low_level_decode_tokens_per_s']:.1f} tok/s).",
            ]
        if "low_level_batch_speedup_4" in ll:
            lines += [
                "",
                f"Batched decoding's ceiling here: the bare loop with 4 sequences in one batch reaches "
                f"{ll['low_level_4_seqs_tokens_per_s']:.1f} tok/s in all, {ll['low_level_batch_speedup_4']:.2f}x one sequence "
                f"(the backend: {ll['batched_decode_tokens_per_s']['speedup_4']:.2f}x); one thread instead of {sp['threads']} decodes "
                f"{ll['low_level_1_thread_tokens_per_s']:.1f} tok/s, so {sp['threads']} threads give {ll['thread_scaling']:.2f}x: "
                "decode is bound by arithmetic on this CPU more than by reading the weights, and a batch's extra "
                "sequences cost nearly what separate decodes cost."
                if ll["thread_scaling"] > 1.5
                else f"Batched decoding's ceiling here: the bare loop with 4 sequences in one batch reaches "
                f"{ll['low_level_4_seqs_tokens_per_s']:.1f} tok/s in all, {ll['low_level_batch_speedup_4']:.2f}x one sequence "
                f"(the backend: {ll['batched_decode_tokens_per_s']['speedup_4']:.2f}x); {sp['threads']} threads give "
                f"{ll['thread_scaling']:.2f}x one thread.",
            ]
    summary_path = args.out / "summary.json"
    if summary_path.exists():
        su = json.loads(summary_path.read_text())
        lines += [
            "",
            f"Questions (first HotpotQA dev questions, hybrid retrieval, k=3, {su['threads']} threads, runtimes interleaved per question; "
            "`benchmarks/results/runtime/records.jsonl`):",
            "",
            "| strategy | runtime | n | EM | s/question | speed-up vs float32 | answers identical to float32 | EM - float32 [95% CI] | right->wrong / wrong->right | prefill share of model time (est.) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, rows in su["strategies"].items():
            for label, row in rows.items():
                diff = row.get("em_minus_float32")
                lines.append(
                    f"| {name} | {label} | {row['n']} | {row['em']:.1f} | {row['seconds_per_question']:.1f} | "
                    f"{row.get('speedup_vs_float32', 1.0):.2f}x | "
                    + (
                        f"{row['answers_identical_to_float32']}/{row['n']} | {diff[0]:+.1f} [{diff[1]:+.1f}, {diff[2]:+.1f}] | {row['right_to_wrong']} / {row['wrong_to_right']} |"
                        if diff
                        else "- | - | - |"
                    )
                    + (f" {100 * row['prefill_share']:.0f}% |" if "prefill_share" in row else " - |")
                )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from nlqo.cli.common import DEFAULT_MODEL
    from nlqo.llm.llamacpp import default_threads

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--part", choices=("all", "speed", "qa", "ceilings", "report"), default="all")
    parser.add_argument(
        "--runtimes", default=",".join(RUNTIMES), help="comma-separated subset of " + ", ".join(RUNTIMES)
    )
    parser.add_argument("--strategies", default="standard-rag,linear")
    parser.add_argument("--questions", type=Path, default=DATA / "hotpotqa_dev_199.jsonl.gz")
    parser.add_argument("--corpus", type=Path, default=DATA / "hotpotqa_dev_199_corpus.jsonl.gz")
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--threads", type=int, default=default_threads())
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--no-docs", action="store_true", help="do not rewrite the block in docs/models.md")
    args = parser.parse_args(argv)
    args.strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    args.out.mkdir(parents=True, exist_ok=True)
    import torch

    torch.set_num_threads(args.threads)
    if args.part == "ceilings":
        path = args.out / "speed.json"
        data = json.loads(path.read_text())
        data["runtimes"]["llama-cpp"].update(
            decode_ceilings(load("llama-cpp", args.model, args.threads).runtime.path, args.threads)
        )
        data["ceilings_date"] = now()
        path.write_text(json.dumps(data, indent=2) + "\n")
    elif args.part != "report":
        labels = [s.strip() for s in args.runtimes.split(",") if s.strip()]
        llms = {label: load(label, args.model, args.threads) for label in labels}
        if args.part in ("all", "speed"):
            run_speed(args, llms)
        if args.part in ("all", "qa"):
            run_qa(args, llms)
    if (args.out / "records.jsonl").exists():
        summarize(args)
    text = report(args)
    print(text)
    if not args.no_docs:
        write_block(ROOT / "docs" / "models.md", "bench-runtime", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
