"""The experiment runner every benchmark uses: configurations side by side on the same cases.

An experiment is declared, not programmed (see ``benchmarks/``): the cases it measures (questions,
corpus sizes, prompts), the configurations compared on each (``configs``), one function that
measures one configuration on one case, and one that renders the records as the table a docs page
quotes. :func:`main` does the rest for all of them:

- records go to ``OUT/records.jsonl``, one line per (case, configuration), synced as they are made;
  running again resumes (pairs with a record are skipped); ``--force`` measures everything again;
- the configurations alternate on each case, their order rotating by case, so that a machine's
  drift over hours falls on all of them alike (quote their ratios, not their seconds);
- ``OUT/run.json`` says what ran: the command, its options (one field each), the commit, the machine,
  when;
- the table is written between the docs page's markers for the experiment's block, from the records
  alone, so ``--render`` (no measuring) regenerates exactly what the docs show.

>>> list(rotated(["a", "b", "c"], 1))
['b', 'c', 'a']
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import attrs

from nlqo.docblocks import write_block
from nlqo.eval.records import append_records, read_records

RECORDS = "records.jsonl"
RUN = "run.json"
REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"

Case = dict[str, Any]
Record = dict[str, Any]


@attrs.frozen
class Option:
    """One command-line option of an experiment: ``argparse.add_argument(*flags, **kwargs)``."""

    flags: tuple[str, ...]
    kwargs: dict[str, Any] = attrs.field(factory=dict)

    @classmethod
    def of(cls, *flags: str, **kwargs: Any) -> Option:
        return cls(flags, kwargs)


@attrs.frozen
class Experiment:
    """A side-by-side experiment: ``measure`` of every configuration on every case, rendered by ``table``.

    ``cases(args)`` yields dicts whose ``key`` fields name a case; a record is the case, the
    configuration under ``config_field``, and what ``measure(context, case, config)`` returned.
    ``setup(args)`` makes the context once per run (a loaded model, say); ``configs(args)`` names the
    configurations. ``table(records, run)`` gets every record and ``run.json``; ``artifacts(records,
    run, out)``, when given, writes what else the records make (plots, summaries) into ``out``.
    """

    name: str
    doc: str
    block: str
    cases: Callable[[argparse.Namespace], Iterable[Case]]
    measure: Callable[[Any, Case, str], Record]
    table: Callable[[list[Record], dict[str, Any]], str]
    configs: Callable[[argparse.Namespace], Sequence[str]] = lambda args: ("default",)
    setup: Callable[[argparse.Namespace], Any] = lambda args: args
    options: tuple[Option, ...] = ()
    artifacts: Callable[[list[Record], dict[str, Any], Path], None] | None = None
    key: tuple[str, ...] = ("case",)
    config_field: str = "config"
    title: str = ""
    about: str = ""

    @property
    def out(self) -> Path:
        return RESULTS / self.name

    def record_key(self, record: Record) -> tuple[Any, ...]:
        return (*(record.get(k) for k in self.key), record.get(self.config_field))


def rotated(items: Sequence[str], shift: int) -> Iterable[str]:
    """``items`` starting at ``shift`` (modulo their number), wrapping around."""
    shift = shift % len(items) if items else 0
    return [*items[shift:], *items[:shift]]


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def machine() -> dict[str, Any]:
    """The machine a run measured on."""
    return {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version()}


def load(out: Path) -> tuple[list[Record], dict[str, Any]]:
    """The records and ``run.json`` of a results folder (a torn last record is dropped: it runs again)."""
    run_path = out / RUN
    run = json.loads(run_path.read_text(encoding="utf-8")) if run_path.exists() else {}
    return read_records(out / RECORDS), run


def render(experiment: Experiment, out: Path | None = None) -> str:
    """The experiment's table, from its records alone."""
    records, run = load(out or experiment.out)
    return experiment.table(records, run)


def measure_all(experiment: Experiment, args: argparse.Namespace, out: Path) -> int:
    """Measure every (case, configuration) without a record; the number measured."""
    path = out / RECORDS
    done = {experiment.record_key(r) for r in read_records(path)}
    cases = list(experiment.cases(args))
    configs = list(experiment.configs(args))
    todo = [
        (case, config)
        for i, case in enumerate(cases)
        for config in rotated(configs, i)
        if (*(case.get(k) for k in experiment.key), config) not in done
    ]
    if not todo:
        return 0
    context = experiment.setup(args)
    for n, (case, config) in enumerate(todo, 1):
        started = time.perf_counter()
        record = {**case, experiment.config_field: config, **experiment.measure(context, case, config)}
        append_records(path, [record])
        name = " ".join(str(case.get(k)) for k in experiment.key)
        print(f"[{n}/{len(todo)}] {name} {config}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return len(todo)


def parser(experiment: Experiment) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=experiment.about, formatter_class=argparse.RawDescriptionHelpFormatter)
    for option in experiment.options:
        p.add_argument(*option.flags, **option.kwargs)
    p.add_argument("--out", type=Path, default=experiment.out, help="results folder (default: %(default)s)")
    p.add_argument("--render", action="store_true", help="only rewrite the docs table from the records")
    p.add_argument("--force", action="store_true", help="measure again what has records")
    p.add_argument("--no-docs", action="store_true", help=f"do not write the table into {experiment.doc}")
    return p


def main(experiment: Experiment, argv: Sequence[str] | None = None) -> int:
    """Run an experiment from the command line (see the module's docstring)."""
    args = parser(experiment).parse_args(argv)
    out: Path = args.out
    if not args.render:
        out.mkdir(parents=True, exist_ok=True)
        if args.force:
            (out / RECORDS).unlink(missing_ok=True)
        options = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        for k in ("out", "render", "force", "no_docs"):
            options.pop(k)
        from nlqo.eval.runner import source_commit

        previous = load(out)[1]
        run = {
            "experiment": experiment.name,
            "command": " ".join([Path(sys.argv[0]).name, *(sys.argv[1:] if argv is None else argv)]),
            "commit": source_commit(),
            "started": now(),
            **machine(),
            **options,
        }
        if previous.get("started") and not args.force:
            run["first_started"] = previous.get("first_started", previous["started"])
        (out / RUN).write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")
        measured = measure_all(experiment, args, out)
        print(f"{measured} measured; records in {out / RECORDS}", file=sys.stderr)
    text = render(experiment, out)
    print(text)
    if experiment.artifacts is not None:
        experiment.artifacts(*load(out), out)
    if experiment.doc and not args.no_docs:
        write_block(REPO / experiment.doc, experiment.block, text, title=experiment.title)
    return 0
