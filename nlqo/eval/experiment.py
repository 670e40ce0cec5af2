"""The experiment runner every benchmark uses: configurations side by side on the same cases.

An experiment is declared, not programmed (see ``benchmarks/``): the cases it measures (questions,
corpus sizes, prompts), the configurations compared on each (``configs``), one function that
measures one configuration on one case, and the blocks that render the records as the tables the docs
quote. :func:`main` does the rest for all of them:

- records go to ``OUT/records.jsonl``, one line per (case, configuration), synced as they are made,
  each with the time it was measured (``measured_at``: a table of a part re-run later cites its own date);
  running again resumes (pairs with a record are skipped); ``--force`` measures everything again;
- the configurations alternate on each case, their order rotating by case, so that a machine's
  drift over hours falls on all of them alike (quote their ratios, not their seconds);
- ``OUT/run.json`` says what ran: the command, its options (one field each), the commit, the machine,
  when;
- each table is written between its docs page's markers (an experiment may fill several blocks), from
  the records alone, so ``--render`` (no measuring) regenerates exactly what the docs show.

>>> list(rotated(["a", "b", "c"], 1))
['b', 'c', 'a']
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import attrs

from nlqo.common.docblocks import write_block
from nlqo.eval.host import load_average as load_average, machine, now, source_commit
from nlqo.eval.records import append_records, read_records

RECORDS = "records.jsonl"
RUN = "run.json"
REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
DATA = REPO.parent / "shared" / "data"
"""The shared QA sets and their corpora (``../shared/data``, see its README)."""
SETS = ("hotpotqa_dev_199", "2wiki_dev_300", "musique_dev_200")
"""The three dev sets of ``DATA``, in the order the docs' tables list them."""

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
class Block:
    """A table in the docs: ``table(records, run)`` between the markers of block ``name`` in ``doc``
    (a page that does not exist yet starts with ``# title``); with ``part``, the table gets only the
    records of that part of the experiment (their ``part`` field)."""

    doc: str
    name: str
    table: Callable[[list[Record], dict[str, Any]], str]
    title: str = ""
    part: str | None = None


@attrs.frozen
class Experiment:
    """A side-by-side experiment: ``measure`` of every configuration on every case, rendered as ``blocks``.

    ``cases(args)`` yields dicts whose fields name a case (a record whose fields agree has measured it);
    a record is the case, the configuration under ``config_field``, and what ``measure(context, case,
    config)`` returned. ``setup(args)`` makes the context once per run (a loaded model, say);
    ``configs(args)`` names the configurations, and ``applies(case, config)`` says which of them a case
    is measured in (a part that only some runtimes have, say). Each block's table gets the records (of
    its part, when it names one) and ``run.json``; ``artifacts(records, run, out)``, when given, writes
    what else the records make into ``out``.
    """

    name: str
    blocks: tuple[Block, ...]
    cases: Callable[[argparse.Namespace], Iterable[Case]]
    measure: Callable[[Any, Case, str], Record]
    configs: Callable[[argparse.Namespace], Sequence[str]] = lambda args: ("default",)
    applies: Callable[[Case, str], bool] = lambda case, config: True
    setup: Callable[[argparse.Namespace], Any] = lambda args: args
    options: tuple[Option, ...] = ()
    artifacts: Callable[[list[Record], dict[str, Any], Path], None] | None = None
    config_field: str = "config"
    about: str = ""
    """The ``--help`` text (default: the docstring of the script run)."""

    @property
    def out(self) -> Path:
        return RESULTS / self.name


def rotated(items: Sequence[str], shift: int) -> Iterable[str]:
    """``items`` starting at ``shift`` (modulo their number), wrapping around."""
    shift = shift % len(items) if items else 0
    return [*items[shift:], *items[:shift]]


def load(out: Path) -> tuple[list[Record], dict[str, Any]]:
    """The records and ``run.json`` of a results folder (a torn last record is dropped: it runs again)."""
    run_path = out / RUN
    run = json.loads(run_path.read_text(encoding="utf-8")) if run_path.exists() else {}
    return read_records(out / RECORDS), run


THREADS = Option.of("--threads", type=int, help="torch CPU threads (default: torch's, one per core)")


def torch_threads(args: argparse.Namespace) -> argparse.Namespace:
    """A ``setup`` for experiments with the ``THREADS`` option: torch's thread count, when given."""
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    return args


