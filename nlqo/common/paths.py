"""What is at a path a user gave, in words, for messages that name the path and what was expected.

>>> import tempfile
>>> folder = Path(tempfile.mkdtemp())
>>> (folder / "notes.txt").write_text("hi")
2
>>> (folder / "loop").symlink_to(folder / "loop")
>>> found(folder), found(folder / "notes.txt"), found(folder / "loop")
('a folder', 'a file', 'a symlink loop')
>>> found(folder / "notes.txt" / "idx") == f"nothing: {folder / 'notes.txt'} is a file, so nothing can be under it"
True
>>> found(folder / "missing")
'nothing (no such file or folder)'
>>> read_text(folder, "a cost-model file") # doctest: +ELLIPSIS
Traceback (most recent call last):
...
nlqo.errors.InputFileError: /...: expected a cost-model file, found a folder
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from nlqo.errors import InputFileError

FOLDER = "a folder"
FILE = "a file"
NOTHING = "nothing (no such file or folder)"


def found(path: str | os.PathLike[str]) -> str:
    """What ``path`` is: ``a folder`` or ``a file`` when it can be read, else what stands in the way
    (nothing there, a file above it, a symlink loop or a broken symlink, a FIFO, socket or device,
    a folder or file that cannot be read and why)."""
    path = Path(path)
    try:
        info = path.stat()
    except OSError as exc:
        return _missing(path, exc)
    if stat.S_ISDIR(info.st_mode):
        try:
            with os.scandir(path) as entries:
                next(entries, None)
            os.stat(path / ".")  # what is in it can be reached, not only listed
        except OSError as exc:
            return f"a folder that cannot be read ({exc.strerror or exc})"
        return FOLDER
    if stat.S_ISREG(info.st_mode):
        try:
            with open(path, "rb") as fh:
                fh.read(1)
        except OSError as exc:
            return f"a file that cannot be read ({exc.strerror or exc})"
        return FILE
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
    ):
        if test(info.st_mode):
            return name
    return "neither a file nor a folder"


def _missing(path: Path, exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "a symlink loop"
    if exc.errno == errno.ENOTDIR:
        above = next((p for p in path.parents if p.is_file()), None)
        return f"nothing: {above or 'a path above it'} is a file, so nothing can be under it"
    if exc.errno == errno.ENOENT:
        if path.is_symlink():
            return f"a broken symlink (to {os.readlink(path)})"
        return NOTHING
    return f"a path that cannot be read ({exc.strerror or exc})"


def read_bytes(path: str | os.PathLike[str], expected: str) -> bytes:
    """The bytes of the file at ``path``, which should be ``expected`` (``"an IR file"``); when it cannot be
    read, an :class:`~nlqo.errors.InputFileError` ``PATH: expected EXPECTED, found <what is there>``."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        what = found(path)
        if what == FILE:  # found() could read its first byte; the rest could not be read
            what = f"a file that cannot be read ({exc.strerror or exc})"
        raise InputFileError(f"{path}: expected {expected}, found {what}") from None


def read_text(path: str | os.PathLike[str], expected: str) -> str:
    """:func:`read_bytes` as UTF-8 text (a BOM is allowed); other bytes are an
    :class:`~nlqo.errors.InputFileError` naming the line and column of the first one.

    >>> import tempfile
    >>> latin = Path(tempfile.mkdtemp()) / "w.cost"
    >>> _ = latin.write_bytes("cost = depth\\n# Z\\xfcrich".encode("latin-1"))
    >>> read_text(latin, "a cost-model file")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    nlqo.errors.InputFileError: /.../w.cost:2: not UTF-8 text (byte 0xfc at column 4); save the file as UTF-8
    """
    data = read_bytes(path, expected)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        read = bytes(exc.object)  # without the BOM, which exc.start does not count
        before = read[: exc.start].decode("utf-8", errors="replace")
        line, column = before.count("\n") + 1, len(before.rsplit("\n", 1)[-1]) + 1
        raise InputFileError(
            f"{path}:{line}: not UTF-8 text (byte 0x{read[exc.start]:02x} at column {column}); save the file as UTF-8"
        ) from None


def dataset_name(path: str | os.PathLike[str]) -> str:
    """The file name without its JSON Lines suffixes.

    >>> dataset_name("../shared/data/hotpotqa_dev_199.jsonl.gz")
    'hotpotqa_dev_199'
    """
    name = Path(path).name
    for suffix in (".gz", ".jsonl", ".json"):
        name = name.removesuffix(suffix)
    return name


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    """nlqo's cache directory: ``$NLQO_CACHE``, else ``~/.cache/nlqo``.

    >>> cache_root({"NLQO_CACHE": "/data/nlqo"})
    PosixPath('/data/nlqo')
    >>> cache_root({}).parts[-2:]
    ('.cache', 'nlqo')
    """
    env = os.environ if env is None else env
    value = env.get("NLQO_CACHE")
    return Path(value).expanduser() if value else Path.home() / ".cache" / "nlqo"
