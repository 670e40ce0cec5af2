"""llama.cpp's CPU kernels side by side (issue 54): prefill and decode tokens/s of one model on each
llama-cpp-python build and CPU variant, and the shipped weights against requantized ones, with the
greedy answers compared.

Configurations (``--configs``, comma-separated; the first is the reference the others are compared with):

* ``avx2``: the AVX2-only build, its CPU backend linked in (``--avx2-python``: a Python whose
  llama_cpp is that build, default the repository's ``.venv``);
* ``auto``: the build with runtime-dispatched CPU variants (``--variants-python``), choosing the best
  variant that runs here (:mod:`nlqo.runtime.llm.llamacpp.variants`);
* a variant's name (``haswell`` = AVX2, ``skylakex`` = AVX-512, ``icelake``, ``zen4`` = AVX-512
  VBMI/VNNI/BF16, ...): the same build with that variant forced (``NLQO_LLAMA_CPU_VARIANT``);
* any of them with ``@Q4_0`` or ``@Q8_0``: on the weights requantized from the shipped file (once, kept
  in ``$NLQO_CACHE/requantized``) by llama.cpp's ``llama_model_quantize``.

Each configuration runs in a process of its own, loaded once and kept for the run (a process keeps
the CPU variant it started with); only one measures at a time, with ``--threads`` threads. Cases:

* ``speed``, ``--repeats`` times: a ``--prompt-tokens`` prompt prefilled (nothing reused) and
  ``--decode-tokens`` greedy tokens decoded; the configurations alternate on every repeat, their
  order rotating, so a machine's drift falls on all alike; the table gives medians;
* ``answers``: the first ``--questions`` HotpotQA dev questions as standard-rag prompts (k=3: the
  supporting passages and a distractor, as the dataset lists them), greedy, each configuration's
  answer compared with the reference's.

Every record carries the CPU's model and its SIMD flags (/proc/cpuinfo), which the table states.
Nothing else should run on the machine while it measures. For example::

    python benchmarks/kernels.py --variants-python /tmp/kvar/venv/bin/python \
        --configs avx2,auto,haswell,skylakex,icelake,zen4,auto@Q4_0,auto@Q8_0

A worker's Python needs llama_cpp and nlqo's core dependencies (attrs, lark, numpy); nlqo itself
comes from this checkout (``PYTHONPATH``), and the model file from the parent.
"""

from __future__ import annotations

import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FILLER = (
    "Barcelona hosted the 1992 Summer Olympics. Barcelona is the capital of Catalonia, an autonomous "
    "community of Spain. Madrid is the capital of Spain and the Manzanares river flows through it. "
)
SIMD = ("avx", "avx2", "fma", "f16c", "avx_vnni", "avx512", "amx")
"""The /proc/cpuinfo flags recorded (those starting with one of these)."""
QUANTS = {"Q4_0": 2, "Q8_0": 7}
"""llama.cpp's ``LLAMA_FTYPE_MOSTLY_*`` of the weight types a configuration may requantize to."""


def cpu() -> dict:
    """The CPU's model name and SIMD flags."""
    try:
        first = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").split("\n\n")[0]
    except OSError:
        first = ""
    fields = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in first.splitlines())}
    flags = sorted(f for f in fields.get("flags", "").split() if f.startswith(SIMD))
    return {"cpu_model": fields.get("model name", ""), "cpu_flags": " ".join(flags)}


# --- the worker: one configuration in a process of its own (needs only llama_cpp and nlqo's runtime) ---


