"""One configuration for the CLI, the bench and the Python API: a user's cost model reaches every command."""

from __future__ import annotations

import json

import pytest

from nlqo import Engine, EngineConfig
from nlqo.cli import build_parser, main
from nlqo.cli.common import config_from_args
from nlqo.errors import ConfigError, LimitError
from nlqo.eval.records import read_records
from nlqo.runtime.llm.scripted import ScriptedLLM
from nlqo.testing import PASSAGES, HashEmbedder, KeywordRetriever

QUESTION = "Which band released Counterparts, is Canadian and had a famous drummer?"
IR = 'q1 = (?band, "released", "Counterparts")\nq2 = (?band, "is", "Canadian")\nq3 = (?band, "had", "a famous drummer")\nanswer ?band'
CHAIN = {"q1": "$root", "q2": "q1", "q3": "q2"}
FLAT = {"q1": "$root", "q2": "$root", "q3": "$root"}


def scripted() -> ScriptedLLM:
    """Writes the IR above, calls every undecided pair 'parent' (so chains and flat trees are both
    valid), and answers 'Rush'."""
    return ScriptedLLM([("nlqo IR", IR), ("Relation of A", "parent"), ("", "Rush")])


@pytest.fixture
def cost_files(tmp_path):
    chain = tmp_path / "chain.cost"
    chain.write_text('description "deep plans first"\nparam w = 1\ncost = -w * depth\n')
    bushy = tmp_path / "bushy.cost"
    bushy.write_text('description "flat plans first"\ncost = depth - leaves\n')
    return chain, bushy


@pytest.fixture
def fake_parts(monkeypatch):
    """The builder's loading seams: a scripted LLM and the keyword retriever instead of a model and an index."""
    import nlqo.main.builder as builder

    monkeypatch.setattr(builder, "load_llm", lambda name, **options: scripted())
    monkeypatch.setattr(
        builder, "open_retrieval", lambda config, embedder=None: (KeywordRetriever(PASSAGES), HashEmbedder())
    )


def ask_plan(capsys, *args) -> dict[str, str]:
    assert main(["ask", QUESTION, "--index", "unused", "--strategy", "tree", "--json", "--quiet", *args]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["answer"] == "Rush"
    return data["plan"]


def test_ask_plans_with_the_users_cost_model(fake_parts, cost_files, capsys):
    chain, bushy = cost_files
    assert ask_plan(capsys, "--cost-model", str(chain)) == CHAIN
    assert ask_plan(capsys, "--cost-model", str(bushy)) == FLAT
    assert ask_plan(capsys, "--cost-model", str(chain), "--param", "w=-1") == FLAT  # a negative weight flips it


def test_explain_plans_with_the_users_cost_model_and_rules(fake_parts, cost_files, capsys, tmp_path):
    chain, bushy = cost_files
    for model, expected in ((chain, CHAIN), (bushy, FLAT)):
        assert (
            main(
                [
                    "explain",
                    QUESTION,
                    "--index",
                    "unused",
                    "--strategy",
                    "tree",
                    "--format",
                    "json",
                    "--quiet",
                    "--cost-model",
                    str(model),
                ]
            )
            == 0
        )
        data = json.loads(capsys.readouterr().out)
        assert {c: n["id"] for n in data["nodes"] for c in n["children"]} == expected
        assert data["cost"]["model"] == model.stem and data["stats"]["exact"] is True
    (tmp_path / "none_but_normalise.rules").write_text("normalize_variables\n")
    assert (
        main(
            [
                "explain",
                QUESTION,
                "--index",
                "unused",
                "--format",
                "json",
                "--quiet",
                "--rules",
                str(tmp_path / "none_but_normalise.rules"),
                "--rules",
                "none",
            ]
        )
        == 0
    )


@pytest.mark.filterwarnings("error::UserWarning")  # plots fit their layout with long ablation names
def test_bench_varies_the_cost_model_as_an_ablation_axis(fake_parts, cost_files, tmp_path, monkeypatch, capsys):
    import types

    import nlqo.eval.workspace as workspace

    index = types.SimpleNamespace(
        retriever=lambda mode: KeywordRetriever(PASSAGES),
        embedder=HashEmbedder(),
        manifest=types.SimpleNamespace(embedder="hash"),
    )
    monkeypatch.setattr(workspace, "open_index", lambda out, **kw: (index, {"index": "fake"}))
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "a", "question": QUESTION, "answers": ["Rush"]}) + "\n")
    chain, bushy = cost_files
    out = tmp_path / "out"
    argv = ["bench", "--questions", str(questions), "--index", "unused", "--out", str(out), "--strategies", "tree,no-rag",
            "--cost-model", f"{chain},{bushy}", "--quiet"]  # fmt: skip
    assert main(argv) == 0
    plans = {r["strategy"]: r["plan_tree"] for r in read_records(out / "records.jsonl")}
    assert plans == {f"tree[cost_model={chain}]": CHAIN, f"tree[cost_model={bushy}]": FLAT, "no-rag": None}
    run = json.loads((out / "run.json").read_text())
    assert "--cost-model" in run["command"] and f"{chain},{bushy}" in run["command"]


