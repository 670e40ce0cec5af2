"""Inputs written to break things: every one gets a plan, a clear error, or a refusal that names its limit.

The response cache's concurrent writers are in tests/test_llm_cache.py
(test_processes_writing_the_same_folder_lose_nothing_and_tear_nothing); a corpus line that is not
JSON is in tests/test_corpus.py (a located CorpusError).
"""

from __future__ import annotations

import json
import multiprocessing
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nlqo.cli import main
from nlqo.errors import IRSemanticError, IRSyntaxError
from nlqo.ir import Query
from nlqo.ir.syntax import parse, parse_bytes, read, render

VALID = 'question "Who directed Jaws?"\nq1 = (?d, "directed", "Jaws")\nrelation q1 none q1x\nq1x = (?d, "born in", ?c)\nanswer ?d\n'


def plan_exit(capsys, path) -> tuple[int, str]:
    code = main(["plan", str(path), "--cost-model", "structural"])
    return code, capsys.readouterr().err


def test_a_file_that_is_not_utf8_is_a_located_error(tmp_path, capsys):
    f = tmp_path / "latin1.nlqo"
    f.write_bytes('q1 = (?x, "born in", "Zürich")\nanswer ?x\n'.encode("latin-1"))
    code, err = plan_exit(capsys, f)
    assert code == 2 and f"{f}:1:24: not UTF-8 text (byte 0xfc)" in err and "Traceback" not in err


def test_a_binary_file_is_a_located_error(tmp_path, capsys):
    f = tmp_path / "model.bin"
    f.write_bytes(bytes(range(256)) * 4)
    code, err = plan_exit(capsys, f)
    assert code == 2 and f"{f}:1:1: a NUL byte: this is a binary file" in err


@pytest.mark.parametrize(
    "content, message",
    [(b"", "empty IR"), (b"\n\n  \n", "empty IR"), (b"\xef\xbb\xbf", "empty IR"), (b"# only a comment\n", "no atoms")],
)
def test_an_empty_file_is_a_clear_error(tmp_path, capsys, content, message):
    f = tmp_path / "empty.nlqo"
    f.write_bytes(content)
    code, err = plan_exit(capsys, f)
    assert code == 2 and f"{f}: {message}" in err


def test_a_10000_line_ir_parses_and_is_refused_by_the_planner_with_its_limit(tmp_path, capsys):
    lines = (
        ['question "a very long chain"'] + [f'q{i} = (?v{i}, "p{i}", ?v{i + 1})' for i in range(9_998)] + ["answer ?v0"]
    )
    f = tmp_path / "big.nlqo"
    f.write_text("\n".join(lines) + "\n")
    query = read(f)  # LALR: one pass over the lines (no timing here: the machine's load would decide it)
    assert len(query.atoms) == 9_998
    code, err = plan_exit(capsys, f)
    assert (
        code == 2
        and "the query has 9998 atoms, more than the optimizer plans (1000; raise it with --max-atoms N" in err
    )


