"""benchmarks/record_findings.py: the figures the docs quote about linear runs, on hand-made records."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "record_findings.py"


@pytest.fixture(scope="module")
def findings():
    spec = importlib.util.spec_from_file_location("record_findings", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def step(node, kind, text, score=None):
    return {"node": node, "kind": kind, "text": text, "terminator_score": score}


def linear_run(*steps, question="Where was the director of Jaws born?", stop_reason="terminator"):
    return {"question": question, "trace": list(steps), "stop_reason": stop_reason}


REPEAT = linear_run(
    step("hop-1", "llm", " Who directed Jaws?"),
    step("hop-1", "retrieve", "Who directed Jaws?", 0.93),
    step("hop-2", "llm", " Who directed  jaws"),
    step("hop-2", "stop", "terminator", 1.0),
)
MAIN = linear_run(
    step("hop-1", "retrieve", "Who directed Jaws?", 0.93),
    step("hop-2", "retrieve", "Where was Steven Spielberg born?", 0.82),
    step("hop-3", "llm", "Where was the director of Jaws born?"),
    step("hop-3", "stop", "terminator", 0.87),
)


def test_stop_cause_names_what_the_last_sub_question_repeated(findings):
    assert findings.stop_cause(REPEAT) == "an earlier sub-question"
    assert findings.stop_cause(MAIN) == "the main question"
    assert findings.stop_cause(linear_run(step("hop-1", "retrieve", "x", 0.5), stop_reason="max_hops")) == "max_hops"


def test_tau_changes_a_run_only_where_a_later_hop_scored_between_the_thresholds(findings):
    # hop 1 never stops (min_hops), so its 0.93 does not count; hop 2 scored 0.82 and the stop 0.87
    assert findings.tau_would_change(MAIN, 0.8) and findings.tau_would_change(MAIN, 0.9)
    assert not findings.tau_would_change(REPEAT, 0.8) and not findings.tau_would_change(REPEAT, 0.9)
    assert not findings.tau_would_change(MAIN, 0.85)


def test_findings_count_substituted_nodes_auto_operators_and_last_resorts(findings, tmp_path, capsys):
    import json

    question = "Where was the director of Jaws born?"
    tree = {"qid": "a", "strategy": "tree[tree_queries=substitute]", "question": question, "stop_reason": "root_answered", "em": 0.0, "evidence_complete": True, "trace": [
        {**step("q1", "retrieve", "director directed Jaws"), "note": "question by substitution: Who directed Jaws?"},
        step("q2", "retrieve", question),
        step("$root", "retrieve", question),
    ]}  # fmt: skip
    autos = [
        {
            "qid": "a",
            "strategy": "auto",
            "question": question,
            "stop_reason": "answer",
            "operator": "retrieve",
            "em": 1.0,
            "trace": [],
        },
        {
            "qid": "b",
            "strategy": "auto",
            "question": question,
            "stop_reason": "terminator; fallback_answer",
            "operator": "linear",
            "em": 0.0,
            "trace": [],
        },
        {
            "qid": "c",
            "strategy": "auto",
            "question": question,
            "stop_reason": "terminator",
            "operator": "linear",
            "em": 1.0,
            "trace": [],
            "evidence_complete": True,
        },
    ]
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [tree, *autos]))
    findings.findings(tmp_path)
    out = capsys.readouterr().out
    assert "3 questions with records" in out
    assert "tree node retrievals using the main question: 1 of 2; by substitution: 1" in out
    assert "auto ran: linear 2 (50.0 EM), retrieve 1 (100.0 EM)" in out
    assert "answers of last resort: {'fallback_answer': 1}" in out
    assert "every gold passage retrieved, answered wrong: tree[tree_queries=substitute] 1 of 1, auto 0 of 1" in out


def test_findings_count_comparison_answers_that_name_none_of_the_options(findings, tmp_path, capsys):
    import json

    question = "Which film came out first, Jaws or Alien?"
    (tmp_path / "q.jsonl").write_text(
        json.dumps({"id": "c1", "question": question, "answers": ["Jaws"], "type": "comparison"})
        + "\n"
        + json.dumps(
            {"id": "c2", "question": "Are Jaws and Alien both films?", "answers": ["yes"], "type": "comparison"}
        )
        + "\n"
        + json.dumps({"id": "b1", "question": "Who directed Jaws?", "answers": ["Steven Spielberg"], "type": "bridge"})
        + "\n"
    )
    (tmp_path / "run.json").write_text(json.dumps({"questions_file": str(tmp_path / "q.jsonl")}))
    records = [
        {"qid": "c1", "strategy": "linear", "question": question, "answer": "1975", "answers": ["Jaws"], "stop_reason": "terminator", "em": 0.0, "hops": 1, "trace": []},
        {"qid": "c1", "strategy": "tree", "question": question, "answer": "jaws", "answers": ["Jaws"], "stop_reason": "root_answered", "em": 1.0, "trace": []},
        {"qid": "c2", "strategy": "linear", "question": "Are Jaws and Alien both films?", "answer": "yes", "answers": ["yes"], "stop_reason": "terminator", "em": 1.0, "hops": 1, "trace": []},
        {"qid": "b1", "strategy": "linear", "question": "Who directed Jaws?", "answer": "Steven Spielberg", "answers": ["Steven Spielberg"], "stop_reason": "terminator", "em": 1.0, "hops": 1, "trace": []},
    ]  # fmt: skip
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    findings.findings(tmp_path)
    # yes/no comparisons and bridge questions do not count; a year is not one of the films named
    assert "comparison answers naming nothing the question names: linear 1 of 1, tree 0 of 1" in capsys.readouterr().out


def test_a_choice_stop_step_is_not_the_terminators_stop(findings):
    run = linear_run(
        step("hop-1", "retrieve", "Who directed Jaws?", 0.5),
        step("choice", "stop", "Jaws"),
        stop_reason="max_hops; held_to_options",
    )
    assert findings.stop_cause(run) == "max_hops; held_to_options"
    assert (
        findings.stop_cause({**REPEAT, "trace": [*REPEAT["trace"], step("choice", "stop", "Jaws")]})
        == "an earlier sub-question"
    )


def test_seconds_by_call_groups_llm_calls_by_kind_per_question(findings):
    def call(node, ms, prompt, cached, generated):
        return {
            "node": node,
            "kind": "llm",
            "wall_ms": ms,
            "prompt_tokens": prompt,
            "cached_prompt_tokens": cached,
            "generated_tokens": generated,
        }

    runs = [
        {
            "strategy": "linear",
            "trace": [
                call("hop-1", 3000, 500, 400, 10),
                call("hop-2", 1000, 600, 500, 20),
                call("answer", 500, 700, 690, 4),
            ],
        },
        {
            "strategy": "linear[tau=0.9]",
            "trace": [call("hop-1", 2000, 500, 400, 30), {"node": "hop-2", "kind": "stop", "wall_ms": 0}],
        },
    ]
    (rows,) = findings.seconds_by_call(runs).values()
    assert rows == [
        "hop-# 3.0 s (1.5 calls, 100 computed + 20 generated tokens each)",
        "answer 0.2 s (0.5 calls, 10 computed + 4 generated tokens each)",
    ]


def test_parse_prefix_hits_count_parses_served_mostly_from_the_cache(findings):
    def parse_call(cached, ms):
        return {"node": "parse", "kind": "llm", "wall_ms": ms, "prompt_tokens": 400, "cached_prompt_tokens": cached}

    runs = [
        {"strategy": "tree", "trace": [parse_call(394, 5000)]},
        {"strategy": "tree", "index": 6, "trace": [parse_call(3, 14000)]},
        {"strategy": "tree[tree_queries=rewrite]", "trace": [parse_call(394, 3000)]},
        {"strategy": "auto", "trace": [parse_call(0, 20000)]},
        {
            "strategy": "tree",
            "trace": [{"node": "parse", "kind": "llm", "wall_ms": 0, "prompt_tokens": 0, "cached_prompt_tokens": 0}],
        },
    ]
    assert findings.parse_prefix_hits(runs, "tree") == (2, 3, 4.0, 14.0, [7])
    assert findings.parse_prefix_hits(runs, "auto") == (0, 1, 0.0, 20.0, [])


def test_questions_option_keeps_the_records_of_a_range_of_question_indices(findings, tmp_path, capsys):
    import json

    def auto(index, em):
        return {
            "qid": f"q{index}",
            "index": index,
            "strategy": "auto",
            "question": "Who?",
            "stop_reason": "answer",
            "operator": "retrieve",
            "em": em,
            "trace": [],
        }

    (tmp_path / "records.jsonl").write_text("".join(json.dumps(auto(i, float(i >= 2))) + "\n" for i in range(4)))
    assert findings.question_range("2:") == range(2, findings.sys.maxsize)
    assert findings.question_range(":2") == range(0, 2)
    findings.main(["--questions", "2:", str(tmp_path)])
    out = capsys.readouterr().out
    assert "2 questions with records" in out and "auto ran: retrieve 2 (100.0 EM)" in out
    with pytest.raises(SystemExit):
        findings.main(["--questions", "2", str(tmp_path)])


def test_strategy_means_count_only_questions_every_strategy_finished(findings):
    def run(qid, strategy, em, seconds, retrievals):
        return {"qid": qid, "strategy": strategy, "em": em, "seconds": seconds, "retrievals": retrievals}

    records = [
        run("a", "linear", 1.0, 20.0, 2),
        run("a", "auto", 0.0, 30.0, 1),
        run("b", "linear", 0.0, 10.0, 1),
        run("b", "auto", 1.0, 10.0, 1),
        run("c", "linear", 1.0, 99.0, 9),
    ]
    assert findings.strategy_means(records) == (
        2,
        ["linear 50.0 EM · 15.0 s · 1.50 retrievals", "auto 50.0 EM · 20.0 s · 1.00 retrievals"],
    )


def test_auto_against_linear_counts_questions_won_and_lost_per_operator(findings):
    records = [
        {"qid": "a", "strategy": "linear", "em": 0.0}, {"qid": "a", "strategy": "auto", "operator": "linear", "em": 1.0},
        {"qid": "b", "strategy": "linear", "em": 1.0}, {"qid": "b", "strategy": "auto", "operator": "linear", "em": 0.0},
        {"qid": "c", "strategy": "linear", "em": 1.0}, {"qid": "c", "strategy": "auto", "operator": "linear", "em": 1.0},
        {"qid": "d", "strategy": "linear", "em": 0.0}, {"qid": "d", "strategy": "auto", "operator": "retrieve", "em": 1.0},
        {"qid": "e", "strategy": "auto", "operator": "retrieve", "em": 1.0},  # linear has no record: not compared
        {"qid": "f", "strategy": "linear[question_first=on]", "em": 0.0}, {"qid": "f", "strategy": "auto", "operator": "linear", "em": 1.0},
    ]  # fmt: skip
    assert findings.auto_against_linear(records) == {"linear": (1, 1), "retrieve": (1, 0)}
    assert findings.auto_against_linear([r for r in records if r["strategy"] != "linear"]) == {}
