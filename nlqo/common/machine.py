"""The machine a measurement or a probe was made on, as a key that changes when the CPU does."""

from __future__ import annotations

import hashlib
import os
import platform
from pathlib import Path


def cpu_signature() -> str:
    """The CPU as the kernel describes it (model name and instruction-set flags), and the core count."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    first = text.split("\n\n")[0]
    lines = [ln for ln in first.splitlines() if ln.split(":")[0].strip() in ("model name", "flags", "Features")]
    return f"{platform.machine()} cores={os.cpu_count()} " + "; ".join(sorted(lines))


def cpu_key(signature: str) -> str:
    """A short hash of a :func:`cpu_signature`, for cache keys.

    >>> len(cpu_key(cpu_signature())), cpu_key("a") == cpu_key("a") != cpu_key("b")
    (16, True)
    """
    return hashlib.sha256(signature.encode()).hexdigest()[:16]
