"""PNG plots of a run, drawn with matplotlib's object API (no pyplot, no global backend switch)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from nlqo.eval.metrics import wilson_interval
from nlqo.common.extras import need

PLOTS = ("em_vs_seconds.png", "tokens_per_question.png", "hops_histogram.png")


def _figure(width: float, height: float):
    Figure = need("matplotlib.figure", "eval").Figure

    return Figure(figsize=(width, height), layout="constrained")


MARKERS = "osD^vP*Xhp<>"


def em_vs_seconds(summary: dict[str, Any], path: Path) -> Path:
    """EM (%) against mean seconds per question, one marker per strategy named in the legend
    (labels beside points overlap when strategies cost alike); log time axis when times span 10x."""
    fig = _figure(7.2, 4.4)
    ax = fig.subplots()
    seconds = []
    for i, name in enumerate(summary["strategies"]):
        r = summary["results"][name]
        if r["seconds"] is None or r["em"] is None:
            continue
        seconds.append(r["seconds"])
        ax.scatter(r["seconds"], 100 * r["em"], s=55, marker=MARKERS[i % len(MARKERS)], label=name, alpha=0.85)
    if seconds and min(seconds) > 0 and max(seconds) / min(seconds) >= 10:
        from matplotlib.ticker import LogLocator, ScalarFormatter

        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.set_xlabel("seconds per question (mean)")
    ax.set_ylabel("EM (%)")
    ax.set_title(f"{summary['dataset']}: EM vs time (n={summary['n']})")
    ax.grid(alpha=0.3, which="both")
    if seconds:
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.savefig(path, dpi=120)
    return path


def em_vs_seconds_sets(panels: Sequence[tuple[str, Sequence[tuple[str, float, float, int, bool]]]], path: Path) -> Path:
    """One panel per data set: EM (%) with its 95% Wilson interval against mean seconds per question,
    for ``(title, [(strategy, em, seconds, n, other_run), ...])``; ``other_run`` points (a strategy
    measured on fewer questions, in a sibling run) are hollow."""
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    fig = _figure(4.2 * len(panels) + 1.6, 4.4)
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    names = list(dict.fromkeys(name for _, points in panels for name, *_ in points))
    for ax, (title, points) in zip(axes, panels):
        for name, em, seconds, n, other_run in points:
            low, high = wilson_interval(em * n, n)
            colour = f"C{names.index(name) % 10}"
            ax.errorbar(
                seconds,
                100 * em,
                yerr=[[100 * (em - low)], [100 * (high - em)]],
                fmt="none",
                ecolor=colour,
                alpha=0.35,
                capsize=2,
            )
            ax.scatter(seconds, 100 * em, s=55, marker=MARKERS[names.index(name) % len(MARKERS)], alpha=0.9,
                       facecolors="none" if other_run else colour, edgecolors=colour, label=name + (" (fewer questions)" if other_run else ""))  # fmt: skip
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(FixedLocator([1, 2, 5, 10, 20, 50, 100, 200, 500]))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("seconds per question (mean, log)")
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("EM (%), 95% interval")
    handles: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    fig.legend(handles.values(), handles.keys(), fontsize=8, loc="outside right center")
    fig.savefig(path, dpi=120)
    return path


def _tick(name: str, width: int = 28) -> str:
    """A strategy name short enough for a rotated tick label (an ablation's file path can fill the figure).

    >>> _tick("tree[cost_model=/tmp/pytest-of-root/pytest-7/chain.cost]")
    'tree[cost_model=…chain.cost]'
    >>> _tick("auto")
    'auto'
    """
    if len(name) <= width:
        return name
    head, _, rest = name.partition("=")
    tail = rest.rsplit("/", 1)[-1]
    short = f"{head}=…{tail}" if rest else name
    return short if len(short) <= width else short[: width - 1] + "…"


def tokens_per_question(summary: dict[str, Any], rows: Mapping[str, Sequence[dict[str, Any]]], path: Path) -> Path:
    """Generated tokens per question (box plot) and mean prompt tokens computed vs from cache."""
    names = summary["strategies"]
    labels = [_tick(n) for n in names]
    fig = _figure(max(6.4, 1.1 * len(names) + 2), 4.6)
    left, right = fig.subplots(1, 2)
    left.boxplot([[r["generated_tokens"] for r in rows[n]] or [0] for n in names])
    left.set_xticks(range(1, len(names) + 1), labels)
    left.set_title("generated tokens per question")
    computed = [summary["results"][n]["computed_prompt_tokens"] or 0 for n in names]
    cached = [summary["results"][n]["cached_prompt_tokens"] or 0 for n in names]
    right.bar(labels, computed, label="computed")
    right.bar(labels, cached, bottom=computed, label="from cache")
    right.set_title("prompt tokens per question (mean)")
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.tick_params(axis="x", labelrotation=45, labelsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"{summary['dataset']} (n={summary['n']})")
    fig.savefig(path, dpi=120)
    return path


def hops_histogram(summary: dict[str, Any], path: Path) -> Path:
    """Questions per hop count (retrievals), grouped bars per strategy."""
    names = summary["strategies"]
    hops = sorted({int(h) for n in names for h in summary["results"][n]["hops_histogram"]}) or [0]
    fig = _figure(max(6.4, 0.6 * len(hops) * max(1, len(names)) / 2 + 3), 4.4)
    ax = fig.subplots()
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        counts = summary["results"][name]["hops_histogram"]
        ax.bar(
            [h + (i - (len(names) - 1) / 2) * width for h in hops],
            [counts.get(str(h), 0) for h in hops],
            width,
            label=name,
        )
    ax.set_xticks(hops)
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("hops (retrievals) per question")
    ax.set_ylabel("questions")
    ax.set_title(f"{summary['dataset']}: hops (n={summary['n']})")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.savefig(path, dpi=120)
    return path


def write_plots(summary: dict[str, Any], rows: Mapping[str, Sequence[dict[str, Any]]], folder: Path) -> list[Path]:
    """Write the three plots into ``folder``; return their paths (named as in ``PLOTS``)."""
    folder.mkdir(parents=True, exist_ok=True)
    return [
        em_vs_seconds(summary, folder / PLOTS[0]),
        tokens_per_question(summary, rows, folder / PLOTS[1]),
        hops_histogram(summary, folder / PLOTS[2]),
    ]