def test_a_10000_line_ir_of_mostly_comments_plans(tmp_path, capsys):
    f = tmp_path / "commented.nlqo"
    f.write_text("# note\n" * 9_997 + VALID.replace("relation q1 none q1x\n", ""))
    assert main(["plan", str(f), "--cost-model", "structural", "--format", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["nodes"]) == 3


def test_an_error_on_the_last_of_10000_lines_names_that_line(tmp_path, capsys):
    f = tmp_path / "late.nlqo"
    f.write_text("\n".join(f'q{i} = (?v, "p", "o")' for i in range(9_999)) + '\nq9999 = (?v "p", "o")\n')
    code, err = plan_exit(capsys, f)
    assert code == 2 and f"{f}:10000:" in err and "missing comma" in err


@pytest.mark.parametrize(
    "constant",
    [
        '\\"' * 5_000,  # five thousand escaped quotes
        "\\\\" * 5_000 + '\\"',  # backslashes, then a quote
        '\\"\\\\\\"' * 2_000,  # quote, backslash, quote, over and over
        "\\u00e9\\n\\t\\/" * 1_000,
        "'\\\"'" * 3_000,
    ],
)
def test_deeply_nested_quotes_and_escapes_round_trip(constant):
    q = parse(f'q1 = (?x, "says", "{constant}")\nanswer ?x')
    again = parse(render(q))
    assert again == q and json.loads(f'"{constant}"') == q.atoms[0].object.text


def test_a_lone_surrogate_escape_is_a_located_error():
    with pytest.raises(IRSyntaxError, match=r"<ir>:2:16: string escape \\ud800 is half of a surrogate pair"):
        parse('question "q"\nq1 = (?x, "p", "\\ud800")\nanswer ?x')


def test_an_unterminated_quote_of_20000_characters_is_a_located_error():
    with pytest.raises(IRSyntaxError, match="unterminated or malformed string") as info:
        parse('q1 = (?x, "p", "' + "a" * 20_000 + "\nanswer ?x")
    assert info.value.line == 1


def _located(exc: Exception, source: str) -> bool:
    if isinstance(exc, IRSyntaxError):
        return exc.line >= 1 and exc.column >= 1 and str(exc).startswith(f"{source}:{exc.line}:")
    if isinstance(exc, IRSemanticError):
        return str(exc).startswith(f"{source}:")
    return False


def _read_or_locate(data: bytes) -> None:
    try:
        query = parse_bytes(data, source="fuzz.nlqo")
    except (IRSyntaxError, IRSemanticError) as exc:
        assert _located(exc, "fuzz.nlqo"), str(exc)
        return
    assert isinstance(query, Query) and parse(render(query)) == query


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_PIECES = st.sampled_from(['q1', ' = ', '(', ')', ', ', '?x', '?y', '"p"', '"', '\\', '\\"', 'answer ', 'relation ', ' parent ',
                           ' sibling ', 'question ', '\n', '\r\n', '#', '\t', '\x00', 'é', '\ud7ff', '\\u12', '\\ud800', 'q2'])  # fmt: skip


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes_give_a_query_or_a_located_error(data):
    _read_or_locate(data)


@FUZZ
@given(st.lists(_PIECES, max_size=40).map("".join))
def test_grammar_shaped_text_gives_a_query_or_a_located_error(text):
    _read_or_locate(text.encode("utf-8", errors="surrogatepass"))


@FUZZ
@given(st.integers(0, len(VALID)), st.binary(min_size=1, max_size=4))
def test_a_valid_file_with_bytes_spliced_in_gives_a_query_or_a_located_error(at, junk):
    raw = VALID.encode()
    _read_or_locate(raw[:at] + junk + raw[at:])


def _write_relations(path: str, worker: int, rounds: int, start) -> None:
    from nlqo.ir import Atom, Const, Var
    from nlqo.optimizer.relations import RelationCache

    start.wait(timeout=60)
    for r in range(rounds):
        cache = RelationCache.open(path)
        a = Atom("a", Var("x"), Const(f"worker {worker}"), Const(f"round {r}"))
        b = Atom("b", Var("x"), Const("p"), Const("o"))
        cache.put(a, b, "parent" if r % 2 else "sibling")
        cache.save()


def test_processes_writing_one_relation_cache_lose_nothing_and_leave_valid_json(tmp_path):
    path = tmp_path / "relations.json"
    ctx = multiprocessing.get_context("spawn")
    workers, rounds = 4, 15
    start = ctx.Barrier(workers)
    procs = [ctx.Process(target=_write_relations, args=(str(path), w, rounds, start)) for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * workers
    entries = json.loads(path.read_text(encoding="utf-8"))
    assert len(entries) == workers * rounds
    assert {k.split("\t")[0] for k in entries} == {
        f"?x worker {w} round {r}" for w in range(workers) for r in range(rounds)
    }
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".relations-")]


def test_a_corrupt_relation_cache_is_a_clear_error(tmp_path):
    from nlqo.errors import ConfigError
    from nlqo.optimizer.relations import RelationCache

    path = tmp_path / "relations.json"
    path.write_bytes(b'{"a\\tb": "par')
    with pytest.raises(ConfigError, match="not a relation cache"):
        RelationCache.open(path)


