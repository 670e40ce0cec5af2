"""The generation grammar stays inside the validation grammar.

Strings are generated from ``grammar/nlqo-generate.lark`` (as completed by ``nlqo.ir.grammar``) in
two ways: by hypothesis from Lark's reading of the grammar, and by random walks through
llguidance's matcher, the engine that constrains the models (over a byte-level vocabulary, so every
string it allows can be reached). Either way, the first stage followed by the answer stage must parse
with ``grammar/nlqo.lark`` and pass the parser's semantic and grounding checks.
"""

from __future__ import annotations

import lark
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.lark import from_lark

from nlqo.errors import IRSemanticError
from nlqo.ir.grammar import answer_grammar, generation_grammar, ir_constraint, max_reply_bytes, mentioned, whole_grammar
from nlqo.parser.parse import check_grounded
from nlqo.ir.syntax import parse

llguidance = pytest.importorskip("llguidance")

QUESTIONS = (
    None,
    "In which city was the director of the film Jaws born?",
    "Which film came out first, Jaws or Alien?",
    "Is 7 a prime?",  # no word of three letters or more besides "prime"
    "Wer hat den Film Über Zürich gedreht?",
)


@st.composite
def grammars(draw):
    return draw(st.sampled_from(QUESTIONS)), draw(st.integers(1, 5))


def _lark(text: str) -> lark.Lark:
    return lark.Lark(text, start="start")


def _accept(question, text: str) -> None:
    query = parse(text, source="<generated>")
    if question is not None:
        check_grounded(query, question)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data(), grammars())
def test_strings_lark_generates_from_both_stages_are_valid_grounded_ir(data, spec):
    question, max_atoms = spec
    first = data.draw(from_lark(_lark(generation_grammar(max_atoms, question))))
    rest = data.draw(from_lark(_lark(answer_grammar(first))))
    _accept(question, first + rest)
    assert first.count(" = (") <= max_atoms


class _Bytes:
    """A vocabulary of the 256 bytes and an end token: every string llguidance allows is reachable."""

    eos_token_id = 256
    bos_token_id = None
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
    special_token_ids = [256]

    def __call__(self, text):
        return list(text if isinstance(text, bytes) else text.encode("utf-8"))


@pytest.fixture(scope="module")
def byte_tokenizer():
    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Bytes()))


def _walk(tokenizer, grammar: str, rng) -> bytes:
    """A random string of ``grammar`` as llguidance reads it: forced bytes, then random allowed ones."""
    matcher = llguidance.LLMatcher(tokenizer, llguidance.LLMatcher.grammar_from_lark(grammar), log_level=0)
    assert not matcher.is_error(), matcher.get_error()
    out = bytearray()
    while not matcher.is_stopped():
        forced = matcher.compute_ff_tokens()
        if forced:
            assert matcher.consume_tokens(forced)
            out += bytes(forced)
            continue
        bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
        allowed = np.flatnonzero(bits[: tokenizer.vocab_size])
        token = int(rng.choice(list(allowed)))
        assert matcher.consume_token(token)
        if token != tokenizer.eos_token:
            out.append(token)
    return bytes(out)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False), grammars())
def test_strings_llguidance_allows_are_valid_grounded_ir_within_the_byte_budget(byte_tokenizer, rng, spec):
    question, max_atoms = spec
    first = _walk(byte_tokenizer, generation_grammar(max_atoms, question), rng)
    rest = _walk(byte_tokenizer, answer_grammar(first.decode("utf-8")), rng)
    _accept(question, (first + rest).decode("utf-8"))
    assert len(first + rest) <= max_reply_bytes(max_atoms, question)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), grammars())
def test_the_single_grammar_for_servers_gives_ir_that_parses(data, spec):
    """Servers take one grammar: its answer line may name a variable no atom mentions, or one
    twice (semantic errors the parser repairs), but never breaks the syntax."""
    question, max_atoms = spec
    text = data.draw(from_lark(_lark(whole_grammar(max_atoms, question))))
    try:
        _accept(question, text)
    except IRSemanticError as exc:
        assert "is not mentioned by any atom" in str(exc) or "answer names a target twice" in str(exc)