def test_plan_ask_explain_and_bench_share_the_planning_options():
    parser = build_parser()
    common = ["--cost-model", "structural", "--param", "alpha=3", "--rules", "none", "--budget", "7", "--beam", "4"]
    configs = [
        config_from_args(parser.parse_args(["plan", "f.nlqo", *common])),
        config_from_args(parser.parse_args(["ask", "q?", "--index", "i", *common])),
        config_from_args(parser.parse_args(["explain", "q?", "--index", "i", *common])),
        config_from_args(parser.parse_args(["bench", "--questions", "q", "--index", "i", "--out", "o", *common])),
    ]
    for config in configs:
        assert (config.cost_model, config.param_dict, config.rules, config.budget, config.beam) == (
            "structural",
            {"alpha": 3.0},
            "none",
            7,
            4,
        )


def test_the_python_api_uses_the_same_defaults_as_the_cli():
    cli = config_from_args(build_parser().parse_args(["ask", "q?", "--index", "idx"]))
    assert cli == EngineConfig(index="idx")


def test_engine_from_config_plans_and_answers():
    engine = Engine.from_config(
        EngineConfig(cost_model="structural", strategy="tree", measure_costs=False),
        llm=scripted(), retriever=KeywordRetriever(PASSAGES), embedder=HashEmbedder(),
    )  # fmt: skip
    planned = engine.plan(QUESTION)
    assert dict(planned.plan.tree.parent) == FLAT  # the structural model rewards sibling density
    assert engine.ask(QUESTION).answer == "Rush"


def test_a_20000_character_question_is_refused_with_a_message(fake_parts, capsys):
    engine = Engine.from_config(
        EngineConfig(measure_costs=False), llm=scripted(), retriever=KeywordRetriever(PASSAGES), embedder=HashEmbedder()
    )
    with pytest.raises(LimitError, match="20,000 characters, more than 2,000"):
        engine.ask("why " * 5000)
    assert main(["ask", "x" * 20_000, "--index", "unused", "--quiet"]) == 2
    assert "the question has 20,000 characters" in capsys.readouterr().err
    assert (
        main(
            [
                "ask",
                "x" * 20_000,
                "--index",
                "unused",
                "--quiet",
                "--max-question-chars",
                "30000",
                "--strategy",
                "linear",
                "--max-hops",
                "1",
            ]
        )
        == 0
    )


def test_bad_options_are_config_errors():
    with pytest.raises(ConfigError, match="unknown engine option 'speed'"):
        EngineConfig().with_options(speed=1)
    with pytest.raises(ConfigError, match="--param wants NAME=NUMBER"):
        config_from_args(build_parser().parse_args(["plan", "f", "--param", "alpha"]))


@pytest.mark.parametrize("strategy", ["tree", "linear"])
def test_explain_analyze_annotates_each_node_with_actuals(fake_parts, capsys, strategy):
    argv = [
        "explain",
        QUESTION,
        "--index",
        "unused",
        "--strategy",
        strategy,
        "--analyze",
        "--quiet",
        "--cost-model",
        "structural",
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "actual time=" in text and "Answer: Rush" in text and "Search: exact" in text
    assert ("ParallelTree" if strategy == "tree" else "LinearTemplate") in text
    assert main([*argv, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["physical"]["operator"] == strategy and data["analyze"]["answer"] == "Rush"
    assert all("operator" in n for n in data["nodes"]) and any("actual" in n for n in data["nodes"])
    assert main([*argv, "--format", "dot"]) == 0
    assert "actual time=" in capsys.readouterr().out
