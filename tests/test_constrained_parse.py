"""What uses the constraint layer, with scripted doubles: the parser, relation classification,
EXPLAIN ANALYZE, the response cache and the grammar passed to servers (GBNF)."""

from __future__ import annotations

import json

import lark
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.lark import from_lark

from nlqo.errors import ParseFailure
from nlqo.explain.analyze import node_actuals, parsing_lines
from nlqo.execution.trace import RunResult, Step
from nlqo.ir import Atom, Const, Query, Var
from nlqo.ir.grammar import ir_constraint, max_reply_bytes, whole_grammar
from nlqo.runtime.llm import ScriptedLLM
from nlqo.runtime.llm.base import Capabilities, ChatMessage, Usage
from nlqo.runtime.llm.cache import CachedLLM
from nlqo.runtime.llm.constrain import ConstrainedCompletion, can_constrain, choice, constrained_chat, enforced
from nlqo.runtime.llm.gbnf import to_gbnf
from nlqo.parser.parse import parse_question
from nlqo.runtime.prompts import planning
from nlqo.optimizer.relations import KINDS, llm_asker

QUESTION = "Where was the director of Jaws born?"
GOOD = 'q1 = (?director, "directed", "Jaws")\nq2 = (?director, "born in", ?city)\nanswer ?city'


class Grammared:
    """A backend that applies constraints: it serves scripted replies and records what it was asked."""

    name = "grammared"
    capabilities = Capabilities(constraint="tokens")

    def __init__(self, *replies: str):
        self.replies = list(replies)
        self.calls: list[dict] = []

    def chat(self, messages, *, stop=(), max_tokens=256, prefix_cache=False, constraint=None):
        self.calls.append({"messages": messages, "stop": stop, "max_tokens": max_tokens, "constraint": constraint})
        text = self.replies[min(len(self.calls) - 1, len(self.replies) - 1)]
        usage = Usage(prompt_tokens=50, generated_tokens=10, forced_tokens=12, calls=1)
        if constraint is None:
            return ConstrainedCompletion(text, usage, enforced=False)
        return ConstrainedCompletion(text, usage, enforced=True, mask_ms=1.5, decode_ms=100.0)


def test_a_backend_that_applies_grammars_gets_the_ir_constraint_and_a_budget_it_cannot_exceed():
    llm = Grammared(GOOD)
    result = parse_question(QUESTION, llm, max_atoms=3)
    (call,) = llm.calls
    assert call["constraint"] == ir_constraint(QUESTION, 3) and call["stop"] == ()
    assert call["max_tokens"] == max_reply_bytes(3, QUESTION)
    assert result.constrained and result.attempts == 1 and result.repairs == 0
    assert result.usage.forced_tokens == 12 and (result.mask_ms, result.decode_ms) == (1.5, 100.0)
    assert (
        result.describe()
        == "constrained by the generation grammar, 1 attempt, 0 repairs (repairs for semantic errors only)"
    )


def test_a_constrained_reply_with_a_semantic_error_is_repaired_under_the_grammar():
    ungrounded = 'q1 = (?director, "directed", "Dracula")\nanswer ?director'
    llm = Grammared(ungrounded, GOOD)
    result = parse_question(QUESTION, llm)
    assert result.attempts == 2 and result.constrained
    assert llm.calls[1]["constraint"] is not None
    assert "does not come from the question" in llm.calls[1]["messages"][-1].content


def test_syntax_errors_of_a_constrained_reply_are_not_repaired():
    llm = Grammared('q1 = (?director, "directed"')
    with pytest.raises(ParseFailure, match="syntax errors are not repaired") as info:
        parse_question(QUESTION, llm)
    assert len(llm.calls) == 1 and len(info.value.attempts) == 1


def test_backends_that_cannot_apply_a_grammar_are_asked_as_before():
    llm = ScriptedLLM([("Question:", GOOD)])
    assert not can_constrain(llm)
    result = parse_question(QUESTION, llm)
    assert not result.constrained and result.attempts == 1
    reply = constrained_chat(llm, [ChatMessage("user", "Question: x")], ir_constraint(QUESTION))
    assert not enforced(reply)


def test_constrained_off_asks_freely_with_the_prompts_stops_and_budget():
    llm = Grammared(GOOD)
    result = parse_question(QUESTION, llm, constrained=False)
    (call,) = llm.calls
    assert (
        call["constraint"] is None
        and call["stop"] == planning.PARSE.stop
        and call["max_tokens"] == planning.PARSE.max_tokens
    )
    assert not result.constrained and result.describe() == "unconstrained, 1 attempt, 0 repairs"


