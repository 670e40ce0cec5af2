"""Repairs nlqo makes on its own (a ``RepairWarning``), shown as one ``nlqo: warning: ...`` line each."""

from __future__ import annotations

import contextlib
import sys
import warnings
from typing import Iterator

from nlqo.errors import RepairWarning


@contextlib.contextmanager
def shown_repairs() -> Iterator[None]:
    """Inside, each ``RepairWarning`` is printed to stderr as ``nlqo: warning: MESSAGE``, every time."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", RepairWarning)
        default = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if issubclass(category, RepairWarning):
                print(f"nlqo: warning: {message}", file=sys.stderr)
            else:
                default(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield
