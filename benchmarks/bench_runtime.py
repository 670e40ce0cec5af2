"""The local runtimes side by side on the default model: transformers float32, transformers int8
and llama.cpp (the same GGUF weights as they are), in parts (``--part``):

* **speed**: prefill and decode tokens/s, time to first token after a warm scaffold (the linear
  template's prefix restored, a question appended), and total decode throughput of 1, 2 and 4
  sequences sent at once. For llama.cpp, the decode rate is also compared with a bare low-level
  ``llama_decode`` loop on the same file (the ceiling any backend loop has), with 4 sequences in one
  batch and with one thread (medians of 3: single runs varied by 30% on the shared 2-core machine).
* **qa**: ``standard-rag`` and ``linear`` on the first ``--limit`` HotpotQA questions, every runtime
  on every question, interleaved, compared with float32 question by question.
* **quantize** (transformers only): float32 vs int8 linear layers in bare forward passes, prefill and
  decode timed, whether 24 greedy tokens of a chat answer match float32's, and whether prefilling the
  prompt in two pieces gives the same tokens as at once (int8 computes activation scales per forward
  pass, so KV reuse is not bit-exact there).

All runtimes are loaded in this one process and run one at a time with the same thread count;
nothing else should run on the machine (llama.cpp slows badly when its threads share cores).
"""

import functools
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nlqo.config import DEFAULT_MODEL
from nlqo.eval.datasets import QuestionSet
from nlqo.eval.experiment import DATA, Block, Experiment, Option, main, torch_threads
from nlqo.eval.metrics import bootstrap_diff
from nlqo.eval.runner import run_record
from nlqo.eval.workspace import open_index
from nlqo.runtime.llm.base import ChatMessage
from nlqo.runtime.llm.llamacpp import _init_backend, default_threads
from nlqo.runtime.models import load_local
from nlqo.runtime.prompts.execution import LINEAR
from nlqo.eval.strategy import build_strategy

RUNTIMES = {"float32": ("transformers", "none"), "int8": ("transformers", "int8"), "llama-cpp": ("llama-cpp", "none")}
REFERENCE = "float32"
FILLER = (
    "Barcelona hosted the 1992 Summer Olympics. Barcelona is the capital of Catalonia, an autonomous "
    "community of Spain. Madrid is the capital of Spain and the Manzanares river flows through it. "
)
QUESTION = "Which river flows through the capital of the country that hosted the 1992 Summer Olympics?"


def speed(llm, *, prefill_tokens: int = 400, decode_tokens: int = 48, repeats: int = 3) -> dict:
    """Prefill and decode rates from uncached calls: a long prompt with one generated token, and
    a short prompt with ``decode_tokens`` (prefill time of the short prompt subtracted)."""
    filler = llm.decode(llm.encode(FILLER * 40)[:prefill_tokens])
    llm.complete("Warm-up:", max_tokens=2)
    prefill, decode = [], []
    for i in range(repeats):
        long = llm.complete(f"{i} {filler}", max_tokens=1).usage
        prefill.append(long.computed_prompt_tokens / (long.wall_ms / 1000))
        first = llm.complete(f"Rivers of Europe, part {i}:", max_tokens=1).usage
        many = llm.complete(f"Rivers of Europe, part {i}:", max_tokens=decode_tokens, stop=()).usage
        decode.append((many.generated_tokens - first.generated_tokens) / max((many.wall_ms - first.wall_ms) / 1000, 1e-9))  # fmt: skip
    return {"prefill_tokens_per_s": statistics.median(prefill), "decode_tokens_per_s": statistics.median(decode)}


