"""Shared test fixtures. Module-specific fixtures live in their own test modules."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# No test is timed (speed belongs in benchmarks/): docs/testing.md's tutorial test failed once on a
# machine busy with a benchmark, and its one timed setting was hypothesis's 200 ms deadline.
settings.register_profile("untimed", deadline=None)
settings.load_profile("untimed")

FULL_MATRIX = os.environ.get("NLQO_FULL_MATRIX", os.environ.get("CI", "")).strip().lower() in ("1", "true")
"""Whether the CLI matrix's long tail (tests marked ``cli_matrix``) runs: under CI, or when asked."""


def pytest_collection_modifyitems(config, items):
    """Leave the CLI matrix's long tail out of a developer's ``make test`` (CI runs it)."""
    if FULL_MATRIX or config.getoption("-m"):
        return
    kept = [item for item in items if item.get_closest_marker("cli_matrix") is None]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not beside this checkout")
    return SHARED_DATA
