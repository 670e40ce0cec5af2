"""nlqo bench-plans (issue 55): the parse cache, the resumable parse step, scoring from cached parses,
the figures' intervals and the tables; on scripted models and the kit's hashed-word embedder."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from nlqo.cli import main
from nlqo.common.docblocks import read_block
from nlqo.config import EngineConfig
from nlqo.errors import LLMError
from nlqo.eval import plan_bench as pb
from nlqo.eval import plan_report
from nlqo.eval.metrics import wilson_interval
from nlqo.main import builder
from nlqo.testing import HashEmbedder, ScriptedLLM
from nlqo.testing.gold import Gold, load_gold

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "plan_bench"
SETS = ("musique_dev_200", "strategyqa_229", "2wiki_dev_300")
LIVED = "Who lived longer, Kınar Sıvacıyan or Hans Rosling?"
BORN = "Who was born later, Piero Calamandrei or Franz Lackner?"
DEEP = 'description "rewards depth, penalises edges"\ncost = edges - 3 * depth\n'


def fixture_parses() -> dict[str, dict]:
    return json.loads((FIXTURES / "parses.json").read_text(encoding="utf-8"))["parses"]


def copy_sets(tmp_path: Path) -> list[str]:
    """The fixture's question files, under their sets' names (2Wiki's shapes are read by name)."""
    paths = []
    for name in SETS:
        shutil.copy(FIXTURES / f"{name}.jsonl", tmp_path / f"{name}.jsonl")
        paths.append(str(tmp_path / f"{name}.jsonl"))
    return paths


def seed_cache(folder: Path, config: EngineConfig = EngineConfig()) -> pb.ParseCache:
    cache = pb.ParseCache(folder, config)
    for question, entry in fixture_parses().items():
        cache.put(question, {"ir": entry["ir"], "error": None, "relations": entry["relations"]})
    return cache


def scripted_parser(**replies: str) -> ScriptedLLM:
    """Answers the parse prompt of each question with its IR, every repair prompt with no IR, and every
    relation question with 'parent'."""
    rules = [(r"Relation of A to B:\Z", "parent"), (r"Write the corrected IR lines only\.\Z", "this is not IR")]
    rules += [(re.escape(f"Question: {q}") + r"\Z", ir) for q, ir in replies.items()]
    return ScriptedLLM(rules)


# -- the parse cache ---------------------------------------------------------------------------------


def test_a_parse_is_keyed_by_question_model_settings_and_prompts(tmp_path):
    cache = pb.ParseCache(tmp_path, EngineConfig())
    path = cache.put(LIVED, {"ir": 'q1 = (?a, "p", ?b)\nanswer ?b\n', "error": None, "relations": {}})
    assert cache.get(LIVED)["ir"].startswith("q1") and cache.get(BORN) is None
    key = json.loads(path.read_text(encoding="utf-8"))["key"]
    assert key["question"] == LIVED and key["model"] == EngineConfig().model and key["prompts"] == pb.prompts_digest()
    assert set(pb.PARSE_SETTINGS) <= set(key)
    for change in ({"model": "smollm2-135m"}, {"constrained": False}, {"parse_atoms": 3}, {"repairs": 0}):
        other = pb.ParseCache(tmp_path, EngineConfig(**change))
        assert other.path(LIVED) != path and other.get(LIVED) is None, change
    assert pb.ParseCache(tmp_path, EngineConfig(threads=1)).get(LIVED) is not None  # threads change no parse
    path.write_text('{"format": 1, "key": ', encoding="utf-8")  # torn
    assert cache.get(LIVED) is None
    assert not list(tmp_path.glob(".parse-*"))  # no temporary file left behind


def test_parse_all_parses_each_question_once_keeps_the_relation_answers_and_resumes(tmp_path):
    golds = [Gold.from_steps(LIVED, ["Kınar Sıvacıyan", "Hans Rosling"]), Gold.from_steps(BORN, ["A", "B"])]
    llm = scripted_parser(
        **{
            LIVED: 'q1 = (?person, "died in", ?year1)\nq2 = (?person, "died in", ?year2)\nanswer ?year1, ?year2',
            BORN: "this is not IR",
        }
    )
    cache = pb.ParseCache(tmp_path / "parses", EngineConfig(repairs=1))
    lines: list[str] = []
    report = pb.parse_all(golds, cache, lambda: llm, progress=lines.append)
    assert (report.questions, report.cached, report.parsed, report.failed) == (2, 0, 2, 1)
    lived = cache.get(LIVED)
    # the two atoms share ?person at one depth: the engine asks the LLM, and the answer is kept for planning
    assert lived["relations"] == {"?person died in ?year1\t?person died in ?year2": "parent"}
    assert lived["attempts"] == 1 and "name no entity" in lived["warnings"][0]
    born = cache.get(BORN)
    assert born["ir"] is None and born["error"].startswith("ParseFailure") and born["relations"] == {}
    assert len(lines) == 2 and lines[0].startswith("[1/2]") and "min left" in lines[0]
    calls = len(llm.calls)

    def no_llm():
        raise AssertionError("the LLM is loaded only when a question is not cached")

    again = pb.parse_all(golds, cache, no_llm)
    assert (again.cached, again.parsed) == (2, 0) and len(llm.calls) == calls


def test_a_backend_failure_is_not_cached_so_that_a_resumed_run_asks_again(tmp_path):
    golds = [Gold.from_steps(LIVED, ["A", "B"]), Gold.from_steps(BORN, ["A", "B"])]
    llm = scripted_parser(**{LIVED: 'q1 = ("Hans Rosling", "died in", ?y)\nanswer ?y'})  # nothing for BORN
    cache = pb.ParseCache(tmp_path, EngineConfig())
    with pytest.raises(LLMError):
        pb.parse_all(golds, cache, lambda: llm)
    assert cache.get(LIVED) is not None and cache.get(BORN) is None


# -- scoring and the tables --------------------------------------------------------------------------


@pytest.fixture
def hashed(monkeypatch, tmp_path):
    """The CLI's embedder is the kit's HashEmbedder (its vectors kept under a temporary NLQO_CACHE);
    loading an LLM fails the test."""
    monkeypatch.setattr(builder, "load_embedder", lambda name: HashEmbedder())
    monkeypatch.setenv("NLQO_CACHE", str(tmp_path / "cache"))

    def no_model(config):
        raise AssertionError("scoring from the cache must not load the LLM")

    monkeypatch.setattr(builder, "load_model", no_model)


def test_bench_plans_scores_cached_parses_and_writes_records_summary_tables_and_the_docs_block(
    tmp_path, hashed, capsys
):
    files = copy_sets(tmp_path)
    out, docs = tmp_path / "out", tmp_path / "benchmarks.md"
    seed_cache(out / "parses")
    docs.write_text("# Benchmarks\n\nkept\n\n<!-- BEGIN plan-bench -->\nold\n<!-- END plan-bench -->\n\nafter\n")
    (tmp_path / "deep.cost").write_text(DEEP, encoding="utf-8")
    argv = ["bench-plans", "--questions", *files, "--out", str(out), "--score-only", "--quiet", "--docs", str(docs)]
    argv += ["--cost-models", f"default,structural,{tmp_path / 'deep.cost'}"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "no cached parse" not in err and "scored 72 plans" in err  # 12 questions x 3 cost models x 2 searches
    records = [json.loads(line) for line in (out / "records.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(records) == 72 and {r["cost_model"] for r in records} == {"default", "structural", "deep"}
    assert {r["search"] for r in records} == {"dp", "greedy"} and all(r["planned"] for r in records)
    rows = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    overall = {
        (r["dataset"], r["cost_model"], r["search"]): r["figures"]["overall"]["value"]
        for r in rows
        if r["group"] == "all"
    }
    assert overall[("2wiki_dev_300", "deep", "dp")] < overall[("2wiki_dev_300", "default", "dp")]
    assert {r["group"] for r in rows if r["dataset"] == "2wiki_dev_300"} == {
        "all", "2 hops", "4 hops", "type comparison", "type bridge_comparison"
    }  # fmt: skip
    wiki = next(r for r in rows if r["dataset"] == "2wiki_dev_300" and r["group"] == "all")
    assert wiki["figures"]["precision"] is None and wiki["figures"]["shape_match"]["n"] == 6  # shapes only
    block = read_block(docs, "plan-bench")
    assert block is not None and block.startswith("| set | cost model |") and "| PlanRAG paper |" in block
    assert "98.5 | 94.2" in block and "96.4 | 83.1 | 87.9 | 3.2" in block and "human annotation" in block
    text = docs.read_text(encoding="utf-8")
    assert text.startswith("# Benchmarks\n\nkept") and text.endswith("after\n") and "\nold\n" not in text
    assert (out / "results.md").read_text(encoding="utf-8").count("| PlanRAG paper |") == 1
    run = json.loads((out / "run.json").read_text(encoding="utf-8"))
    assert run["plans"] == 72 and run["unparsed"] == 0 and run["threshold"] == 0.5 and run["embedder"] == "hash"
    assert run["command"].startswith("nlqo bench-plans --questions ") and "--score-only" in run["command"]
    assert (tmp_path / "cache" / "plan-bench" / "embeddings-hash.npz").is_file()


def test_score_only_scores_what_is_cached_and_says_what_is_not(tmp_path, hashed, capsys):
    files = copy_sets(tmp_path)
    out = tmp_path / "out"
    cache = seed_cache(out / "parses")
    cache.path(LIVED).unlink()
    argv = ["bench-plans", "--questions", *files, "--out", str(out), "--score-only", "--cost-models", "structural"]
    assert main([*argv, "--search", "dp"]) == 0
    captured = capsys.readouterr()
    assert "1 of 12 questions have no cached parse" in captured.err
    assert "structural / default / dp" in captured.out
    assert len((out / "records.jsonl").read_text(encoding="utf-8").splitlines()) == 11


def test_parse_only_parses_with_the_configured_model_and_scores_nothing(tmp_path, monkeypatch, capsys):
    questions = tmp_path / "musique_dev_200.jsonl"
    questions.write_text(
        json.dumps({"id": "x", "question": LIVED, "decomposition": [{"question": "a"}, {"question": "#1 b"}]}) + "\n"
    )
    loaded = []

    def load_model(config):
        loaded.append(config.model)
        return scripted_parser(**{LIVED: 'q1 = ("Hans Rosling", "died in", ?y)\nanswer ?y'})

    monkeypatch.setattr(builder, "load_model", load_model)
    argv = ["bench-plans", "--questions", str(questions), "--out", str(tmp_path / "out"), "--parse-only"]
    assert main([*argv, "--model", "smollm2-135m"]) == 0
    assert loaded == ["smollm2-135m"] and not (tmp_path / "out" / "records.jsonl").exists()
    assert "1 parsed now (0 failed)" in capsys.readouterr().err
    assert pb.ParseCache(tmp_path / "out" / "parses", EngineConfig(model="smollm2-135m")).get(LIVED) is not None
    assert main([*argv, "--model", "smollm2-135m"]) == 0 and loaded == ["smollm2-135m"]  # cached: no model loaded


def test_parse_only_and_score_only_exclude_each_other(capsys):
    with pytest.raises(SystemExit):
        main(["bench-plans", "--questions", "q.jsonl", "--out", "o", "--parse-only", "--score-only"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_shares_get_wilson_intervals_and_the_mean_a_seeded_bootstrap():
    base = {"dataset": "s", "variant": "v", "cost_model": "c", "rules": "r", "search": "dp", "textual": True}
    records = [
        dict(base, hops=2, kind="a", matched=1, atoms=2, steps=2, overall=0.5, planned=True),
        dict(base, hops=3, kind="b", matched=3, atoms=3, steps=3, overall=1.0, planned=True),
    ]
    for r in records:
        r.update(edges_found=0, gold_edges=0, bare_leaves=0, leaves=1, depth_match=True, shape_match=False)
        r.update(edge_outcomes={"parent-child": 1, "sibling": 1})
        r.update(
            linear_degeneration=None,
            relations={k: {"right": 0, "pairs": 0} for k in ("none", "parent-child", "sibling")},
        )
    rows = plan_report.summarize(records, seed=3)
    assert [r["group"] for r in rows] == ["all", "2 hops", "3 hops", "type a", "type b"]
    precision = rows[0]["figures"]["precision"]
    assert (precision["k"], precision["n"], precision["value"]) == (4, 5, 0.8)
    assert (precision["low"], precision["high"]) == wilson_interval(4, 5)
    assert rows[0]["figures"]["edges"] is None and rows[0]["figures"]["linear_degeneration"] is None
    mean = rows[0]["figures"]["overall"]
    assert mean["value"] == 0.75 and 0.5 <= mean["low"] <= mean["high"] <= 1.0
    assert plan_report.summarize(records, seed=3) == rows  # seeded: the same intervals every time
    assert rows[0]["edge_outcomes"] == {"parent-child": 2, "reversed": 0, "sibling": 2, "none": 0, "unmatched": 0}
    assert "| s | c | r | dp | 4 | 50.0 | 0.0 | 50.0 | 0.0 | 0.0 |" in plan_report.edges_table(rows)
    table = plan_report.main_table(rows)
    assert "| s | c | r | dp | 2 | 100.0 [34, 100] | 80.0 [38, 96] |" in table


def test_every_shipped_cost_model_and_both_searches_are_the_defaults():
    assert set(pb.shipped_cost_models()) >= {"default", "shallow", "structural"}
    variants = pb.variants(pb.shipped_cost_models(), ["default"], pb.SEARCHES)
    assert len(variants) == 2 * len(pb.shipped_cost_models()) and variants[0].name == "default / default / dp"
    with pytest.raises(Exception, match="unknown search 'beam'"):
        pb.variants(["default"], ["default"], ["beam"])


def test_the_memo_embedder_embeds_each_text_once_and_keeps_its_vectors(tmp_path):
    class Counting(HashEmbedder):
        def __init__(self):
            self.seen: list[str] = []

        def encode(self, texts, *, kind="query", progress=None):
            self.seen += list(texts)
            return super().encode(texts, kind=kind)

    base = Counting()
    memo = pb.MemoEmbedder.open(base, tmp_path)
    first = memo.encode(["a river", "a county", "a river"])
    assert base.seen == ["a river", "a county"] and first.shape == (3, HashEmbedder.dim)
    assert (memo.encode(["a county"]) == first[1]).all() and base.seen == ["a river", "a county"]
    memo.save()
    again = pb.MemoEmbedder.open(Counting(), tmp_path)
    assert (again.encode(["a river"]) == first[0]).all() and again.base.seen == [] and again.seconds == 0.0
    (tmp_path / "embeddings-hash.npz").write_bytes(b"not an npz")
    assert pb.MemoEmbedder.open(base, tmp_path).vectors == {}  # a broken file is no cache, not an error


@pytest.mark.real_model
def test_the_small_real_model_parses_two_gold_questions_into_the_cache(tmp_path):
    """The parse step on a real model (the small one), and its parses scored against the gold."""
    from nlqo.runtime.llm.backends import load_llm
    from realmodels import load_or_skip

    config = EngineConfig(model="smollm2-135m")
    llm = load_or_skip(lambda: load_llm("smollm2-135m"))
    golds = load_gold(FIXTURES / "musique_dev_200.jsonl", limit=2)
    cache = pb.ParseCache(tmp_path, config)
    report = pb.parse_all(golds, cache, lambda: llm)
    assert report.parsed == 2 and all(cache.get(g.question) is not None for g in golds)
    planner = pb.Planner.load(pb.Variant("structural", "default", "dp"), config, None)
    records, missing = pb.score_all(golds, cache, [planner], HashEmbedder(), threshold=0.5)
    assert not missing and len(records) == 2 and all(0.0 <= r["overall"] <= 1.0 for r in records)