def first_token_after_warm_scaffold(llm, *, repeats: int = 3) -> dict:
    """Seconds to the first token of a question on the linear template's restored scaffold."""
    llm = llm.fork()
    warm = llm.session(LINEAR.scaffold)
    warm.append(LINEAR.opening("Who wrote the novel on which the film Psycho was based?"))
    warm.generate(max_tokens=1)  # computes and saves the scaffold
    times, cached = [], []
    for i in range(repeats):
        session = llm.session(LINEAR.scaffold)
        session.append(LINEAR.opening(f"Question {i}: which country hosted the 1992 Summer Olympics?"))
        usage = session.generate(max_tokens=1).usage
        times.append(usage.wall_ms / 1000)
        cached.append(usage.cached_prompt_tokens / usage.prompt_tokens)
    return {"ttft_warm_scaffold_s": statistics.median(times), "scaffold_cached_share": statistics.median(cached)}


def batched(llm, n: int, *, tokens: int = 32) -> float:
    """Total decode throughput with ``n`` requests sent at once (generated tokens per second)."""
    jobs = [(llm.fork(), f"Write a list of cities in country number {i + 1}:") for i in range(n)]
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=n) as pool:
        usages = list(pool.map(lambda job: job[0].complete(job[1], max_tokens=tokens, stop=()).usage, jobs))
    return sum(u.generated_tokens for u in usages) / (time.perf_counter() - started)


def bare_decode(path: Path, threads: int, *, tokens: int = 48, seqs: int = 1) -> float:
    """Total tokens/s of a bare greedy ``llama_decode`` loop decoding ``seqs`` sequences together,
    one token each per call (no bookkeeping): the ceiling of any backend on this machine."""
    import llama_cpp as ll
    import numpy as np

    _init_backend(ll)
    model = ll.llama_model_load_from_file(str(path).encode(), ll.llama_model_default_params())
    params = ll.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_threads, params.n_threads_batch = 2048, 512, threads, threads
    params.n_seq_max, params.flash_attn_type = seqs, ll.LLAMA_FLASH_ATTN_TYPE_DISABLED
    ctx, vocab = ll.llama_init_from_model(model, params), ll.llama_model_get_vocab(model)
    buf = (ll.llama_token * 64)()
    n = ll.llama_tokenize(vocab, b"Rivers of Europe:", 17, buf, 64, True, True)
    batch = ll.llama_batch_init(512, 0, 1)

    def decode(items: list[tuple[int, int, int, bool]]) -> list[int]:  # (token, position, sequence, logits?)
        for i, (token, pos, seq, wanted) in enumerate(items):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, pos, 1, wanted
            batch.seq_id[i][0] = seq
        batch.n_tokens = len(items)
        assert ll.llama_decode(ctx, batch) == 0
        logits = (ll.llama_get_logits_ith(ctx, i) for i, item in enumerate(items) if item[3])
        return [int(np.argmax(np.ctypeslib.as_array(p, shape=(ll.llama_vocab_n_tokens(vocab),)))) for p in logits]

    nexts = [decode([(t, i, s, i == n - 1) for i, t in enumerate(buf[:n])])[0] for s in range(seqs)]
    started = time.perf_counter()
    for i in range(tokens):
        nexts = decode([(t, n + i, s, True) for s, t in enumerate(nexts)])
    rate = seqs * tokens / (time.perf_counter() - started)
    ll.llama_batch_free(batch), ll.llama_free(ctx), ll.llama_model_free(model)
    return rate


def greedy(llm, ids: list[int], n: int, split: int | None = None) -> list[int]:
    """``n`` greedy tokens after ``ids``, prefilled at once or in two pieces at ``split``."""
    import torch

    with torch.inference_mode():
        cache = llm._new_cache()
        if split:
            llm._forward(cache, ids[:split])
        logits = llm._forward(cache, ids[split or 0 :])
        out = []
        for _ in range(n):
            out.append(int(torch.argmax(logits)))
            logits = llm._forward(cache, [out[-1]])
    return out


