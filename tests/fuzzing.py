"""Every parser a user feeds a file or a request to, as a fuzz target (issue 52, item 1).

A :class:`Target` has its inputs, a hypothesis strategy of ``(generator, input)`` pairs: text drawn
from the parser's own Lark grammar (or, for JSON files, the shipped files with a value replaced, a key
dropped or one added), the shipped files (``examples/``, ``rules/``, ``cost_models/``, the bundled
statistics, fixtures) with bytes flipped, cut, duplicated, repeated and spliced, and raw bytes. Its
``feed`` gives one input to the parser the way a user does and checks the contract: a result that
works when used, or a located one-line :class:`~nlqo.errors.NlqoError` (``FILE:LINE:`` where the
input has lines; exit 2 through the CLI; HTTP 4xx through the service). Anything else is an
AssertionError naming what broke, or the exception itself.

tests/test_fuzz_parsers.py runs a bounded campaign of every target in ``make test``; ``make fuzz``
(scripts/fuzz.py) runs the same targets on at least 100,000 inputs and writes the counts.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import copy
import functools
import gzip
import io
import json
import math
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import lark
from hypothesis import strategies as st
from hypothesis.extra.lark import from_lark

from nlqo.errors import (
    ConfigError,
    CorpusError,
    CostModelError,
    IndexFileError,
    InputFileError,
    IRSemanticError,
    IRSyntaxError,
)

ROOT = Path(__file__).resolve().parents[1]
RESULT, ERROR = "result", "error"
"""The two outcomes a target's contract allows (an HTTP target also counts ``timeout``: a 504 to a
request that asked for a timeout shorter than its work)."""


@functools.cache
def workspace() -> Path:
    """A folder for the files the targets write, removed at exit."""
    folder = Path(tempfile.mkdtemp(prefix="nlqo-fuzz-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


# --- generators ---------------------------------------------------------------------------------

ODD = [b"\x00", b"\xff", b"\xfe", b"\xc3", b"\xef\xbb\xbf", b"\r", b"\n", b"\r\n", b"\t", b"\x0c", b" ", b'"', b"\\",
       b"\\u", b"\\ud800", b"\\u0000", "é".encode(), "\u2028".encode(), "😀".encode(), b"\xed\xa0\x80", b"#", b",",
       b"[" * 5_000, b"{" * 300, b"-" * 3_000, b"(" * 3_000, b"1e999", b"-1e999", b"1e-999", b"NaN", b"Infinity",
       b"-Infinity", b"null", b"true", b"0", b"-0", b"1" + b"0" * 5_000, b"9" * 20]  # fmt: skip
"""Bytes worth inserting into any file: encodings, escapes, JSON's odd values, deep nesting."""
OPS = ("flip", "byte", "delete", "truncate", "duplicate", "repeat", "nest", "insert", "splice", "delete line",
       "duplicate line", "swap lines")  # fmt: skip
NESTS = ((b"[", b"]"), (b'{"a": ', b"}"), (b"(", b")"), (b"-", b""), (b"log(", b")"))