def run_nlqo(*args: str, wait_for: Path | None = None) -> tuple[str, float, float | None]:
    """Run ``python -m nlqo ARGS`` in the repository: its standard output, its wall seconds, and the
    seconds until ``wait_for`` existed (None without it: a run's start-up, say); a failure ends the
    experiment with the command's error output."""
    started, appeared = time.perf_counter(), None
    command = [sys.executable, "-m", "nlqo", *args]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while wait_for is not None and appeared is None and process.poll() is None:
        if wait_for.exists():
            appeared = round(time.perf_counter() - started, 2)
        time.sleep(0.1)
    out, err = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"nlqo {' '.join(args)} failed ({process.returncode}):\n{err[-3000:]}")
    return out, round(time.perf_counter() - started, 2), appeared


def free_port() -> int:
    """A TCP port free on loopback now (for a server the experiment starts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(url: str) -> bool:
    """Whether ``url`` answers 200 (directly, not through a proxy)."""
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def serving(command: Sequence[str], health: str, log: Path, env: Mapping[str, str] = {}) -> Iterator[None]:
    """Run the server ``command`` (its output to ``log``, ``env`` added) until the ``with`` ends, once
    ``health`` answers 200; a server that exits first ends the experiment with the end of its log."""
    with open(log, "w") as out:
        process = subprocess.Popen([*command], env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT)
    try:
        while not answers(health):
            if process.poll() is not None:
                raise SystemExit(f"{command[0]} did not start: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield
    finally:
        process.terminate()
        process.wait(timeout=60)


def render(experiment: Experiment, out: Path | None = None) -> dict[str, str]:
    """The experiment's tables by block name, from its records alone."""
    records, run = load(out or experiment.out)
    parts = {block.part: [r for r in records if block.part in (None, r.get("part"))] for block in experiment.blocks}
    return {block.name: block.table(parts[block.part], run) for block in experiment.blocks}


def identity(record: Record, fields: Iterable[str]) -> str:
    """The values of ``fields`` in ``record`` (None where it has none), as JSON: a case's name.

    >>> identity({"n": 1, "value": 2, "config": "a"}, ["n"]) == identity({"n": 1}, ["n"])
    True
    """
    return json.dumps([record.get(k) for k in fields])


def measure_all(experiment: Experiment, args: argparse.Namespace, out: Path) -> int:
    """Measure every (case, configuration) without a record; the number measured."""
    path, field = out / RECORDS, experiment.config_field
    cases, configs = list(experiment.cases(args)), list(experiment.configs(args))
    names = {tuple(sorted(case)) for case in cases}  # the field names cases have
    done = {(identity(r, fields), r.get(field)) for r in read_records(path) for fields in names}
    todo = [
        (case, config)
        for i, case in enumerate(cases)
        for config in rotated(configs, i)
        if experiment.applies(case, config) and (identity(case, sorted(case)), config) not in done
    ]
    if not todo:
        return 0
    context = experiment.setup(args)
    for n, (case, config) in enumerate(todo, 1):
        started = time.perf_counter()
        record = {**case, experiment.config_field: config, **experiment.measure(context, case, config)}
        record["measured_at"] = now()
        append_records(path, [record])
        name = " ".join(str(v) for v in case.values())[:80]
        print(f"[{n}/{len(todo)}] {name} {config}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return len(todo)


def parser(experiment: Experiment) -> argparse.ArgumentParser:
    """The experiment's command line; ``--help`` names where its records and tables go."""
    tables = ", ".join(f"{block.doc} ({block.name})" for block in experiment.blocks)
    where = f"Records: {experiment.out / RECORDS}, {RUN} beside them. Tables: {tables}."
    p = argparse.ArgumentParser(
        description=experiment.about or sys.modules["__main__"].__doc__,
        epilog=where,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for option in experiment.options:
        p.add_argument(*option.flags, **option.kwargs)
    p.add_argument("--out", type=Path, default=experiment.out, help="results folder (default: %(default)s)")
    p.add_argument("--render", action="store_true", help="only rewrite the docs tables from the records")
    p.add_argument("--force", action="store_true", help="measure again what has records")
    pages = ", ".join(dict.fromkeys(block.doc for block in experiment.blocks))
    p.add_argument("--no-docs", action="store_true", help=f"do not write the tables into {pages}")
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
    tables = render(experiment, out)
    print("\n\n".join(tables.values()))
    if experiment.artifacts is not None:
        experiment.artifacts(*load(out), out)
    if not args.no_docs:
        for block in experiment.blocks:
            write_block(REPO / block.doc, block.name, tables[block.name], title=block.title)
    return 0
