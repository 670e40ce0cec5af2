"""docs/testing.md is a tutorial whose code runs: every ```python block, in order, in one
namespace, then every test_* function the blocks define."""

from __future__ import annotations

import re
import textwrap
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


def test_every_oracle_of_the_table_imports_from_the_module_it_names():
    """Part 3's table: a row's function comes from nlqo.testing.oracles unless the row names its module.
    It used to list check_cost_formula, which is in nlqo.testing only, under nlqo.testing.oracles."""
    import importlib

    text = DOC.read_text(encoding="utf-8")
    table = text[text.index("| oracle | what must hold |") :].split("\n\n", 1)[0]
    rows = re.findall(r"^\| `(\w+)\(.*?\)`(?: \(`([\w.]+)`[^|]*\))? \|", table, flags=re.M)
    assert len(rows) >= 7, table
    for name, module in rows:
        assert hasattr(importlib.import_module(module or "nlqo.testing.oracles"), name), (name, module)


COST_MODELS = DOC.with_name("cost-models.md")


def fenced(path: Path, language: str) -> list[str]:
    """The ```LANGUAGE blocks of a page, in order; a block indented under a list item loses its indent."""
    found = re.findall(rf"^( *)```{language}\n(.*?)^\1```", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    return [textwrap.dedent("\n".join(line[len(indent) :] for line in body.split("\n"))) for indent, body in found]


def test_the_cost_models_walkthrough_runs(tmp_path, monkeypatch):
    """docs/cost-models.md's worked example: the waves.cost of step 1, under ~/my-nlqo, then every
    python block in order, then the tests they define (step 4 plans with the testing kit's embedder)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    page = COST_MODELS.read_text(encoding="utf-8")
    assert "Write `~/my-nlqo/cost_models/waves.cost`" in page
    (waves,) = [b for b in fenced(COST_MODELS, "") if b.startswith('description "fewer parallel waves"')]
    (tmp_path / "my-nlqo" / "cost_models").mkdir(parents=True)
    (tmp_path / "my-nlqo" / "cost_models" / "waves.cost").write_text(waves, encoding="utf-8")
    namespace: dict = {"__name__": "docs_cost_models"}
    for i, block in enumerate(fenced(COST_MODELS, "python"), 1):
        exec(compile(block, f"{COST_MODELS}:block {i}", "exec"), namespace)
    tests = {name: fn for name, fn in namespace.items() if name.startswith("test_") and callable(fn)}
    assert list(tests) == ["test_waves_plans_are_valid"]
    for name, fn in tests.items():
        fn()