@st.composite
def mutated(draw: Any, seeds: Sequence[bytes], tokens: Sequence[bytes] = ()) -> bytes:
    """A seed file after one to four mutations: a bit flipped, a byte set, a range deleted, the file
    cut, a range duplicated or repeated (up to 3,000 times) or nested (in brackets, parentheses or
    minus signs, up to 3,000 deep), a token inserted, the tail of another seed spliced on, a line
    deleted, duplicated or swapped."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 4))):
        op, n = draw(st.sampled_from(OPS)), len(data)
        i = draw(st.integers(0, n))
        j = draw(st.integers(i, min(n, i + 64)))
        if op == "flip" and n:
            data[min(i, n - 1)] ^= 1 << draw(st.integers(0, 7))
        elif op == "byte" and n:
            data[min(i, n - 1)] = draw(st.integers(0, 255))
        elif op == "delete":
            del data[i:j]
        elif op == "truncate":
            del data[i:]
        elif op == "duplicate":
            data[j:j] = data[i:j]
        elif op == "repeat":
            data[i:j] = data[i:j] * draw(st.sampled_from((2, 10, 100, 3_000)))
        elif op == "nest":
            left, right = draw(st.sampled_from(NESTS))
            times = draw(st.sampled_from((2, 100, 3_000)))
            data[i:j] = left * times + data[i:j] + right * times
        elif op == "insert":
            data[i:i] = draw(st.sampled_from([*ODD, *tokens]))
        elif op == "splice":
            other = draw(st.sampled_from(seeds))
            data = data[:i] + other[draw(st.integers(0, len(other))) :]
        elif op.endswith(("line", "lines")):
            lines = bytes(data).split(b"\n")
            a, b = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            if op == "delete line":
                del lines[a]
            elif op == "duplicate line":
                lines.insert(a, lines[a])
            else:
                lines[a], lines[b] = lines[b], lines[a]
            data = bytearray(b"\n".join(lines))
    return bytes(data)


def json_values(max_leaves: int = 6) -> st.SearchStrategy[Any]:
    """Any JSON value, odd ones likely: NaN and infinities (Python writes them), huge and negative
    numbers, booleans where numbers go, strings with control characters and lone surrogates."""
    leaf = st.one_of(
        st.none(),
        st.booleans(),
        st.sampled_from([0, 1, -1, 2**63, -(2**63), 10**30, 0.5, -0.0, 1e308, -1e308, 1e-320]),
        st.floats(),
        st.integers(),
        st.sampled_from(["", " ", "all", "linear", "retrieve", "parent", "sibling", "child", "none", "hash", "flat"]),
        st.text(max_size=12),
        st.sampled_from(["\x00", "\ud800", "a\tb", "é" * 3, "../../x", "/", "1e3", "NaN"]),
    )
    return st.recursive(
        leaf,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
        max_leaves=max_leaves,
    )


def _paths(value: Any, at: tuple = ()) -> list[tuple]:
    """Every place in a JSON value: the root, each key and each index, depth first."""
    out = [at]
    if isinstance(value, dict):
        for key, inner in value.items():
            out += _paths(inner, (*at, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            out += _paths(inner, (*at, index))
    return out


def _set(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    value[path[0]] = _set(value[path[0]], path[1:], new)
    return value


@st.composite
def json_mutated(draw: Any, seeds: Sequence[Any]) -> bytes:
    """A seed JSON value with one to three changes (a value replaced by another of any type, a key or
    item dropped, a key added, a value wrapped in a list), written as a program other than nlqo could
    write it (NaN and Infinity included; ASCII-escaped or not, indented or not)."""
    value = copy.deepcopy(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(value)))
        op = draw(st.sampled_from(["replace", "replace", "drop", "add", "wrap"]))
        if op == "drop" and path:
            parent = functools.reduce(lambda v, k: v[k], path[:-1], value)
            del parent[path[-1]]
            continue
        here = functools.reduce(lambda v, k: v[k], path, value)
        if op == "add" and isinstance(here, dict):
            here[draw(st.sampled_from(["", "extra", "n", "em", "files", "format", "all", "calibration"]))] = draw(
                json_values()
            )
        elif op == "wrap":
            value = _set(value, path, [here])
        else:
            value = _set(value, path, draw(json_values()))
    text = json.dumps(value, ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, 2])))
    return text.encode("utf-8", errors="surrogatepass")


def grammar(file: str, explicit: dict[str, st.SearchStrategy[str]]) -> st.SearchStrategy[bytes]:
    """Text drawn from ``grammar/FILE`` (hypothesis.extra.lark), as UTF-8 bytes."""
    parser = lark.Lark((ROOT / "grammar" / file).read_text(encoding="utf-8"), parser="lalr")
    return from_lark(parser, explicit=explicit).map(lambda text: text.encode("utf-8", errors="surrogatepass"))


def tagged(**generators: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[str, Any]]:
    """One input from any of ``generators``, with its generator's name (which the campaign counts by)."""
    return st.one_of(*(g.map(functools.partial(lambda name, x: (name, x), name)) for name, g in generators.items()))


RAW = st.binary(max_size=400)


# --- what a message must look like --------------------------------------------------------------


def lines_of(data: bytes) -> int:
    """Lines a file of ``data`` has, as a message may name them (a last line without a newline counts)."""
    return data.count(b"\n") + 1


def check_located(message: str, source: str, data: bytes, *, pointer: bool = False) -> None:
    """``message`` names ``source`` first, then a line of ``data`` if it names one (``SOURCE:LINE:`` or
    ``SOURCE:LINE:COLUMN:``); it is one line, or (``pointer``) one line followed by the offending line
    and a caret under the column."""
    head, *rest = message.split("\n")
    assert head.startswith(f"{source}:"), f"the message does not start with the file's name: {message[:300]!r}"
    located = re.match(rf"{re.escape(source)}:(\d+):(?:(\d+):)? ", head)
    if located:
        assert 1 <= int(located[1]) <= lines_of(data), f"line {located[1]} of a {lines_of(data)}-line file: {head!r}"
    if pointer and rest:
        assert located and located[2], f"a pointer without a column: {message[:300]!r}"
        assert len(rest) == 2 and rest[0].startswith("  ") and rest[1].strip() == "^", message[:300]
    else:
        assert not rest, f"a message of {len(rest) + 1} lines: {message[:300]!r}"


