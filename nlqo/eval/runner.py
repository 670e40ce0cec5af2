"""The bench loop: every strategy on the same questions, interleaved, resumable.

Files in the output folder: ``run.json`` (what was run, on what, where, when), ``records.jsonl``
(one record per question and strategy, appended as it goes), ``summary.json``, ``results.md``,
``answers.md`` (each strategy's answer to each question, linking its plan page), ``plans.html``
(the EXPLAIN ANALYZE page of every planned run) and the plots. Running again into the
same folder resumes: finished (question, strategy) pairs are skipped, and a folder holding a run
of another model, index, question file or top-k is refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import attrs

from nlqo import __version__
from nlqo.errors import ConfigError, NlqoError
from nlqo.eval import plan_pages
from nlqo.eval.datasets import YES_NO, Question, QuestionSet
from nlqo.eval.host import machine, now, source_commit
from nlqo.eval.judge import LLMJudge
from nlqo.eval.plots import write_plots
from nlqo.eval.records import FILENAME as RECORDS, append_records, make_record, read_records
from nlqo.eval.summary import answers_table, complete_rows, counted, differences_table, markdown_table, summarize
from nlqo.common.storage import replace_atomically, writing
from nlqo.eval.strategy import Strategy

RUN = "run.json"
SUMMARY = "summary.json"
TABLE = "results.md"
ANSWERS = "answers.md"
KEY = ("qid", "strategy")
"""The fields that name a record: one per question and strategy."""
KEPT = "every record is kept"
IDENTITY = (
    "questions_sha256",
    "skip",
    "model",
    "runtime",
    "quantize",
    "embedder",
    "retrieval",
    "k",
    "corpus_sha256",
    "index_digest",
)
"""``run.json`` fields that must match for a run to resume in the same folder."""


def interleave(n_questions: int, names: Sequence[str]) -> list[tuple[int, str]]:
    """(question index, strategy) pairs: all strategies per question, the order rotating by question.

    >>> interleave(3, ["a", "b", "c"])
    [(0, 'a'), (0, 'b'), (0, 'c'), (1, 'b'), (1, 'c'), (1, 'a'), (2, 'c'), (2, 'a'), (2, 'b')]
    """
    out = []
    for i in range(n_questions):
        shift = i % len(names) if names else 0
        out += [(i, name) for name in [*names[shift:], *names[:shift]]]
    return out


def run_record(
    strategy: Strategy,
    question: Question,
    index: int,
    name: str,
    *,
    yes_no: bool = False,
    judge: LLMJudge | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """Run ``strategy`` on ``question`` (number ``index`` of its set) and return the record named
    ``name``; a run that fails with an nlqo error is a wrong answer with ``error``."""
    result, error = None, None
    started = clock()
    try:
        result = strategy.run(question.question)
    except NlqoError as exc:
        error = f"{type(exc).__name__}: {exc}"
    seconds = clock() - started
    judged = None
    if judge is not None:
        judged = judge.grade(question.question, question.answers, result.answer if result else "")
    return make_record(question, index, name, result, seconds, yes_no_question=yes_no, judge=judged, error=error)


@attrs.define(eq=False)
class Bench:
    """Runs ``strategies`` (display name -> strategy, in report order) over ``questions`` into ``out``."""

    questions: QuestionSet
    strategies: Mapping[str, Strategy]
    out: Path = attrs.field(converter=Path)
    meta: Mapping[str, Any] = attrs.field(factory=dict)
    """Model, embedder, retrieval mode, k, index, command line: recorded in ``run.json``."""
    seed: int = 0
    """Seed of the bootstrap intervals."""
    jobs: int = 1
    """Questions run at once by joblib threads; 1 (default) for timing runs."""
    judge: LLMJudge | None = None
    progress: bool = True
    clock: Callable[[], float] = time.perf_counter
    executor: Callable[[Bench, list[tuple[int, str]]], Iterable[list[dict[str, Any]]]] | None = None
    """Runs the (question index, strategy) pairs still missing and yields their records as they
    finish (e.g. :class:`nlqo.eval.cluster.ClusterRun`); None runs them here, in ``jobs`` threads.
    Records are written by this process either way."""

    @property
    def names(self) -> list[str]:
        return list(self.strategies)

    def run(self) -> dict[str, Any]:
        """Run what is missing, then write the summary, table and plots; return the summary."""
        with writing(self.out, "nothing was run"):
            self.out.mkdir(parents=True, exist_ok=True)
        with _only_writer(self.out):
            return self._run()

    def _run(self) -> dict[str, Any]:
        info = self._start()
        path = self.out / RECORDS
        wanted = {(q.id, n) for q in self.questions.questions for n in self.names}
        earlier = [r for r in read_records(path, required=KEY) if (r["qid"], r["strategy"]) in wanted]
        done = {(r["qid"], r["strategy"]) for r in earlier}
        todo = [
            (i, n)
            for i, n in interleave(len(self.questions), self.names)
            if (self.questions.questions[i].id, n) not in done
        ]
        running = _RunningEM(self.names, earlier)
        with _bar(len(done), len(wanted), self.questions.name, self.progress) as bar:
            for records in self._execute(todo):
                append_records(path, records)
                running.add(records)
                bar.update(len(records))
                bar.set_postfix_str(running.text(), refresh=False)
        return self.finish(info)

    def finish(self, info: dict[str, Any] | None = None) -> dict[str, Any]:
        """(Re)write ``summary.json``, ``results.md`` and the plots from the records on disk."""
        info = info if info is not None else _read_run(self.out / RUN)
        info["finished"] = now()
        _write_json(self.out / RUN, info)
        return self.write_summary(info)

    def write_summary(self, info: dict[str, Any], records: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Write ``summary.json`` (``info`` as its ``meta``), ``results.md``, ``answers.md``, ``plans.html`` and the plots; return the summary."""
        records = read_records(self.out / RECORDS, required=KEY) if records is None else records
        summary = {**summarize(records, self.questions, self.names, seed=self.seed, meta=info), "records": len(records)}
        rows = complete_rows(records, self.questions, self.names)
        _write_json(self.out / SUMMARY, summary)
        with writing(self.out / TABLE, KEPT):
            (self.out / TABLE).write_text(render_results(summary), encoding="utf-8")
        with writing(self.out / plan_pages.FILENAME, KEPT):
            links = plan_pages.write(self.out, records)
        with writing(self.out / ANSWERS, KEPT):
            (self.out / ANSWERS).write_text(
                f"# {summary['dataset']}: every answer\n\n{answers_table(rows, links)}", encoding="utf-8"
            )
        with writing(self.out, KEPT):  # the plots
            write_plots(summary, rows, self.out)
        return summary

    def run_one(self, index: int, name: str) -> dict[str, Any]:
        """Run strategy ``name`` on question ``index``; its record (a failed run is a wrong answer with ``error``)."""
        question = self.questions.questions[index]
        return run_record(
            self.strategies[name],
            question,
            index,
            name,
            yes_no=self.yes_no(question),
            judge=self.judge,
            clock=self.clock,
        )

    def yes_no(self, question: Question) -> bool:
        """Whether ``question`` is scored as a yes/no question."""
        return self.questions.kind == YES_NO or question.is_yes_no

    def _execute(self, todo: list[tuple[int, str]]) -> Iterator[list[dict[str, Any]]]:
        if self.executor is not None:
            yield from self.executor(self, todo)
            return
        if self.jobs <= 1:
            for index, name in todo:
                yield [self.run_one(index, name)]
            return
        from joblib import Parallel, delayed

        groups: dict[int, list[str]] = {}
        for index, name in todo:
            groups.setdefault(index, []).append(name)

        def question(index: int, names: list[str]) -> list[dict[str, Any]]:
            return [self.run_one(index, name) for name in names]

        parallel = Parallel(n_jobs=self.jobs, backend="threading", return_as="generator_unordered")
        yield from parallel(delayed(question)(index, names) for index, names in groups.items())

    def _start(self) -> dict[str, Any]:
        """Write ``run.json``, or check that the one already there describes the same setup."""
        info = {
            "dataset": self.questions.name,
            "questions_file": self.questions.path,
            "questions_sha256": self.questions.sha256,
            "kind": self.questions.kind,
            "limit": len(self.questions),
            "strategies": self.names,
            "seed": self.seed,
            "jobs": self.jobs,
            "judge": None if self.judge is None else self.judge.name,
            **self.meta,
            "machine": machine(),
            "nlqo_version": __version__,
            "nlqo_commit": source_commit(),
        }
        path = self.out / RUN
        if path.exists():
            old = _read_run(path)
            for key in IDENTITY:
                if key in old and key in info and old[key] != info[key]:
                    raise ConfigError(
                        f"{self.out} holds a run with {key}={old[key]!r}, not {info[key]!r}; "
                        "use another --out folder (or delete this one) to start a new run"
                    )
            info["started"] = old.get("started", now())
            info["resumed"] = [*old.get("resumed", []), now()]
            info["commits"] = list(dict.fromkeys([*old.get("commits", [old.get("nlqo_commit")]), info["nlqo_commit"]]))
        else:
            info["started"] = now()
        _write_json(path, info)
        return info


