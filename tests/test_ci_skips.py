"""Under CI=true a skip fails the run unless tests/allowed_skips.txt allows its reason; every run says
how many tests skipped and why."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ALLOWED_SKIPS, allowed_skips

SAMPLE = """
import pytest

def test_allowed():
    pytest.skip("allowed reason, with details")

def test_unlisted():
    pytest.skip("some other reason")

@pytest.mark.skipif(True, reason="unlisted marker")
def test_marked():
    pass

def test_runs():
    assert True
"""


def run_sample(tmp_path: Path, ci: bool) -> subprocess.CompletedProcess:
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "allowed_skips.txt").write_text("# comment\nallowed reason | a why\n")
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    env = {k: v for k, v in os.environ.items() if k != "CI"} | ({"CI": "true"} if ci else {})
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )


def test_under_ci_only_allowed_skips_pass(tmp_path):
    done = run_sample(tmp_path, ci=True)
    assert done.returncode == 1
    assert "1 failed, 1 passed, 1 skipped, 1 error" in done.stdout
    assert "'some other reason' is not in tests/allowed_skips.txt" in done.stdout
    assert "'unlisted marker' is not in tests/allowed_skips.txt" in done.stdout
    assert "skips: 1 (CI=true: each one is allowed)" in done.stdout


def test_outside_ci_skips_are_counted_with_their_reasons(tmp_path):
    done = run_sample(tmp_path, ci=False)
    assert done.returncode == 0
    assert "skips: 3" in done.stdout and "1 x some other reason" in done.stdout


def test_the_allow_list_gives_a_why_for_each_reason(tmp_path):
    assert all(why for why in allowed_skips(ALLOWED_SKIPS).values())
    bad = tmp_path / "allowed.txt"
    bad.write_text("a reason with no why\n")
    with pytest.raises(AssertionError, match="allowed.txt:1: write 'reason / why'".replace("/", "|")):
        allowed_skips(bad)
