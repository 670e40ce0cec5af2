"""Figures docs/ir.md, docs/execution.md and docs/benchmarks.md quote, computed from benchmark records.

    python benchmarks/record_findings.py [--questions FIRST:END] [RUN_FOLDER ...]
    (default: the runs of benchmarks/results/runs/, else the int8 runs of benchmarks/results/bench/;
    ``--questions 25:50`` keeps the records of questions 26 to 50, by their index in the run)

Prints, per run: each strategy's EM, seconds and retrievals per question over the questions every
strategy finished (with ``--questions 0:25``, the first 25); the parse failures of tree and auto
and what ``nlqo.parser.tidy`` makes of each first reply; how the tree's node questions were made (substituted, rewritten, a copy of the main
question); how many of the tree's leaves name no entity (subject and object both variables, so their retrieval
has only the predicate to go on); what auto ran (operator) and its EM on each, and
per operator the questions auto got right and linear wrong and the other way round; answers of last resort; per strategy, how
many runs that retrieved every gold passage still answered wrong, and how many answers to a
comparison question (the question file's type, when run.json's file is at hand) name none of the
things the question names; how many answers to a choice question the run's own text linked to one
option (right: and it is right), and how many were asked again among the options (held: the new
answer names one; right: and is right); and the linear
template's hop counts, what it repeated when the terminator stopped it, and how many of its runs
another threshold (tau 0.8 or 0.9) could change at all; per strategy, where its LLM seconds go
(seconds, calls and tokens per kind of call), and how often tree's and auto's parse call found its
scaffold in the prefix cache. Variants (``tree[tree_queries=rewrite]``)
count with their strategy.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from finished import finished_questions  # noqa: E402
from nlqo.errors import IRSemanticError, IRSyntaxError, ParseFailure
from nlqo.eval.summary import strategy_summary
from nlqo.execute.choice import CHOICE_NODE, HELD
from nlqo.execute.trace import PARSE_FAILED
from nlqo.parser import check_grounded, clean, drop_repeats, tidy
from nlqo.syntax import parse


def outcome(text: str, question: str) -> str:
    try:
        check_grounded(parse(text, source="<llm>"), question)
        return "valid IR"
    except (IRSyntaxError, IRSemanticError) as exc:
        message = str(exc)
        for key, label in (
            ("no answer statement", "only the answer line missing"),
            ("three terms", "a triple with two or four terms"),
        ):
            if key in message:
                return label
        return "other error"


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def is_terminator_stop(step: dict) -> bool:
    """A hop's stop step (the terminator's), not the choice step's (also kind ``stop``)."""
    return step["kind"] == "stop" and step["node"].startswith("hop-")


def stop_cause(record: dict) -> str:
    """What the linear template's last proposed sub-question repeated when the terminator stopped it."""
    steps = record["trace"]
    stops = [i for i, step in enumerate(steps) if is_terminator_stop(step)]
    if not stops:
        return record["stop_reason"]
    proposed = words(steps[stops[0] - 1]["text"])
    if proposed == words(record["question"]):
        return "the main question"
    if any(proposed == words(step["text"]) for step in steps[: stops[0]] if step["kind"] == "retrieve"):
        return "an earlier sub-question"
    return "a new sub-question"


def tau_would_change(record: dict, tau: float, *, default: float = 0.85, min_hops: int = 1) -> bool:
    """Whether the linear run would have gone otherwise with threshold ``tau``: an earlier hop scored
    between the two thresholds, so one of them stops there and the other does not."""
    low, high = sorted((tau, default))
    return any(
        step["terminator_score"] is not None and low <= step["terminator_score"] < high
        for step in record["trace"]
        if step["node"].startswith("hop-") and int(step["node"][4:]) > min_hops and step["kind"] in ("retrieve", "stop")
    )