def refresh(folder: str | Path) -> None:
    """Rewrite a result folder's summary, table and plots when its records have changed since
    (a run still going, or one stopped before it finished).

    The questions are read again from the file ``run.json`` names (its absolute path, else the
    path as the command gave it, from the current folder) and must have the recorded SHA-256.
    """
    folder = Path(folder)
    records, summary = folder / RECORDS, folder / SUMMARY
    done = read_records(records, repair=False, required=KEY)
    if not done or (summary.is_file() and json.loads(summary.read_text(encoding="utf-8")).get("records") == len(done)):
        return
    info = _read_run(folder / RUN)
    command = info.get("command") or []
    given = command[command.index("--questions") + 1] if "--questions" in command[:-1] else None
    candidates = [p for p in (info.get("questions_file"), given) if p and Path(p).is_file()]
    if not candidates:
        raise ConfigError(
            f"{folder}: cannot find its question file {info.get('questions_file')!r} to summarize its records"
        )
    skip = info.get("skip") or 0
    limit = info.get("limit")
    questions = QuestionSet.load(candidates[0], limit=None if limit is None else limit + skip, skip=skip)
    if questions.sha256 != info.get("questions_sha256"):
        raise ConfigError(f"{folder}: {candidates[0]} is not the question file this run used (SHA-256 differs)")
    bench = Bench(questions, dict.fromkeys(info["strategies"]), folder, seed=info.get("seed", 0), progress=False)  # type: ignore[arg-type]  # only read back, never run
    finished, resumed = info.get("finished"), info.get("resumed") or []
    still_going = not finished or any(at > finished for at in resumed)  # ISO times in UTC compare as text
    bench.write_summary(info if not still_going else {**info, "summarized": now()}, done)


