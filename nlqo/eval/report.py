"""Generate ``docs/benchmarks.md`` from bench result folders (never edited by hand).

The generated part sits between ``<!-- BEGIN bench-report -->`` and ``<!-- END bench-report -->``;
text outside the markers is kept. It holds the summary: the runs, every strategy on every run, a
plot of every strategy on every set. Each run's details go to a page of their own,
``docs/benchmarks/<parent>/<run>.md``, its plots beside it in ``docs/benchmarks/<parent>/<run>/``;
how the baselines work goes to ``docs/benchmarks/baselines.md``.
"""

from __future__ import annotations

import inspect
import json
import os
import shlex
import shutil
from pathlib import Path
from typing import Any, Sequence

import attrs

from nlqo.common.docblocks import write_block
from nlqo.errors import ConfigError
from nlqo.eval import plan_pages
from nlqo.eval.plots import PLOTS, em_vs_seconds_sets
from nlqo.eval.runner import ANSWERS, SUMMARY, refresh
from nlqo.eval.summary import counted, differences_table, kinds_table, markdown_table
from nlqo.runtime.prompts.baselines import IRCOT, NO_RAG, SELF_ASK, STANDARD_RAG, TextPrompt
from nlqo.eval.baselines import BASELINES

BLOCK = "bench-report"
COMPANION = "-baselines"
"""Suffix of the folder that holds a run's other baselines on its first questions (``make bench``)."""
SETS_PLOT = "em_vs_seconds_sets.png"
"""The report's plot of every strategy on every set, beside ``docs``'s folder ``benchmarks/``."""
PROMPTS = {
    "no-rag": (NO_RAG,),
    "standard-rag": (STANDARD_RAG,),
    "iter-retgen": (STANDARD_RAG,),
    "ircot": (IRCOT,),
    "self-ask": (SELF_ASK,),
}


def load_run(folder: str | Path) -> dict[str, Any]:
    """The summary of a result folder (its ``meta`` holds ``run.json``), brought up to date with its records."""
    refresh(folder)
    path = Path(folder) / SUMMARY
    if not path.is_file():
        raise ConfigError(f"{folder}: no {SUMMARY}; run 'nlqo bench ... --out {folder}' first")
    summary = json.loads(path.read_text(encoding="utf-8"))
    summary["folder"] = str(Path(folder))
    return summary


def _machine(meta: dict[str, Any]) -> str:
    m = meta.get("machine") or {}
    load = m.get("load_average")
    busy = f", load average {load[0]} at start" if load else ""
    return f"{m.get('cpus', '?')} CPUs, {m.get('memory_gib', '?')} GiB, {m.get('platform', '?')}{busy}"


def _quantization(meta: dict[str, Any]) -> str:
    """How the model's weights were used, when not as stored, and on which runtime.

    >>> _quantization({"quantize": "int8"})
    ' with int8 linear layers (--quantize int8; LOSSY: halved the default model EM, docs/models.md)'
    >>> _quantization({"quantize": "none", "runtime": "llama-cpp"}), _quantization({})
    (' on llama-cpp', '')
    """
    kind = meta.get("quantize") or "none"
    runtime = f" on {meta['runtime']}" if meta.get("runtime") else ""
    if kind == "none":
        return runtime
    return (
        f"{runtime} with {kind} linear layers (--quantize {kind}; LOSSY: halved the default model EM, docs/models.md)"
    )


def _lossy(meta: dict[str, Any]) -> str:
    """A label for figures measured on a lossy setting, to stand next to every one of them.

    >>> _lossy({"quantize": "int8"}), _lossy({"quantize": "none"})
    (', int8 (lossy)', '')
    """
    kind = meta.get("quantize") or "none"
    return "" if kind == "none" else f", {kind} (lossy)"


def _threads(meta: dict[str, Any]) -> str:
    noun = "llama.cpp thread" if meta.get("runtime") == "llama-cpp" else "torch thread"
    return f", {counted(meta['threads'], noun)}" if meta.get("threads") else ""


