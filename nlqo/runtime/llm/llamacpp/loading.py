"""Loading llama.cpp and a GGUF file: the import, the file check, the process-wide backend with
llama.cpp's messages sent to logging and its CPU variant chosen (:mod:`~nlqo.runtime.llm.llamacpp.variants`),
and the thread count."""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from pathlib import Path
from typing import Any

from nlqo.errors import ConfigError, ModelNotAvailable

GGUF_MAGIC = b"GGUF"

DEFAULT_N_SEQ = 4
"""Slots of one context: requests decoded together, and resident prefixes."""

DEFAULT_N_CTX_SEQ = 8192
"""Tokens one slot holds (prompt and generation)."""

PREFILL_CHUNK = 512
"""Prompt tokens per llama_decode call (also the context's batch size)."""


def default_threads() -> int:
    """The cores this process may run on (llama.cpp slows badly when given more threads than that)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def check_gguf(path: Path) -> None:
    """Raise :class:`ModelNotAvailable` naming ``path`` unless it exists and starts like a GGUF file."""
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise ModelNotAvailable(f"cannot read the GGUF model {path}: {exc.strerror or exc}") from None
    if magic != GGUF_MAGIC:
        raise ModelNotAvailable(
            f"{path} is not a GGUF file (it starts with {magic!r}, not {GGUF_MAGIC!r}): corrupt or the wrong file"
        )


def _llama():
    try:
        import llama_cpp
    except ImportError as exc:
        raise ModelNotAvailable(
            "the llama.cpp runtime needs llama-cpp-python: run `sh scripts/install-llama-cpp.sh` "
            f"(or choose --runtime transformers); import failed: {exc}"
        ) from None
    return llama_cpp


_BACKEND_READY = threading.Lock()
_backend_started = False

LOG = logging.getLogger("nlqo.llama_cpp")
"""llama.cpp's messages, one record per line ("llama_model_loader: ...", "control-looking token ...").
Nothing shows them unless logging is configured: the CLI sends them to its log file (:mod:`nlqo.common.logs`)."""
LOG.addHandler(logging.NullHandler())

_GGML_LEVELS = {1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
"""``ggml_log_level`` (ggml.h: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4; CONT 5 continues the last
message). llama-cpp-python's own callback maps an older order and prints warnings as errors."""
_GGML_CONT = 5


class _LogLines:
    """A llama.cpp log callback: pieces of text joined into lines, each logged to :data:`LOG` at its level."""

    def __init__(self) -> None:
        self.pending = ""
        self.level = logging.INFO
        self.lock = threading.Lock()
        self.first_error = ""
        """The first error line since :meth:`said` was last called (why a model did not load)."""

    def said(self) -> str:
        """``"; llama.cpp said: LINE"`` for the first error line logged since the last call, else ``""``."""
        with self.lock:
            line, self.first_error = self.first_error, ""
        return f"; llama.cpp said: {line}" if line else ""

    def __call__(self, level: int, text: bytes | None, user_data: Any) -> None:
        try:  # an exception must not cross into C (ctypes would print it to stderr)
            with self.lock:
                if level != _GGML_CONT:
                    self._emit(self.pending)
                    self.pending, self.level = "", _GGML_LEVELS.get(level, logging.INFO)
                *lines, self.pending = (self.pending + (text or b"").decode("utf-8", "replace")).split("\n")
                for line in lines:
                    self._emit(line)
        except BaseException:  # noqa: BLE001 - a log line lost is better than a crash in C
            pass

    def _emit(self, line: str) -> None:
        if line.strip():
            LOG.log(self.level, line.rstrip())
            if self.level >= logging.ERROR and not self.first_error:
                self.first_error = line.strip()


_LOG_LINES = _LogLines()
_LOG_CALLBACK: Any = None
"""The ctypes callback given to llama.cpp (kept here: llama.cpp holds only a pointer to it)."""


_cpu_variant: str | None = None
"""The CPU backend variant this process runs (``zen4``, ``haswell``: :mod:`~nlqo.runtime.llm.llamacpp.variants`),
or None: the build's own, linked in, or llama.cpp not started yet."""


def cpu_variant() -> str | None:
    """The llama.cpp CPU variant this process runs; None for a build with its CPU backend linked in."""
    return _cpu_variant


def _init_backend(ll, *, model: Path | None = None, cpu_variant: str | None = None) -> None:
    """Start llama.cpp once per process, its messages sent to :data:`LOG` instead of stderr, with the
    CPU backend variant ``cpu_variant`` (else ``$NLQO_LLAMA_CPU_VARIANT``, else the best one that runs
    ``model`` here: :func:`~nlqo.runtime.llm.llamacpp.variants.load_cpu_backend`). The variant is chosen
    once: a later call asking for another raises :class:`~nlqo.errors.ConfigError`."""
    global _backend_started, _LOG_CALLBACK, _cpu_variant
    from nlqo.runtime.llm.llamacpp import variants

    with _BACKEND_READY:
        if _backend_started:
            asked = variants.requested(cpu_variant)
            if asked is not None and asked != _cpu_variant:
                raise ConfigError(
                    f"llama.cpp's CPU backend is chosen once per process: this one runs "
                    f"{_cpu_variant or 'the built-in backend'}, so {variants.VARIANT_ENV}={asked} needs a new process"
                )
            return
        _LOG_CALLBACK = ll.llama_log_callback(_LOG_LINES)
        ll.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))
        _cpu_variant = variants.load_cpu_backend(ll, model=model, cpu_variant=cpu_variant)
        ll.llama_backend_init()
        _backend_started = True