def check_in_index(message: str, folder: Path, data: bytes) -> None:
    """One line naming the index folder, or a file of it (its manifest, at a line of ``data`` if it names one)."""
    source = message.split(": ", 1)[0]
    assert source == str(folder) or source.startswith(f"{folder}/"), (
        f"the message names no index file: {message[:300]!r}"
    )
    check_located(message, source.split(":", 1)[0] if source.endswith("manifest.json") else source, data)


def write(name: str, data: bytes) -> Path:
    path = workspace() / name
    path.write_bytes(data)
    return path


# --- the targets --------------------------------------------------------------------------------


@attrs.frozen
class Target:
    """One parser under fuzzing: how to draw inputs and how to feed one."""

    name: str
    """Short name, used for tests and the campaign's counts."""
    what: str
    """What is fed, for the docs' table."""
    inputs: Callable[[], st.SearchStrategy[tuple[str, Any]]]
    feed: Callable[[Any], str]
    """Gives one input to the parser; returns its outcome, or raises when the contract is broken."""


def _seeds(*patterns: str) -> list[bytes]:
    files = sorted({p for pattern in patterns for p in ROOT.glob(pattern)})
    assert files, patterns
    return [p.read_bytes() for p in files]


# IR files (.nlqo) ---------------------------------------------------------------------------------

IR_TOKENS = [b"q1", b"q2", b" = ", b"(?x, ", b'"p", ', b'?y)', b"\nanswer ?x", b"answer ", b"relation ", b" parent ",
             b" sibling ", b" none ", b"question ", b'"Who?"', b"?", b"=", b"(", b")"]  # fmt: skip


def _ir_inputs() -> st.SearchStrategy[tuple[str, Any]]:
    spaced = {name: st.from_regex(pattern, fullmatch=True).map(lambda s: f" {s} ") for name, pattern in
              (("ID", r"q[1-4]"), ("VAR", r"\?[xyz]"), ("RELKIND", r"parent|sibling|none"))}  # fmt: skip
    explicit = {"WS": st.just(" "), "COMMENT": st.just(" # c"), "_NL": st.sampled_from(["\n", "\r\n"]), **spaced}
    seeds = _seeds("examples/*.nlqo", "tests/fixtures/rules/*.nlqo")
    return tagged(grammar=grammar("nlqo.lark", explicit), mutated=mutated(seeds, IR_TOKENS), raw=RAW)


def feed_ir(data: bytes) -> str:
    """``parse_bytes`` as ``nlqo plan FILE`` reads it; a query renders to text that reads back as itself and plans."""
    from nlqo.ir.syntax import parse, parse_bytes, render
    from nlqo.testing.strategies import plan

    try:
        query = parse_bytes(data, source="fuzz.nlqo")
    except (IRSyntaxError, IRSemanticError) as exc:
        check_located(str(exc), "fuzz.nlqo", data, pointer=True)
        return ERROR
    assert parse(render(query)) == query
    if len(query.atoms) <= 8:
        plan(query, seed=None)
    return RESULT


# Cost files (.cost) -------------------------------------------------------------------------------

COST_NAMES = ("depth", "size", "edges", "imbalance", "leaves", "height", "similarity", "alpha", "w", "log", "min",
              "sqrt", "cost", "param", "description")  # fmt: skip
COST_NUMBERS = ("0", "1", "2.5", "0.0", ".5", "1e300", "1e-300", "1e308", "1e309", "1e999", "9" * 400, "00")
COST_TOKENS = [b"cost = ", b"param w = ", b"param alpha = -", b"description ", b'"d"', b"log(", b"min(", b"max(",
               b"abs(", b"/ 0", b" / (depth - depth)", b"log(0)", b"- 1e308 * 1e308", b" * ", b", ", b")", b"inf",
               b"- size"]  # fmt: skip
COST_QUERY = 'q1 = (?x, "directed", "Jaws")\nq2 = (?x, "born in", ?c)\nq3 = (?c, "capital of", ?k)\nanswer ?k\n'


def _cost_inputs() -> st.SearchStrategy[tuple[str, Any]]:
    explicit = {"NAME": st.sampled_from(COST_NAMES), "NUMBER": st.sampled_from(COST_NUMBERS),
                "STRING": st.sampled_from(['"x"', '"a\\"b"', '"\\q"', '"\\ud800"', '"é"', '""']),
                "_NL": st.sampled_from(["\n", "\r\n"]), "COMMENT": st.just("# c")}  # fmt: skip
    seeds = _seeds("cost_models/*.cost") + [b"param w = 3\ncost = log(depth) / (size - w) - 1e308 * edges\n"]
    return tagged(grammar=grammar("cost.lark", explicit), mutated=mutated(seeds, COST_TOKENS), raw=RAW)


