"""docs/testing.md is a tutorial whose code runs: every ```python block, in order, in one
namespace, then every test_* function the blocks define."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "testing.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_the_tutorial_has_code_for_both_parts():
    code = "\n".join(blocks())
    assert "@structural(" in code and "check_rule_file(" in code and len(blocks()) >= 6


def test_the_testing_tutorial_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs_testing"}
    for i, block in enumerate(blocks(), 1):
        exec(compile(block, f"{DOC}:block {i}", "exec"), namespace)
    tests = {name: fn for name, fn in namespace.items() if name.startswith("test_") and callable(fn)}
    assert len(tests) >= 4, sorted(tests)
    for name, fn in tests.items():
        try:
            fn()
        except Exception as exc:  # name the tutorial's test in the failure
            pytest.fail(f"docs/testing.md {name}: {exc!r}")
    assert "height" in capsys.readouterr().out  # the printed directions