def test_a_relation_cache_path_at_a_folder_is_a_clear_error(tmp_path, capsys):
    """Issue 52: 'nlqo plan FILE --relations-cache FOLDER' was 'internal error: IsADirectoryError' (exit 70)."""
    older = Path(__file__).resolve().parents[1] / "examples" / "older.nlqo"
    code = main(["plan", str(older), "--cost-model", "structural", "--relations-cache", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err == f"nlqo: error: {tmp_path}: expected a relation cache file (JSON), found a folder\n"


def _read_relation_under_the_c_locale(path: str, out) -> None:
    import locale

    from nlqo.ir import Atom, Const, Var
    from nlqo.optimizer.relations import RelationCache

    a = Atom("a", Var("x"), Const("born in"), Const("Zürich"))
    b = Atom("b", Var("x"), Const("lives in"), Const("Genève"))
    try:
        kind = str(RelationCache.open(path).get(a, b))
    except Exception as exc:  # reported, so that the test fails at once
        kind = repr(exc)
    out.put((locale.getpreferredencoding(False), kind))


def test_a_relation_cache_is_read_as_utf8_whatever_the_locale(tmp_path, monkeypatch):
    """JSON is UTF-8: a cache file another tool wrote with raw non-ASCII text reads the same under an ASCII locale."""
    path = tmp_path / "relations.json"
    path.write_text(
        json.dumps({"?x born in zürich\t?x lives in genève": "child"}, ensure_ascii=False), encoding="utf-8"
    )
    for name, value in {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}.items():
        monkeypatch.setenv(name, value)
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_read_relation_under_the_c_locale, args=(str(path), out))
    proc.start()
    encoding, kind = out.get(timeout=120)
    proc.join(timeout=60)
    assert (encoding, kind, proc.exitcode) == ("ANSI_X3.4-1968", "child", 0)


def test_a_relation_cache_is_read_as_utf8_in_this_process_under_an_ascii_ctype():
    """The same in-process (where mutmut sees it): with LC_CTYPE switched to C, the locale's encoding
    is ASCII (unless Python runs in UTF-8 mode), and the raw non-ASCII file still reads."""
    import locale
    import queue
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "relations.json"
        text = json.dumps({"?x born in zürich\t?x lives in genève": "child"}, ensure_ascii=False)
        path.write_text(text, encoding="utf-8")
        saved = locale.setlocale(locale.LC_CTYPE)
        out: queue.Queue = queue.Queue()
        try:
            locale.setlocale(locale.LC_CTYPE, "C")
            _read_relation_under_the_c_locale(str(path), out)
        finally:
            locale.setlocale(locale.LC_CTYPE, saved)
    encoding, kind = out.get_nowait()
    assert kind == "child"
    assert sys.flags.utf8_mode or encoding == "ANSI_X3.4-1968"


@pytest.mark.parametrize("content", ['["a\\tb", "parent"]', '{"a\\tb": 1}', '{"a\\tb": null}', '"parent"'])
def test_json_that_is_not_a_relation_cache_is_a_clear_error(tmp_path, content):
    from nlqo.errors import ConfigError
    from nlqo.optimizer.relations import RelationCache

    path = tmp_path / "relations.json"
    path.write_text(content)
    with pytest.raises(ConfigError) as info:
        RelationCache.open(path)
    assert str(info.value) == f"{path}: not a relation cache (JSON object of pair -> kind)"


def test_a_relation_cache_saves_one_sorted_entry_a_line_into_folders_it_makes(tmp_path, monkeypatch):
    """Written beside the cache (not in the system temp folder, which may be another file system) and
    renamed over it; the folders are made as needed."""
    import os
    import tempfile
    from pathlib import Path

    from nlqo.ir import Atom, Const, Var
    from nlqo.optimizer.relations import RelationCache

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no such temp folder"))
    path = tmp_path / "deep" / "er" / "relations.json"
    cache = RelationCache.open(path)
    b = Atom("b", Var("x"), Const("p"), Const("o"))
    cache.put(Atom("z", Var("x"), Const("z"), Const("1")), b, "sibling")
    cache.put(Atom("a", Var("x"), Const("a"), Const("1")), b, "parent")
    renames = []
    replace = os.replace

    def watched(src, dst):  # the temporary file's name is what an interrupted save leaves behind
        renames.append((Path(src).parent == path.parent, Path(src).name.startswith(".relations-"), Path(dst)))
        replace(src, dst)

    monkeypatch.setattr(os, "replace", watched)
    cache.save()
    cache.save()  # again, over the existing folder and file
    assert renames == [(True, True, path)] * 2
    assert path.read_text(encoding="utf-8") == '{\n"?x a 1\\t?x p o": "parent",\n"?x z 1\\t?x p o": "sibling"\n}'
    assert sorted(p.name for p in path.parent.iterdir()) == ["relations.json", "relations.json.lock"]


def test_a_relation_cache_that_cannot_be_written_raises_the_write_error_and_leaves_no_temporary_file(
    tmp_path, monkeypatch
):
    import os

    from nlqo.ir import Atom, Const, Var
    from nlqo.optimizer.relations import RelationCache

    def full(*args):
        raise OSError("no space left on device")

    def stuck(path):
        raise PermissionError(f"cannot remove {path}")

    cache = RelationCache.open(tmp_path / "relations.json")
    cache.put(Atom("a", Var("x"), Const("a"), Const("1")), Atom("b", Var("x"), Const("p"), Const("o")), "parent")
    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError, match="no space left on device"):
        cache.save()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["relations.json.lock"]
    monkeypatch.setattr(os, "unlink", stuck)  # the temporary file cannot even be removed: still the write's error
    with pytest.raises(OSError, match="no space left on device"):
        cache.save()
