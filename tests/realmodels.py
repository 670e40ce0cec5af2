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
        unavailable(f"the real-model tests need the model: {exc}")
        raise  # not reached: unavailable() skips or fails


def in_ci() -> bool:
    """Whether this is CI (``CI=true``), where what a test needs must be there."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true")


def unavailable(reason: str) -> None:
    """Skip the test for ``reason``, or fail it in CI (which must run it)."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: this test must run, not skip)", pytrace=False)
    pytest.skip(reason)