def _commits(meta: dict[str, Any]) -> str:
    """The source commit(s) a run's records came from.

    >>> _commits({"nlqo_commit": "abc"}), _commits({"commits": ["abc", "def"]}), _commits({})
    (' at abc', ' at abc, def (resumed on a later commit)', '')
    """
    commits = [c for c in meta.get("commits") or [meta.get("nlqo_commit")] if c]
    if not commits:
        return ""
    return f" at {', '.join(commits)}" + (" (resumed on a later commit)" if len(commits) > 1 else "")


def plan_groups_table(summary: dict[str, Any]) -> list[str]:
    """Every strategy's EM on the questions grouped by what each planning strategy ran.

    >>> s = {"strategies": ["linear", "auto"], "plan_groups": {"auto": {
    ...     "linear": {"n": 3, "em": {"linear": 1 / 3, "auto": 2 / 3}}, "parse_failed": {"n": 1, "em": {"linear": 0.0, "auto": 1.0}}}}}
    >>> print("\\n".join(plan_groups_table(s)[2:]))
    | questions on which | n | linear | auto |
    |---|---|---|---|
    | auto ran a linear plan | 3 | 33.3 | **66.7** |
    | auto ran no plan (did not parse; linear template) | 1 | 0.0 | **100.0** |
    <BLANKLINE>
    """
    groups = summary.get("plan_groups") or {}
    if not groups:
        return []
    names = summary["strategies"]
    lines = [
        "EM (%) of every strategy on the questions grouped by what a planning strategy ran (its own column in bold). "
        "Within a row the questions are the same; across rows they differ (questions that parse may be easier).",
        "",
        f"| questions on which | n | {' | '.join(names)} |",
        "|---|---|" + "---|" * len(names),
    ]
    for planner, by_key in groups.items():
        for key, group in by_key.items():
            cells = [f"{100 * group['em'][n]:.1f}" for n in names]
            cells = [f"**{c}**" if n == planner else c for n, c in zip(names, cells)]
            lines.append(
                f"| {planner} ran {_PLAN_LABELS.get(key, f'a {key} plan')} | {group['n']} | {' | '.join(cells)} |"
            )
    return [*lines, ""]


_PLAN_LABELS = {"parse_failed": "no plan (did not parse; linear template)"}


def _stray_yes_no(summary: dict[str, Any]) -> str:
    """Which strategies answered a bare yes or no where the gold answer is neither.

    >>> _stray_yes_no({"strategies": ["a", "b", "c"], "results": {"a": {"stray_yes_no": 18}, "b": {"stray_yes_no": 0}, "c": {}}})
    'Answered a bare yes or no to a question whose gold answer is neither (questions): a 18.'
    """
    counts = [(n, summary["results"][n].get("stray_yes_no") or 0) for n in summary["strategies"]]
    cells = [f"{n} {c}" for n, c in counts if c]
    return (
        f"Answered a bare yes or no to a question whose gold answer is neither (questions): {', '.join(cells)}."
        if cells
        else ""
    )


def _demo_leaks(summary: dict[str, Any]) -> str:
    """Which strategies answered with a demonstration's answer that no retrieved passage contains.

    >>> _demo_leaks({"strategies": ["a", "b"], "results": {"a": {"demo_leaks": 0}, "b": {"demo_leaks": 0}}})
    'Demonstration answers in predictions without a retrieved passage that contains them: none.'
    >>> _demo_leaks({"strategies": ["a", "b"], "results": {"a": {"demo_leaks": 2}, "b": {}}})
    'Demonstration answers in predictions without a retrieved passage that contains them: **a 2** (copied from a prompt).'
    >>> _demo_leaks({"strategies": ["a"], "results": {"a": {"demo_leaks": None}}})
    ''
    """
    results = summary["results"]
    if all(results[n].get("demo_leaks") is None for n in summary["strategies"]):
        return ""  # records from before the check
    cells = [f"{n} {results[n]['demo_leaks']}" for n in summary["strategies"] if results[n].get("demo_leaks")]
    head = "Demonstration answers in predictions without a retrieved passage that contains them: "
    return head + (f"**{', '.join(cells)}** (copied from a prompt)." if cells else "none.")


