"""A local backend's per-token costs, measured once per model, runtime, threads and machine, then kept.

Measuring takes several seconds of model calls (:func:`nlqo.planner.lower.measure_profile`); `auto`
needs the figures on every start. They are kept in ``$NLQO_CACHE/profiles/`` under a key of everything
they depend on, so a change of any (another model file, runtime, thread count, CPU, nlqo version)
measures afresh. A server's costs depend on its load and slots, so a server is measured every time.

>>> import tempfile
>>> from nlqo.runtime.llm.base import Capabilities
>>> class Local:
...     capabilities = Capabilities(cache_identity=True)
...     threads = 2
...     def cache_identity(self):
...         return {"model": "m", "runtime": "llama-cpp", "file": "m.gguf"}
>>> root = Path(tempfile.mkdtemp())
>>> calls = []
>>> def measure(llm, base):
...     calls.append(1)
...     return attrs.evolve(base, prefill_ms_per_token=9.0, source="measured")
>>> llm = Local()
>>> first, cached = cached_profile(llm, BackendProfile(), root=root, measure=measure)
>>> again, cached_again = cached_profile(llm, BackendProfile(), root=root, measure=measure)
>>> (first.prefill_ms_per_token, cached, again == first, cached_again, len(calls))
(9.0, False, True, True, 1)
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable

import attrs

from nlqo._version import __version__
from nlqo.common.paths import cache_root
from nlqo.common.machine import cpu_key, cpu_signature
from nlqo.common.storage import replace_atomically
from nlqo.execution.physical import BackendProfile
from nlqo.planner.lower import measure_profile
from nlqo.runtime.llm.base import cache_identity

LOCAL_RUNTIMES = ("llama-cpp", "transformers")
"""Runtimes whose costs depend only on the model, the threads and the machine."""


def profile_key(llm: Any, base: BackendProfile) -> dict[str, Any] | None:
    """What a kept profile must match, or None for a backend whose costs are not kept (a server)."""
    identity = cache_identity(llm)
    if identity.get("runtime") not in LOCAL_RUNTIMES:
        return None
    return {
        "backend": identity,
        "threads": getattr(llm, "threads", None),
        "cpu": cpu_key(cpu_signature()),
        "base": attrs.asdict(base),
        "nlqo": __version__,
    }


def cached_profile(
    llm: Any,
    base: BackendProfile,
    *,
    root: Path | None = None,
    measure: Callable[[Any, BackendProfile], BackendProfile] = measure_profile,
    before_measuring: Callable[[], None] = lambda: None,
) -> tuple[BackendProfile, bool]:
    """The profile measured for ``llm`` (kept from an earlier run when its key matches), and whether
    it was kept; ``before_measuring`` is called when it is measured now (to say so: it takes seconds)."""
    key = profile_key(llm, base)
    if key is None:
        before_measuring()
        return measure(llm, base), False
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:24]
    path = (root or cache_root() / "profiles") / f"{digest}.json"
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        if kept.get("key") == json.loads(json.dumps(key, default=str)):
            fields = kept["profile"]
            fields["batch_speedup"] = tuple(fields.get("batch_speedup", ()))
            return BackendProfile(**fields), True
    except (OSError, ValueError, TypeError, KeyError):
        pass  # nothing kept, or a file from another version: measure again
    before_measuring()
    profile = measure(llm, base)
    if profile.source == "measured":
        _write(path, {"key": key, "profile": attrs.asdict(profile)})
    return profile, False


def _write(path: Path, data: dict) -> None:
    """Write atomically; a cache that cannot be written is only a cache (the next run measures again)."""
    try:
        replace_atomically(path, json.dumps(data, indent=1, sort_keys=True, default=str))
    except OSError:
        pass