def worker(model: str, threads: int) -> int:
    """Answer the parent's requests (one JSON line each on stdin) with one JSON line each on stdout."""
    import llama_cpp

    from nlqo.runtime.llm.base import ChatMessage
    from nlqo.runtime.llm.llamacpp import LlamaCppLLM, cpu_variant

    llm = LlamaCppLLM.load(model, threads=threads)
    llm.complete("Warm-up:", max_tokens=2)
    reply = {"variant": cpu_variant() or "built-in", "llama_cpp": llama_cpp.__version__, "model_file": Path(model).name}
    print(json.dumps(reply), flush=True)
    for line in sys.stdin:
        ask = json.loads(line)
        if ask["op"] == "speed":
            out = speed(llm, ask["prompt_tokens"], ask["decode_tokens"], ask["repeat"])
        else:
            messages = [ChatMessage(m["role"], m["content"]) for m in ask["messages"]]
            answer = llm.chat(messages, max_tokens=ask["max_tokens"])
            out = {"answer": answer.text, "prompt_tokens": answer.usage.prompt_tokens, "seconds": answer.usage.wall_ms / 1000}  # fmt: skip
        print(json.dumps(out), flush=True)
    return 0


def speed(llm, prompt_tokens: int, decode_tokens: int, repeat: int) -> dict:
    """Prefill tokens/s of a ``prompt_tokens`` prompt (one token generated, nothing reused) and decode
    tokens/s of ``decode_tokens`` greedy tokens (the prefill and first token of the short prompt subtracted)."""
    ids = llm.encode(f"Part {repeat}. " + FILLER * (1 + prompt_tokens // 30), special=True)[:prompt_tokens]
    long, _ = llm.generate_ids(ids, max_tokens=1)
    short = llm.encode(f"Rivers of Europe, part {repeat}:", special=True)
    first, _ = llm.generate_ids(short, max_tokens=1)
    many, _ = llm.generate_ids(short, max_tokens=decode_tokens)
    steps = many.usage.generated_tokens - first.usage.generated_tokens
    return {
        "prompt_tokens": long.usage.prompt_tokens,
        "prefill_tokens_per_s": long.usage.computed_prompt_tokens / (long.usage.wall_ms / 1000),
        "decoded_tokens": steps,
        "decode_tokens_per_s": steps / max((many.usage.wall_ms - first.usage.wall_ms) / 1000, 1e-9),
    }


def quantize(source: str, target: str, ftype: int) -> int:
    """Requantize ``source`` to ``target`` with llama.cpp (``llama_model_quantize``)."""
    import ctypes

    import llama_cpp as ll

    from nlqo.runtime.llm.llamacpp import _init_backend

    _init_backend(ll)
    params = ll.llama_model_quantize_default_params()
    params.ftype, params.allow_requantize, params.nthread = ftype, True, 0
    return int(ll.llama_model_quantize(source.encode(), target.encode(), ctypes.byref(params)))


# --- the parent: the experiment -------------------------------------------------------------------------


class Worker:
    """A configuration's process, started once, asked one request at a time."""

    def __init__(self, python: str, model: Path, threads: int, variant: str | None, log: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k != "NLQO_LLAMA_CPU_VARIANT"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        if variant:
            env["NLQO_LLAMA_CPU_VARIANT"] = variant
        self.log = open(log, "a")
        command = [python, str(Path(__file__).resolve()), "--worker", str(model), str(threads)]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, env=env)  # fmt: skip
        self.hello = self._read(f"{python} with {variant or 'its default CPU backend'} did not start")

    def _read(self, what: str) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"{what}: see {self.log.name}")
        return json.loads(line)

    def ask(self, **request) -> dict:
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self._read(f"worker {self.process.args} failed")

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)
        self.log.close()


def parse_config(config: str) -> tuple[str, str | None, str | None]:
    """``zen4@Q8_0`` -> (build ``variants``, variant ``zen4``, weights ``Q8_0``).

    >>> parse_config("avx2"), parse_config("auto"), parse_config("haswell@Q4_0")
    (('avx2', None, None), ('variants', None, None), ('variants', 'haswell', 'Q4_0'))
    """
    name, _, weights = config.partition("@")
    if weights and weights not in QUANTS:
        raise SystemExit(f"{config}: weights must be one of {', '.join(QUANTS)}")
    if name == "avx2":
        return "avx2", None, weights or None
    return "variants", (None if name == "auto" else name), weights or None