def render_results(summary: dict[str, Any]) -> str:
    """``results.md``: the run's table, EM differences and plots."""
    meta = summary["meta"]
    lines = [
        f"# {summary['dataset']}: {counted(summary['n'], 'question')}",
        "",
        f"model `{meta.get('model', '?')}`, embedder `{meta.get('embedder', '?')}`, retrieval {meta.get('retrieval', '?')}, "
        f"top-k {meta.get('k', '?')}; started {meta.get('started', '?')}",
        "",
        markdown_table(summary),
        "EM differences (paired bootstrap, 95%):",
        "",
        differences_table(summary),
        f"Every question with each strategy's answer: [{ANSWERS}]({ANSWERS}).",
        "",
        *[f"![{name}]({name})" for name in ("em_vs_seconds.png", "tokens_per_question.png", "hops_histogram.png")],
    ]
    if summary["pending"]:
        lines.insert(
            2,
            f"{counted(summary['pending'], 'question')} not finished by every strategy {'is' if summary['pending'] == 1 else 'are'} left out.\n",
        )
    return "\n".join(lines) + "\n"


def _write_json(path: Path, data: Any) -> None:
    """Replace ``path`` whole (a temporary file renamed over it): a kill or a full disk keeps the old one."""
    with writing(path, f"{path.name} is unchanged and {KEPT}"):
        replace_atomically(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def _read_run(path: Path) -> dict[str, Any]:
    """``run.json``, or a ``ConfigError`` that says how to go on when it is damaged."""
    fix = f"delete it to resume the records in {path.parent} with the next bench command's setup, or use another --out folder"
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: missing; run the bench command into {path.parent} again to recreate it") from None
    except ValueError as exc:  # JSONDecodeError or UnicodeDecodeError
        raise ConfigError(f"{path}: not valid JSON ({exc}); {fix}") from exc
    if not isinstance(info, dict):
        raise ConfigError(f"{path}: a JSON {type(info).__name__}, not the object a run writes; {fix}")
    return info


class _RunningEM:
    """EM so far per strategy, for the progress bar."""

    def __init__(self, names: Sequence[str], records: list[dict[str, Any]]):
        self.sums = {n: [0.0, 0] for n in names}
        self.add(records)

    def add(self, records: list[dict[str, Any]]) -> None:
        for r in records:
            if r["strategy"] in self.sums:
                self.sums[r["strategy"]][0] += r["em"]
                self.sums[r["strategy"]][1] += 1

    def text(self) -> str:
        return " ".join(f"{n}={s / c:.2f}" for n, (s, c) in self.sums.items() if c)


LOCK = ".bench.lock"
"""In the output folder: held by the one run writing it (its pid inside)."""


@contextlib.contextmanager
def _only_writer(out: Path) -> Iterator[None]:
    """Hold ``out``'s lock for the run: a second run on the same folder is refused, not interleaved."""
    with writing(out / LOCK, "nothing was run"):
        handle = open(out / LOCK, "a+", encoding="ascii")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            pid = handle.read().strip() or "?"
            raise ConfigError(
                f"{out} is being written by another nlqo bench (pid {pid}); wait for it, or give another --out"
            ) from None
        with writing(out / LOCK, "nothing was run"):
            handle.seek(0)
            handle.truncate()
            handle.write(str(os.getpid()))
            handle.flush()
        yield
    finally:
        handle.close()  # closing releases the lock


def _bar(initial: int, total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=f"bench {desc}", unit="run", disable=not enabled, dynamic_ncols=True)
