"""Fuzzing (issue 37, item 5): mutated IR, bad corpus lines and odd questions give an answer or one
clear error, never a traceback.

- The IR parser on the example files mutated (tokens and lines deleted, duplicated, swapped;
  unicode inserted; tokens repeated into very long constructs): a query or a located IR error.
  tests/test_hard_inputs.py has random bytes, grammar-shaped text and spliced junk.
- ``nlqo index`` on corpus files with one bad thing each: indexed (a skipped line named by file and
  line) or refused with an ``nlqo: error:`` naming file and line, exit 2.
- ``nlqo ask``, ``explain``, ``parse`` and ``retrieve`` on empty, 100 kB and control-character
  questions: an answer, or exit 2 before any model loads.

Models are a scripted LLM and a hashing embedder, except the cells marked ``real_model``.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nlqo.cli import main
from nlqo.errors import IRSemanticError, IRSyntaxError
from nlqo.ir import Query
from nlqo.ir.syntax import parse, parse_bytes, render
from nlqo.testing import HashEmbedder, ScriptedLLM

EXAMPLES = {
    p.name: p.read_text(encoding="utf-8") for p in sorted((Path(__file__).parents[1] / "examples").glob("*.nlqo"))
}
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- the IR parser on mutated example files -----------------------------------------------------

_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|\?\w+|\w+|[ \t]+|\r?\n|.', re.S)
_ODD = ["\x00", "\x01", "\x7f", "\x85", "\u2028", "\ufeff", "\u200b", "\u0301", "é", "İ", "😀", "\ud800", "\udfff",
        "\\", '"', "\\u", "\\ud800", "#", "\r", "\t", "("]  # fmt: skip


def _located(exc: Exception) -> bool:
    if isinstance(exc, IRSyntaxError):
        return exc.line >= 1 and exc.column >= 1 and str(exc).startswith(f"fuzz.nlqo:{exc.line}:{exc.column}: ")
    return isinstance(exc, IRSemanticError) and str(exc).startswith("fuzz.nlqo:")


def query_or_located_error(text: str) -> Query | Exception:
    """Parse ``text`` as a file's bytes; only a located IR error may escape, and a query round-trips."""
    try:
        query = parse_bytes(text.encode("utf-8", errors="surrogatepass"), source="fuzz.nlqo")
    except (IRSyntaxError, IRSemanticError) as exc:
        assert _located(exc), str(exc)
        return exc
    assert parse(render(query)) == query
    return query


@st.composite
def mutated(draw) -> str:
    """An example IR file after one to four mutations of its tokens or lines."""
    text = draw(st.sampled_from(sorted(EXAMPLES.values())))
    for _ in range(draw(st.integers(1, 4))):
        tokens, lines = _TOKEN.findall(text), text.split("\n")
        op = draw(
            st.sampled_from(
                ["delete", "duplicate", "swap", "delete line", "duplicate line", "swap lines", "insert", "repeat"]
            )
        )
        units = lines if op.endswith(("line", "lines")) else tokens
        i, j = draw(st.integers(0, len(units) - 1)), draw(st.integers(0, len(units) - 1))
        if op.startswith("delete"):
            del units[i]
        elif op.startswith("duplicate"):
            units.insert(i, units[i])
        elif op.startswith("swap"):
            units[i], units[j] = units[j], units[i]
        elif op == "insert":
            units.insert(i, draw(st.sampled_from(_ODD) | st.characters()))
        else:
            units[i] = units[i] * draw(st.sampled_from([2, 3, 100, 5_000]))
        text = ("\n" if units is lines else "").join(units)
    return text


@FUZZ
@given(mutated())
def test_mutated_example_files_give_a_query_or_a_located_error(text):
    query_or_located_error(text)


def test_every_example_file_parses_unmutated():
    for name, text in EXAMPLES.items():
        assert isinstance(query_or_located_error(text), Query), name


