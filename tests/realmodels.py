"""Loading a real bundled model in a test: a skip on a developer's machine without it, a failure in CI."""

from __future__ import annotations

import os
from typing import Callable, TypeVar

import pytest

from nlqo.errors import ModelNotAvailable

T = TypeVar("T")


def load_or_skip(load: Callable[[], T]) -> T:
    """``load()``; when the model is not installed, skip the test, or fail it in CI (which must run it)."""
    try:
        return load()
    except ModelNotAvailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the real-model tests: {exc}")
        pytest.skip(str(exc))
