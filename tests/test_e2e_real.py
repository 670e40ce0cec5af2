"""End to end on the real small model (smollm2-135m) and the real embedder over a tiny index.

Slow-ish (a few seconds per generation on 2 cores); they assert on the trace, not on answer quality,
since the 135M model is too weak to be right reliably.
"""

from __future__ import annotations

import json

import pytest

from nlqo.cli import main

pytestmark = pytest.mark.real_model

PASSAGES = [
    {"id": "a1", "title": "Jaws (film)", "text": "Jaws is a 1975 thriller film directed by Steven Spielberg."},
    {
        "id": "a2",
        "title": "Steven Spielberg",
        "text": "Steven Spielberg is an American film director born in Cincinnati, Ohio.",
    },
    {"id": "a3", "title": "Cincinnati", "text": "Cincinnati is a city in the state of Ohio."},
    {"id": "a4", "title": "Ada Lovelace", "text": "Ada Lovelace was born on 10 December 1815 in London."},
    {"id": "a5", "title": "Charles Babbage", "text": "Charles Babbage was born on 26 December 1791 in London."},
]
QUESTION = "In which city was the director of the film Jaws born?"


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    folder = tmp_path_factory.mktemp("e2e")
    corpus = folder / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(p) for p in PASSAGES) + "\n")
    assert main(["index", str(corpus), "--out", str(folder / "index"), "--quiet"]) == 0
    return folder / "index"


@pytest.fixture(scope="module")
def engine(index):
    from nlqo import Engine, EngineConfig

    return Engine.from_config(EngineConfig(index=index, model="smollm2-135m", k=2, max_hops=3, measure_costs=False))