def test_an_error_lark_could_not_label_is_a_located_error():
    # lark 1.3's match_examples raised TypeError on this one (about one mutated file in 40 did)
    found = query_or_located_error('\nquestion"x"\nq1=(?d,"p","J")\nq2=(?c')
    assert isinstance(found, IRSyntaxError) and (found.line, found.column) == (4, 5)
    assert found.label == "missing comma between the terms of a triple"


CHAIN = "".join(f'q{i} = (?v{i}, "p", ?v{i + 1})\n' for i in range(300))


@pytest.mark.parametrize(
    "text, expected",
    [
        pytest.param(
            "q1 = " + "(" * 10_000 + "?x" + ")" * 10_000 + "\nanswer ?x",
            "fuzz.nlqo:1:7: a triple needs exactly three terms",
            id="10000 nested parentheses",
        ),
        pytest.param(
            'q1 = (?x, "p", ?y)\nanswer ' + ", ".join(f"?v{i}" for i in range(20_000)),
            "fuzz.nlqo:2: answer variable ?v0 is not mentioned",
            id="20000 answer targets",
        ),
        pytest.param(
            'q1 = (?x, "p", ?y)\nanswer ' + ", ".join(["?x"] * 5_000),
            "fuzz.nlqo:2: answer names a target twice",
            id="one target 5000 times",
        ),
        pytest.param("q" * 100_000 + ' = (?x, "p", ?y)\nanswer ?x', None, id="an atom id of 100000 characters"),
        pytest.param("q1 = (?" + "x" * 100_000 + ', "p", ?y)\nanswer ?y', None, id="a variable of 100000 characters"),
        pytest.param(
            'question "' + "\\u00e9" * 50_000 + '"\nq1 = (?x, "p", ?y)\nanswer ?x',
            None,
            id="a question of 50000 escapes",
        ),
        pytest.param(
            "\n".join(f"relation q1 parent q{i}" for i in range(2, 5_000)) + '\nq1 = (?x, "p", ?y)\nanswer ?x',
            "fuzz.nlqo:1: relation names unknown atom 'q2'",
            id="5000 relations to unknown atoms",
        ),
        pytest.param(
            CHAIN
            + "".join(f"relation q{i} parent q{i + 1}\n" for i in range(299))
            + "relation q299 parent q0\nanswer ?v0",
            "fuzz.nlqo:",
            id="a cycle of 300 pins",
        ),
        pytest.param("\r" * 1_000 + "q1", "fuzz.nlqo:1:1: ", id="1000 carriage returns"),
        pytest.param(
            "# " + "é" * 100_000 + '\nq1 = (?x, "p", ?y)\nanswer ?x', None, id="a comment of 100000 characters"
        ),
    ],
)
def test_very_deep_and_long_constructs_give_a_query_or_a_located_error(text, expected):
    found = query_or_located_error(text)
    if expected is None:
        assert isinstance(found, Query)
    else:
        assert isinstance(found, Exception) and str(found).startswith(expected), str(found)[:300]


# --- corpus files for nlqo index ----------------------------------------------------------------


class NamedHashEmbedder(HashEmbedder):
    """The hashing embedder under the default embedder's name, which ``nlqo index`` records."""

    name = "all-minilm-l6-v2"


def scripted() -> ScriptedLLM:
    return ScriptedLLM([("nlqo IR", 'q1 = (?x, "wrote", "The Hobbit")\nanswer ?x')], default="J. R. R. Tolkien")


@pytest.fixture
def fake_models(monkeypatch):
    """Every embedder nlqo loads is the hashing one, every model the scripted LLM."""
    import nlqo.main.builder
    from nlqo.runtime.embed import SentenceEmbedder

    monkeypatch.setattr(SentenceEmbedder, "load", classmethod(lambda cls, *a, **kw: NamedHashEmbedder()))
    monkeypatch.setattr(nlqo.main.builder, "load_llm", lambda *a, **kw: scripted())


