"""The constraint layer without a model: llguidance over a byte-level vocabulary plus an end token.

Every byte is a token, so forced runs, masks and the two stages of the IR constraint can be
checked exactly; random logits stand in for a model.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nlqo.errors import LLMError
from nlqo.ir.grammar import ir_constraint
from nlqo.runtime.llm.constrain import Constraint, Matcher, choice, literal
from nlqo.ir.syntax import parse

llguidance = pytest.importorskip("llguidance")
EOS = 256


class _Bytes:
    eos_token_id = EOS
    bos_token_id = None
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
    special_token_ids = [EOS]

    def __call__(self, text):
        return list(text if isinstance(text, bytes) else text.encode("utf-8"))


@pytest.fixture(scope="module")
def tokenizer():
    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Bytes()))


def test_a_literal_is_forced_whole(tokenizer):
    m = Matcher.start(literal('say "hi"\n'), tokenizer)
    assert bytes(m.forced()) == b'say "hi"\n' and m.done and m.forced_tokens == 9


def test_forced_runs_stop_at_a_choice_and_respect_a_limit(tokenizer):
    m = Matcher.start(Constraint('start: "answer: " ("yes" | "no")'), tokenizer)
    assert bytes(m.forced(3)) == b"ans" and bytes(m.forced()) == b"wer: " and not m.done
    m.advance(ord("n"))
    assert bytes(m.forced()) == b"o" and m.done and m.text == "answer: no" and m.forced_tokens == 9


def test_a_choice_ends_without_an_end_token_and_a_disallowed_token_is_an_error(tokenizer):
    m = Matcher.start(choice(["parent", "child"]), tokenizer)
    logits = np.zeros(257, dtype=np.float32)
    logits[ord("z")] = 5.0
    logits[ord("c")] = 1.0
    assert m.choose(logits) == ord("c")
    m.advance(ord("c"))
    assert bytes(m.forced()) == b"hild" and m.done
    with pytest.raises(LLMError, match="choice"):
        Matcher.start(choice(["parent"]), tokenizer).advance(ord("x"))


def test_a_bad_grammar_is_named(tokenizer):
    with pytest.raises(LLMError, match="rejected by llguidance"):
        Matcher.start(Constraint("start: undefined_rule"), tokenizer)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False))
def test_choose_is_the_argmax_of_the_masked_logits_and_the_reply_is_valid_ir(tokenizer, rng):
    """The fast path (the model's own choice when allowed) never differs from masking everything;
    following the IR constraint to the end gives valid IR, the answer stage included."""
    question = "In which city was the director of the film Jaws born?"
    m = Matcher.start(ir_constraint(question, 3), tokenizer)
    values = np.random.default_rng(rng.getrandbits(32))
    steps = 0
    while not m.done:
        if m.forced():
            continue
        logits = values.standard_normal(257).astype(np.float32)
        if rng.random() < 0.3:  # often a structural byte on top, as a model writing IR would have
            logits[ord(rng.choice('",)\n?qa'))] += 10.0
        shadow = Matcher.start(ir_constraint(question, 3), tokenizer)
        shadow._inner = m._inner.deep_copy()
        expected = shadow.masked_argmax(logits.copy())
        token = m.choose(logits)
        assert token == expected
        m.advance(token)
        if token == EOS:
            break
        steps += 1
    parse(m.text)
    assert steps + m.forced_tokens == len(m.text.encode("utf-8"))


def test_a_span_of_long_passages_is_a_grammar_the_parser_takes(tokenizer):
    from nlqo.execution.fallback import span_constraint, spans

    texts = [" ".join(f"w{p}x{i}" for i in range(200)) + "." for p in range(3)]  # 3,557 spans
    with pytest.raises(LLMError, match="items"):  # the same spans as one flat alternation: too many
        Matcher.start(choice(spans(texts)), tokenizer).advance(ord("w"))
    m = Matcher.start(span_constraint(texts), tokenizer)
    for byte in b"w1x7 w1x8 w1x9":
        m.advance(byte)
    assert m.text == "w1x7 w1x8 w1x9" and not m.done  # a longer span may follow
    with pytest.raises(LLMError):  # not a run of the passages
        m.advance(ord("z"))
