"""Demonstration answers must not reach predictions unless a retrieved passage holds them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nlqo.eval.leaks import demo_leak
from nlqo.eval.summary import strategy_summary
from nlqo.runtime.prompts import baselines, demonstration_answers, execution

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("module", [execution, baselines], ids=["execution", "baselines"])
def test_every_declared_demonstration_answer_is_in_its_modules_prompts(module):
    text = Path(module.__file__).read_text()
    for answer in module.DEMO_ANSWERS:
        assert answer in text
    assert set(module.DEMO_ANSWERS) <= demonstration_answers()


def test_a_demonstration_answer_counts_as_a_leak_only_without_support():
    assert demo_leak("cincinnati", ["Toronto is a city."]) == "Cincinnati"
    assert demo_leak("Cincinnati", ["He was born in Cincinnati, Ohio."]) is None
    assert demo_leak("Toronto", ["nothing"]) is None and demo_leak("", []) is None
    assert demo_leak("The Jaws", []) == "Jaws"  # articles and case go, as in exact match


def test_the_summary_counts_leaks_and_says_nothing_of_records_without_the_check():
    rows = [{"em": 0.0, "demo_leak": "Jaws"}, {"em": 1.0, "demo_leak": None}]
    assert strategy_summary(rows)["demo_leaks"] == 1
    assert strategy_summary([{"em": 1.0}])["demo_leaks"] is None


def _runs():
    return sorted((ROOT / "benchmarks" / "results" / "runs").glob("*/records.jsonl"))


KNOWN_LEAKS = {
    # self-ask's own demonstration answer (Frankenstein's author's husband), given to a question on
    # Jason's father (gold "Aeson", so no EM gained); docs/benchmarks.md reports it in MuSiQue's targets.
    "musique_dev_200-baselines": [("self-ask", "2hop__84439_482364", "Percy Bysshe Shelley")],
}
"""The committed predictions that repeat their prompt's demonstrations (the engine's strategies have
none: where auto's template wrote its demonstration's year on MuSiQue, the engine now asks again,
nlqo.execution.fallback, and those two records were re-run): the benchmark reports them as a missed
target, and a new one fails the test."""


@pytest.mark.skipif(not _runs(), reason="no benchmark run on the default runtime is committed yet")
@pytest.mark.parametrize("path", _runs(), ids=lambda p: p.parent.name)
def test_no_committed_prediction_is_a_demonstration_answer_without_support(path):
    leaks = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record.get("demo_leak"):
            leaks.append((record["strategy"], record["qid"], record["answer"]))
    known = KNOWN_LEAKS.get(path.parent.name, [])
    assert leaks == known, f"predictions copied from a prompt's demonstrations: {leaks[:10]}"
    assert not {strategy for strategy, _, _ in leaks} & {"linear", "tree", "auto"}
