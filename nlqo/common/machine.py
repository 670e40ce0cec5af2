"""The machine a measurement or a probe was made on, as a key that changes when the CPU does."""

from __future__ import annotations

import hashlib
import os
import platform
from pathlib import Path


SIMD_FLAGS = ("avx", "avx2", "fma", "f16c", "avx_vnni", "amx", "sve", "neon", "asimd")
"""Prefixes of the instruction-set flags that decide which kernels run (``avx512*``, ``amx_*`` too)."""


def _first_processor() -> list[str]:
    """The lines of /proc/cpuinfo that describe the first processor (none where there is no such file)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return text.split("\n\n")[0].splitlines()


def _cpuinfo() -> dict[str, str]:
    entries = (line.partition(":") for line in _first_processor())
    return {key.strip(): value.strip() for key, sep, value in entries if sep}


def cpu_signature() -> str:
    """The CPU as the kernel describes it (model name and instruction-set flags), and the core count."""
    lines = [ln for ln in _first_processor() if ln.split(":")[0].strip() in ("model name", "flags", "Features")]
    return f"{platform.machine()} cores={os.cpu_count()} " + "; ".join(sorted(lines))


def cpu_description() -> dict[str, object]:
    """The CPU's model name and the instruction-set flags that decide which kernels run, for a
    benchmark's record of the machine (``flags`` lists those of :data:`SIMD_FLAGS`)."""
    info = _cpuinfo()
    flags = (info.get("flags") or info.get("Features") or "").split()
    simd = sorted(f for f in flags if f.startswith(("avx512", *SIMD_FLAGS)))
    return {"cpu": info.get("model name") or platform.processor() or platform.machine(), "cpu_flags": simd}


def cpu_key(signature: str) -> str:
    """A short hash of a :func:`cpu_signature`, for cache keys.

    >>> len(cpu_key(cpu_signature())), cpu_key("a") == cpu_key("a") != cpu_key("b")
    (16, True)
    """
    return hashlib.sha256(signature.encode()).hexdigest()[:16]