def _remaining(summary: dict[str, Any]) -> str:
    """The CPU time the missing questions need at the rate measured so far.

    >>> _remaining({"pending": 36, "results": {"a": {"seconds": 300.0}, "b": {"seconds": 62.0}}})
    ' (at the measured 362 s per question for all strategies, about 3.6 process-hours)'
    """
    per_question = sum(r["seconds"] or 0.0 for r in summary["results"].values())
    if not per_question:
        return ""
    return f" (at the measured {per_question:.0f} s per question for all strategies, about {summary['pending'] * per_question / 3600:.1f} process-hours)"


def run_page(summary: dict[str, Any], docs: Path) -> Path:
    """Where a run's page goes: ``docs/benchmarks/<parent>/<folder>.md`` (runs of the same name in
    other folders, an int8 run beside a faithful one, keep their own)."""
    folder = Path(summary["folder"]).resolve()
    return docs.parent / "benchmarks" / folder.parent.name / f"{folder.name}.md"


def _link(target: Path, page: Path) -> str:
    """``target`` relative to the folder of ``page``, for a Markdown link."""
    return Path(os.path.relpath(target.resolve(), page.parent.resolve())).as_posix()


def _copy_plots(summary: dict[str, Any], page: Path) -> list[str]:
    """Copy a run's plots into the folder beside its ``page`` and link them."""
    target = page.with_suffix("")
    target.mkdir(parents=True, exist_ok=True)
    links = []
    for name in PLOTS:
        source = Path(summary["folder"]) / name
        if source.is_file():
            shutil.copyfile(source, target / name)
            links.append(f"![{summary['dataset']} {name[:-4]}]({target.name}/{name})")
    return links


def run_section(summary: dict[str, Any], page: Path) -> str:
    """One run's page, to be written at ``page``: setup, results table, EM differences and plots."""
    meta = summary["meta"]
    against = "auto" if "auto" in summary["strategies"] else None
    command = meta.get("command")
    lines = [
        f"# {summary['dataset']} ({Path(summary['folder']).name}): {counted(summary['n'], 'question')}{_lossy(meta)}",
        "",
        "Generated by `nlqo bench --report`; do not edit by hand. Back to [the benchmarks](../../benchmarks.md).",
        "",
        f"- model `{meta.get('model', '?')}`{_quantization(meta)}, embedder `{meta.get('embedder', '?')}`, retrieval {meta.get('retrieval', '?')}, top-k {meta.get('k', '?')}",
        f"- machine: {_machine(meta)}{_threads(meta)}; nlqo {meta.get('nlqo_version', '?')}{_commits(meta)}",
        f"- run started {meta.get('started', '?')}, "
        + (
            f"finished {meta.get('finished', '?')}"
            if "summarized" not in meta
            else f"summarized while in progress {meta['summarized']}"
        ),
    ]
    if command:
        lines.append(f"- reproduce: `{shlex.join(command)}`")
    answers = Path(summary["folder"]) / ANSWERS
    if answers.is_file():
        lines.append(f"- every question with each strategy's answer: [{ANSWERS}]({_link(answers, page)})")
    pages = Path(summary["folder"]) / plan_pages.FILENAME
    if pages.is_file():
        lines.append(
            f"- the EXPLAIN ANALYZE page of every planned run: [{plan_pages.FILENAME}]({_link(pages, page)})"
            f" (open it in a browser; {ANSWERS} links each question's plan)"
        )
    if summary["pending"]:
        lines.append(
            f"- **{summary['pending']} of the {summary['questions']} questions are not yet finished by every strategy** and are "
            f"left out; the command above resumes the run{_remaining(summary)}"
        )
    lines += ["", markdown_table(summary)]
    lines += plan_groups_table(summary)
    for line in (_stray_yes_no(summary), _demo_leaks(summary)):
        if line:
            lines += [line, ""]
    kinds = kinds_table(summary)
    if kinds:
        lines += [
            "EM by kind of question (HotpotQA and 2Wiki: the data set's type, yes/no answers apart; MuSiQue: hops):",
            "",
            kinds,
        ]
    lines += ["EM differences, paired bootstrap 95% intervals:", "", differences_table(summary, against=against)]
    lines += [*_copy_plots(summary, page), ""]
    return "\n".join(lines)


