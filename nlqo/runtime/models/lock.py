"""One builder per cache entry: processes that would assemble or convert the same model take turns.

The lock is an exclusive ``flock`` on a small file under ``<cache>/locks/`` (the entries' own
folders hold entries and nothing else). The kernel releases it when its process ends, however it
ends, so a killed builder never leaves it held; the file itself stays (removing it while another
process waits on it would let two builders hold different files).
"""

from __future__ import annotations

import contextlib
import fcntl
from pathlib import Path
from typing import Callable, Iterator


def lock_path(target: Path) -> Path:
    """The lock file of ``target``, an entry of a folder of the cache.

    >>> lock_path(Path("/cache/gguf/m.gguf"))
    PosixPath('/cache/locks/gguf/m.gguf.lock')
    """
    return target.parent.parent / "locks" / target.parent.name / f"{target.name}.lock"


@contextlib.contextmanager
def building(target: Path, say: Callable[[str], None] = lambda message: None) -> Iterator[None]:
    """Hold the lock of ``target`` for the block, waiting (and saying so once) while another process holds it.

    Whoever waited should look for ``target`` again before building it: the other process has
    usually just finished it.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    lock_path(target).parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path(target), "a+b") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"nlqo: waiting for another process to finish {target}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
