"""EXPLAIN output: golden text per example (timings masked), the JSON shape, DOT that renders."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from nlqo.cli import main

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "examples").glob("*.nlqo"))
GOLDEN = Path(__file__).parent / "fixtures" / "explain"


def run_cli(capsys, *args) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


def mask(text: str) -> str:
    return re.sub(r"\d+\.\d+ ms", "<t> ms", text)


def test_plan_without_model_loads_no_llm(monkeypatch, capsys):
    # EngineConfig.model always has a default; plan must not load it unless --model is given
    # (a machine with only the 135M model installed could not plan at all).
    def refuse(config):
        raise AssertionError(f"plan loaded {config.model} without --model")

    monkeypatch.setattr("nlqo.cli.plan.load_model", refuse)
    out = run_cli(capsys, "plan", str(EXAMPLES[0]), "--cost-model", "structural")
    assert "cost" in out.lower()


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_text_matches_golden(example, capsys):
    out = mask(run_cli(capsys, "plan", str(example), "--cost-model", "structural", "--verbose"))
    golden = GOLDEN / f"{example.stem}.txt"
    if os.environ.get("NLQO_UPDATE_GOLDEN") == "1":  # regenerate on purpose, then review the diff and commit
        golden.write_text(out)
    assert golden.exists(), f"{golden} is missing: write it with NLQO_UPDATE_GOLDEN=1, review it, commit it"
    assert out == golden.read_text()


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_json_shape(example, capsys):
    data = json.loads(run_cli(capsys, "plan", str(example), "--cost-model", "structural", "--format", "json"))
    assert set(data) >= {"question", "answer_var", "root", "nodes", "cost", "stats"}
    assert set(data["stats"]) >= {
        "planning_ms",
        "llm_calls",
        "cache_hits",
        "subsets",
        "pruned_pairs",
        "fallback",
        "left_out",
        "budget",
        "beam",
        "beam_dropped",
        "exact",
    }
    assert data["version"] == 2 and data["stats"]["exact"] is True and data["stats"]["beam_dropped"] == 0
    assert set(data["cost"]) >= {"total", "terms"}
    ids = [n["id"] for n in data["nodes"]]
    assert ids[0] == data["root"] == "$root"
    for node in data["nodes"]:
        assert set(node) >= {"id", "triple", "children"}
        assert node["triple"] is None if node["id"] == "$root" else len(node["triple"]) == 3
        assert all(c in ids for c in node["children"])
    # every node but the root is some node's child, once
    children = [c for n in data["nodes"] for c in n["children"]]
    assert sorted(children) == sorted(ids[1:])


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_dot_renders(example, capsys, tmp_path):
    out = run_cli(capsys, "plan", str(example), "--cost-model", "structural", "--format", "dot")
    assert out.startswith("digraph plan {") and out.rstrip().endswith("}")
    if shutil.which("dot") is None:
        pytest.skip("graphviz 'dot' is not installed")
    svg = subprocess.run(["dot", "-Tsvg"], input=out, capture_output=True, text=True, check=True).stdout
    assert "<svg" in svg and "Answer" in svg  # the root's label


def test_equivalent_inputs_explain_alike(capsys, tmp_path):
    """Plans compare by EXPLAIN output: statement order and variable case do not matter."""
    a = tmp_path / "a.nlqo"
    b = tmp_path / "b.nlqo"
    a.write_text('q1 = (?d, "directed", "Jaws")\nq2 = (?d, "born in", ?city)\nanswer ?city\n')
    b.write_text('answer ?City\nq1 = (?D, "directed", "Jaws")\nq2 = (?D, "born in", ?City)\n')
    first = mask(run_cli(capsys, "plan", str(a), "--cost-model", "structural"))
    second = mask(run_cli(capsys, "plan", str(b), "--cost-model", "structural"))
    assert first == second


def test_bad_file_is_a_clear_error(capsys, tmp_path):
    bad = tmp_path / "bad.nlqo"
    bad.write_text('q1 = (?a, "p" ?b)\nanswer ?a\n')
    assert main(["plan", str(bad), "--cost-model", "structural"]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:1:15: missing comma" in err


def test_a_node_that_never_ran_says_so_without_an_empty_field(monkeypatch):
    """The linear template of the question alone annotates only its root: the atom below it once read
    ``size=1; ; never executed``."""
    import nlqo.explain.analyze as analyze

    monkeypatch.setattr(analyze, "physical_annotations", lambda physical: {"$root": "LinearTemplate", "q1": ""})
    monkeypatch.setattr(analyze, "_by_node", lambda result, physical: {})
    assert analyze.actual_annotations(None, None) == {"$root": "LinearTemplate; never executed", "q1": "never executed"}
