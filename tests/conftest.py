"""Shared test fixtures. Module-specific fixtures live in their own test modules."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# No test is timed (speed belongs in benchmarks/): docs/testing.md's tutorial test failed once on a
# machine busy with a benchmark, and its one timed setting was hypothesis's 200 ms deadline.
settings.register_profile("untimed", deadline=None)
# Under mutmut (`make mutation`) the examples are fixed, so a mutant's verdict does not depend on
# the draw and the report's figures are reproduced by its command.
settings.register_profile("mutation", deadline=None, derandomize=True, database=None)
settings.load_profile("mutation" if os.environ.get("MUTANT_UNDER_TEST") else "untimed")

FULL_MATRIX = os.environ.get("NLQO_FULL_MATRIX", os.environ.get("CI", "")).strip().lower() in ("1", "true")
"""Whether the CLI matrix's long tail (tests marked ``cli_matrix``) runs: under CI, or when asked."""


def pytest_collection_modifyitems(config, items):
    """Leave the CLI matrix's long tail out of a developer's ``make test`` (CI runs it); under mutmut,
    run a mutant's tests fastest first."""
    if "__mutmut_" in os.environ.get("MUTANT_UNDER_TEST", ""):
        _fastest_first(items)
    if FULL_MATRIX or config.getoption("-m"):
        return
    kept = [item for item in items if item.get_closest_marker("cli_matrix") is None]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


MUTANT_MEMORY = 4 * 2**30
"""Memory a mutant's test run may take beyond what it holds at the start (mutmut forks it)."""


def pytest_configure(config):
    """Under mutmut, cap a mutant's data memory: a mutant that grows a list forever (``node = None``
    for ``stack.pop()``) then fails with MemoryError, a kill, instead of filling the machine before its
    timeout. The data segment, not the address space: a cap on the address space stops chromium (the
    EXPLAIN page tests), which reserves far more than it uses, so every mutant those tests ran was
    "killed"."""
    if "__mutmut_" in os.environ.get("MUTANT_UNDER_TEST", ""):
        import resource

        with open("/proc/self/statm") as statm:
            data = int(statm.read().split()[5]) * resource.getpagesize()
        hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
        soft = data + MUTANT_MEMORY
        resource.setrlimit(resource.RLIMIT_DATA, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


def _fastest_first(items):
    """Order ``items`` by the durations mutmut recorded (``mutmut-stats.json`` in its work folder, the
    current directory), so that a mutant a quick test kills stops early (mutmut runs pytest with -x).
    mutmut passes a mutant's tests in set order; the verdict does not depend on the order."""
    import json

    try:
        durations = json.loads(Path("mutmut-stats.json").read_text(encoding="utf-8"))["duration_by_test"]
    except (OSError, ValueError, KeyError):
        return
    items.sort(key=lambda item: durations.get(item.nodeid, 0.0))


REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
ALLOWED_SKIPS = Path(__file__).with_name("allowed_skips.txt")
"""Skips a CI run may have, one per line: ``reason | why it is allowed``; any other fails under CI=true."""
IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true")


def allowed_skips(path: Path = ALLOWED_SKIPS) -> dict[str, str]:
    """Skip reason (the start of the message) -> why CI may skip it."""
    allowed = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip() and not line.startswith("#"):
            reason, sep, why = line.partition(" | ")
            assert sep and reason.strip() and why.strip(), f"{path}:{n}: write 'reason | why'"
            allowed[reason.strip()] = why.strip()
    return allowed


def skip_reason(report) -> str:
    """The message of a skipped test's report."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


def _fail_unallowed_skip(report) -> None:
    """Turn a skipped report into a failure under CI=true unless tests/allowed_skips.txt allows its reason."""
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = skip_reason(report)
        if not any(reason.startswith(allowed) for allowed in allowed_skips()):
            report.outcome = "failed"
            report.longrepr = f"skipped under CI=true: {reason!r} is not in tests/allowed_skips.txt"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI=true a skip whose reason is not in tests/allowed_skips.txt fails the test."""
    outcome = yield
    _fail_unallowed_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """The same for a whole module skipped at collection (``pytest.importorskip`` at its top)."""
    outcome = yield
    _fail_unallowed_skip(outcome.get_result())


def pytest_terminal_summary(terminalreporter):
    """Say how many tests skipped, and why, so that a skip is never silent."""
    skipped = terminalreporter.stats.get("skipped", [])
    reasons: dict[str, int] = {}
    for report in skipped:
        reasons[skip_reason(report)] = reasons.get(skip_reason(report), 0) + 1
    terminalreporter.write_line(
        f"skips: {len(skipped)}" + (" (CI=true: each one is allowed)" if IN_CI and skipped else "")
    )
    for reason, count in sorted(reasons.items()):
        terminalreporter.write_line(f"  {count} x {reason}")


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not beside this checkout")
    return SHARED_DATA