def feed_cost(data: bytes) -> str:
    """``load_cost_model(FILE)``; a model plans a three-atom query to a cost that is a number or inf
    (never NaN), and EXPLAIN's JSON of it is strict JSON."""
    from nlqo.explain import formats
    from nlqo.ir.syntax import parse
    from nlqo.optimizer.cost import load_cost_model
    from nlqo.testing import HashEmbedder
    from nlqo.testing.strategies import plan

    path = write("fuzz.cost", data)
    try:
        model = load_cost_model(str(path))
    except (CostModelError, InputFileError) as exc:
        check_located(str(exc), str(path), data, pointer=True)
        return ERROR
    planned = plan(parse(COST_QUERY), cost_model=model, embedder=HashEmbedder(), seed=None)
    assert not math.isnan(planned.cost.total), model.formula()
    text = formats.render(formats.LogicalView(planned, model=model), "json")
    json.loads(text, parse_constant=lambda name: (_ for _ in ()).throw(AssertionError(f"{name} in JSON")))
    return RESULT


# Rule lists (.rules) ------------------------------------------------------------------------------

RULE_TOKENS = [b"normalize_variables", b"merge_duplicate_atoms", b"drop_unreachable", b"__init__", b"__pycache__",
               b"Program", b"load_rule", b"rewrite", b"attrs", b"os", b"..", b".", b"drop_unreachable.x", b"# c",
               b"\n", b" "]  # fmt: skip


def _rules_inputs() -> st.SearchStrategy[tuple[str, Any]]:
    names = st.lists(st.sampled_from(RULE_TOKENS), max_size=8).map(b"".join)
    lines = st.lists(names, min_size=1, max_size=6).map(b"\n".join)
    return tagged(grammar=lines, mutated=mutated(_seeds("rules/*.rules"), RULE_TOKENS), raw=RAW)


RULES_QUERY = 'q1 = (?x, "directed", "Jaws")\nq2 = (?x, "directed", "Jaws")\nq3 = ("a", "b", "c")\nanswer ?x\n'


def feed_rules(data: bytes) -> str:
    """``load_rules(FILE)``; the rules it loads rewrite a query (with a duplicate and an unreachable atom)."""
    from nlqo.ir.syntax import parse
    from nlqo.optimizer.rewrite import Program, load_rules, rewrite

    path = write("fuzz.rules", data)
    try:
        rules = load_rules(str(path))
    except (ConfigError, InputFileError) as exc:
        check_located(str(exc), str(path), data)
        return ERROR
    assert isinstance(rewrite(parse(RULES_QUERY), rules), Program)
    return RESULT


# Statistics (statistics.json) ---------------------------------------------------------------------


def _statistics_inputs() -> st.SearchStrategy[tuple[str, Any]]:
    seeds = [ROOT / "nlqo/planner/statistics/default.json", *sorted(ROOT.glob("benchmarks/results/statistics/*/statistics.json"))]  # fmt: skip
    values = [{**json.loads(p.read_bytes()), "measured_on": dict(_engine().identity)} for p in seeds]  # this setup's
    raw = [_dumps(v) for v in values]
    values.append(_calibrated(values[0]))
    small = [_shrunk(v) for v in values]  # three operators, one class each: a change lands where it is read more often
    return tagged(
        structured=json_mutated(small + values),
        mutated=mutated(raw, ODD),
        any_json=json_values(12).map(_dumps),
        raw=RAW,
    )


def _calibrated(stats: dict) -> dict:
    """``stats`` as a version-2 file, with a calibration fitted on a made-up sample of three operators."""
    from nlqo.planner.statistics.calibration import Row, fit
    from nlqo.runtime.llm.scripted import word_confidence

    def row(i: int, j: int) -> Row:
        right = (i + j) % 3 == 0
        return Row(f"q{i}", "other", float(right), 8.0 + 4 * j, word_confidence("x", logprob=-3 + 0.1 * i + right))

    rows = {op: [row(i, j) for i in range(30)] for j, op in enumerate(("retrieve", "linear", "iterate"))}
    return {**stats, "version": 2, "calibration": fit(rows).to_dict()}


def _shrunk(stats: dict) -> dict:
    out = copy.deepcopy(stats)
    out["operators"] = {op: {"all": classes["all"]} for op, classes in list(out["operators"].items())[:3]}
    return out


def _dumps(value: Any) -> bytes:
    return json.dumps(value).encode("utf-8", errors="surrogatepass")


@functools.cache
def _engine(strategy: str = "auto"):
    from nlqo.config import EngineConfig
    from nlqo.main.engine import Engine
    from nlqo.runtime.llm import ScriptedLLM
    from nlqo.testing.fakes import PASSAGES, HashEmbedder, KeywordRetriever

    config = EngineConfig(strategy=strategy, measure_costs=False, cost_model="structural", max_question_chars=200)
    llm = ScriptedLLM([], default=" Steven Spielberg")
    return Engine.from_config(config, llm=llm, retriever=KeywordRetriever(PASSAGES), embedder=HashEmbedder())