def test_the_answer_stage_lists_only_mentioned_variables_and_never_one_twice():
    text = 'q1 = ("Jaws", "released in", ?year1)\nq2 = ("Alien", "has ?x", ?year2)\nanswer'
    assert mentioned(text) == (["?year1", "?year2"], ["q1", "q2"])
    parser = _lark(answer_grammar(text))
    for ok in (" ?year1", " ?year2, ?year1"):
        parser.parse(ok)
    for bad in (" ?x", " ?year1, ?year1", " ?year1, ?year2, ?year1", " q1"):
        with pytest.raises(lark.LarkError):
            parser.parse(bad)
    assert answer_grammar('q1 = ("Jaws", "released in", "1975")\nanswer').endswith('t0: "q1"')


def test_atom_ids_are_in_order_and_bounded_and_relations_name_written_atoms():
    parser = _lark(generation_grammar(2, None))
    parser.parse('q1 = (?a, "p", "o")\nq2 = (?a, "p", ?b)\nrelation q2 parent q1\nanswer')
    for bad in (
        'q2 = (?a, "p", "o")\nanswer',  # ids start at q1
        'q1 = (?a, "p", "o")\nq3 = (?a, "p", ?b)\nanswer',  # and go up by one
        'q1 = (?a, "p", "o")\nq2 = (?a, "p", ?b)\nq3 = (?b, "p", ?c)\nanswer',  # at most two here
        'q1 = (?a, "p", "o")\nrelation q1 parent q2\nanswer',  # q2 was not written
        'q1 = (?a, "p", "o")\nq2 = (?a, "p", ?b)\nrelation q1 none q1\nanswer',  # an atom with itself
        'q1 = (?a, "p", "o")\nq2 = (?a, "p", ?b)\nrelation q1 none q2\nrelation q1 parent q2\nanswer',  # one pin at most
        'q1 = (?a, ?p, "o")\nanswer',  # the predicate is a string
        'q1 = (?a, "p", "o")\nanswer ?a',  # the answer line is the second stage
    ):
        with pytest.raises(lark.LarkError):
            parser.parse(bad)


def test_constants_are_runs_of_the_question_words_or_hold_one():
    question = "Which film has the director who died later, Love In A Fallen City (Film) or Mummy'S Boys?"
    spans = _lark(generation_grammar(1, question, spans=True))
    for ok in ("Love In A Fallen City (Film)", "love in a fallen city", "Mummy's Boys", "director who died"):
        spans.parse(f'q1 = (?d, "directed", "{ok}")\nanswer')
    for bad in ("the film Love In A Fallen City", "?director", "1947-04-14 Mummy'S Boys", "Dracula"):
        with pytest.raises(lark.LarkError):
            spans.parse(f'q1 = (?d, "directed", "{bad}")\nanswer')
    words = _lark(generation_grammar(1, "Who directed Jaws?"))
    words.parse('q1 = (?d, "directed", "the film Jaws")\nanswer')
    with pytest.raises(lark.LarkError):
        words.parse('q1 = (?d, "directed", "Dracula")\nanswer')


def test_the_first_atom_names_a_constant_unless_unanchored():
    loose = 'q1 = (?d, "directed", ?film)\nq2 = (?d, "directed", "Jaws")\nanswer'
    anchored = _lark(generation_grammar(2, "Who directed Jaws?", anchored=True))
    with pytest.raises(lark.LarkError):
        anchored.parse(loose)
    for ok in (
        'q1 = ("Jaws", "directed by", ?d)\nanswer',
        'q1 = (?d, "directed", "Jaws")\nq2 = (?d, "born in", ?c)\nanswer',
    ):
        anchored.parse(ok)
    _lark(generation_grammar(2, "Who directed Jaws?")).parse(loose)
    assert ir_constraint("Who directed Jaws?", anchored=True).key() != ir_constraint("Who directed Jaws?").key()


def test_the_constraint_carries_both_stages_and_a_single_grammar():
    c = ir_constraint("Who directed Jaws?", 3)
    assert c.grammar == generation_grammar(3, "Who directed Jaws?") and c.then is answer_grammar
    assert c.single == whole_grammar(3, "Who directed Jaws?")
    assert c.key() != ir_constraint("Who directed Alien?", 3).key()
