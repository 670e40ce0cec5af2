"""Parsing modes side by side on the first ``--limit`` questions of each shared dev set, one model; run it alone.

* constrained vs unconstrained (issue 13): under the IR's generation grammar (``constrained=True``) and freely
  with repairs after the fact: valid IR on the first reply and within the repairs, tokens generated and
  forced, seconds, mask and decode time.
* anchoring, constrained: do the parse's atoms name the question's entities? The default, the first atom
  naming a constant, that with IR with loose atoms (``nlqo.parser.parse.unanchored``) sent back once, that with
  constants runs of the question's words; loose atoms and constants not in the question (invented ones).
"""

import time

from nlqo.cli.common import DEFAULT_MODEL
from nlqo.errors import ParseFailure
from nlqo.eval.datasets import QuestionSet
from nlqo.eval.experiment import DATA, SETS, Block, Experiment, Option, main
from nlqo.ir import Const
from nlqo.ir.grammar import MAX_ATOMS
from nlqo.runtime.llm.backends import runtime_of
from nlqo.runtime.models import load_local
from nlqo.parser.parse import parse_question, unanchored
from nlqo.ir.syntax import parse

MODES = {"constrained": {"constrained": True}, "unconstrained": {"constrained": False}}
ANCHORING = {
    "unanchored": {"anchored": False, "anchor_repairs": 0, "spans": False},
    "first-atom": {"anchored": True, "anchor_repairs": 0, "spans": False},
    "first-atom+repair": {"anchored": True, "anchor_repairs": 1, "spans": False},
    "first-atom+spans": {"anchored": True, "anchor_repairs": 0, "spans": True},
}
USAGE = ("calls", "prompt_tokens", "cached_prompt_tokens", "generated_tokens", "forced_tokens")


def questions(args) -> list[dict]:
    """The first ``--limit`` questions of each set, one case each."""
    return [
        {"set": name, "index": i, "qid": q.id, "question": q.question}
        for name in args.sets
        for i, q in enumerate(QuestionSet.load(DATA / f"{name}.jsonl.gz", limit=args.limit).questions)
    ]


def setup(args) -> dict:
    """The model, loaded once, with a handle per mode (each keeps its own warm prompt prefix)."""
    llm = load_local(args.model, runtime=args.runtime, threads=args.threads, progress=True)
    return {"args": args, "runtime": runtime_of(llm), "handles": {m: llm.fork() for m in args.modes}}


def measure(context: dict, case: dict, mode: str) -> dict:
    """Parse the case's question with ``parse_question`` as ``mode`` says; a failure is a record too."""
    args, llm = context["args"], context["handles"][mode]
    before, started = llm.total, time.perf_counter()
    try:
        kwargs = {"repairs": args.repairs, "max_atoms": args.parse_atoms, **(MODES | ANCHORING)[mode]}
        result = parse_question(case["question"], llm, **kwargs)
    except ParseFailure as exc:
        result, failure = None, exc
    seconds, after = time.perf_counter() - started, llm.total
    attempts = result.attempts if result else len(failure.attempts)
    usage = {("llm_calls" if k == "calls" else k): getattr(after, k) - getattr(before, k) for k in USAGE}
    return {
        **{"valid": result is not None, "valid_first": attempts == 1 and result is not None, "attempts": attempts},
        **{"repair_calls": attempts - 1, "seconds": round(seconds, 3), **usage},
        "mask_ms": round(result.mask_ms, 3) if result else None,
        "decode_ms": round(result.decode_ms, 3) if result else None,
        "atoms": len(result.query.atoms) if result else None,
        "loose": list(unanchored(result.query)) if result else None,
        "ir": result.text if result else (failure.attempts or [""])[-1],
        "error": None if result else (failure.errors or [str(failure)])[-1],
        "runtime": context["runtime"],
    }


def paired(records: list[dict], modes) -> dict[str, dict[str, list[dict]]]:
    """``{set or "all": {mode: records}}`` over the questions parsed in every mode."""
    by = {(r["set"], r["qid"], r["mode"]): r for r in records}
    both = sorted({(s, q) for s, q, _ in by if all((s, q, m) in by for m in modes)})
    groups = {name: [k for k in both if name in ("all", k[0])] for name in [*SETS, "all"]}
    return {name: {m: [by[(*k, m)] for k in keys] for m in modes} for name, keys in groups.items() if keys}