def no_model(*args, **kwargs):
    raise AssertionError("a model was loaded")


def run(capsys, *argv) -> tuple[int, str, str]:
    """``nlqo ARGV`` in process: exit code, stdout, stderr; nothing printed a traceback."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "internal error" not in err, err
    return code, out, err


def line(ident: str, text: str = "A passage about things.", **more) -> bytes:
    return (json.dumps({"id": ident, "title": ident.upper(), "text": text, **more}) + "\n").encode()


A, C = line("a", "Tolkien wrote The Hobbit."), line("c", "Bloemfontein is a city.")
BAD_LINES = {
    "bytes that are not UTF-8": (
        b'{"id": "b", "text": "caf\xe9"}\n',
        "not UTF-8 text (byte 0xe9 at column 25); save the file as UTF-8",
    ),
    "no text field": (
        b'{"id": "b", "title": "B"}\n',
        "missing or empty text field 'text' (fields: id, title); name it with --text-field",
    ),
    "an empty text": (
        line("b", " "),
        "missing or empty text field 'text' (fields: id, text, title); name it with --text-field",
    ),
    "text null": (
        b'{"id": "b", "text": null}\n',
        "missing or empty text field 'text' (fields: id, text); name it with --text-field",
    ),
    "text a number": (b'{"id": "b", "text": 42}\n', "text field 'text' is a number, not a string"),
    "text a list": (b'{"id": "b", "text": ["x"]}\n', "text field 'text' is a list, not a string"),
    "no id field": (b'{"text": "x"}\n', "missing id field 'id' (fields: text); name it with --id-field"),
    "id null": (b'{"id": null, "text": "x"}\n', "missing id field 'id' (fields: id, text); name it with --id-field"),
    "id a list": (b'{"id": [1], "text": "x"}\n', "id field 'id' is a list, not a string or a whole number"),
    "id a fraction": (b'{"id": 1.5, "text": "x"}\n', "id field 'id' is a number, not a string or a whole number"),
    "id true": (b'{"id": true, "text": "x"}\n', "id field 'id' is true or false, not a string or a whole number"),
    "title a number": (b'{"id": "b", "title": 7, "text": "x"}\n', "title field 'title' is a number, not a string"),
    "title a list": (b'{"id": "b", "title": ["B"], "text": "x"}\n', "title field 'title' is a list, not a string"),
    "a duplicate id": (line("a", "Another passage."), "duplicate id 'a' (first seen on line 1)"),
    "not an object": (b'["b", "x"]\n', "expected a JSON object, got a list"),
    "not JSON": (b"b,x\n", "invalid JSON: Expecting value (column 1)"),
    "nested 100000 deep": (b"[" * 100_000 + b"\n", "invalid JSON: nested too deeply"),
    "a 5000-digit id": (
        b'{"id": 1' + b"0" * 5_000 + b', "text": "x"}\n',
        "invalid JSON: a number of more than 4,300 digits",
    ),
    "half a surrogate pair": (
        b'{"id": "b", "text": "x \\ud800 y"}\n',
        "field 'text' holds \\ud800, half of a surrogate pair, at character 3",
    ),
    "a NUL byte outside the JSON": (line("b")[:-1] + b"\x00\n", "invalid JSON: Extra data (column"),
}


@pytest.mark.parametrize("bad, message", BAD_LINES.values(), ids=BAD_LINES.keys())
def test_a_bad_corpus_line_is_refused_or_skipped_with_its_file_and_line(fake_models, capsys, tmp_path, bad, message):
    source = tmp_path / "corpus.jsonl"
    source.write_bytes(A + bad + C)
    code, out, err = run(capsys, "index", source, "--out", tmp_path / "idx", "--quiet")
    assert code == 2 and err.startswith(f"nlqo: error: {source}:2: {message}") and not (tmp_path / "idx").exists()
    code, out, err = run(capsys, "index", source, "--out", tmp_path / "idx", "--quiet", "--on-error", "skip")
    assert code == 0 and out.startswith("indexed 2 passages") and "skipped 1 bad records" in out
    assert f"nlqo index: skipped {source}:2: {message}" in err


@pytest.mark.parametrize(
    "content, count",
    [
        pytest.param(A + line("big", "word " * 1_000_000) + C, 3, id="a line of 5 MB"),
        pytest.param(b"\xef\xbb\xbf" + A + C, 2, id="a byte order mark"),
        pytest.param(A.replace(b"\n", b"\r\n") + C, 2, id="CRLF line ends"),
        pytest.param(A + b"\n   \n" + C, 2, id="blank lines"),
        pytest.param(A + line("b", "nul \\u0000 inside") + C, 3, id="an escaped NUL in the text"),
        pytest.param(
            A + b'{"id": 7, "text": "a whole-number id", "title": null}\n' + C, 3, id="a number id and a null title"
        ),
        pytest.param(A + line("b", "unicode: \u05de\u05d9 \U0001f9d9 \u200b\u2028") + C, 3, id="unicode text"),
    ],
)
def test_a_large_or_unusual_corpus_line_is_indexed(fake_models, capsys, tmp_path, content, count):
    source = tmp_path / "corpus.jsonl"
    source.write_bytes(content)
    code, out, err = run(capsys, "index", source, "--out", tmp_path / "idx", "--quiet")
    assert code == 0 and out.startswith(f"indexed {count} passages"), err
    code, out, _ = run(
        capsys, "retrieve", "--index", tmp_path / "idx", "The Hobbit", "--mode", "bm25", "--format", "json", "-k", "1"
    )
    assert code == 0 and json.loads(out)["hits"][0]["id"] == "a"


def test_an_empty_corpus_file_is_refused(fake_models, capsys, tmp_path):
    source = tmp_path / "empty.jsonl"
    source.write_bytes(b"")
    code, _, err = run(capsys, "index", source, "--out", tmp_path / "idx", "--quiet")
    assert code == 2 and err == f"nlqo: error: {source}: no passages to index\n"


def test_a_jsonl_gz_that_is_plain_text_is_read_as_it_is(fake_models, capsys, tmp_path):
    source = tmp_path / "corpus.jsonl.gz"
    source.write_bytes(A + C)
    code, out, _ = run(capsys, "index", source, "--out", tmp_path / "idx", "--quiet")
    assert code == 0 and out.startswith("indexed 2 passages")


def test_a_jsonl_gz_of_other_bytes_is_refused_saying_it_is_not_gzip(fake_models, capsys, tmp_path):
    source = tmp_path / "corpus.jsonl.gz"
    source.write_bytes(b"PK\x03\x04 a zip file, say")
    code, _, err = run(capsys, "index", source, "--out", tmp_path / "idx", "--quiet")
    assert code == 2
    assert (
        err
        == f"nlqo: error: {source}:1: invalid JSON: Expecting value (column 1) (the file is named .gz but is not gzip-compressed)\n"
    )


LINES = b"".join(line(f"p{i}", f"passage number {i} about things") for i in range(400))


@pytest.mark.parametrize(
    "damage, message",
    [
        pytest.param(
            lambda z: z[: len(z) // 2],
            "Compressed file ended before the end-of-stream marker was reached",
            id="truncated",
        ),
        pytest.param(lambda z: z[:-8] + bytes(8), "CRC check failed", id="a wrong checksum"),
        pytest.param(
            lambda z: z[:40] + bytes(b ^ 0x55 for b in z[40:80]) + z[80:],
            "Error -3 while decompressing data",
            id="corrupt deflate data",
        ),
    ],
)
def test_a_damaged_gzip_keeps_the_lines_before_the_damage_or_is_refused_at_its_line(
    fake_models, capsys, tmp_path, damage, message
):
    source = tmp_path / "corpus.jsonl.gz"
    source.write_bytes(damage(gzip.compress(LINES)))
    code, _, err = run(capsys, "index", source, "--out", tmp_path / "idx", "--quiet")
    found = re.match(rf"nlqo: error: {re.escape(str(source))}:(\d+): cannot read past this line: (.*)", err)
    assert code == 2 and found and message in found.group(2), err
    bad = int(found.group(1))
    code, out, err = run(capsys, "index", source, "--out", tmp_path / "idx", "--quiet", "--on-error", "skip")
    assert code in (0, 2)
    if bad == 1:  # nothing readable before the damage
        assert code == 2 and "no passages to index" in err
        return
    assert (
        code == 0
        and out.startswith(f"indexed {bad - 1} passages")
        and f"skipped {source}:{bad}: cannot read past this line" in err
    )
    code, out, _ = run(
        capsys,
        "retrieve",
        "--index",
        tmp_path / "idx",
        f"passage number {bad - 2}",
        "--mode",
        "bm25",
        "--format",
        "json",
        "-k",
        "1",
    )
    assert json.loads(out)["hits"][0]["id"] == f"p{bad - 2}"  # the last whole line before the damage, not a torn one


# --- questions ----------------------------------------------------------------------------------

HUNDRED_KB = "Who wrote The Hobbit? " * 4_546
QUESTION_ERRORS = {
    "empty": ("", "the question is empty"),
    "blank": (" \t\n ", "the question is empty"),
    "a NUL": ("\x00", "the question holds a control character (U+0000) at character 1; remove it"),
    "a NUL inside": (
        "Who wrote\x00 The Hobbit?",
        "the question holds a control character (U+0000) at character 10; remove it",
    ),
    "escape sequences": (
        "\x1b[31mWho?\x1b[0m",
        "the question holds a control character (U+001B) at character 1; remove it",
    ),
    "a C1 control": ("Who\x85 wrote it?", "the question holds a control character (U+0085) at character 4; remove it"),
    "a byte not UTF-8": (
        "Who wrote \udcff?",
        "the question is not valid text: character 11 is half of a surrogate pair (U+DCFF)",
    ),
    "a lone surrogate": ("\ud800", "the question is not valid text: character 1 is half of a surrogate pair (U+D800)"),
    "no words": ("?!... --", "the question has no letter or digit: nothing to ask"),
    "100 kB": (HUNDRED_KB, "the question has 100,012 characters, more than 2,000 (--max-question-chars"),
}


@pytest.mark.parametrize("command", ["ask", "explain", "parse"])
@pytest.mark.parametrize("question, message", QUESTION_ERRORS.values(), ids=QUESTION_ERRORS.keys())
def test_a_question_that_cannot_be_asked_is_refused_before_any_model_loads(
    monkeypatch, capsys, tmp_path, command, question, message
):
    import nlqo.main.builder
    from nlqo.runtime.embed import SentenceEmbedder

    monkeypatch.setattr(nlqo.main.builder, "load_llm", no_model)
    monkeypatch.setattr(SentenceEmbedder, "load", classmethod(no_model))
    index = () if command == "parse" else ("--index", tmp_path / "no-index")
    code, out, err = run(capsys, command, question, *index)
    assert code == 2 and out == "" and err.startswith(f"nlqo: error: {message}"), err


@pytest.mark.parametrize(
    "question, message",
    [v for k, v in QUESTION_ERRORS.items() if k != "100 kB"],
    ids=[k for k in QUESTION_ERRORS if k != "100 kB"],
)
def test_a_query_that_cannot_be_searched_is_refused_by_retrieve(fake_models, capsys, tmp_path, question, message):
    code, out, err = run(capsys, "retrieve", "--index", tmp_path / "no-index", question)
    assert code == 2 and out == "" and err.startswith(f"nlqo: error: {message.replace('question', 'query')}"), err


@pytest.fixture
def demo_index(fake_models, capsys, tmp_path) -> Path:
    source = tmp_path / "corpus.jsonl"
    source.write_bytes(A + line("b", "J. R. R. Tolkien was born in Bloemfontein.") + C)
    assert run(capsys, "index", source, "--out", tmp_path / "idx", "--quiet")[0] == 0
    return tmp_path / "idx"


ODD_QUESTIONS = {
    "tabs and line breaks": "Who wrote\tThe Hobbit?\r\nAnd where was he born?\n",
    "right-to-left and emoji": "\u05de\u05d9 \u05db\u05ea\u05d1 \u05d0\u05ea The Hobbit? \U0001f9d9\u200d\u2642\ufe0f",
    "combining marks and ligatures": "Who wrote The Ho\u0301bbit, the \ufb01rst book? \u0130",
    "one letter": "x",
    "2000 characters": ("Who wrote The Hobbit? " * 100)[:2_000],
    "quotes and backslashes": 'Who wrote "The Hobbit" \\ or "\\u0000"?',
}


@pytest.mark.parametrize("command", ["ask", "explain"])
@pytest.mark.parametrize("question", ODD_QUESTIONS.values(), ids=ODD_QUESTIONS.keys())
def test_odd_but_valid_questions_are_answered(demo_index, capsys, command, question):
    code, out, err = run(
        capsys,
        command,
        question,
        "--index",
        demo_index,
        "--quiet",
        *(("--json",) if command == "ask" else ("--format", "json")),
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["answer"] == "J. R. R. Tolkien" if command == "ask" else data


def test_odd_but_valid_questions_are_parsed_or_refused_for_their_ir(fake_models, capsys):
    for name, question in ODD_QUESTIONS.items():
        code, out, err = run(capsys, "parse", question)
        if name == "one letter":  # the scripted IR names The Hobbit, which 'x' does not
            assert code == 2 and err.startswith("nlqo: error: the LLM did not write valid IR for 'x' in 2 attempts"), (
                err
            )
        else:
            assert code == 0 and out.endswith("answer ?x\n"), (name, err)


@pytest.mark.parametrize("query", [HUNDRED_KB, *ODD_QUESTIONS.values()])
def test_odd_but_valid_queries_are_searched(demo_index, capsys, query):
    code, out, _ = run(capsys, "retrieve", "--index", demo_index, query, "--format", "json")
    assert code == 0 and json.loads(out)["query"] == query and len(json.loads(out)["hits"]) == 3


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(st.text(max_size=80) | st.text(st.characters(max_codepoint=0x9F), max_size=20))
def test_any_text_as_a_question_is_answered_or_refused_with_exit_2(demo_index, capsys, question):
    code, out, err = run(
        capsys, "ask", "--index", demo_index, "--quiet", "--json", "--", question
    )  # "--": a question may start with "-"
    assert (code, err.startswith("nlqo: error: the question ")) in ((0, False), (2, True)), err
    if code == 0:
        assert json.loads(out)["question"] == question


def test_command_line_bytes_that_are_not_utf8_are_refused_by_the_real_cli():
    nlqo = Path(sys.executable).with_name("nlqo")
    done = subprocess.run(
        [nlqo, "parse", b"Who wrote The Hobbit\xff?", "--model", "no-such-model"], capture_output=True, timeout=300
    )
    err = done.stderr.decode("utf-8", errors="replace")
    assert done.returncode == 2 and err.startswith(
        "nlqo: error: the question is not valid text: character 21 is half of a surrogate pair (U+DCFF)"
    ), err


@pytest.mark.real_model
@pytest.mark.parametrize("question", [ODD_QUESTIONS["tabs and line breaks"], ODD_QUESTIONS["right-to-left and emoji"], ODD_QUESTIONS["2000 characters"]],
                         ids=["tabs and line breaks", "right-to-left and emoji", "2000 characters"])  # fmt: skip
def test_odd_questions_on_the_real_small_model(monkeypatch, capsys, tmp_path, question):
    from nlqo.runtime.embed import SentenceEmbedder

    monkeypatch.setattr(SentenceEmbedder, "load", classmethod(lambda cls, *a, **kw: NamedHashEmbedder()))
    source = tmp_path / "corpus.jsonl"
    source.write_bytes(A + line("b", "J. R. R. Tolkien was born in Bloemfontein.") + C)
    assert run(capsys, "index", source, "--out", tmp_path / "idx", "--quiet")[0] == 0
    code, out, err = run(
        capsys, "ask", question, "--index", tmp_path / "idx", "--model", "smollm2-135m", "--quiet", "--json"
    )
    assert code == 0 and json.loads(out)["question"] == question, err
    code, out, err = run(capsys, "parse", question, "--model", "smollm2-135m")
    assert code in (0, 2) and (
        out.rstrip().splitlines()[-1].startswith("answer ") if code == 0 else err.startswith("nlqo: error: ")
    ), err


# --- an index manifest with fields of any JSON value ---------------------------------------------

_JSON = st.none() | st.booleans() | st.integers(-5, 10**30) | st.floats(allow_nan=True) | st.text(max_size=8) | st.sampled_from(
    ["flat", "hnsw", "ivf", "bm25", "../x", "/etc/hostname"]) | st.lists(st.integers(), max_size=2) | st.dictionaries(st.text(max_size=4), st.integers(), max_size=2)  # fmt: skip


@pytest.fixture(scope="module")
def built_index(tmp_path_factory) -> Path:
    from nlqo.index import build_index
    from nlqo.common.passages import Passage

    folder = tmp_path_factory.mktemp("manifest") / "idx"
    build_index(
        [Passage(id=str(i), title=f"t{i}", text=f"passage {i} about things") for i in range(20)], folder, HashEmbedder()
    )
    return folder


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(st.data())
def test_a_manifest_with_any_field_changed_opens_or_is_an_index_error(built_index, tmp_path_factory, data):
    import shutil

    from nlqo.errors import IndexFileError
    from nlqo.index import Index

    manifest = json.loads((built_index / "manifest.json").read_text())
    for _ in range(data.draw(st.integers(1, 3))):
        target = data.draw(st.sampled_from(["top", "faiss", "file"]))
        faiss, files = manifest.get("faiss"), manifest.get("files")
        if target == "faiss" and isinstance(faiss, dict) and faiss:
            faiss[data.draw(st.sampled_from(sorted(faiss)))] = data.draw(_JSON)
        elif target == "file" and isinstance(files, list) and files and isinstance(files[0], dict):
            files[0][data.draw(st.sampled_from(["path", "size", "sha256"]))] = data.draw(_JSON)
        else:
            manifest[data.draw(st.sampled_from(sorted(manifest)))] = data.draw(_JSON)
    folder = tmp_path_factory.mktemp("spoilt") / "idx"
    shutil.copytree(built_index, folder)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    for verify in (True, False):
        try:
            with Index.open(folder, embedder=HashEmbedder(), verify=verify) as index:
                index.hybrid_search("passage 3 things", 3)
        except IndexFileError:  # one line naming the file, or the embedder the manifest wants
            pass


def test_a_manifest_naming_another_faiss_kind_is_an_index_error(built_index, tmp_path):
    import shutil

    from nlqo.errors import IndexFileError
    from nlqo.index import Index

    folder = tmp_path / "idx"
    shutil.copytree(built_index, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["faiss"]["kind"] = "hnsw"  # the file holds a flat index: setting efSearch raised AttributeError
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexFileError, match="holds a IndexFlatIP, but the manifest says it is a hnsw index"):
        Index.open(folder, embedder=HashEmbedder())