def requantized(args, weights: str) -> Path:
    """The model's weights requantized to ``weights`` (made once, kept)."""
    from nlqo.common.paths import cache_root

    target = cache_root() / "requantized" / f"{args.gguf.stem}.{weights}.gguf"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".part")
        print(f"requantizing {args.gguf.name} to {weights} ...", file=sys.stderr, flush=True)
        python = args.variants_python or args.avx2_python
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        done = subprocess.run([python, __file__, "--quantize", str(args.gguf), str(tmp), str(QUANTS[weights])], env=env)
        if done.returncode != 0 or not tmp.is_file():
            raise SystemExit(f"requantizing to {weights} failed")
        tmp.rename(target)
    return target


def setup(args):
    from nlqo.runtime.models.gguf import find_gguf

    args.gguf = find_gguf(args.model, progress=True)
    if args.gguf is None:
        raise SystemExit(f"{args.model}: not a GGUF model")
    args.workers = {}
    args.cpu = cpu()
    args.out.mkdir(parents=True, exist_ok=True)
    args.prompts = prompts(args)
    return args


def worker_for(args, config: str) -> Worker:
    if config not in args.workers:
        build, variant, weights = parse_config(config)
        python = args.avx2_python if build == "avx2" else args.variants_python
        if not python:
            raise SystemExit(f"{config}: give --variants-python (a Python whose llama_cpp has the CPU variants)")
        model = requantized(args, weights) if weights else args.gguf
        w = args.workers[config] = Worker(python, model, args.threads, variant, args.out / f"worker-{config}.log")
        if (build == "avx2") != (w.hello["variant"] == "built-in"):
            raise SystemExit(
                f"{config}: {python}'s llama_cpp "
                + (
                    "has CPU variants; give --avx2-python a Python with the AVX2-only build"
                    if build == "avx2"
                    else "has its CPU backend built in; give --variants-python a Python with the build of scripts/install-llama-cpp-variants.sh"
                )  # fmt: skip
            )
    return args.workers[config]


def prompts(args) -> list[list[dict]]:
    """The first ``--questions`` questions as standard-rag chat messages (k=3 passages: the supporting ones, then distractors)."""
    from nlqo.runtime.prompts.baselines import DOCS, STANDARD_RAG

    out = []
    with gzip.open(args.questions_file, "rt", encoding="utf-8") as fh:
        for line in fh:
            if len(out) >= args.questions:
                break
            row = json.loads(line)
            paragraphs = row.get("paragraphs") or []
            support = set(row.get("supporting_titles") or [])
            ranked = sorted(paragraphs, key=lambda p: p["title"] not in support)[:3]
            reference = "".join(
                DOCS.item.format(n=i, title=p["title"], text=p["text"]) for i, p in enumerate(ranked, 1)
            )
            messages = STANDARD_RAG.messages(question=row["question"], reference=reference)
            out.append([{"role": m.role, "content": m.content} for m in messages])
    return out


def cases(args) -> list[dict]:
    out = [{"part": "speed", "repeat": r} for r in range(args.repeats)]
    return out + [{"part": "answers", "question": i} for i in range(args.questions)]


def measure(args, case: dict, config: str) -> dict:
    w = worker_for(args, config)
    base = {**w.hello, "threads": args.threads, **args.cpu, "load_average": round(os.getloadavg()[0], 2)}
    if case["part"] == "speed":
        started = time.perf_counter()
        row = w.ask(
            op="speed", prompt_tokens=args.prompt_tokens, decode_tokens=args.decode_tokens, repeat=case["repeat"]
        )
        return {**base, **row, "seconds": round(time.perf_counter() - started, 2)}
    return {**base, **w.ask(op="answer", messages=args.prompts[case["question"]], max_tokens=32)}