def row(name: str, mode: str, rs: list[dict]) -> str:
    n, mask, decode = len(rs), sum(r["mask_ms"] or 0.0 for r in rs), sum(r["decode_ms"] or 0.0 for r in rs)
    share = f"{round(100.0 * mask / decode, 2):.2f}%" if decode else "–"
    pct = lambda field: f"{round(100.0 * sum(r[field] for r in rs) / n, 1):.0f}%"  # noqa: E731
    per = lambda field, digits=1: f"{round(sum(r[field] for r in rs) / n, digits):.1f}"  # noqa: E731
    return f"| {name} | {mode} | {n} | {pct('valid_first')} | {pct('valid')} | {sum(r['repair_calls'] for r in rs)} | {per('generated_tokens')} | {per('forced_tokens')} | {per('seconds', 2)} | {share} |"  # fmt: skip


def table(records: list[dict], run: dict) -> str:
    out = ["| set | mode | questions | valid IR, 1st reply | valid IR (≤ repairs) | repair calls | generated / parse | forced / parse | s / parse | mask time / decode time |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    out += [row(name, mode, rs) for name, modes in paired(records, MODES).items() for mode, rs in modes.items()]
    first = paired(records, MODES)["all"]["constrained"][0]
    return "\n".join(out) + (
        f"\n\n{run['model']} on {first['runtime']} ({run['threads'] or 'all'} threads), repairs={run['repairs']}, "
        f"parse_atoms={run['parse_atoms']}; `python benchmarks/bench_parse.py` ({first['measured_at']}). Forced tokens "
        "are appended without sampling; decode time is the model's forward passes after the prompt."
    )


def invented(record: dict) -> tuple[int, int]:
    """(constants, constants not in the question) of a valid record's IR, case and whitespace aside."""
    squeeze = lambda text: " ".join(text.lower().split())  # noqa: E731
    constants = [t.text for a in parse(record["ir"]).atoms for t in (a.subject, a.object) if isinstance(t, Const)]
    return len(constants), sum(squeeze(c) not in squeeze(record["question"]) for c in constants)


def anchoring_row(name: str, mode: str, rs: list[dict]) -> str:
    n, valid = len(rs), [r for r in rs if r["valid"]]
    counts, atoms = [invented(r) for r in valid], sum(r["atoms"] for r in valid)
    per = lambda field, digits: round(sum(r[field] for r in rs) / n, digits)  # noqa: E731
    return (
        f"| {name} | {mode} | {n} | {len(valid)} | {sum(bool(r['loose']) for r in valid)} "
        f"| {sum(len(r['loose']) for r in valid)} / {atoms} | {sum(i for _, i in counts)} / {sum(c for c, _ in counts)} "
        f"| {per('llm_calls', 2):.2f} | {per('generated_tokens', 1):.1f} | {per('seconds', 2):.1f} |"
    )


def anchoring_table(records: list[dict], run: dict) -> str:
    out = ["| set | mode | questions | valid IR | IR with a loose atom | loose atoms / atoms | constants not in the question | LLM calls / parse | generated / parse | s / parse |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    groups = paired(records, ANCHORING)
    out += [anchoring_row(name, m, rs) for name, modes in groups.items() for m, rs in modes.items()]
    return "\n".join(out) + (
        f"\n\n{run['model']}, constrained parsing, repairs={run['repairs']}; a loose atom is linked through shared "
        f"variables to no atom naming a constant. `python benchmarks/bench_parse.py` ({groups['all']['unanchored'][0]['measured_at']})."
    )


EXPERIMENT = Experiment(
    name="parse",
    blocks=(Block("docs/ir.md", "bench-parse", table), Block("docs/ir.md", "bench-anchoring", anchoring_table)),
    cases=questions,
    configs=lambda args: args.modes,
    config_field="mode",
    setup=setup,
    measure=measure,
    options=(
        Option.of(
            "--modes", nargs="+", default=[*MODES, *ANCHORING], choices=[*MODES, *ANCHORING], help="(default: all)"
        ),
        Option.of("--sets", nargs="+", default=list(SETS), choices=SETS, help="dev sets (default: all three)"),
        Option.of("--limit", type=int, default=50, help="first N questions of each set (default: %(default)s)"),
        Option.of("--model", default=DEFAULT_MODEL, help="model (default: %(default)s)"),
        Option.of("--runtime", default="auto", choices=("auto", "llama-cpp", "transformers"), help="runtime"),
        Option.of("--threads", type=int, help="LLM threads (default: the machine's cores)"),
        Option.of("--repairs", type=int, default=2, help="repair rounds, as the engine uses (default: 2)"),
        Option.of("--parse-atoms", type=int, default=MAX_ATOMS, help="atoms a constrained reply may write"),
    ),
)

if __name__ == "__main__":
    raise SystemExit(main(EXPERIMENT))
