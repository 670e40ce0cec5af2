"""Every user-facing parser grammar-fuzzed (issue 52, item 1): a bounded campaign of each target of
tests/fuzzing.py (IR, cost and rules files, statistics, the relation cache, the index manifest,
question files, HTTP bodies of ``nlqo serve``; the files also through the CLI), with the crashes the
fuzzers found as regression examples. ``make fuzz`` runs the same targets on 100,000 inputs.

tests/test_fuzz.py (mutated IR tokens, corpus lines, odd questions), tests/test_hard_inputs.py (IR
bytes) and tests/test_cost_models.py (drawn formulas) fuzz parts of the same ground; these targets
add the grammar-driven, byte-level and structured generators for every parser.
"""

from __future__ import annotations

import gzip
import json
import os

import pytest
from hypothesis import HealthCheck, example, given, settings

pytest.importorskip("fastapi")

import fuzzing  # noqa: E402
from fuzzing import BY_NAME, ERROR, RESULT, check_cli, check_located  # noqa: E402

EXAMPLES = int(os.environ.get("NLQO_FUZZ_EXAMPLES", 150))
"""Inputs per library target in ``make test`` (a few seconds each); the CLI targets get 40% of it."""
BOUNDED = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
CLI = settings(BOUNDED, max_examples=max(1, EXAMPLES * 2 // 5))

DEEP = b"[" * 100_000
MINUS = b"cost = " + b"-" * 3_000 + b"depth\n"
LONG_SUM = b"cost = " + b" + ".join([b"depth"] * 3_000) + b"\n"
STATS = json.loads((fuzzing.ROOT / "nlqo/planner/statistics/default.json").read_bytes())


def stats_with(**changes) -> bytes:
    """The bundled statistics, measured on the fuzzing engine's setup, with ``changes`` (a dotted path -> value)."""
    data = json.loads(json.dumps({**STATS, "measured_on": dict(fuzzing._engine().identity)}))
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = data
        for key in parents:
            node = node[key]
        node[last] = value
    return json.dumps(data).encode()


def gz_damaged() -> bytes:
    lines = b"".join(b'{"id": %d, "question": "q %d?", "answers": ["a"]}\n' % (i, i) for i in range(400))
    zipped = gzip.compress(lines, mtime=0)
    return zipped[:40] + bytes(b ^ 0x55 for b in zipped[40:80]) + zipped[80:]


# --- the bounded campaign ------------------------------------------------------------------------


@BOUNDED
@given(BY_NAME["ir"].inputs())
@example(("regression", b"q1 = (?x, " + b"(" * 10_000 + b'"p", ?y)\nanswer ?x'))
def test_ir_files_give_a_query_or_a_located_error(tagged):
    fuzzing.feed_ir(tagged[1])


@CLI
@given(BY_NAME["ir-cli"].inputs())
def test_ir_files_through_nlqo_plan_exit_0_or_2_with_a_located_error(tagged):
    fuzzing.feed_ir_cli(tagged[1])


@BOUNDED
@given(BY_NAME["cost"].inputs())
@example(("regression", MINUS))  # was RecursionError: lark's transformer and the evaluator recurse per level
@example(("regression", LONG_SUM))  # the same, by a sum of 3,000 terms
@example(("regression", b"cost = " + b"-" * 100 + b"log(0) / depth\n"))  # the deepest allowed, and no value
@example(("regression", b"param w = 1e308\ncost = w * w - w * w + 1e-300 / (depth - depth)\n"))  # inf - inf: NaN
def test_cost_files_give_a_model_that_plans_or_a_located_error(tagged):
    fuzzing.feed_cost(tagged[1])


@CLI
@given(BY_NAME["cost-cli"].inputs())
@example(("regression", MINUS))
def test_cost_files_through_nlqo_plan_exit_0_or_2_with_a_located_error(tagged):
    fuzzing.feed_cost_cli(tagged[1])


@BOUNDED
@given(BY_NAME["rules"].inputs())
@example(("regression", b"normalize_variables\n__init__\n"))  # was TypeError when the rules ran: a module's method
@example(("regression", b"normalize_variables\x0cbogus\n"))  # was named as line 2 of this 1-line file (splitlines)
def test_rule_lists_give_rules_that_rewrite_or_a_located_error(tagged):
    fuzzing.feed_rules(tagged[1])


@CLI
@given(BY_NAME["rules-cli"].inputs())
@example(("regression", b"__init__\n"))  # was exit 70
def test_rule_lists_through_nlqo_plan_exit_0_or_2_with_a_located_error(tagged):
    fuzzing.feed_rules_cli(tagged[1])


@BOUNDED
@given(BY_NAME["statistics"].inputs())
@example(("regression", DEEP))  # was RecursionError
@example(("regression", stats_with(operators__retrieve__all__seconds=[1])))  # was TypeError in auto's choice
@example(("regression", stats_with(operators__linear__all__n="many")))  # the same, comparing n with 8
@example(("regression", stats_with(measured_on=[1, 2])))  # was AttributeError in check
@example(("regression", stats_with(prefill_ms_per_token={"a": 1})))
@example(("regression", stats_with(**{"operators__linear__all__\u00ca\n6J": 1})))  # was a message of two lines
@example(("regression", stats_with(operators={})))  # was an unlocated 'no operator to choose from' in auto's choice
@example(("regression", stats_with(operators={"bogus": STATS["operators"]["linear"]})))  # the same
def test_statistics_files_are_used_by_auto_or_give_a_located_error(tagged):
    fuzzing.feed_statistics(tagged[1])


@BOUNDED
@given(BY_NAME["relations"].inputs())
@example(("regression", DEEP))  # was RecursionError
def test_relation_caches_decide_pairs_or_give_a_located_error(tagged):
    fuzzing.feed_relations(tagged[1])


@CLI
@given(BY_NAME["relations-cli"].inputs())
@example(("regression", DEEP))  # was exit 70
def test_relation_caches_through_nlqo_plan_exit_0_or_2_with_a_located_error(tagged):
    fuzzing.feed_relations_cli(tagged[1])


@BOUNDED
@given(BY_NAME["manifest"].inputs())
@example(("regression", DEEP))  # was RecursionError
@example(("regression", fuzzing.manifest_seed().replace(b'"embedder": "hash"', b'"embedder": "hush"') + b" "))
@example(("regression", fuzzing.manifest_seed().replace(b'"path": "dense.faiss"', b'"path": "' + b"x" * 300 + b'"')))
def test_index_manifests_open_and_search_or_give_a_located_error(tagged):
    fuzzing.feed_manifest(tagged[1])


@CLI
@given(BY_NAME["manifest-cli"].inputs())
@example(("regression", DEEP))  # was exit 70
@example(("regression", fuzzing.manifest_seed().replace(b'"files": [', b'"files": [{"\\n": null}, ')))  # was 2 lines
def test_index_manifests_through_nlqo_retrieve_exit_0_or_2_with_a_located_error(tagged):
    fuzzing.feed_manifest_cli(tagged[1])


@BOUNDED
@given(BY_NAME["questions"].inputs())
@example(("regression", ("plain", b'{"id": 1, "question": "q?", "answers": 5}\n', 0)))  # was TypeError
@example(("regression", ("plain", b'{"id": 1, "question": "q?", "answers": ["a"], "supporting_titles": 3}\n', 0)))
@example(("regression", ("plain", DEEP + b"\n", 0)))  # was RecursionError
@example(("regression", ("gzip damaged", b'{"id": "demo1", "question": "In w', 608)))  # was zlib.error
def test_question_files_load_or_give_a_located_error(tagged):
    fuzzing.feed_questions(tagged[1])


@CLI
@given(BY_NAME["questions-cli"].inputs())
@example(("regression", ("gzip damaged", b'{"id": "demo1", "question": "In w', 608)))  # was exit 70
def test_question_files_through_nlqo_bench_exit_2_naming_the_file_or_the_index(tagged):
    fuzzing.feed_questions_cli(tagged[1])


@BOUNDED
@given(BY_NAME["http"].inputs())
@example(("regression", ("/v1/ask", "application/json", b'{"question": "Who directed Jaws?", "stream": true}')))
@example(("regression", ("/v1/ask", "application/json", b'{"question": "Who directed Jaws?", "timeout": 1e-9}')))
@example(("regression", ("/v1/retrieve", "application/json", b'{"query": "Jaws", "k": 1e999}')))
@example(("regression", ("/v1/explain", "application/json", b"[" * 100_000)))
def test_http_bodies_get_an_answer_or_a_4xx(tagged):
    fuzzing.feed_http(tagged[1])


# --- each crash the fuzzers found, in full ---------------------------------------------------------


@pytest.mark.parametrize(
    "feed, name, data, message",
    [
        pytest.param(
            fuzzing.feed_cost, "fuzz.cost", MINUS,
            "{path}:1:1: the formula nests 3000 operations deep (a sum or product of that many terms, or that many "
            "signs), more than the 100 a cost model may", id="cost: 3000 minus signs",
        ),
        pytest.param(
            fuzzing.feed_rules, "fuzz.rules", b"# mine\n\n__init__\n", "{path}:3: unknown rewrite rule '__init__'",
            id="rules: __init__",
        ),
        pytest.param(
            fuzzing.feed_statistics, "statistics.json", stats_with(operators__retrieve__all__seconds=[1]),
            "{path}: cannot read statistics: operators.retrieve.all.seconds is [1], not a number; rebuild them with "
            "'nlqo analyze'", id="statistics: seconds a list",
        ),
        pytest.param(
            fuzzing.feed_statistics, "statistics.json", stats_with(measured_on=[1, 2]),
            "{path}: cannot read statistics: measured_on is [1, 2], not an object; rebuild them with 'nlqo analyze'",
            id="statistics: measured_on a list",
        ),
        pytest.param(
            fuzzing.feed_statistics, "statistics.json", stats_with(operators={}),
            "{path}: cannot read statistics: no operator measured over all questions (no operator has figures under 'all'); "
            "rebuild them with 'nlqo analyze'", id="statistics: no operator",
        ),
        pytest.param(
            fuzzing.feed_statistics, "statistics.json", DEEP,
            "{path}: cannot read statistics: JSON nested too deeply; rebuild them with 'nlqo analyze'",
            id="statistics: nested 100000 deep",
        ),
        pytest.param(
            fuzzing.feed_relations, "relations.json", DEEP,
            "{path}: not a relation cache (JSON object of pair -> kind): nested too deeply",
            id="relation cache: nested 100000 deep",
        ),
        pytest.param(
            fuzzing.feed_questions, "questions.jsonl", ("plain", b'{"id": 0, "question": "q?", "answers": ["a"]}\n{"id": 1, "question": "q?", "answers": 5}\n', 0),
            "{path}:2: the answers are a number, not a string or a list of strings", id="questions: answers a number",
        ),
        pytest.param(
            fuzzing.feed_questions, "questions.jsonl",
            ("plain", b'\n{"id": 1, "question": "q?", "answers": ["a"], "supporting_titles": true}\n', 0),
            "{path}:2: supporting_titles is true or false, not a list of titles", id="questions: titles true",
        ),
        pytest.param(
            fuzzing.feed_questions, "questions.jsonl", ("plain", DEEP + b"\n", 0),
            "{path}:1: invalid JSON: nested too deeply", id="questions: nested 100000 deep",
        ),
        pytest.param(
            fuzzing.feed_questions, "questions.jsonl", ("plain", b'{"id": 1, "question": "q?", "answers": ["a"]}\n\xff\n', 0),
            "{path}:2: not UTF-8 text (byte 0xff at column 1); save the file as UTF-8", id="questions: not UTF-8",
        ),
    ],
)  # fmt: skip
def test_each_crash_the_fuzzers_found_is_a_located_error(feed, name, data, message):
    from nlqo.kinds import Operator

    expected = message.format(path=fuzzing.workspace() / name, operators=", ".join(map(str, Operator)))
    assert last_error(feed, data) == expected


def last_error(feed, data) -> str:
    """The message of the NlqoError ``feed`` met on ``data`` (its first line)."""
    from nlqo.errors import NlqoError

    seen: list[str] = []
    original = fuzzing.check_located

    def spy(message, *args, **kwargs):
        seen.append(message)
        return original(message, *args, **kwargs)

    fuzzing.check_located = spy
    try:
        assert feed(data) == ERROR
    except NlqoError as exc:  # pragma: no cover - a feed never lets one through
        raise AssertionError(exc) from None
    finally:
        fuzzing.check_located = original
    return seen[-1].split("\n")[0]


def test_a_damaged_gzip_question_file_names_the_line_it_cannot_read_past():
    """Was ``zlib.error: Error -3 while decompressing data`` (not an OSError: nothing caught it)."""
    from nlqo.errors import CorpusError
    from nlqo.eval.datasets import QuestionSet

    path = fuzzing.write("damaged.jsonl.gz", gz_damaged())
    with pytest.raises(CorpusError, match=rf"^{path}:1: cannot read past this line: Error -3 while decompressing"):
        QuestionSet.load(path)


def test_an_index_opened_with_another_embedder_names_the_index():
    """The fuzzed manifest's embedder found a message that named no file: it names the index folder now."""
    from nlqo.errors import IndexFileError
    from nlqo.index import Index
    from nlqo.testing.fakes import HashEmbedder

    folder = fuzzing.index_folder()
    other = HashEmbedder()
    other.name = "other"  # type: ignore[misc]
    with pytest.raises(IndexFileError, match=rf"^{folder}: this index was built with embedder 'hash' \(dimension 256\), not 'other'"):  # fmt: skip
        Index.open(folder, embedder=other)


@pytest.mark.parametrize(
    "argv, file, expected",
    [
        (["plan", "{older}", "--cost-model", "{file}"], "fuzz.cost", "{file}:1:1: the formula nests 3000 operations"),
        (["plan", "{older}", "--rules", "{file}"], "fuzz.rules", "{file}:1: unknown rewrite rule '__init__'"),
        (["plan", "{older}", "--cost-model", "structural", "--relations-cache", "{file}"], "relations.json",
         "{file}: not a relation cache (JSON object of pair -> kind): nested too deeply"),
    ],
)  # fmt: skip
def test_the_crashes_through_the_cli_exit_2_naming_the_file(argv, file, expected):
    data = {"fuzz.cost": MINUS, "fuzz.rules": b"__init__\n", "relations.json": DEEP}[file]
    path = fuzzing.write(file, data)
    code, out, err = fuzzing.run_cli(*(a.format(older=fuzzing.older(), file=path) for a in argv))
    assert code == 2 and err.startswith("nlqo: error: " + expected.format(file=path)), err[:300]


# --- the checks can fail -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "message, pointer, why",
    [
        ("f.x: bad", False, None),
        ("f.x:2: bad", False, None),
        ("f.x:2:5: bad\n  line\n      ^", True, None),
        ("bad", False, "does not start with the file's name"),
        ("g.x:1: bad", False, "does not start with the file's name"),
        ("f.x:9: bad", False, "line 9 of a 2-line file"),
        ("f.x:1: bad\nmore", False, "a message of 2 lines"),
        ("f.x:1: bad\n  line\n  ^", True, "a pointer without a column"),
    ],
)
def test_the_message_check_refuses_what_is_not_located_or_not_one_line(message, pointer, why):
    if why is None:
        check_located(message, "f.x", b"one\ntwo", pointer=pointer)
    else:
        with pytest.raises(AssertionError, match=why):
            check_located(message, "f.x", b"one\ntwo", pointer=pointer)


def test_the_cli_check_refuses_an_internal_error_and_another_exit_code():
    with pytest.raises(AssertionError, match="internal error"):
        check_cli(70, "nlqo: internal error: TypeError: x (the traceback is in log; please report it)\n", "f", b"")
    with pytest.raises(AssertionError):
        check_cli(1, "nlqo: error: f: x\n", "f", b"")
    assert check_cli(2, "nlqo: error: f:1: x\n", "f", b"") == ERROR and check_cli(0, "", "f", b"") == RESULT


def test_a_target_fails_on_a_crash_and_on_a_500(monkeypatch):
    """A parser that raises something other than an NlqoError, or a service that answers 500, fails its target."""
    import nlqo.ir.syntax
    import nlqo.optimizer.relations

    def crash(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(nlqo.ir.syntax, "parse_bytes", crash)
    with pytest.raises(RecursionError):
        fuzzing.feed_ir(b"q1")
    monkeypatch.setattr(nlqo.optimizer.relations, "_read_entries", crash)
    with pytest.raises(RecursionError):
        fuzzing.feed_relations(b"{}")
    code, _, err = fuzzing.run_cli("plan", fuzzing.older(), "--relations-cache", fuzzing.write("relations.json", b"{}"))
    with pytest.raises(AssertionError, match="internal error"):
        check_cli(code, err, "relations.json", b"{}")
    engine = fuzzing.served().app
    monkeypatch.setattr(fuzzing._engine("retrieve"), "retriever", None)  # retrieve now fails with AttributeError
    with pytest.raises(AssertionError, match="HTTP 500"):
        fuzzing.feed_http(("/v1/retrieve", "application/json", b'{"query": "Jaws"}'))
    assert engine is fuzzing.served().app