def baselines_section() -> str:
    """How each baseline works, what it follows, its limits and its prompts (from the code)."""
    lines = [
        "# Baselines",
        "",
        "Generated by `nlqo bench --report` from `nlqo/eval/baselines.py` and `nlqo/runtime/prompts/baselines.py`; "
        "do not edit by hand. Back to [the benchmarks](../benchmarks.md). The control flow and prompt "
        "wording follow FlashRAG (Jin et al. 2024, github.com/RUC-NLPIR/FlashRAG, `flashrag/pipeline/active_pipeline.py` "
        "and `examples/methods/run_exp.py`), which implements Iter-RetGen (Shao et al., EMNLP Findings 2023), IRCoT "
        "(Trivedi et al., ACL 2023) and Self-Ask (Press et al., EMNLP Findings 2023); the few-shot demonstrations are our own. "
        "Every strategy of a run uses the same model (greedy), retriever and top-k. Hops count retrievals. Every "
        "strategy, baselines included, asks the backend to reuse its prefix KV cache (a server with automatic prefix "
        "caching does the same for any client), and each strategy of a run has its own prefix cache on the shared "
        "weights, so none borrows or evicts another's; what only the linear template has is one transcript that grows "
        "in a single KV state. FlashRAG caps every generation at 32 tokens, "
        "here answers keep 32 and the IRCoT and self-ask steps get 64. Every strategy's final text, baseline or "
        "engine, goes through the same extraction before scoring (`nlqo.execution.answers.short_answer`: the first line, "
        "without scaffold the model went on to write, a bare yes/no when it starts with one, the quoted name when it "
        "starts with one, no trailing period).",
        "",
    ]
    for name, cls in BASELINES.items():
        doc = inspect.cleandoc(cls.__doc__ or "")
        limits = [f"{a.name}={a.default}" for a in attrs.fields(cls) if a.name not in ("llm", "retriever")]
        lines += [f"## {name}", "", doc, "", f"Defaults: {', '.join(limits)}.", ""]
        for prompt in PROMPTS.get(name, ()):
            lines += _prompt_block(prompt)
    return "\n".join(lines)


def _prompt_block(prompt) -> list[str]:
    if isinstance(prompt, TextPrompt):
        kind, body = "raw completion", prompt.template
    else:
        kind, body = "chat", f"[system]\n{prompt.instruction}\n\n[user]\n{prompt.template}"
    stops = ", ".join(repr(s) for s in prompt.stop) or "none"
    return [
        f"<details><summary>prompt <code>{prompt.name}</code> ({kind}; stop {stops}; at most {prompt.max_tokens} tokens)</summary>",
        "",
        "```text",
        body,
        "```",
        "</details>",
        "",
    ]


def _run_label(summary: dict[str, Any]) -> str:
    """The run's data set, with its folder where that is another name (an ablation's, say).

    >>> _run_label({"dataset": "d1", "folder": "runs/d1"}), _run_label({"dataset": "d1", "folder": "ablations/tau"})
    ('d1', 'd1 tau')
    >>> _run_label({"dataset": "d1", "folder": "runs/d1-baselines"})
    'd1-baselines'
    """
    folder = Path(summary.get("folder", summary["dataset"])).name
    return folder if folder.startswith(summary["dataset"]) else f"{summary['dataset']} {folder}"


