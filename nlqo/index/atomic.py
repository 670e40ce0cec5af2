"""Replace an index folder so that a reader never sees a half-written one.

A build writes into a temporary sibling ``.NAME.tmp-PID-XXXX`` and calls ``replace_dir``. On Linux
the two folders are swapped in one ``renameat2(RENAME_EXCHANGE)`` call; elsewhere the old folder is
renamed aside to ``.NAME.old-PID``, the new one renamed in, and the old one deleted. A build that
dies before the swap leaves the old index untouched (its temporary folder is removed by the next
build); one that dies between the two fallback renames is undone by ``recover``.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
from pathlib import Path

from nlqo.common.processes import process_alive

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def temp_sibling(target: Path) -> Path:
    """A new empty folder next to ``target``, named after it and this process."""
    return Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-{os.getpid()}-", dir=target.parent))


def replace_dir(new: Path, target: Path) -> None:
    """Move folder ``new`` to ``target``, replacing and deleting any folder already there."""
    _fsync_tree(new)
    if not target.exists():
        os.rename(new, target)
    elif _exchange(new, target):
        shutil.rmtree(new)
    else:
        aside = target.parent / f".{target.name}.old-{os.getpid()}"
        os.rename(target, aside)
        os.rename(new, target)
        shutil.rmtree(aside)
    _fsync_dir(target.parent)


def leftovers(target: Path, kind: str) -> list[Path]:
    """Temporary (``kind="tmp"``) or set-aside (``"old"``) siblings of ``target``."""
    return sorted(target.parent.glob(f".{target.name}.{kind}-*"))


def recover(target: Path) -> Path | None:
    """If ``target`` is missing but a set-aside old copy exists, rename it back; return it."""
    if target.exists():
        return None
    for old in reversed(leftovers(target, "old")):
        if old.is_dir():
            os.rename(old, target)
            return old
    return None


def remove_stale(target: Path) -> list[Path]:
    """Delete temporary siblings whose building process is no longer running."""
    removed = []
    for tmp in leftovers(target, "tmp"):
        pid = tmp.name[len(f".{target.name}.tmp-") :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not process_alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)
            removed.append(tmp)
    return removed


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux ``renameat2``); ``False`` if not supported here."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    return renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0


def _fsync_tree(folder: Path) -> None:
    for root, _dirs, files in os.walk(folder):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(root))


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