def test_relation_classification_is_constrained_to_the_four_words_without_retries():
    llm = Grammared("sibling")
    query = Query(
        atoms=(Atom("q1", Var("a"), Const("p"), Const("x")), Atom("q2", Var("a"), Const("r"), Const("y"))),
        answer=Var("a"),
    )
    kind, usage = llm_asker(llm)(query, query.atoms[0], query.atoms[1])
    (call,) = llm.calls
    assert kind == "sibling" and call["constraint"].grammar == choice(KINDS).grammar and usage.forced_tokens == 12
    free = Grammared("sibling")
    llm_asker(free, constrained=False)(query, query.atoms[0], query.atoms[1])
    assert free.calls[0]["constraint"] is None


def test_explain_analyze_says_how_the_question_was_parsed_and_counts_forced_tokens():
    usage = Usage(
        prompt_tokens=300, cached_prompt_tokens=250, generated_tokens=20, forced_tokens=15, wall_ms=900.0, calls=1
    )
    parse_step = Step.llm(
        "parse",
        usage,
        GOOD,
        note="constrained by the generation grammar, 1 attempt, 0 repairs (repairs for semantic errors only)",
    )
    result = RunResult(question=QUESTION, answer="x", strategy="tree", trace=(parse_step,))
    (line,) = parsing_lines(result)
    assert line == (
        "Parsing: constrained by the generation grammar, 1 attempt, 0 repairs (repairs for semantic errors only); "
        "900 ms, tokens 50/250/20+15 forced"
    )
    assert result.stats()["forced_tokens"] == 15 and node_actuals([parse_step])["forced_tokens"] == 15
    assert parse_step.to_dict()["forced_tokens"] == 15


def test_the_response_cache_keys_constrained_replies_by_their_constraint(tmp_path):
    llm = CachedLLM(Grammared("yes"), tmp_path)
    messages = [ChatMessage("user", "Sensible?")]
    yes_no, other = choice(["yes", "no"]), choice(["yes", "no", "maybe"])
    first = constrained_chat(llm, messages, yes_no)
    again = constrained_chat(llm, messages, yes_no)
    constrained_chat(llm, messages, other)
    constrained_chat(llm, messages, None)
    assert can_constrain(llm) and enforced(first) and not enforced(again)  # a stored reply is validated like any other
    assert [c["constraint"] for c in llm.inner.calls] == [yes_no, other, None]


def test_a_server_gets_the_grammar_as_gbnf_only_when_told_its_field():
    from test_openai_backend import CHAT_OK, Stub, backend

    with Stub([(200, {}, CHAT_OK)]) as stub:
        plain = backend(stub.url)
        told = backend(stub.url, grammar_field="grammar")
        assert not can_constrain(plain) and can_constrain(told)
        constrained_chat(plain, [ChatMessage("user", "Hi")], choice(["yes", "no"]))
        reply = constrained_chat(told, [ChatMessage("user", "Hi")], ir_constraint(QUESTION))
    assert "grammar" not in stub.requests[0][2]
    assert stub.requests[1][2]["grammar"] == to_gbnf(whole_grammar(question=QUESTION))
    assert isinstance(reply, ConstrainedCompletion) and not enforced(reply)


class _Bytes:
    eos_token_id = 256
    bos_token_id = None
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
    special_token_ids = [256]

    def __call__(self, text):
        return list(text if isinstance(text, bytes) else text.encode("utf-8"))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data(), st.sampled_from([None, QUESTION]), st.integers(1, 3))
def test_the_gbnf_form_accepts_what_the_lark_grammar_generates(data, question, max_atoms):
    """GBNF read back by llguidance's own converter accepts strings generated from the Lark original."""
    llguidance = pytest.importorskip("llguidance")
    from llguidance.gbnf_to_lark import gbnf_to_lark

    grammar = whole_grammar(max_atoms, question)
    text = data.draw(from_lark(lark.Lark(grammar, start="start")))
    tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Bytes()))
    matcher = llguidance.LLMatcher(
        tokenizer, llguidance.LLMatcher.grammar_from_lark(gbnf_to_lark(to_gbnf(grammar))), log_level=0
    )
    raw = text.encode("utf-8")
    assert matcher.try_consume_tokens(list(raw)) == len(raw) and matcher.is_accepting(), json.dumps(text)