def quantized(llm, model: str, prefill: int = 500, decode: int = 16) -> dict:
    """A transformers model's bare forward passes: ``prefill`` prompt tokens at once, then ``decode``
    single-token steps; its greedy chat answer, and whether it survives a prefill in two pieces."""
    import torch

    filler = llm.encode(FILLER * 200)[:prefill]
    with torch.inference_mode():
        llm._forward(llm._new_cache(), filler[:32])  # warm-up
        cache, started = llm._new_cache(), time.perf_counter()
        llm._forward(cache, filler)
        prefill_s, started = time.perf_counter() - started, time.perf_counter()
        for _ in range(decode):
            llm._forward(cache, [filler[0]])
        decode_s = (time.perf_counter() - started) / decode
    prompt = llm.encode(llm.format_chat([ChatMessage("system", FILLER), ChatMessage("user", QUESTION)]))
    answer = greedy(llm, prompt, 24)
    return {
        **{"model": model, "prefill": prefill, "decode": decode},
        **{"prefill_tok_s": prefill / prefill_s, "decode_s_per_token": decode_s, "answer_ids": answer},
        "answer": llm.decode(answer),
        "same_when_prefilled_in_two_pieces": greedy(llm, prompt, 24, len(prompt) // 2) == answer,
        **{"torch": torch.__version__, "threads": torch.get_num_threads(), "load_average": os.getloadavg()[0]},
    }


@functools.cache
def loaded(label: str, model: str, threads: int):
    runtime, quantize = RUNTIMES[label]
    return load_local(model, runtime=runtime, quantize=quantize, threads=threads, progress=True)


def cases(args) -> list[dict]:
    out = [{"part": p} for p in ("speed", "quantize") if args.part in ("all", p)]
    if args.part in ("all", "qa"):
        questions = QuestionSet.load(args.questions, limit=args.limit).questions
        out += [{"part": "qa", "qid": q.id, "index": i, "strategy": s} for i, q in enumerate(questions) for s in args.strategies]  # fmt: skip
    return out


def setup(args):
    torch_threads(args)
    args.by_id = {q.id: q for q in QuestionSet.load(args.questions, limit=args.limit).questions}
    args.index = open_index(args.out, corpus=str(args.corpus), progress=True)[0] if args.part in ("all", "qa") else None
    args.built = {}  # (runtime, strategy name) -> the strategy
    return args


def measure(args, case: dict, label: str) -> dict:
    llm = loaded(label, args.model, args.threads)
    if case["part"] == "speed":
        row = {**speed(llm), **first_token_after_warm_scaffold(llm)}
        row["batched_decode_tokens_per_s"] = {str(n): batched(llm, n) for n in (1, 2, 4)}
        if label == "llama-cpp":
            path, t = llm.runtime.path, args.threads
            row["low_level_decode_tokens_per_s"] = bare_decode(path, t)
            for field, threads, seqs in (("low_level_4_seqs", t, 4), ("low_level_1_thread", 1, 1), ("low_level_1_seq", t, 1)):  # fmt: skip
                runs = [bare_decode(path, threads, seqs=seqs) for _ in range(3)]
                row[f"{field}_tokens_per_s"] = statistics.median(runs)
        return row
    if case["part"] == "quantize":
        return quantized(llm, args.model)
    name, index = case["strategy"], args.index
    if (label, name) not in args.built:  # each on its own fork of the model, kept for the run
        args.built[label, name] = build_strategy(
            name, llm.fork(), index.retriever("hybrid"), embedder=index.embedder, k=3
        )
    return run_record(args.built[label, name], args.by_id[case["qid"]], case["index"], name)


def speed_table(rows: list[dict], run: dict) -> list[str]:
    lines = [
        f"Token-level speed ({run['model']}, {run['threads']} threads, {run['started'][:10]}; `benchmarks/results/runtime/records.jsonl`):",
        "",
        "| runtime | prefill tok/s | decode tok/s | first token after warm scaffold | scaffold served from cache | batched decode tok/s (1 / 2 / 4 seqs) | 4 seqs vs 1 |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: list(RUNTIMES).index(r["runtime"])):
        b = r["batched_decode_tokens_per_s"]
        ttft = f"{r['ttft_warm_scaffold_s']:.2f} s" if "ttft_warm_scaffold_s" in r else "-"
        share = f"{100 * r['scaffold_cached_share']:.0f}%" if "scaffold_cached_share" in r else "-"
        lines.append(
            f"| {r['runtime']} | {r['prefill_tokens_per_s']:.1f} | {r['decode_tokens_per_s']:.1f} | {ttft} | {share} | "
            f"{b['1']:.1f} / {b['2']:.1f} / {b['4']:.1f} | {b['4'] / b['1']:.2f}x |"
        )
    if ll := next((r for r in rows if "low_level_decode_tokens_per_s" in r), None):
        bare, four, one_thread = (ll[f"low_level_{k}_tokens_per_s"] for k in ("decode", "4_seqs", "1_thread"))
        one, scaling, t = ll["low_level_1_seq_tokens_per_s"], ll["low_level_1_seq_tokens_per_s"] / one_thread, run["threads"]  # fmt: skip
        b = ll["batched_decode_tokens_per_s"]
        lines += [
            "",
            f"llama.cpp decode through the backend: {ll['decode_tokens_per_s']:.1f} tok/s, "
            f"{100 * ll['decode_tokens_per_s'] / bare:.0f}% of a bare `llama_decode` loop on the same file ({bare:.1f} tok/s).",
            "",
            f"Batched decoding's ceiling here: the bare loop with 4 sequences in one batch reaches {four:.1f} tok/s in all, "
            f"{four / one:.2f}x one sequence (the backend: {b['4'] / b['1']:.2f}x); "
            + (
                f"one thread instead of {t} decodes {one_thread:.1f} tok/s, so {t} threads give {scaling:.2f}x: decode is "
                "bound by arithmetic on this CPU more than by reading the weights, and a batch's extra sequences cost "
                "nearly what separate decodes cost."
                if scaling > 1.5
                else f"{t} threads give {scaling:.2f}x one thread."
            ),
        ]
    return lines


def qa_table(records: list[dict], rates: dict, run: dict) -> list[str]:
    lines = [
        "",
        f"Questions (first HotpotQA dev questions, hybrid retrieval, k=3, {run['threads']} threads, runtimes interleaved per question; "
        "`benchmarks/results/runtime/records.jsonl`):",
        "",
        "| strategy | runtime | n | EM | s/question | speed-up vs float32 | answers identical to float32 | EM - float32 [95% CI] | right->wrong / wrong->right | prefill share of model time (est.) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    by = {(r["qid"], r["runtime"], r["strategy"]): r for r in records}
    for name in dict.fromkeys(r["strategy"] for r in records):
        labels = [label for label in RUNTIMES if any(k[1:] == (label, name) for k in by)]
        qids = sorted({k[0] for k in by if k[2] == name and all((k[0], label, name) in by for label in labels)})
        ref = [by[(q, REFERENCE, name)] for q in qids]
        for label in labels:
            recs, n = [by[(q, label, name)] for q in qids], len(qids)
            em, seconds = round(100 * sum(r["em"] for r in recs) / max(n, 1), 1), sum(r["seconds"] for r in recs)
            cells = [name, label, n, f"{em:.1f}", f"{round(seconds / max(n, 1), 2):.1f}"]
            cells.append(f"{round(sum(r['seconds'] for r in ref) / max(seconds, 1e-9), 2):.2f}x")
            if label == REFERENCE:
                cells += ["-", "-", "-"]
            else:
                same = sum(a["answer"].strip() == b["answer"].strip() for a, b in zip(recs, ref))
                d = bootstrap_diff([r["em"] for r in recs], [r["em"] for r in ref], seed=0)
                worse, better = sum(b["em"] > a["em"] for a, b in zip(recs, ref)), sum(a["em"] > b["em"] for a, b in zip(recs, ref))  # fmt: skip
                cells += [f"{same}/{n}", f"{round(100 * d.mean, 1):+.1f} [{round(100 * d.low, 1):+.1f}, {round(100 * d.high, 1):+.1f}]", f"{worse} / {better}"]  # fmt: skip
            if rate := rates.get(label):  # the share of model time on prompt tokens, from token counts and rates
                computed = sum(r["prompt_tokens"] - r["cached_prompt_tokens"] for r in recs)
                prefill = computed / rate["prefill_tokens_per_s"]
                decode = sum(r["generated_tokens"] for r in recs) / rate["decode_tokens_per_s"]
                cells.append(f"{100 * round(prefill / max(prefill + decode, 1e-9), 3):.0f}%")
            else:
                cells.append("-")
            lines.append("| " + " | ".join(map(str, cells)) + " |")
    return lines


def quantize_table(records: list[dict], run: dict) -> str:
    rows = sorted((r for r in records if r["part"] == "quantize"), key=lambda r: list(RUNTIMES).index(r["runtime"]))
    base = rows[0]
    lines = [
        f"Measured {base['measured_at'][:10]} on {run.get('processor') or run['machine']}, {run['cpus']} cores, load average {base['load_average']:.1f}, "
        f"torch {base['torch']}, {base['threads']} threads, model `{base['model']}`, {base['prefill']}-token prefill, "
        f"{base['decode']} decode steps (`python benchmarks/bench_runtime.py --part quantize`).",
        "",
        "| linear layers | prefill tok/s | decode s/token | speed-up prefill / decode | same 24-token answer as float32 | same tokens when prefilled in two pieces | answer |",
        "|---|---:|---:|---:|---|---|---|",
    ]
    for r in rows:
        speed = f"{r['prefill_tok_s'] / base['prefill_tok_s']:.2f}x / {base['decode_s_per_token'] / r['decode_s_per_token']:.2f}x"
        answer = r["answer"].split("<|")[0].replace("\n", " ").replace("|", "/").strip()  # up to the end-of-turn marker
        same = "yes" if r["answer_ids"] == base["answer_ids"] else "no"
        chunked = "yes" if r["same_when_prefilled_in_two_pieces"] else "no"
        lines.append(f"| {r['runtime']} | {r['prefill_tok_s']:.1f} | {r['decode_s_per_token']:.3f} | {speed} | {same} | {chunked} | {answer} |")  # fmt: skip
    return "\n".join(lines)


def table(records: list[dict], run: dict) -> str:
    speeds = [r for r in records if r["part"] == "speed"]
    qa = [r for r in records if r["part"] == "qa"]
    lines = speed_table(speeds, run) if speeds else []
    lines += qa_table(qa, {r["runtime"]: r for r in speeds}, run) if qa else []
    return "\n".join(lines) + "\n"


EXPERIMENT = Experiment(
    name="runtime",
    blocks=(Block("docs/models.md", "bench-runtime", table), Block("docs/models.md", "bench-quantize", quantize_table)),
    cases=cases,
    configs=lambda args: args.runtimes.split(","),
    config_field="runtime",
    applies=lambda case, runtime: case["part"] != "quantize" or RUNTIMES[runtime][0] == "transformers",
    setup=setup,
    measure=measure,
    options=(
        Option.of("--model", default=DEFAULT_MODEL),
        Option.of("--part", choices=("all", "speed", "qa", "quantize"), default="all"),
        Option.of("--runtimes", default=",".join(RUNTIMES), help="comma-separated subset of " + ", ".join(RUNTIMES)),
        Option.of("--strategies", nargs="+", default=["standard-rag", "linear"]),
        Option.of("--questions", type=Path, default=DATA / "hotpotqa_dev_199.jsonl.gz"),
        Option.of("--corpus", type=Path, default=DATA / "hotpotqa_dev_199_corpus.jsonl.gz"),
        Option.of("--limit", type=int, default=50),
        Option.of("--threads", type=int, default=default_threads()),
    ),
)

if __name__ == "__main__":
    raise SystemExit(main(EXPERIMENT))
