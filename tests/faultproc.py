"""Run ``nlqo`` with a scripted LLM and a hashing embedder, stopping at a named point to be killed.

    python tests/faultproc.py POINT N MARKER ARGS...

runs ``nlqo ARGS...``. The ``N``-th time it reaches ``POINT`` it writes ``MARKER`` and sleeps
until the test kills it, so a SIGKILL lands at the same place on every run (``none`` never
stops). ``fake_models()`` installs the same doubles in the test's own process.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from nlqo.testing.fakes import HashEmbedder, ScriptedLLM

ANSWERS = ("Paris", "1889", "Rush", "Salzburg", "Fleming", "1969", "Everest", "Nile")


class NamedHashEmbedder(HashEmbedder):
    """The hashing embedder under the default embedder's name, so bench reuses its index by name."""

    name = "all-minilm-l6-v2"


def reply(prompt: str) -> str:
    """The first known answer in the prompt's passages (none for a prompt without passages)."""
    return next((a for a in ANSWERS if a in prompt), "unknown")


@contextlib.contextmanager
def fake_models() -> Iterator[None]:
    """``nlqo`` loads ``NamedHashEmbedder`` for every embedder and a ``ScriptedLLM`` for every model."""
    import nlqo.main.builder
    from nlqo.runtime.embed import SentenceEmbedder

    saved = SentenceEmbedder.__dict__["load"], nlqo.main.builder.load_llm
    SentenceEmbedder.load = classmethod(lambda cls, *a, **kw: NamedHashEmbedder())  # type: ignore[assignment,method-assign]
    nlqo.main.builder.load_llm = lambda *a, **kw: ScriptedLLM([], default=reply)
    try:
        yield
    finally:
        SentenceEmbedder.load, nlqo.main.builder.load_llm = saved  # type: ignore[method-assign]


def stop(marker: Path) -> None:
    """Tell the test where we are, then wait for its SIGKILL."""
    marker.write_text(str(os.getpid()))
    while True:
        time.sleep(60)


def after(module: Any, name: str, n: int, marker: Path) -> None:
    """Stop after the ``n``-th call of ``module.name`` returns."""
    inner, calls = getattr(module, name), itertools.count(1)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = inner(*args, **kwargs)
        if next(calls) == n:
            stop(marker)
        return result

    setattr(module, name, wrapped)


def before(module: Any, name: str, n: int, marker: Path) -> None:
    """Stop when ``module.name`` is called the ``n``-th time, before it runs."""
    inner, calls = getattr(module, name), itertools.count(1)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if next(calls) == n:
            stop(marker)
        return inner(*args, **kwargs)

    setattr(module, name, wrapped)


def torn_record(n: int, marker: Path) -> None:
    """The ``n``-th append writes the first half of its line, as a kill in mid-write leaves it."""
    import json

    from nlqo.eval import runner

    inner, calls = runner.append_records, itertools.count(1)

    def wrapped(path: Path, records: list[dict[str, Any]]) -> None:
        if next(calls) == n:
            line = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()
            with open(path, "ab") as fh:
                fh.write(line[: len(line) // 2])
            stop(marker)
        inner(path, records)

    runner.append_records = wrapped  # type: ignore[assignment]


def set_aside(n: int, marker: Path) -> None:
    """The fallback swap (no ``renameat2``) stops right after it renames the old index aside."""
    from nlqo.index import atomic

    atomic._exchange = lambda a, b: False
    rename, calls = os.rename, itertools.count(1)

    def wrapped(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        rename(src, dst, *args, **kwargs)
        if ".old-" in Path(dst).name and next(calls) == n:
            stop(marker)

    os.rename = wrapped


def points() -> dict[str, Callable[[int, Path], None]]:
    """Where a process can stop: point name -> installer of the stop at its ``n``-th pass."""
    from nlqo.eval import runner
    from nlqo.index import atomic, bm25, dense, store

    return {
        "record": lambda n, m: after(runner, "append_records", n, m),
        "torn-record": torn_record,
        "summary": lambda n, m: before(runner.Bench, "write_summary", n, m),
        "store": lambda n, m: after(store, "write_store", n, m),
        "dense": lambda n, m: after(dense, "write_dense", n, m),
        "bm25": lambda n, m: after(bm25, "write_bm25", n, m),
        "swap": lambda n, m: before(atomic, "replace_dir", n, m),
        "set-aside": set_aside,
    }


if __name__ == "__main__":
    from nlqo.cli import main

    point, count, mark = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    with fake_models():
        if point != "none":
            points()[point](count, mark)
        sys.exit(main(sys.argv[4:]))