def feed_statistics(data: bytes) -> str:
    """``nlqo ask --statistics FILE``'s reading: load, check against the engine's setup, then ``auto``
    chooses an operator by them for a question of each class, and a cascade reads their calibration."""
    from nlqo.planner.statistics import store

    path = write("statistics.json", data)
    engine = _engine()
    try:
        stats = store.check(store.load(path), engine.identity)
    except ConfigError as exc:
        check_located(str(exc), str(path), data)
        return ERROR
    engine = attrs.evolve(engine, statistics=stats)
    for question in ("Who directed Jaws?", "Is Paris in France?", "Which is older, A or B?"):
        engine.choose(question)
    engine.calibration  # noqa: B018 - reading it is the test
    stats.describe()
    return RESULT


# The relation cache (--relations-cache FILE) ------------------------------------------------------

PAIR_QUERY = 'q1 = (?x, "born in", "Zürich")\nq2 = (?x, "lives in", "Genève")\nanswer ?x\n'


def _relation_seeds() -> list[dict]:
    a, b = "?x born in zürich", "?x lives in genève"
    return [
        {f"{a}\t{b}": "child"},
        {f"{b}\t{a}": "parent", "?a p b\t?a q c": "sibling"},
        {f"{a}\t{b}": "merge:yes"},
        {},
    ]


def _relations_inputs() -> st.SearchStrategy[tuple[str, Any]]:
    seeds = _relation_seeds()
    raw = [json.dumps(s, indent=0, sort_keys=True).encode() for s in seeds]
    return tagged(structured=json_mutated(seeds), mutated=mutated(raw, ODD), any_json=json_values(8).map(_dumps), raw=RAW)  # fmt: skip


def feed_relations(data: bytes) -> str:
    """``RelationCache.open(FILE)``; the cache then decides a pair the triples leave open, and saves."""
    from nlqo.ir.syntax import parse
    from nlqo.optimizer.relations import RelationCache, resolve

    path = write("relations.json", data)
    try:
        cache = RelationCache.open(path)
    except ConfigError as exc:
        check_located(str(exc), str(path), data)
        return ERROR
    resolve(parse(PAIR_QUERY), cache=cache)
    cache.save()
    return RESULT


# The index manifest (IDX/manifest.json) -----------------------------------------------------------


@functools.cache
def index_folder() -> Path:
    """A small index built with the hashing embedder; :func:`feed_manifest` replaces its manifest."""
    from nlqo.index.build import build_index
    from nlqo.testing.fakes import HashEmbedder

    corpus = workspace() / "corpus.jsonl"
    corpus.write_bytes((ROOT / "examples" / "demo_corpus.jsonl").read_bytes())
    folder = workspace() / "idx"
    build_index(corpus, folder, HashEmbedder())
    return folder


@functools.cache
def manifest_seed() -> bytes:
    return (index_folder() / "manifest.json").read_bytes()


def _manifest_inputs() -> st.SearchStrategy[tuple[str, Any]]:
    seed = manifest_seed()
    value = json.loads(seed)
    return tagged(
        structured=json_mutated([value]), mutated=mutated([seed], ODD), any_json=json_values(8).map(_dumps), raw=RAW
    )


def feed_manifest(data: bytes) -> str:
    """``Index.open(IDX)`` with this manifest (its checksums verified), then a BM25 search; an even-length
    input also opens it with the hashing embedder and searches by vectors."""
    from nlqo.index import Index
    from nlqo.index.retriever import make_retriever
    from nlqo.testing.fakes import HashEmbedder

    folder = index_folder()
    manifest = folder / "manifest.json"
    manifest.write_bytes(data)
    dense = len(data) % 2 == 0
    try:
        index = Index.open(folder, embedder=HashEmbedder() if dense else None)
        make_retriever(index, "dense" if dense else "bm25").search("Jaws director", 2)
    except IndexFileError as exc:
        check_in_index(str(exc), folder, data)
        return ERROR
    finally:
        manifest.write_bytes(manifest_seed())
    return RESULT


# Question files (.jsonl, .jsonl.gz) ---------------------------------------------------------------

CONTAINERS = ("plain", "gzip", "gzip damaged", "gzip named plain", "plain named gzip")


def _question_inputs() -> st.SearchStrategy[tuple[str, Any]]:
    raw = (ROOT / "examples" / "demo_questions.jsonl").read_bytes()
    records = [json.loads(line) for line in raw.splitlines() if line.strip()]
    structured = st.lists(json_mutated(records), min_size=1, max_size=4).map(lambda lines: b"\n".join(lines) + b"\n")
    body = st.one_of(structured, mutated([raw], ODD), RAW)
    return tagged(file=st.tuples(st.sampled_from(CONTAINERS), body, st.integers(0, 2**32)))