def speed_table(records: list[dict], run: dict) -> str:
    rows = [r for r in records if r["part"] == "speed"]
    if not rows:
        return ""
    configs = list(dict.fromkeys(run.get("configs", "").split(","))) or sorted({r["config"] for r in rows})
    configs = [c for c in configs if any(r["config"] == c for r in rows)]
    first = rows[0]
    answers = [r for r in records if r["part"] == "answers"]
    ref = configs[0]
    by_q = {(r["question"], r["config"]): r["answer"].strip() for r in answers}
    lines = [
        f"Measured {first['measured_at'][:10]} by `python benchmarks/kernels.py` on {first['cpu_model'] or run.get('processor')}, "
        f"{run.get('cpus')} cores, {first['threads']} threads, model `{run.get('model')}`, a {first['prompt_tokens']}-token prompt "
        f"and {first['decoded_tokens']} decoded tokens, medians of {run.get('repeats')} interleaved repeats "
        f"(`benchmarks/results/kernels/records.jsonl`). CPU flags: {first['cpu_flags']}.",
        "",
        f"| configuration | build | CPU variant | weights | prefill tok/s | decode tok/s | prefill / decode vs {ref} | answers as {ref}'s | load average |",  # fmt: skip
        "|---|---|---|---|---:|---:|---:|---|---:|",
    ]
    medians = {}
    for c in configs:
        mine = [r for r in rows if r["config"] == c]
        medians[c] = (statistics.median(r["prefill_tokens_per_s"] for r in mine), statistics.median(r["decode_tokens_per_s"] for r in mine))  # fmt: skip
    for c in configs:
        mine = [r for r in rows if r["config"] == c]
        _, _, weights = parse_config(c)
        build = "AVX2 only" if mine[0]["variant"] == "built-in" else "dispatched"
        pre, dec = medians[c]
        ratio = f"{pre / medians[ref][0]:.2f}x / {dec / medians[ref][1]:.2f}x"
        qs = sorted({q for q, cc in by_q if cc == c and (q, ref) in by_q})
        same = f"{sum(by_q[(q, c)] == by_q[(q, ref)] for q in qs)}/{len(qs)}" if qs else "-"
        load = statistics.median(r["load_average"] for r in mine)
        lines.append(
            f"| {c} | {build} | {mine[0]['variant']} | "
            f"{weights or 'as shipped (' + mine[0]['model_file'] + ')'} | {pre:.1f} | {dec:.1f} | {ratio} | {same} | {load:.1f} |"
        )
    return "\n".join(lines) + "\n"


sys.path.insert(0, str(REPO))
from nlqo.config import DEFAULT_MODEL  # noqa: E402 - after the checkout is on the path (a worker's Python)
from nlqo.eval.experiment import DATA, Block, Experiment, Option, main  # noqa: E402
from nlqo.runtime.llm.llamacpp import default_threads  # noqa: E402

VENV = REPO / ".venv" / "bin" / "python"
EXPERIMENT = Experiment(
    name="kernels",
    blocks=(Block("docs/models.md", "bench-kernels", speed_table),),
    cases=cases,
    configs=lambda args: args.configs.split(","),
    setup=setup,
    measure=measure,
    options=(
        Option.of("--model", default=DEFAULT_MODEL),
        Option.of(
            "--configs", default="avx2,auto,haswell", help="comma-separated; the first is the reference (see above)"
        ),  # fmt: skip
        Option.of("--avx2-python", default=str(VENV) if VENV.exists() else sys.executable),
        Option.of(
            "--variants-python",
            default=None,
            help="a Python whose llama_cpp was built by scripts/install-llama-cpp-variants.sh",
        ),  # fmt: skip
        Option.of("--repeats", type=int, default=3),
        Option.of("--prompt-tokens", type=int, default=512),
        Option.of("--decode-tokens", type=int, default=48),
        Option.of("--questions", type=int, default=20),
        Option.of("--questions-file", type=Path, default=DATA / "hotpotqa_dev_199.jsonl.gz"),
        Option.of("--threads", type=int, default=default_threads()),
    ),
)

if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        raise SystemExit(worker(sys.argv[2], int(sys.argv[3])))
    if sys.argv[1:2] == ["--quantize"]:
        raise SystemExit(quantize(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    raise SystemExit(main(EXPERIMENT))