def overview(runs: Sequence[dict[str, Any]]) -> list[str]:
    """EM and seconds per question of every strategy on every run, one column per run; a
    ``-baselines`` run shares its main run's column, its cells marked with its question count.

    >>> runs = [{"dataset": "d1", "n": 2, "strategies": ["a"], "results": {"a": {"em": 0.5, "seconds": 3.0}}},
    ...         {"dataset": "d2", "n": 1, "strategies": ["a", "b"], "results": {"a": {"em": 1.0, "seconds": 2.0}, "b": {"em": 0.0, "seconds": 1.0}}},
    ...         {"dataset": "d1", "folder": "runs/d1-baselines", "n": 1, "strategies": ["c"], "results": {"c": {"em": 1.0, "seconds": 9.0}}}]
    >>> print("\\n".join(overview(runs)[2:7]))
    | strategy | d1 (n=2) | d2 (n=1) |
    |---|---|---|
    | a | 50.0 · 3.0 s | 100.0 · 2.0 s |
    | b | - | 0.0 · 1.0 s |
    | c | 100.0 · 9.0 s (first 1) | - |
    """
    if len(runs) < 2:
        return []
    columns: dict[tuple[str, str], list[dict[str, Any]]] = {}  # (label, lossy): its runs, the main run first
    for s in runs:
        label, lossy = _run_label(s), _lossy(s.get("meta", {}))
        main = (label.removesuffix(COMPANION), lossy)
        key = main if label.endswith(COMPANION) and main in columns else (label, lossy)
        columns.setdefault(key, []).append(s)
    names = list(dict.fromkeys(n for s in runs for n in s["strategies"]))
    heads = " | ".join(f"{label} (n={group[0]['n']}{lossy})" for (label, lossy), group in columns.items())
    lines = ["## Overview", "", f"| strategy | {heads} |", "|---|" + "---|" * len(columns)]
    for name in names:
        cells = []
        for group in columns.values():
            found = [run for run in group if name in run["results"] and run["results"][name]["em"] is not None]
            if not found:
                cells.append("-")
                continue
            r = found[0]["results"][name]
            first = f" (first {found[0]['n']})" if found[0] is not group[0] else ""
            cells.append(f"{100 * r['em']:.1f} · {r['seconds']:.1f} s{first}")
        lines.append(f"| {name} | {' | '.join(cells)} |")
    return [
        *lines,
        "",
        "EM (%) · seconds per question; '(first n)': a strategy of the set's `-baselines` run, on the first n questions only; each run's page has the rest.",
        "",
    ]


def sets_panels(runs: Sequence[dict[str, Any]]) -> list[tuple[str, list[tuple[str, float, float, int, bool]]]]:
    """The panels of the plot of every strategy on every set (:func:`em_vs_seconds_sets`): one per run
    of the faithful runtime that has its ``-baselines`` sibling among ``runs`` (the benchmark's runs;
    ablations and lossy runs have none), the sibling's strategies, by name, marked as measured on
    fewer questions.

    >>> runs = [{"dataset": "d", "folder": "runs/d", "n": 4, "meta": {}, "results": {"auto": {"em": 0.5, "seconds": 2.0}}},
    ...         {"dataset": "d", "folder": "runs/d-baselines", "n": 2, "meta": {},
    ...          "results": {"self-ask": {"em": 0.5, "seconds": 3.0}, "ircot": {"em": 0.0, "seconds": 9.0}}}]
    >>> sets_panels(runs)[0]
    ('d (n=4)', [('auto', 0.5, 2.0, 4, False), ('ircot', 0.0, 9.0, 2, True), ('self-ask', 0.5, 3.0, 2, True)])
    >>> sets_panels(runs[:1]), sets_panels([{**runs[0], "meta": {"quantize": "int8"}}, runs[1]])
    ([], [])
    """
    siblings = {str(Path(s["folder"])): s for s in runs}
    panels = []
    for s in runs:
        sibling = siblings.get(str(Path(s["folder"])) + COMPANION)
        if sibling is None or _lossy(s.get("meta", {})):
            continue
        points = [
            (n, r["em"], r["seconds"], s["n"], False)
            for n, r in s["results"].items()
            if r["em"] is not None and r["seconds"]
        ]
        points += [
            (n, r["em"], r["seconds"], sibling["n"], True)
            for n, r in sorted(sibling["results"].items())
            if n not in s["results"] and r["em"] is not None and r["seconds"]
        ]
        panels.append((f"{s['dataset']} (n={s['n']})", points))
    return panels