def test_ask_linear_json_on_the_real_model(index, capsys):
    code = main(
        [
            "ask",
            QUESTION,
            "--index",
            str(index),
            "--model",
            "smollm2-135m",
            "--strategy",
            "linear",
            "--max-hops",
            "3",
            "-k",
            "2",
            "--json",
            "--quiet",
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) >= {"question", "answer", "strategy", "supporting", "stats", "trace"}
    stats = data["stats"]
    assert set(stats) >= {
        "llm_calls",
        "prompt_tokens",
        "cached_prompt_tokens",
        "generated_tokens",
        "hops",
        "stop_reason",
        "planning_ms",
        "execution_ms",
    }
    assert 1 <= stats["hops"] <= 3
    assert stats["stop_reason"] in ("terminator", "max_hops", "empty_question")
    assert stats["llm_calls"] == 2 * stats["hops"] + 1 + (stats["stop_reason"] != "max_hops")
    # the scaffold prefix and earlier hops come from the KV cache
    assert 0 < stats["cached_prompt_tokens"] < stats["prompt_tokens"]
    retrieves = [s for s in data["trace"] if s["kind"] == "retrieve"]
    assert len(retrieves) == stats["hops"]
    assert all(len(s["passages"]) == 2 and s["terminator_score"] is not None for s in retrieves)
    assert data["answer"] != "" and data["supporting"]


def test_kv_reuse_serves_prompt_tokens_from_cache_and_changes_nothing_else(engine):
    from nlqo.execution.linear import LinearExecutor
    from nlqo.execution.operators.template import executor

    with_reuse = executor(engine).run(QUESTION)
    without = LinearExecutor(engine.llm, engine.retriever, engine.embedder, k=2, max_hops=3, kv_reuse=False).run(
        QUESTION
    )
    assert with_reuse.answer == without.answer
    assert [s.text for s in with_reuse.trace if s.kind == "llm"] == [s.text for s in without.trace if s.kind == "llm"]
    assert without.stats()["cached_prompt_tokens"] == 0
    assert with_reuse.stats()["cached_prompt_tokens"] > 0.6 * with_reuse.stats()["prompt_tokens"]


def test_tree_on_the_real_model(engine):
    from nlqo.execution.operators.tree import executor as tree_executor
    from nlqo.ir.syntax import parse

    query = parse(f'question "{QUESTION}"\nq1 = (?d, "directed", "Jaws")\nq2 = (?d, "born in", ?city)\nanswer ?city')
    plan = engine.optimizer.optimize(query)
    result = tree_executor(engine).run(plan)
    nodes = [s.node for s in result.trace if s.kind == "retrieve"]
    assert nodes.index("q1") < nodes.index("q2") < nodes.index("$root")
    # questions by substitution (the default): one answer call per node, a rewrite only where a
    # child's answer is empty
    rewritten = [
        s.node
        for s in result.trace
        if s.kind == "retrieve" and s.node != "$root" and not s.note.startswith("question by substitution")
    ]
    assert len([s for s in result.trace if s.kind == "llm"]) == 3 + len(rewritten)
    assert "q1" not in rewritten  # a leaf has no children to wait for
    assert result.stop_reason == "root_answered" and result.answer


def test_an_answer_naming_no_option_is_asked_again_and_the_real_model_must_pick_an_option(engine):
    from nlqo.execution.choice import CHOICE_NODE, HELD, held_to_options
    from nlqo.execution.trace import RunResult, Step

    question = "Who was born first, Ada Lovelace or Charles Babbage?"
    hits = engine.retriever.search("Ada Lovelace Charles Babbage born", 2)
    ran = RunResult(
        question=question,
        answer="London",
        strategy="linear",
        trace=(Step.retrieve("hop-1", question, hits, 1.0),),
        stop_reason="terminator",
    )
    result = held_to_options(ran, engine.llm)
    # the constraint leaves the 135M model no other reply (llama.cpp applies it token by token)
    assert result.answer in ("Ada Lovelace", "Charles Babbage") and result.stop_reason == f"terminator; {HELD}"
    step = result.trace[-1]
    assert step.node == CHOICE_NODE and step.forced_tokens > 0 and "'London' named no option" in step.note


def test_explain_analyze_json_shape(index, capsys, repo):
    ir = repo / "examples" / "director_birthplace.nlqo"
    code = main(
        [
            "explain",
            QUESTION,
            "--index",
            str(index),
            "--model",
            "smollm2-135m",
            "--ir",
            str(ir),
            "--analyze",
            "--format",
            "json",
            "--max-hops",
            "2",
            "-k",
            "2",
            "--quiet",
            "--strategy",
            "tree",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    data = json.loads(out)
    assert [n["id"] for n in data["nodes"]] == ["$root", "q2", "q1"]
    assert data["physical"]["operator"] == "tree" and data["physical"]["waves"] == [["q1"], ["q2"], ["$root"]]
    assert data["physical"]["reason"] == "forced by --strategy tree"
    assert set(data["physical"]["estimates"]) == {"linear", "tree"}
    assert data["analyze"]["stats"]["execution_ms"] > 0
    actual = {n["id"]: n["actual"] for n in data["nodes"]}
    substituted = {
        s["node"]
        for s in data["analyze"]["trace"]
        if s["kind"] == "retrieve" and s["note"].startswith("question by substitution")
    }
    assert "q1" in substituted  # a leaf's question is its atom (questions by substitution, the default)
    assert actual["q1"]["llm_calls"] == 1 and actual["$root"]["llm_calls"] == 1
    assert actual["q2"]["llm_calls"] == (1 if "q2" in substituted else 2)  # a rewrite where q1's answer was empty
    assert all(a["generated_tokens"] > 0 and len(a["passages"]) == 2 and a["actual_ms"] > 0 for a in actual.values())


def test_explain_analyze_page_on_the_real_model(index, tmp_path, repo):
    import re

    ir = repo / "examples" / "director_birthplace.nlqo"
    page = tmp_path / "plan.html"
    code = main(
        [
            "explain",
            QUESTION,
            "--index",
            str(index),
            "--model",
            "smollm2-135m",
            "--ir",
            str(ir),
            "--analyze",
            "--format",
            "html",
            "--out",
            str(page),
            "-k",
            "2",
            "--quiet",
            "--strategy",
            "tree",
        ]
    )
    assert code == 0
    html = page.read_text()
    (block,) = re.findall(r'<script type="application/json" id="nlqo-plans">(.*?)</script>', html, re.S)
    data = json.loads(block)[0]["explain"]
    trace = data["analyze"]["trace"]
    for node in data["nodes"]:
        steps = [trace[i] for i in node["actual"]["steps"]]
        retrieval = next(s for s in steps if s["kind"] == "retrieve")
        asked_directly = node["id"] == "$root" or retrieval["note"].startswith(
            "question by substitution"
        )  # else rewritten first
        assert [s["kind"] for s in steps if s["kind"] != "stop"] == (
            ["retrieve", "llm"] if asked_directly else ["llm", "retrieve", "llm"]
        )
        assert all(s["prompt"].startswith("[system]") and s["text"] for s in steps if s["kind"] == "llm")
        passages = [p for s in steps if s["kind"] == "retrieve" for p in s["passages"]]
        assert len(passages) == 2 and all(
            p["text"] and p["text"] in steps[-1]["prompt"] for p in passages
        )  # the answer prompt shows them
