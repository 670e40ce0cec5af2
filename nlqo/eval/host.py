"""Where and when a measurement ran: the machine, its load, the commit and the time, for run.json."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from nlqo.common.machine import cpu_description


def now() -> str:
    """The time in UTC, to the second, as ISO 8601."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def load_average() -> list[float] | None:
    """The machine's 1, 5 and 15 minute load averages (what else ran beside a measurement); None on
    platforms without them."""
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def machine() -> dict[str, Any]:
    """The machine a run ran on, with its load average when the run (re)started."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        memory = None
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        **cpu_description(),
        "cpus": os.cpu_count(),
        "memory_gib": None if memory is None else round(memory, 1),
        "python": platform.python_version(),
        "load_average": load_average(),
    }


def source_commit() -> str | None:
    """The git commit nlqo runs from (``+dirty`` with uncommitted changes), or None outside a checkout."""
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "nlqo"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