def question_file(container: str, body: bytes, seed: int) -> tuple[str, bytes]:
    """File name and bytes of a question file holding ``body``, in ``container``."""
    if container == "plain":
        return "questions.jsonl", body
    if container == "plain named gzip":
        return "questions.jsonl.gz", body
    zipped = gzip.compress(body, mtime=0)
    if container == "gzip named plain":
        return "questions.jsonl", zipped
    if container == "gzip damaged":
        cut = seed % (len(zipped) + 1)
        return "questions.jsonl.gz", (zipped[:cut] + bytes([seed % 251]) + zipped[cut + 1 :])[: len(zipped) - seed % 3]
    return "questions.jsonl.gz", zipped


def feed_questions(given: tuple[str, bytes, int]) -> str:
    """``QuestionSet.load(FILE)``: every question a string, with at least one gold answer."""
    from nlqo.eval.datasets import QuestionSet

    name, data = question_file(*given)
    path = write(name, data)
    (workspace() / ("questions.jsonl" if name.endswith(".gz") else "questions.jsonl.gz")).unlink(missing_ok=True)
    try:
        questions = QuestionSet.load(path)
    except CorpusError as exc:
        check_located(str(exc), str(path), _plain(given[0], data))
        return ERROR
    assert all(isinstance(q.question, str) and q.answers and all(isinstance(a, str) for a in q.answers) for q in questions.questions)  # fmt: skip
    return RESULT


# HTTP bodies of nlqo serve ------------------------------------------------------------------------

ENDPOINTS = ("/v1/ask", "/v1/explain", "/v1/retrieve")
VALID_BODIES: dict[str, list[dict]] = {
    "/v1/ask": [{"question": "Who directed Jaws?"}, {"question": "Who directed Jaws?", "strategy": "retrieve", "explain": True},
                {"question": "Where was the director of Jaws born?", "stream": True, "timeout": 30},
                {"question": "Who directed Jaws?", "strategy": "linear", "explain": "html"}],
    "/v1/explain": [{"question": "Who directed Jaws?"}, {"question": "Who directed Jaws?", "strategy": "tree", "format": "html"}],
    "/v1/retrieve": [{"query": "Jaws", "k": 2}, {"query": "Spielberg"}],
}  # fmt: skip
FIELDS = ["question", "query", "strategy", "explain", "stream", "timeout", "format", "k", "extra"]
CONTENT_TYPES = ["application/json"] * 12 + ["application/json; charset=latin-1", "application/problem+json",
                                              "text/plain", "", "application/x-www-form-urlencoded"]  # fmt: skip
"""Mostly JSON, so that most bodies reach the app past the Content-Type check."""


WORDS = ["Who", "directed", "Jaws", "Is", "a", "film", "born", "where", "older", "or", "?", "é", "\x00", "\u202e", ""]
QUESTIONS = st.one_of(
    st.lists(st.sampled_from(WORDS) | st.text(max_size=8), min_size=1, max_size=10).map(" ".join),
    st.text(max_size=60),
    st.sampled_from(["Who directed Jaws?", "x" * 201, "Jaws " * 40]),
)
STRATEGIES = st.sampled_from(["auto", "retrieve", "linear", "tree", "iterate", "cascade"])
VALID: dict[str, st.SearchStrategy[dict]] = {
    "/v1/ask": st.fixed_dictionaries(
        {"question": QUESTIONS},
        optional={"strategy": STRATEGIES, "explain": st.sampled_from([True, False, "json", "html"]),
                  "stream": st.booleans(), "timeout": st.floats(1e-3, 30)},
    ),
    "/v1/explain": st.fixed_dictionaries(
        {"question": QUESTIONS}, optional={"strategy": STRATEGIES, "format": st.sampled_from(["json", "html"])}
    ),
    "/v1/retrieve": st.fixed_dictionaries({"query": QUESTIONS}, optional={"k": st.integers(-1, 60)}),
}  # fmt: skip
"""Bodies of the request schema's shape, for each endpoint."""


def _http_inputs() -> st.SearchStrategy[tuple[str, Any]]:
    schema = st.dictionaries(st.sampled_from(FIELDS), json_values(4), max_size=5).map(_dumps)

    def request(path: str) -> st.SearchStrategy[tuple[str, Any]]:
        seeds = VALID_BODIES[path]
        bodies = tagged(
            valid=VALID[path].map(_dumps),
            structured=json_mutated(seeds),
            schema=schema,
            mutated=mutated([_dumps(s) for s in seeds], ODD),
            raw=RAW,
        )
        return st.tuples(st.sampled_from(CONTENT_TYPES), bodies).map(lambda t: (t[1][0], (path, t[0], t[1][1])))

    return st.sampled_from(ENDPOINTS).flatmap(request)