def named_in_question(answer: str, question: str) -> bool:
    """Whether ``answer`` is one of the things ``question`` names (as the answer to "which of A or B"
    must be).

    >>> named_in_question("Krudt Og Klunker", "Which film was released earlier, Grandi Magazzini or Krudt Og Klunker?")
    True
    >>> named_in_question("1986", "Which film was released earlier, Grandi Magazzini or Krudt Og Klunker?")
    False
    """
    return len(answer) > 2 and " ".join(words(answer)) in " ".join(words(question))


def question_types(folder: Path) -> dict[str, str]:
    """Question id -> the data set's type, from the question file run.json names (empty when it is not at hand)."""
    from nlqo.eval.datasets import QuestionSet

    meta = json.loads((folder / "run.json").read_text(encoding="utf-8")) if (folder / "run.json").is_file() else {}
    path = Path(meta.get("questions_file") or "")
    return {q.id: q.type for q in QuestionSet.load(path).questions} if path.is_file() else {}


def base(record: dict) -> str:
    """The record's strategy without its variant options."""
    return record["strategy"].split("[")[0]


def call_kind(node: str) -> str:
    """A trace node as a kind of call: ``hop-2`` -> ``hop-#``, ``q3`` -> ``q#``."""
    return re.sub(r"\d+", "#", node)


def seconds_by_call(records: list[dict]) -> dict[str, list[str]]:
    """Per strategy, where its LLM seconds go: for each kind of call (largest first), seconds per
    question, calls per question and the prompt tokens computed and tokens generated per call.
    The tree's sibling nodes run at once, so its calls' seconds add up to more than its wall time."""
    out: dict[str, list[str]] = {}
    for name in sorted({base(r) for r in records}):
        runs = [r for r in records if base(r) == name]
        calls: dict[str, list[dict]] = {}
        for r in runs:
            for step in r["trace"]:
                if step["kind"] == "llm" and step["prompt_tokens"]:
                    calls.setdefault(call_kind(step["node"]), []).append(step)
        rows = sorted(calls.items(), key=lambda kv: -sum(s["wall_ms"] for s in kv[1]))
        out[name] = [
            f"{kind} {sum(s['wall_ms'] for s in steps) / 1000 / len(runs):.1f} s "
            f"({len(steps) / len(runs):.1f} calls, {sum(s['prompt_tokens'] - s['cached_prompt_tokens'] for s in steps) // len(steps)} computed"
            f" + {sum(s['generated_tokens'] for s in steps) // len(steps)} generated tokens each)"
            for kind, steps in rows
        ]
    return out


def parse_prefix_hits(records: list[dict], strategy: str) -> tuple[int, int, float, float, list[int]]:
    """How often ``strategy``'s parse call found its prompt's scaffold in the prefix cache (more than
    half the prompt cached): hits, calls, the mean seconds of a hit and of a miss, and the questions
    (1-based) of the misses."""
    hits, misses, missed = [], [], []
    for r in records:
        if base(r) == strategy:
            for step in r["trace"]:
                if step["node"] == "parse" and step["kind"] == "llm" and step["prompt_tokens"]:
                    hit = 2 * step["cached_prompt_tokens"] > step["prompt_tokens"]
                    (hits if hit else misses).append(step["wall_ms"] / 1000)
                    if not hit and "index" in r:
                        missed.append(r["index"] + 1)
    mean = lambda xs: sum(xs) / len(xs) if xs else 0.0  # noqa: E731
    return len(hits), len(hits) + len(misses), mean(hits), mean(misses), sorted(missed)


def strategy_means(records: list[dict]) -> tuple[int, list[str]]:
    """Over the questions every strategy of ``records`` has finished: their count, and per strategy
    (in order of first record) its EM, seconds and retrievals per question (the report's means,
    :func:`nlqo.eval.summary.strategy_summary`)."""
    names = list(dict.fromkeys(r["strategy"] for r in records))
    done = finished_questions(records)
    means = {n: strategy_summary([r for r in records if r["strategy"] == n and r["qid"] in done]) for n in names}
    value = lambda m, field: m[field] or 0.0  # noqa: E731  (hand-made records may lack a field)
    return len(done), [
        f"{n} {100 * value(m, 'em'):.1f} EM · {value(m, 'seconds'):.1f} s · {value(m, 'retrievals'):.2f} retrievals"
        for n, m in means.items()
    ]


