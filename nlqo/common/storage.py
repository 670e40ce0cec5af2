"""Failed writes (disk full, quota, permission) as one ``WriteError`` that names the file and what was kept."""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import tempfile
from pathlib import Path
from typing import Iterator

from nlqo.errors import WriteError

NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def write_error(path: str | os.PathLike[str], exc: OSError, kept: str) -> WriteError:
    """The ``WriteError`` for ``exc`` raised while writing ``path``; ``kept`` says what survived.

    >>> print(write_error("out/records.jsonl", OSError(errno.ENOSPC, "No space left on device"), "the records before are kept"))
    disk full while writing out/records.jsonl: No space left on device; the records before are kept (free some space and run the same command again)
    >>> print(write_error("idx", PermissionError(errno.EACCES, "Permission denied", "idx/.x"), "nothing was written"))
    cannot write idx/.x: Permission denied; nothing was written
    """
    file = os.fsdecode(exc.filename) if exc.filename else os.fspath(path)
    reason = exc.strerror or str(exc)
    if exc.errno in NO_SPACE:
        return WriteError(
            f"disk full while writing {file}: {reason}; {kept} (free some space and run the same command again)",
            path=file,
        )
    return WriteError(f"cannot write {file}: {reason}; {kept}", path=file)


@contextlib.contextmanager
def writing(path: str | os.PathLike[str], kept: str) -> Iterator[None]:
    """Turn an ``OSError`` (or SQLite's "database or disk is full") raised inside into a ``WriteError`` about ``path``."""
    try:
        yield
    except OSError as exc:
        raise write_error(path, exc, kept) from exc
    except sqlite3.OperationalError as exc:  # SQLite reports ENOSPC as SQLITE_FULL
        if "full" not in str(exc):
            raise
        raise write_error(path, OSError(errno.ENOSPC, str(exc)), kept) from exc


def kept_index(target: Path) -> str:
    """What a failed build keeps in ``target``: the old index, or nothing."""
    return (
        f"the old index in {target} is kept"
        if (target / "manifest.json").is_file()
        else f"nothing was written to {target}"
    )


def replace_atomically(path: Path, text: str, prefix: str | None = None) -> None:
    """Write ``text`` to a temporary file beside ``path`` (named ``prefix``..., by default ``.NAME.``...)
    and rename it over ``path``: a reader sees the old file or the new one, never half of one, and
    concurrent writers never share a temporary file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=prefix or f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):  # the write's error, not the clean-up's, is the one to report
            Path(tmp).unlink(missing_ok=True)
        raise