class InProcess:
    """An ASGI app called in this process, one request at a time, on an event loop of its own."""

    def __init__(self, app: Any):
        self.app = app
        self.loop = asyncio.new_event_loop()

    def request(self, method: str, path: str, body: bytes, content_type: str) -> tuple[int, dict[str, str], bytes]:
        return self.loop.run_until_complete(asyncio.wait_for(self._request(method, path, body, content_type), 60))

    async def _request(self, method: str, path: str, body: bytes, content_type: str):
        headers = [(b"host", b"127.0.0.1"), (b"content-length", str(len(body)).encode())]
        if content_type:
            headers.append((b"content-type", content_type.encode()))
        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
                 "method": method, "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
                 "root_path": "", "headers": headers, "client": ("127.0.0.1", 50000),
                 "server": ("127.0.0.1", 8000)}  # fmt: skip
        finished, sent = asyncio.Event(), [False]
        status, response_headers, chunks = [0], {}, []

        async def receive() -> dict:
            if not sent[0]:
                sent[0] = True
                return {"type": "http.request", "body": body, "more_body": False}
            await finished.wait()  # the client stays until the whole answer is in
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                response_headers.update({k.decode().lower(): v.decode() for k, v in message.get("headers", [])})
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    finished.set()

        try:
            await self.app(scope, receive, send)
        finally:
            finished.set()
        return status[0], response_headers, b"".join(chunks)


@functools.cache
def served() -> InProcess:
    """``nlqo serve``'s app over an engine with a scripted model, a keyword retriever and a hashing embedder."""
    from nlqo.serve.app import create_app
    from nlqo.serve.service import Service

    service = Service(_engine("retrieve"), capacity=1, queue_limit=4, timeout=30)
    strategies = ("auto", "retrieve", "linear", "tree", "iterate", "cascade")
    return InProcess(create_app(service, strategy="retrieve", strategies=strategies, model="scripted"))


def _error_shape(status: int, body: Any) -> None:
    assert isinstance(body, dict) and set(body) == {"error"}, body
    assert isinstance(body["error"].get("type"), str) and isinstance(body["error"].get("message"), str), body
    assert status < 500 or status == 504, f"HTTP {status}: {body}"


def feed_http(given: tuple[str, str, bytes]) -> str:
    """``POST ENDPOINT`` with this body and Content-Type: 200 with an answer, or a 4xx with the error shape
    (a 504 only when the request set a timeout); a streamed answer's ``error`` event likewise."""
    path, content_type, body = given
    status, headers, raw = served().request("POST", path, body, content_type)
    if headers.get("content-type", "").startswith("text/event-stream"):
        events = [json.loads(line[6:]) for line in raw.decode().split("\n") if line.startswith("data: ")]
        names = [line[7:] for line in raw.decode().split("\n") if line.startswith("event: ")]
        assert status == 200 and names[0] == "accepted" and names[-1] in ("result", "error"), raw[:500]
        if names[-1] == "result":
            return RESULT
        status, answer = events[-1]["status"], {"error": {k: v for k, v in events[-1].items() if k != "status"}}
    else:
        answer = json.loads(raw)
        if status == 200:
            assert isinstance(answer, dict) and "error" not in answer, answer
            return RESULT
    _error_shape(status, answer)
    if status == 504:
        assert b'"timeout"' in body, f"a 504 to a request that set no timeout: {answer}"
        return "timeout"
    return ERROR


# --- through the CLI ----------------------------------------------------------------------------


def run_cli(*argv: Any) -> tuple[int, str, str]:
    """``nlqo ARGV`` in this process: exit code, standard output, standard error."""
    from nlqo.cli import main

    import nlqo.cli

    out, err, parser = io.StringIO(), io.StringIO(), _parser()
    built, nlqo.cli.build_parser = nlqo.cli.build_parser, lambda: parser  # type: ignore[assignment]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([str(a) for a in argv])
    finally:
        nlqo.cli.build_parser = built
    return code, out.getvalue(), err.getvalue()


@functools.cache
def _parser():
    """The CLI's argument parser, built once (building it takes most of an in-process run's time)."""
    import nlqo.cli

    return nlqo.cli.build_parser()


def check_cli(code: int, err: str, source: str, data: bytes, *, pointer: bool = False) -> str:
    """Exit 0, or exit 2 with one ``nlqo: error:`` message located in ``source``; never 70 or a traceback."""
    assert "Traceback" not in err and "internal error" not in err, err
    if code == 0:
        return RESULT
    assert code == 2 and err.startswith("nlqo: error: "), (code, err[:500])
    check_located(err.removeprefix("nlqo: error: ").rstrip("\n"), source, data, pointer=pointer)
    return ERROR


