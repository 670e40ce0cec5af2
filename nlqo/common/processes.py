"""Questions about other processes of this machine."""

from __future__ import annotations

import os


def process_alive(pid: int) -> bool:
    """Whether a process with this id exists (what a dead builder left behind may be removed).

    >>> process_alive(os.getpid())
    True
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether ``pid`` has exited and only waits to be reaped (Linux's ``/proc``; False where unknown).

    >>> _zombie(os.getpid())
    False
    """
    try:
        stat = open(f"/proc/{pid}/stat", encoding="ascii", errors="replace").read()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] == ["Z"]  # the state follows the parenthesised name
