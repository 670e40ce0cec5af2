"""Where the model libraries' messages go: a log file, and the terminal only with ``--verbose``.

llama.cpp (through the log callback of :mod:`nlqo.runtime.llm.llamacpp`), transformers,
sentence-transformers, and Python warnings raised outside nlqo become :mod:`logging` records.
Inside :func:`routed` (the CLI runs every command in it) each record goes to the log file
(:func:`log_path`) and, when verbose, to stderr too; transformers' progress bars ("Loading
weights") become one log line each. nlqo's own lines (progress, ``nlqo: warning: ...``, its own
warnings) are printed, not logged, and stay on the terminal. Outside :func:`routed` (nlqo as a
library) nothing is changed: the caller's logging configuration decides.
"""

from __future__ import annotations

import contextlib
import io
import logging
import logging.handlers
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import attrs

ENV = "NLQO_LOG"
"""Environment variable naming the log file (default: ``logs/nlqo.log`` in nlqo's cache directory)."""

MAX_BYTES = 5 << 20
"""The log file is rotated at this size; one older file (``nlqo.log.1``) is kept."""

FORMAT = "%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"
_PACKAGE = Path(__file__).resolve().parents[1]


def log_path(env: Mapping[str, str] | None = None) -> Path:
    """The log file: ``$NLQO_LOG``, else ``logs/nlqo.log`` under ``$NLQO_CACHE`` (else ``~/.cache/nlqo``).

    >>> log_path({"NLQO_LOG": "/tmp/x.log"}), log_path({"NLQO_CACHE": "/data/nlqo"})
    (PosixPath('/tmp/x.log'), PosixPath('/data/nlqo/logs/nlqo.log'))
    """
    from nlqo.common.paths import cache_root

    env = os.environ if env is None else env
    value = env.get(ENV)
    return Path(value).expanduser() if value else cache_root(env) / "logs" / "nlqo.log"


@attrs.frozen
class Route:
    """Where records go while :func:`routed` is active."""

    path: Path | None
    """The log file; None when it could not be opened (its folder is not writable, say)."""
    verbose: bool
    """Records (and progress bars) also go to stderr."""


_active: Route | None = None
_tamed: bool | None = None
"""Whether transformers' library logger propagated before :func:`tame_transformers` changed it
(None: unchanged, nothing to put back)."""


@contextlib.contextmanager
def routed(*, verbose: bool = False, env: Mapping[str, str] | None = None) -> Iterator[Route]:
    """Inside, library records go to the log file, and to stderr when ``verbose``; all is undone on exit."""
    global _active
    handlers: list[logging.Handler] = []
    file = log_path(env)
    path: Path | None = file
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.handlers.RotatingFileHandler(file, maxBytes=MAX_BYTES, backupCount=1, encoding="utf-8"))
        handlers[-1].setFormatter(logging.Formatter(FORMAT))
    except OSError:
        path = None
    if verbose:
        handlers.append(logging.StreamHandler(sys.stderr))
        handlers[-1].setFormatter(logging.Formatter("%(name)s: %(message)s"))
    root = logging.getLogger()
    level = root.level
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(logging.INFO)
    show = warnings.showwarning
    warnings.showwarning = _logging_foreign_warnings(show)
    previous, _active = _active, Route(path, verbose)
    tame_transformers(load=False)
    try:
        yield _active
    finally:
        _active = previous
        if previous is None:
            _untame_transformers()
        warnings.showwarning = show
        root.setLevel(level)
        for handler in handlers:
            root.removeHandler(handler)
            handler.close()


def _logging_foreign_warnings(default: Callable[..., Any]) -> Callable[..., Any]:
    """A ``warnings.showwarning`` that logs warnings raised outside nlqo and shows nlqo's own as before."""

    def show(message, category, filename, lineno, file=None, line=None):
        if Path(filename).resolve().is_relative_to(_PACKAGE):
            default(message, category, filename, lineno, file, line)
        else:
            logging.getLogger("py.warnings").warning("%s:%s: %s: %s", filename, lineno, category.__name__, message)

    return show


def tame_transformers(*, load: bool = True) -> bool:
    """Send transformers' records and progress bars where :func:`routed` says; whether it did.

    Call it before loading a transformers model. Outside :func:`routed`, or when ``load`` is false
    and transformers is not imported yet, it does nothing.
    """
    global _tamed
    route = _active
    if route is None or (not load and "transformers" not in sys.modules):
        return False
    from transformers.utils import logging as tlog

    if _tamed is None:
        _tamed = tlog.get_logger("transformers").propagate
    tlog.disable_default_handler()
    tlog.enable_propagation()
    if hasattr(tlog, "set_tqdm_hook"):
        tlog.set_tqdm_hook(None if route.verbose else _bar_to_log)
    elif not route.verbose:
        tlog.disable_progress_bar()
    return True


def _untame_transformers() -> None:
    """Put back what :func:`tame_transformers` changed, if it did."""
    global _tamed
    if _tamed is None:
        return
    propagate, _tamed = _tamed, None
    from transformers.utils import logging as tlog

    tlog.enable_default_handler()
    tlog.get_logger("transformers").propagate = propagate
    if hasattr(tlog, "set_tqdm_hook"):
        tlog.set_tqdm_hook(None)
    else:
        tlog.enable_progress_bar()


def _bar_to_log(factory: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A transformers tqdm hook: the bar writes its final state as one line of the log."""
    return factory(*args, **{**kwargs, "file": LineLog(logging.getLogger("tqdm"))})


class LineLog(io.TextIOBase):
    """A text stream that logs each finished line; of a line redrawn with ``\\r`` (a progress bar), the last state.

    >>> import logging
    >>> seen = []
    >>> log = logging.getLogger("doctest.linelog")
    >>> log.addHandler(type("H", (logging.Handler,), {"emit": lambda self, r: seen.append(r.getMessage())})())
    >>> log.setLevel(logging.INFO)
    >>> LineLog(log).write("\\rbar 10%\\rbar 100%\\n\\nnext\\n")
    24
    >>> seen
    ['bar 100%', 'next']
    """

    def __init__(self, logger: logging.Logger):
        super().__init__()
        self.logger = logger
        self.pending = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            last = line.split("\r")[-1].strip()
            if last:
                self.logger.info(last)
        return len(text)