def auto_against_linear(records: list[dict]) -> dict[str, tuple[int, int]]:
    """On the questions both plain ``auto`` and ``linear`` answered, per operator auto ran: how
    many auto got right and linear wrong, and how many the other way round (where auto ran the
    linear template, mostly what its plan hints won and lost)."""
    linear = {r["qid"]: r["em"] for r in records if r["strategy"] == "linear"}
    won_lost: dict[str, tuple[int, int]] = {}
    for r in records:
        if r["strategy"] == "auto" and r["qid"] in linear:
            operator = r.get("operator") or "not recorded"
            won, lost = won_lost.get(operator, (0, 0))
            won_lost[operator] = (won + (r["em"] > linear[r["qid"]]), lost + (r["em"] < linear[r["qid"]]))
    return dict(sorted(won_lost.items()))


def findings(folder: Path, questions: range | None = None) -> None:
    records = [
        json.loads(line) for line in (folder / "records.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    records = [r for r in records if questions is None or r["index"] in questions]
    failures = [r for r in records if base(r) in ("tree", "auto") and r["stop_reason"].startswith(PARSE_FAILED)]
    loops, tidied = 0, Counter()
    for r in failures:
        reply = clean(ParseFailure.replies_in(r["trace"][0]["text"])[0])
        loops += len(drop_repeats(reply).splitlines()) < len(reply.splitlines())
        tidied[outcome(tidy(reply), r["question"])] += 1
    nodes = copies = substituted = 0
    for r in records:
        if base(r) == "tree" and not r["stop_reason"].startswith(PARSE_FAILED):
            for step in r["trace"]:
                if step["kind"] == "retrieve" and step["node"] != "$root":
                    nodes += 1
                    copies += words(step["text"]) == words(r["question"])
                    substituted += (step.get("note") or "").startswith("question by substitution")
    leaves = [
        node["triple"]
        for r in records
        if base(r) == "tree" and r.get("plan")
        for node in r["plan"]["nodes"]
        if node.get("triple") and not node["children"]
    ]
    bare = [t for t in leaves if t[0].startswith("?") and t[2].startswith("?")]
    operators: dict[str, list[float]] = {}
    for r in records:
        if base(r) == "auto":
            operators.setdefault(r.get("operator") or "not recorded", []).append(float(r["em"]))
    complete: dict[str, list[float]] = {}
    for r in records:
        if r.get("evidence_complete"):
            complete.setdefault(r["strategy"], []).append(float(r["em"]))
    types = question_types(folder)
    choices = [
        r
        for r in records
        if "comparison" in types.get(r["qid"], "") and not {a.lower() for a in r["answers"]} & {"yes", "no"}
    ]
    unnamed = Counter(r["strategy"] for r in choices if not named_in_question(r["answer"], r["question"]))
    asked = Counter(r["strategy"] for r in choices)
    last_resort = Counter(
        r["stop_reason"].rsplit("; ", 1)[-1]
        for r in records
        if r["stop_reason"].endswith(("; fallback_answer", "; no_answer"))
    )
    held: dict[str, list[float]] = {}
    linked: dict[str, list[float]] = {}
    for r in records:
        steps = [s for s in r["trace"] if s["node"] == CHOICE_NODE]
        if steps and steps[-1]["kind"] == "stop":
            linked.setdefault(r["strategy"], []).append(float(r["em"]))
        elif steps:
            held.setdefault(r["strategy"], []).append(float(r["em"]) if r["stop_reason"].endswith(HELD) else -1.0)
    linear = [r for r in records if base(r) == "linear"]
    hops = Counter(r["hops"] for r in linear)
    causes = Counter(stop_cause(r) for r in linear)
    scores = [s["terminator_score"] for r in linear for s in r["trace"] if is_terminator_stop(s)]
    print(f"{folder.name}: {len({r['qid'] for r in records})} questions with records")
    finished, means = strategy_means(records)
    if means and finished:
        print(f"  on the {finished} questions every strategy finished: " + "; ".join(means))
    print(f"  parse failures (tree, auto): {len(failures)}; first reply a repetition loop: {loops}")
    print(f"  first replies after tidy: {dict(tidied.most_common())}")
    print(f"  tree node retrievals using the main question: {copies} of {nodes}; by substitution: {substituted}")
    print(
        f"  tree leaves naming no entity (subject and object variables): {len(bare)} of {len(leaves)}"
        + (f", e.g. {' '.join(bare[0])}" if bare else "")
    )
    print(
        "  auto ran: "
        + ", ".join(f"{op} {len(ems)} ({100 * sum(ems) / len(ems):.1f} EM)" for op, ems in sorted(operators.items()))
    )
    if against := auto_against_linear(records):
        print(
            "  auto right where linear wrong / linear right where auto wrong, by what auto ran: "
            + ", ".join(f"{op} {won} / {lost}" for op, (won, lost) in against.items())
        )
    print(f"  answers of last resort: {dict(last_resort) or 'none'}")
    print(
        "  choice answers linked to one option by the run's text: "
        + (", ".join(f"{n} {len(v)} (right {v.count(1.0)})" for n, v in linked.items()) or "none")
    )
    print(
        "  choice answers asked again among the options: "
        + (
            ", ".join(f"{n} {len(v)} (held {sum(e >= 0 for e in v)}, right {v.count(1.0)})" for n, v in held.items())
            or "none"
        )
    )
    print(
        "  every gold passage retrieved, answered wrong: "
        + (", ".join(f"{n} {ems.count(0.0)} of {len(ems)}" for n, ems in complete.items()) or "no such runs")
    )
    if types:
        print(
            "  comparison answers naming nothing the question names: "
            + (", ".join(f"{n} {unnamed[n]} of {asked[n]}" for n in asked) or "no comparison questions")
        )
    print(f"  linear hops: {dict(sorted(hops.items()))}")
    print(
        f"  linear stopped on: {dict(causes.most_common())}; terminator score at the stop >= 0.99: {sum(s >= 0.99 for s in scores)} of {len(scores)}"
    )
    print(
        "  linear runs a tau of 0.8 / 0.9 could change: "
        + " / ".join(str(sum(tau_would_change(r, t) for r in linear)) for t in (0.8, 0.9))
    )
    for name, rows in seconds_by_call(records).items():
        print(f"  {name} LLM seconds per question by call: " + "; ".join(rows))
    for name in ("tree", "auto"):
        hits, n, hit_s, miss_s, missed = parse_prefix_hits(records, name)
        if n:
            where = (
                f"; missed on question{'s' * (len(missed) > 1)} {', '.join(map(str, missed))}"
                if missed and len(missed) <= 10
                else ""
            )
            print(
                f"  {name} parse scaffold served from the prefix cache: {hits} of {n} calls ({hit_s:.1f} s per call when served, {miss_s:.1f} s when not{where})"
            )


def question_range(text: str) -> range:
    """``25:50`` -> ``range(25, 50)``; either end may be left out."""
    first, sep, end = text.partition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected FIRST:END, got {text!r}")
    return range(int(first or 0), int(end) if end else sys.maxsize)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path, metavar="RUN_FOLDER")
    parser.add_argument(
        "--questions",
        type=question_range,
        metavar="FIRST:END",
        help="keep questions FIRST+1 to END of each run (25:50: questions 26-50; either end may be left out)",
    )
    args = parser.parse_args(argv)
    runs = sorted(f for f in Path("benchmarks/results/runs").glob("*/") if (f / "records.jsonl").is_file())
    for folder in args.folders or runs or sorted(Path("benchmarks/results/bench").glob("*/")):
        findings(folder, args.questions)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