def older() -> Path:
    return ROOT / "examples" / "older.nlqo"


def feed_ir_cli(data: bytes) -> str:
    path = write("fuzz.nlqo", data)
    code, _, err = run_cli("plan", path, "--cost-model", "structural", "--format", "json")
    return check_cli(code, err, str(path), data, pointer=True)


def feed_cost_cli(data: bytes) -> str:
    path = write("fuzz.cost", data)
    code, out, err = run_cli("plan", older(), "--cost-model", path, "--format", "json")
    if code == 0:
        json.loads(out, parse_constant=lambda name: (_ for _ in ()).throw(AssertionError(f"{name} in JSON")))
    return check_cli(code, err, str(path), data, pointer=True)


def feed_rules_cli(data: bytes) -> str:
    path = write("fuzz.rules", data)
    code, _, err = run_cli("plan", ROOT / "examples" / "duplicates.nlqo", "--cost-model", "structural", "--rules", path)
    return check_cli(code, err, str(path), data)


def feed_relations_cli(data: bytes) -> str:
    path = write("relations.json", data)
    code, _, err = run_cli("plan", older(), "--cost-model", "structural", "--relations-cache", path)
    return check_cli(code, err, str(path), data)


def feed_manifest_cli(data: bytes) -> str:
    folder = index_folder()
    manifest = folder / "manifest.json"
    manifest.write_bytes(data)
    try:
        code, _, err = run_cli("retrieve", "--index", folder, "Jaws director", "--mode", "bm25", "-k", "2")
    finally:
        manifest.write_bytes(manifest_seed())
    assert "Traceback" not in err and "internal error" not in err, err
    if code == 0:
        return RESULT
    assert code == 2 and err.startswith("nlqo: error: ") and err.endswith("\n"), (code, err[:500])
    check_in_index(err.removeprefix("nlqo: error: ")[:-1], folder, data)
    return ERROR


def feed_questions_cli(given: tuple[str, bytes, int]) -> str:
    """``nlqo bench --questions FILE`` with an index that is not there: a question file that reads ends in
    the error naming the index (before any model loads), one that does not in an error naming the file."""
    name, data = question_file(*given)
    path = write(name, data)
    missing = workspace() / "no-index"
    code, _, err = run_cli("bench", "--questions", path, "--index", missing, "--out", workspace() / "bench", "--strategies", "no-rag")  # fmt: skip
    if code == 2 and err.startswith(f"nlqo: error: {missing}: no such index folder"):
        return RESULT
    assert code == 2, (code, err[:500])
    return check_cli(code, err, str(path), _plain(given[0], data))


def _plain(container: str, data: bytes) -> bytes:
    """The bytes whose lines a message about a question file in ``container`` counts (any, when damaged)."""
    if container == "gzip damaged":
        return b"\n" * len(data) * 1100  # any line the damaged stream might reach
    return gzip.decompress(data) if container == "gzip" else data


TARGETS: tuple[Target, ...] = (
    Target("ir", "IR files (.nlqo): `parse_bytes`, render, plan", _ir_inputs, feed_ir),
    Target("ir-cli", "IR files: `nlqo plan FILE`", _ir_inputs, feed_ir_cli),
    Target("cost", "cost files (.cost): `load_cost_model`, plan, EXPLAIN JSON", _cost_inputs, feed_cost),
    Target("cost-cli", "cost files: `nlqo plan --cost-model FILE`", _cost_inputs, feed_cost_cli),
    Target("rules", "rule lists (.rules): `load_rules`, rewrite", _rules_inputs, feed_rules),
    Target("rules-cli", "rule lists: `nlqo plan --rules FILE`", _rules_inputs, feed_rules_cli),
    Target("statistics", "statistics JSON: `load`, `check`, `auto`'s choice", _statistics_inputs, feed_statistics),
    Target("relations", "relation cache JSON: `RelationCache.open`, resolve, save", _relations_inputs, feed_relations),
    Target(
        "relations-cli", "relation cache: `nlqo plan --relations-cache FILE`", _relations_inputs, feed_relations_cli
    ),  # fmt: skip
    Target("manifest", "index manifest: `Index.open`, search", _manifest_inputs, feed_manifest),
    Target("manifest-cli", "index manifest: `nlqo retrieve --index IDX`", _manifest_inputs, feed_manifest_cli),
    Target("questions", "question files (.jsonl, .jsonl.gz): `QuestionSet.load`", _question_inputs, feed_questions),
    Target("questions-cli", "question files: `nlqo bench --questions FILE`", _question_inputs, feed_questions_cli),
    Target("http", "HTTP bodies of `nlqo serve` (ask, explain, retrieve)", _http_inputs, feed_http),
)
BY_NAME = {t.name: t for t in TARGETS}
