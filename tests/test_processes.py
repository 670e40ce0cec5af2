"""process_alive: a builder that exited counts as dead even before its parent reaps it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from nlqo.common.processes import process_alive


def test_an_exited_unreaped_child_is_not_alive():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        for _ in range(500):  # until it has exited (a zombie: not reaped, since nothing waits for it)
            with open(f"/proc/{child.pid}/stat") as f:
                if f.read().rpartition(")")[2].split()[0] == "Z":
                    break
            time.sleep(0.01)
        assert not process_alive(child.pid)
    finally:
        child.wait()
    assert not process_alive(child.pid)
    assert process_alive(os.getpid())
