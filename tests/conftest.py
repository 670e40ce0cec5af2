"""Shared test fixtures. Module-specific fixtures live in their own test modules."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

# No test is timed (speed belongs in benchmarks/): docs/testing.md's tutorial test failed once on a
# machine busy with a benchmark, and its one timed setting was hypothesis's 200 ms deadline.
settings.register_profile("untimed", deadline=None)
settings.load_profile("untimed")

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
