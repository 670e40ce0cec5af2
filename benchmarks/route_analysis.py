#!/usr/bin/env python3
"""Offline analysis of per-question operator choice (issue 38), over the benchmark of record.

Reads the per-question records of the five strategies (standard-rag = RETRIEVE, iter-retgen = ITERATE,
linear = TEMPLATE, tree = TREE, auto) on the three shared dev sets and asks whether a per-question
choice, fitted on the first 50 questions of a set only (the calibration sample), beats the best fixed
operator on the held-back questions (index >= 50). Nothing is fitted to the held-back questions: every
rule is either fixed in advance (its form) or has its free choices (which operator per class, which
escalation target) made on calibration questions only. Three fitting scopes are reported:

* ``own``    the set's own 50 calibration questions (what `nlqo analyze` on the first 50 would see);
* ``pooled`` the calibration questions of all three sets (150);
* ``others`` the calibration questions of the two *other* sets only: a proxy for an unseen question set.

No model is run. Costs are the recorded seconds: a cascade pays for every operator it ran; a rule that
needs the parse (IR features) pays auto's planning seconds unless the operator it picks parses anyway.

Usage: python benchmarks/route_analysis.py [--data DIR] [--runs DIR] > benchmarks/results/route_analysis.txt
Standard library and numpy only; the bootstrap uses a fixed seed, so the output is deterministic.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
import string
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SETS = ["hotpotqa_dev_199", "2wiki_dev_300", "musique_dev_200"]
SHORT = {"hotpotqa_dev_199": "hotpot", "2wiki_dev_300": "2wiki", "musique_dev_200": "musique"}
OPS = ["standard-rag", "iter-retgen", "linear", "tree", "auto"]
OPNAME = {"standard-rag": "RETRIEVE", "iter-retgen": "ITERATE", "linear": "TEMPLATE", "tree": "TREE", "auto": "auto"}
BASELINES = ["no-rag", "ircot", "self-ask"]
CAL = 50  # calibration sample: questions with index < CAL
MIN_CLASS = 8  # a class with fewer calibration questions falls back to the global choice
BOOT = 10000
SEED = 20261203

# ---------------------------------------------------------------------------------------------- text

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def norm(text: str) -> str:
    """SQuAD normalisation (as nlqo.eval.metrics.normalize_answer)."""
    text = (text or "").lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def contains(hay: str, needle: str) -> bool:
    """Whole-word containment of normalised strings."""
    return bool(needle) and f" {needle} " in f" {hay} "


AUX = {
    "is",
    "are",
    "was",
    "were",
    "do",
    "does",
    "did",
    "has",
    "have",
    "had",
    "can",
    "could",
    "will",
    "would",
    "should",
    "shall",
    "may",
    "might",
}
WH = ["which", "who", "whom", "whose", "what", "when", "where", "how", "why"]
COMPARE = {
    "older",
    "younger",
    "oldest",
    "youngest",
    "first",
    "earlier",
    "earliest",
    "later",
    "last",
    "latest",
    "before",
    "after",
    "more",
    "most",
    "less",
    "fewer",
    "longer",
    "shorter",
    "larger",
    "bigger",
    "smaller",
    "higher",
    "lower",
    "taller",
    "recently",
    "sooner",
}
UNKNOWN = re.compile(
    r"^(unknown|none|n a|no answer|not (mentioned|specified|provided|given|stated|known|available)"
    r"|cannot|can not|i dont know|insufficient|there is no)\b"
)
OPTIONS = re.compile(r"[,:]\s*([^,:]+?)\s+or\s+(.+?)\s*\??\s*$", re.I)


def question_features(q: str) -> dict:
    """Features of the question text alone (no model call)."""
    words = norm(q).split()
    first = words[0] if words else ""
    yesno = first in AUX
    has_or = " or " in f" {q.lower()} "
    choice = has_or and not yesno
    options = []
    m = OPTIONS.search(q)
    if choice and m:
        options = [norm(m.group(1)), norm(m.group(2))]
    wh = next((w for w in words[:1] if w in WH), None) or next((w for w in words if w in WH), "other")
    return {
        "first": first,
        "wh": wh,
        "yesno": yesno,
        "choice": choice,
        "options": options,
        "same_both": any(w in ("same", "both") for w in words),
        "compare_word": any(w in COMPARE for w in words),
        "n_words": len(words),
        "form": "yes/no" if yesno else ("choice" if choice else "wh"),
    }


# ---------------------------------------------------------------------------------------------- data


def load_jsonl(path: Path):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def passages_of(rec: dict) -> list[str]:
    ids = []
    for step in rec.get("trace") or []:
        if step.get("kind") == "retrieve":
            ids += [p["id"] for p in step.get("passages") or []]
    for node in (rec.get("plan") or {}).get("nodes") or []:
        ids += [p["id"] for p in ((node.get("actual") or {}).get("passages") or [])]
    ids += [p["id"] for p in rec.get("supporting") or []]
    return list(dict.fromkeys(ids))


def ir_features(plan: dict | None) -> dict:
    """Atom count and shape of the parse (auto's plan), when there is one."""
    if not plan:
        return {"atoms": 0, "shape": "none", "chain": 0}
    nodes = [n for n in plan.get("nodes") or [] if n.get("triple")]
    atoms = len(nodes)
    # dependency depth: an atom whose subject is a variable produced by another atom depends on it
    produced = {}
    for n in nodes:
        s, _, o = n["triple"]
        if isinstance(o, str) and o.startswith("?"):
            produced[o] = n["id"]
    depth = {}

    def d(n, seen=()):
        if n["id"] in depth:
            return depth[n["id"]]
        s = n["triple"][0]
        src = produced.get(s) if isinstance(s, str) else None
        out = 1
        if src and src not in seen:
            srcn = next(x for x in nodes if x["id"] == src)
            out = 1 + d(srcn, seen + (n["id"],))
        depth[n["id"]] = out
        return out

    chain = max((d(n) for n in nodes), default=0)
    answer_vars = [v.strip() for v in str(plan.get("answer_var") or "").split(",") if v.strip()]
    if atoms <= 1:
        shape = "single"
    elif len(answer_vars) > 1:
        shape = "multi-answer"
    elif chain >= atoms:
        shape = "chain"
    else:
        shape = "branch"
    return {"atoms": atoms, "shape": shape, "chain": chain}


def answer_checks(rec: dict, qf: dict, question: str, corpus: dict) -> dict:
    """Signals on one operator's answer, available once that operator has run (no extra model call)."""
    a = norm(rec["answer"])
    text = " ".join(corpus.get(pid, "") for pid in passages_of(rec))
    is_yn = a in ("yes", "no") or a.split()[:1] in (["yes"], ["no"])
    unknown = (not a) or bool(UNKNOWN.match(a))
    if qf["yesno"]:
        supported = is_yn
    else:
        supported = (not unknown) and (not is_yn) and contains(text, a)
    echo = (not qf["choice"]) and (not qf["yesno"]) and bool(a) and contains(norm(question), a)
    off_options = (
        qf["choice"]
        and bool(qf["options"])
        and not any(a and (a == o or contains(o, a) or contains(a, o)) for o in qf["options"])
    )
    stray_yn = is_yn and not qf["yesno"]
    return {
        "norm": a,
        "supported": supported,
        "unknown": unknown,
        "echo": echo,
        "off_options": off_options,
        "stray_yn": stray_yn,
        "suspect": (not supported) or unknown or echo or off_options or stray_yn,
    }


def load(runs: Path, data: Path) -> dict:
    out = {}
    for name in SETS:
        corpus = {}
        for p in load_jsonl(data / f"{name}_corpus.jsonl.gz"):
            corpus[p["id"]] = norm(f"{p.get('title', '')} {p.get('text', '')}")
        qtype = {q["id"]: q.get("type") for q in load_jsonl(data / f"{name}.jsonl.gz")}
        by_idx = defaultdict(dict)
        for r in load_jsonl(runs / name / "records.jsonl"):
            by_idx[r["index"]][r["strategy"]] = r
        base = defaultdict(dict)
        bpath = runs / f"{name}-baselines" / "records.jsonl"
        if bpath.exists():
            for r in load_jsonl(bpath):
                base[r["index"]][r["strategy"]] = r
        qs = []
        for idx in sorted(by_idx):
            recs = by_idx[idx]
            if not all(op in recs for op in OPS):
                continue
            any_rec = recs["auto"]
            qf = question_features(any_rec["question"])
            ops = {}
            for op in OPS:
                r = recs[op]
                rounds = [norm(t.get("text", "")) for t in r.get("trace") or [] if t.get("kind") == "llm"]
                ops[op] = {
                    "em": float(r["em"]),
                    "f1": float(r["f1"]),
                    "sec": float(r["seconds"]),
                    "plan_sec": float(r.get("planning_ms") or 0.0) / 1000.0,
                    "answer": r["answer"],
                    "rounds": rounds,
                    "stable": len(set(rounds)) <= 1,
                    **answer_checks(r, qf, any_rec["question"], corpus),
                }
            # ITERATE's first round is RETRIEVE (same retrieval, same prompt): check it per question
            ops["iter-retgen"]["round1_is_retrieve"] = (
                bool(ops["iter-retgen"]["rounds"]) and ops["iter-retgen"]["rounds"][0] == ops["standard-rag"]["norm"]
            )
            qs.append(
                {
                    "set": name,
                    "idx": idx,
                    "question": any_rec["question"],
                    "golds": any_rec["answers"],
                    "type": qtype.get(any_rec["qid"]),
                    "qf": qf,
                    "ir": ir_features(any_rec.get("plan")),
                    "auto_operator": any_rec.get("operator"),
                    "ops": ops,
                    "base": {
                        b: {"em": float(base[idx][b]["em"]), "sec": float(base[idx][b]["seconds"])}
                        for b in BASELINES
                        if b in base.get(idx, {})
                    },
                }
            )
        out[name] = qs
    return out


# ---------------------------------------------------------------------------------------------- stats


def wilson(k: float, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    den = 1 + z * z / n
    c = (p + z * z / (2 * n)) / den
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (c - h, c + h)


def paired_interval(diff: np.ndarray, rng_idx: np.ndarray) -> tuple[float, float, float]:
    """Mean difference and its percentile bootstrap 95% interval (resamples given as an index matrix)."""
    means = diff[rng_idx].mean(axis=1)
    return float(diff.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def boot_idx(n: int, seed: int, b: int = BOOT) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, size=(b, n))


def em_of(qs, op):
    return sum(q["ops"][op]["em"] for q in qs) / max(len(qs), 1)


def sec_of(qs, op):
    return sum(q["ops"][op]["sec"] for q in qs) / max(len(qs), 1)


def best_fixed(qs, ops=OPS):
    """Highest EM on qs; ties go to the faster operator."""
    return max(ops, key=lambda op: (em_of(qs, op), -sec_of(qs, op)))


def balanced_fixed(qs, ops=OPS):
    """The fastest operator whose EM lies within the best operator's Wilson 95% interval."""
    best = best_fixed(qs, ops)
    lo, _ = wilson(sum(q["ops"][best]["em"] for q in qs), len(qs))
    ok = [op for op in ops if em_of(qs, op) >= lo - 1e-12]
    return min(ok, key=lambda op: sec_of(qs, op))


def significantly_better(qs, a, b, seed=1, b_n=2000) -> bool:
    """Paired bootstrap: is a's EM above b's on qs with the 95% interval above zero?"""
    if a == b or not qs:
        return False
    diff = np.array([q["ops"][a]["em"] - q["ops"][b]["em"] for q in qs])
    _, lo, _ = paired_interval(diff, boot_idx(len(qs), seed, b_n))
    return lo > 0


# ---------------------------------------------------------------------------------------------- policies
# A policy is fitted on calibration questions and returns a function question -> (em, seconds, ops run).


def fixed_policy(op):
    def fit(cal):
        return lambda q: (q["ops"][op]["em"], q["ops"][op]["sec"], op)

    return fit


def calbest_policy(kind="quality"):
    def fit(cal):
        op = best_fixed(cal) if kind == "quality" else balanced_fixed(cal)
        return lambda q: (q["ops"][op]["em"], q["ops"][op]["sec"], op)

    return fit


PARSING_OPS = {"tree", "auto"}


def escalation_cost(q, first, target):
    """Seconds of running `first`, then `target`. ITERATE's first round is RETRIEVE (same retrieval and
    prompt; section 2 counts how often the records agree), so RETRIEVE then ITERATE costs ITERATE's seconds:
    ITERATE continues from RETRIEVE's round instead of starting over."""
    if first == "standard-rag" and target == "iter-retgen":
        return max(q["ops"][target]["sec"], q["ops"][first]["sec"])
    return q["ops"][first]["sec"] + q["ops"][target]["sec"]


def router_policy(cls, mode="point", needs_parse=False, allowed=OPS):
    """Per-class best operator on the calibration sample; fallback to the global best when a class has
    fewer than MIN_CLASS calibration questions, or (mode 'sig') when the class winner is not
    significantly better than the global best on that class (paired bootstrap)."""

    def fit(cal):
        glob = best_fixed(cal, allowed)
        groups = defaultdict(list)
        for q in cal:
            groups[cls(q)].append(q)
        table = {}
        for c, qs in groups.items():
            if len(qs) < MIN_CLASS:
                continue
            cand = best_fixed(qs, allowed)
            if em_of(qs, cand) <= em_of(qs, glob):
                continue
            if mode == "sig" and not significantly_better(qs, cand, glob):
                continue
            table[c] = cand

        def run(q):
            op = table.get(cls(q), glob)
            sec = q["ops"][op]["sec"]
            if needs_parse and op not in PARSING_OPS:
                sec += q["ops"]["auto"]["plan_sec"]
            return q["ops"][op]["em"], sec, op

        run.table, run.glob = table, glob
        return run

    return fit


def cascade_policy(first, trigger, target=None, targets=OPS):
    """Run `first`; when `trigger` fires on its answer, also run a target (fitted on the calibration
    questions where the trigger fired, unless given) and take its answer. Cost: both operators' seconds."""

    def fit(cal):
        tgt = target
        if tgt is None:
            fired = [q for q in cal if trigger(q["ops"][first], q)]
            cands = [op for op in targets if op != first]
            tgt = (
                max(cands, key=lambda op: (em_of(fired, op) - em_of(fired, first), -sec_of(fired, op)))
                if fired
                else cands[0]
            )
            # only escalate when that helps on calibration
            if fired and em_of(fired, tgt) <= em_of(fired, first):
                tgt = None

        def run(q):
            a = q["ops"][first]
            if tgt is not None and trigger(a, q):
                return q["ops"][tgt]["em"], escalation_cost(q, first, tgt), tgt
            return a["em"], a["sec"], first

        run.target = tgt
        return run

    return fit


def chain_policy(steps, trigger):
    """Run steps in order; stop at the first whose answer does not trigger (the last one always answers)."""

    def fit(cal):
        def run(q):
            sec = q["ops"][steps[0]]["sec"]
            for i, op in enumerate(steps):
                if i:
                    sec += escalation_cost(q, steps[i - 1], op) - q["ops"][steps[i - 1]]["sec"]
                if i == len(steps) - 1 or not trigger(q["ops"][op], q):
                    return q["ops"][op]["em"], sec, op

        return run

    return fit


def agree_policy(a, b, target=None):
    """Run a and b; if their normalised answers agree, take it, else a target fitted on calibration.
    (RETRIEVE and ITERATE: ITERATE's first round is RETRIEVE, so this costs ITERATE's seconds.)"""

    def agree(q):
        return q["ops"][a]["norm"] == q["ops"][b]["norm"] and q["ops"][a]["norm"] != ""

    def fit(cal):
        tgt = target
        if tgt is None:
            dis = [q for q in cal if not agree(q)]
            tgt = best_fixed(dis) if dis else b

        def run(q):
            sec = escalation_cost(q, a, b)
            if agree(q):
                return q["ops"][a]["em"], sec, a
            if tgt in (a, b):
                return q["ops"][tgt]["em"], sec, tgt
            return q["ops"][tgt]["em"], sec + q["ops"][tgt]["sec"], tgt

        run.target = tgt
        return run

    return fit


def balanced_then_quality(trigger):
    """The calibration's balanced operator first; on a triggered answer escalate to the calibration's
    best operator (or, when that is the same operator, to the target fitted on triggered questions)."""

    def fit(cal):
        first, best = balanced_fixed(cal), best_fixed(cal)
        inner = cascade_policy(first, trigger, best if best != first else None)(cal)
        inner.first = first
        return inner

    return fit


def form_then_cascade(choice_cls=lambda q: q["qf"]["form"]):
    """Choice / yes-no questions: the class's best operator on calibration (router, point mode);
    wh questions: RETRIEVE first, escalate on a suspect answer to the target fitted on calibration."""

    def fit(cal):
        wh_cal = [q for q in cal if choice_cls(q) == "wh"]
        casc = cascade_policy("standard-rag", T["suspect"])(wh_cal)
        rout = router_policy(choice_cls)(cal)

        def run(q):
            if choice_cls(q) == "wh":
                return casc(q)
            return rout(q)

        run.target, run.table, run.glob = casc.target, rout.table, rout.glob
        return run

    return fit


T = {
    "unsupported": lambda a, q: not a["supported"],
    "unknown": lambda a, q: a["unknown"],
    "echo": lambda a, q: a["echo"],
    "suspect": lambda a, q: a["suspect"],
    "unsupported|echo": lambda a, q: (not a["supported"]) or a["echo"],
    # ITERATE only: its rounds do not all give the same answer (a free self-consistency signal)
    "unstable": lambda a, q: not a["stable"],
    "suspect|unstable": lambda a, q: a["suspect"] or not a["stable"],
}

CLASSES = {
    "form": lambda q: q["qf"]["form"],
    "form+wh": lambda q: q["qf"]["form"] if q["qf"]["form"] != "wh" else "wh:" + q["qf"]["wh"],
    "form+compare": lambda q: q["qf"]["form"] + ("+cmp" if (q["qf"]["compare_word"] or q["qf"]["same_both"]) else ""),
    "length": lambda q: "short" if q["qf"]["n_words"] <= 12 else ("mid" if q["qf"]["n_words"] <= 20 else "long"),
    "atoms": lambda q: "atoms<=2" if q["ir"]["atoms"] <= 2 else "atoms>=3",
    "shape": lambda q: q["ir"]["shape"],
    "form+atoms": lambda q: q["qf"]["form"] + ("/a<=2" if q["ir"]["atoms"] <= 2 else "/a>=3"),
}


def candidates():
    c = []
    for op in OPS:
        c.append((f"fixed {op}", fixed_policy(op), False))
    c.append(("calib-best fixed (quality)", calbest_policy("quality"), True))
    c.append(("calib balanced fixed", calbest_policy("balanced"), True))
    for name, cls in CLASSES.items():
        parse = name in ("atoms", "shape", "form+atoms")
        c.append((f"router {name} (point)", router_policy(cls, "point", parse), True))
        c.append((f"router {name} (sig)", router_policy(cls, "sig", parse), True))
    for trig in T:
        if "unstable" in trig:  # a property of ITERATE's rounds; RETRIEVE has one round
            continue
        c.append((f"cascade RETRIEVE->fit on {trig}", cascade_policy("standard-rag", T[trig]), True))
    for tgt in ["iter-retgen", "linear", "auto"]:
        c.append((f"cascade RETRIEVE->{tgt} on suspect", cascade_policy("standard-rag", T["suspect"], tgt), False))
    for trig in ["unsupported", "suspect"]:
        c.append((f"cascade ITERATE->fit on {trig}", cascade_policy("iter-retgen", T[trig]), True))
    c.append(("cascade ITERATE->linear on suspect", cascade_policy("iter-retgen", T["suspect"], "linear"), False))
    for trig in ["unstable", "suspect|unstable"]:
        c.append((f"cascade ITERATE->fit on {trig}", cascade_policy("iter-retgen", T[trig]), True))
        c.append((f"cascade ITERATE->auto on {trig}", cascade_policy("iter-retgen", T[trig], "auto"), False))
    c.append(("balanced first -> calib-best on suspect", balanced_then_quality(T["suspect"]), True))
    c.append(
        (
            "chain RETRIEVE->ITERATE->TEMPLATE on suspect",
            chain_policy(["standard-rag", "iter-retgen", "linear"], T["suspect"]),
            False,
        )
    )
    c.append(
        (
            "chain RETRIEVE->TEMPLATE->auto on suspect",
            chain_policy(["standard-rag", "linear", "auto"], T["suspect"]),
            False,
        )
    )
    c.append(("agree(RETRIEVE,ITERATE) else fit", agree_policy("standard-rag", "iter-retgen"), True))
    c.append(("agree(RETRIEVE,ITERATE) else linear", agree_policy("standard-rag", "iter-retgen", "linear"), False))
    c.append(("agree(RETRIEVE,TEMPLATE) else fit", agree_policy("standard-rag", "linear"), True))
    c.append(("form router + RETRIEVE cascade on wh", form_then_cascade(), True))
    return c


# ---------------------------------------------------------------------------------------------- report


def fmt_d(d):
    m, lo, hi = d
    return f"{100 * m:+5.1f} [{100 * lo:+5.1f}, {100 * hi:+5.1f}]"


def describe(policy_fn):
    bits = []
    if getattr(policy_fn, "table", None) is not None:
        tab = ", ".join(f"{k}->{v}" for k, v in sorted(policy_fn.table.items())) or "none"
        bits.append(f"classes: {tab}; else {policy_fn.glob}")
    if hasattr(policy_fn, "first"):
        bits.append(f"first {policy_fn.first}")
    if hasattr(policy_fn, "target"):
        bits.append(f"target {policy_fn.target}")
    return "; ".join(bits)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=HERE / "results" / "runs")
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    args = ap.parse_args()
    data = load(args.runs, args.data)
    P = print

    P("# Per-question operator choice: offline analysis of the benchmark of record (issue 38)")
    P()
    P(f"Calibration = questions with index < {CAL} of each set; held-back = the rest. Nothing is fitted on")
    P("held-back questions. EM in %, s = mean recorded seconds per question (cascades pay every operator they")
    P(f"ran). Differences: paired percentile bootstrap, {BOOT} resamples, seed {SEED}, same resamples for every row.")
    P("Operators: standard-rag = RETRIEVE, iter-retgen = ITERATE, linear = TEMPLATE, tree = TREE, auto.")
    P("'vs cal' = against the best fixed operator picked on the set's calibration sample; 'vs hind' = against")
    P("the best fixed operator on the held-back questions themselves (in hindsight). 'right' = share of")
    P("held-back questions where the choice scores the oracle's EM (the best any of the five gets).")
    P()

    # ---------------------------------------------------------------- 1. fixed operators
    P("## 1. Fixed operators: calibration vs held-back")
    P()
    P("| set | part | n | " + " | ".join(f"{op}" for op in OPS) + " | oracle | majority-of-5 |")
    P("|---|---|---|" + "---|" * (len(OPS) + 2))
    for name in SETS:
        qs = data[name]
        for part, sel in (("cal", [q for q in qs if q["idx"] < CAL]), ("held", [q for q in qs if q["idx"] >= CAL])):
            orc = 100 * np.mean([max(q["ops"][op]["em"] for op in OPS) for q in sel])
            maj = []
            for q in sel:
                c = Counter(q["ops"][op]["norm"] for op in OPS)
                top = c.most_common(1)[0][0]
                maj.append(next(q["ops"][op]["em"] for op in OPS if q["ops"][op]["norm"] == top))
            cells = [f"{100 * em_of(sel, op):.1f} / {sec_of(sel, op):.1f}s" for op in OPS]
            P(
                f"| {SHORT[name]} | {part} | {len(sel)} | "
                + " | ".join(cells)
                + f" | {orc:.1f} | {100 * np.mean(maj):.1f} |"
            )
    P()
    P("Baselines on held-back questions 50-99 only (their runs stop at 100), beside the engine operators there:")
    P()
    P("| set | n | " + " | ".join(BASELINES + OPS) + " |")
    P("|---|---|" + "---|" * (len(BASELINES) + len(OPS)))
    for name in SETS:
        sel = [q for q in data[name] if CAL <= q["idx"] < 100 and all(b in q["base"] for b in BASELINES)]
        cells = [f"{100 * np.mean([q['base'][b]['em'] for q in sel]):.1f}" for b in BASELINES]
        cells += [f"{100 * em_of(sel, op):.1f}" for op in OPS]
        P(f"| {SHORT[name]} | {len(sel)} | " + " | ".join(cells) + " |")
    P()

    # ---------------------------------------------------------------- 2. answer support
    P("## 2. Is the answer supported by the passages the operator retrieved?")
    P()
    P("supported = the normalised answer occurs (whole words) in the normalised text of the passages the")
    P("operator retrieved; for a yes/no-form question, a yes/no answer counts as supported. 'suspect' = not")
    P("supported, or empty/unknown-like, or the answer repeats an entity of a non-choice question (echo), or")
    P("is none of a choice question's two options, or is a bare yes/no to a non-yes/no question.")
    P("All questions of each set (descriptive, nothing fitted).")
    P()
    P(
        "| set | operator | supported % | EM if supported | EM if not | suspect % | EM if suspect | EM if not suspect | echo % | EM if echo |"
    )
    P("|---|---|---|---|---|---|---|---|---|---|")
    for name in SETS:
        qs = data[name]
        for op in OPS:
            a = [q["ops"][op] for q in qs]

            def rate(f, a=a):
                return 100 * np.mean([f(x) for x in a])

            def em_if(f, a=a):
                s = [x["em"] for x in a if f(x)]
                return f"{100 * np.mean(s):.1f} (n={len(s)})" if s else "-"

            P(
                f"| {SHORT[name]} | {op} | {rate(lambda x: x['supported']):.1f} | {em_if(lambda x: x['supported'])} | "
                f"{em_if(lambda x: not x['supported'])} | {rate(lambda x: x['suspect']):.1f} | {em_if(lambda x: x['suspect'])} | "
                f"{em_if(lambda x: not x['suspect'])} | {rate(lambda x: x['echo']):.1f} | {em_if(lambda x: x['echo'])} |"
            )
    P()
    agree1 = sum(q["ops"]["iter-retgen"]["round1_is_retrieve"] for s in SETS for q in data[s])
    P(
        f"ITERATE's first-round answer equals RETRIEVE's answer on {agree1} of {sum(len(data[s]) for s in SETS)} "
        "questions: ITERATE's first round is RETRIEVE, so a RETRIEVE -> ITERATE escalation is charged ITERATE's seconds."
    )
    P()
    P("Escalation triggers on the first operator's answer: how often they fire, the first operator's EM when")
    P("they fire / do not, and every other operator's EM on the questions where they fire. cal | held.")
    P()
    P(
        "| set | first | trigger | fires % cal \\| held | first EM fired | first EM not fired | "
        + " | ".join(f"{op} on fired" for op in OPS)
        + " |"
    )
    P("|---|---|---|---|---|---|" + "---|" * len(OPS))
    for name in SETS:
        parts = ([q for q in data[name] if q["idx"] < CAL], [q for q in data[name] if q["idx"] >= CAL])
        for first in ("standard-rag", "iter-retgen"):
            for tname, trig in T.items():
                if first == "standard-rag" and "unstable" in tname:
                    continue
                fired = [[q for q in p if trig(q["ops"][first], q)] for p in parts]
                quiet = [[q for q in p if not trig(q["ops"][first], q)] for p in parts]

                def pair(a, b, op):
                    return f"{100 * em_of(a, op):.0f} \\| {100 * em_of(b, op):.0f}"

                P(
                    f"| {SHORT[name]} | {first} | {tname} | {100 * len(fired[0]) / len(parts[0]):.0f} \\| "
                    f"{100 * len(fired[1]) / len(parts[1]):.0f} | {pair(*fired, first)} | {pair(*quiet, first)} | "
                    + " | ".join(pair(*fired, op) for op in OPS)
                    + " |"
                )
    P()
    P("When RETRIEVE's answer is suspect / not suspect, EM of every operator on those questions (all questions):")
    P()
    P("| set | RETRIEVE answer | n | " + " | ".join(OPS) + " | oracle |")
    P("|---|---|---|" + "---|" * (len(OPS) + 1))
    for name in SETS:
        for lab, f in (
            ("suspect", lambda q: q["ops"]["standard-rag"]["suspect"]),
            ("not suspect", lambda q: not q["ops"]["standard-rag"]["suspect"]),
        ):
            sel = [q for q in data[name] if f(q)]
            orc = 100 * np.mean([max(q["ops"][op]["em"] for op in OPS) for q in sel]) if sel else 0
            P(
                f"| {SHORT[name]} | {lab} | {len(sel)} | "
                + " | ".join(f"{100 * em_of(sel, op):.1f}" for op in OPS)
                + f" | {orc:.1f} |"
            )
    P()

    # ---------------------------------------------------------------- 3. features
    P("## 3. Plan-time features: EM of every operator per class, calibration (n<50) | held-back")
    P()
    for cname in ["form", "form+wh", "form+compare", "length", "atoms", "shape"]:
        cls = CLASSES[cname]
        P(f"### classes: {cname}")
        P()
        P("| set | class | n cal | n held | " + " | ".join(OPS) + " |")
        P("|---|---|---|---|" + "---|" * len(OPS))
        for name in SETS:
            qs = data[name]
            groups = defaultdict(lambda: ([], []))
            for q in qs:
                groups[cls(q)][0 if q["idx"] < CAL else 1].append(q)
            for c in sorted(groups):
                cal, held = groups[c]
                cells = []
                for op in OPS:
                    a = f"{100 * em_of(cal, op):.0f}" if cal else "-"
                    b = f"{100 * em_of(held, op):.0f}" if held else "-"
                    cells.append(f"{a} \\| {b}")
                P(f"| {SHORT[name]} | {c} | {len(cal)} | {len(held)} | " + " | ".join(cells) + " |")
        P()
    P("Data set's own question type (a gold label, not available on unseen sets; descriptive only), all questions:")
    P()
    P("| set | type | n | " + " | ".join(OPS) + " |")
    P("|---|---|---|" + "---|" * len(OPS))
    for name in SETS:
        g = defaultdict(list)
        for q in data[name]:
            g[q["type"]].append(q)
        for t in sorted(g, key=str):
            P(
                f"| {SHORT[name]} | {t} | {len(g[t])} | "
                + " | ".join(f"{100 * em_of(g[t], op):.1f}" for op in OPS)
                + " |"
            )
    P()

    # ---------------------------------------------------------------- 4. candidates
    cands = candidates()
    scopes = ["own", "pooled", "others"]
    summary = defaultdict(dict)
    for scope in scopes:
        P(f"## 4.{scopes.index(scope) + 1} Candidates fitted on calibration scope '{scope}'")
        P()
        P(
            {
                "own": "Fitted on the set's own first 50 questions.",
                "pooled": "Fitted on the first 50 questions of all three sets together (150).",
                "others": "Fitted on the first 50 questions of the two other sets only (100): the set is 'unseen'.",
            }[scope]
        )
        P()
        for name in SETS:
            qs = data[name]
            held = [q for q in qs if q["idx"] >= CAL]
            own_cal = [q for q in qs if q["idx"] < CAL]
            cal = {
                "own": own_cal,
                "pooled": [q for s in SETS for q in data[s] if q["idx"] < CAL],
                "others": [q for s in SETS if s != name for q in data[s] if q["idx"] < CAL],
            }[scope]
            ref_cal = best_fixed(own_cal)  # the comparison is always the set's own calibration pick
            ref_hind = best_fixed(held)
            bi = boot_idx(len(held), SEED)
            orc = np.array([max(q["ops"][op]["em"] for op in OPS) for q in held])
            e_cal = np.array([q["ops"][ref_cal]["em"] for q in held])
            e_hind = np.array([q["ops"][ref_hind]["em"] for q in held])
            P(
                f"### {name} (held-back n={len(held)}; best fixed on own calibration: {ref_cal} "
                f"{100 * e_cal.mean():.1f}; in hindsight: {ref_hind} {100 * e_hind.mean():.1f}; oracle {100 * orc.mean():.1f})"
            )
            P()
            P("| candidate | EM | s/q | vs cal | vs hind | right % | fitted choice |")
            P("|---|---|---|---|---|---|---|")
            for cname, fit, fitted in cands:
                if scope != "own" and not fitted:
                    continue
                run = fit(cal)
                res = [run(q) for q in held]
                em = np.array([r[0] for r in res])
                sec = float(np.mean([r[1] for r in res]))
                d_cal = paired_interval(em - e_cal, bi)
                d_h = paired_interval(em - e_hind, bi)
                right = 100 * np.mean(em == orc)
                summary[(scope, cname)][name] = (100 * em.mean(), sec, d_cal, d_h)
                P(
                    f"| {cname} | {100 * em.mean():.1f} | {sec:.1f} | {fmt_d(d_cal)} | {fmt_d(d_h)} | {right:.0f} | {describe(run)} |"
                )
            P()

    # ---------------------------------------------------------------- 5. summary
    P("## 5. Summary: which candidates gain +3 EM on at least two of three sets")
    P()
    P("Per set: held-back EM / s per question / difference vs the calibration-picked fixed operator and vs")
    P("the hindsight-best fixed operator (point estimates; intervals in section 4). '#+3 cal' and '#+3 hind'")
    P("count the sets with a gain of at least 3 points.")
    P()
    P("| scope | candidate | " + " | ".join(SHORT[s] for s in SETS) + " | #+3 cal | #+3 hind | #lo>0 hind |")
    P("|---|---|" + "---|" * (len(SETS) + 3))
    for (scope, cname), per in summary.items():
        cells, n3c, n3h, nsig = [], 0, 0, 0
        for s in SETS:
            em, sec, dc, dh = per[s]
            cells.append(f"{em:.1f} / {sec:.1f}s / {100 * dc[0]:+.1f} / {100 * dh[0]:+.1f}")
            n3c += dc[0] >= 0.03 - 1e-9
            n3h += dh[0] >= 0.03 - 1e-9
            nsig += dh[1] > 0
        P(f"| {scope} | {cname} | " + " | ".join(cells) + f" | {n3c} | {n3h} | {nsig} |")
    P()
    win_h = sorted({c for (sc, c), per in summary.items() if sum(per[s][3][0] >= 0.03 - 1e-9 for s in SETS) >= 2})
    win_c = sorted(
        {f"{c} ({sc})" for (sc, c), per in summary.items() if sum(per[s][2][0] >= 0.03 - 1e-9 for s in SETS) >= 2}
    )
    P(
        "Candidates with +3 EM or more on at least two sets against the hindsight-best fixed operator: "
        + (", ".join(win_h) if win_h else "none")
        + "."
    )
    P("Against the fixed operator picked on the calibration sample: " + (", ".join(win_c) if win_c else "none") + ".")
    P()


if __name__ == "__main__":
    main()