def sets_section(runs: Sequence[dict[str, Any]], docs: Path) -> list[str]:
    """The plot of every strategy on every set (:func:`sets_panels`), written beside ``docs``."""
    panels = sets_panels(runs)
    if not panels:
        return []
    (docs.parent / "benchmarks").mkdir(parents=True, exist_ok=True)
    em_vs_seconds_sets(panels, docs.parent / "benchmarks" / SETS_PLOT)
    return [
        f"![EM against seconds per question on every set](benchmarks/{SETS_PLOT})",
        "",
        "Every strategy on every set: EM with its 95% interval (Wilson) against seconds per question; hollow "
        "markers are the `-baselines` runs' strategies, on their first questions only.",
        "",
    ]


BASELINES_PAGE = "benchmarks/baselines.md"
"""How the baselines work, beside ``docs``."""


def render_report(folders: Sequence[str | Path], docs: Path) -> str:
    """The generated Markdown for ``folders``; writes each run's page and the baselines page beside ``docs``."""
    runs = [load_run(f) for f in folders]
    lines = [
        "Generated by `nlqo bench --report` from result folders; do not edit by hand. Percentages for EM, F1, Acc, "
        "judge and evidence recall; 'all gold retrieved' is the share of questions whose every gold supporting "
        "passage (by title) was retrieved at some point of the run, 'gold retrieved' the mean share of gold passages retrieved; "
        "'parse failed' counts the questions the model could not turn into a valid plan, which the engine strategies "
        "then answer with the linear template. "
        "Answers are compared after SQuAD normalisation with every gold alias; when the gold answer is yes or no, "
        "a prediction is scored on its first yes or no word (the same rule for every strategy). "
        f"Each run's page has its setup, command, tables by kind of question, EM differences and plots; "
        f"[{Path(BASELINES_PAGE).name}]({BASELINES_PAGE}) says how each baseline works, with its prompts.",
        "",
        "## Runs",
        "",
        "| dataset | run | n | strategies | model | date |",
        "|---|---|---|---|---|---|",
    ]
    for s in runs:
        page = run_page(s, docs)
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(run_section(s, page) + "\n", encoding="utf-8")
        lines.append(
            f"| {s['dataset']} | [{Path(s['folder']).name}]({_link(page, docs)}) | {s['n']} | {', '.join(s['strategies'])} "
            f"| {s['meta'].get('model', '?')}{_quantization(s['meta'])} | {s['meta'].get('started', '?')} |"
        )
    if not runs:
        lines.append("| (none yet: run `nlqo bench ... --out DIR`, then `nlqo bench --report DIR...`) | | | | | |")
    lines += ["", *overview(runs), *sets_section(runs, docs)]
    baselines = docs.parent / BASELINES_PAGE
    baselines.parent.mkdir(parents=True, exist_ok=True)
    baselines.write_text(baselines_section() + "\n", encoding="utf-8")
    return "\n".join(lines)


def write_report(folders: Sequence[str | Path], docs: str | Path = "docs/benchmarks.md") -> Path:
    """Write the generated block of ``docs`` from ``folders``, and the pages beside it; keep anything
    outside the markers."""
    docs = Path(docs)
    docs.parent.mkdir(parents=True, exist_ok=True)
    body = render_report(folders, docs)
    write_block(docs, BLOCK, body, title="Benchmarks")
    return docs
