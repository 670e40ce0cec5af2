"""Constrained decoding on the real SmolLM2-135M, on both local runtimes (llama.cpp and transformers).

The model is far too weak to decompose questions well; that is the point: whatever it writes under
the IR's generation grammar must parse. Forced tokens must be appended, never chosen: a spy on
``Matcher.choose`` (the only place a constrained token is chosen) counts the sampled positions.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from realmodels import load_or_skip

from nlqo.ir import Atom, Const, Query, Var
from nlqo.ir.grammar import ir_constraint
from nlqo.runtime.llm.base import ChatMessage
from nlqo.runtime.llm.constrain import ConstrainedCompletion, Matcher, choice, enforced, literal
from nlqo.parser.parse import parse_question
from nlqo.runtime.prompts import planning
from nlqo.optimizer.relations import KINDS, llm_asker
from nlqo.ir.syntax import parse

pytestmark = pytest.mark.real_model

QUESTIONS = (
    "In which city was the director of the film Jaws born?",
    "Which film came out first, Jaws or Alien?",
    "Who is the spouse of the Green performer?",
)


@pytest.fixture(scope="module", params=["llama-cpp", "transformers"])
def llm(request):
    if request.param == "llama-cpp":
        pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (sh scripts/install-llama-cpp.sh)")
    from nlqo.runtime.models import load_local

    return load_or_skip(lambda: load_local("smollm2-135m", runtime=request.param, threads=2, progress=False))


@pytest.fixture
def choices(monkeypatch):
    """Counts the positions where a constrained reply's token was chosen from the logits."""
    seen = []
    original = Matcher.choose

    def spy(self, logits):
        token = original(self, logits)
        seen.append(token)
        return token

    monkeypatch.setattr(Matcher, "choose", spy)
    return seen


def test_every_constrained_reply_is_valid_ir(llm, choices):
    for question in QUESTIONS:
        messages = planning.PARSE.messages(question=question)
        reply = llm.chat(messages, max_tokens=3000, constraint=ir_constraint(question, 4))
        assert isinstance(reply, ConstrainedCompletion) and enforced(reply) and reply.finish_reason == "stop"
        query = parse(reply.text)  # as written: no clean-up
        assert 1 <= len(query.atoms) <= 4 and query.answer
        usage = reply.usage
        assert usage.forced_tokens >= 3, "the scaffold (q1 = ...) is forced"
        assert reply.mask_ms > 0 and reply.decode_ms > 0


def test_forced_tokens_are_counted_as_forced_and_never_chosen(llm, choices):
    question = QUESTIONS[0]
    ids = llm.encode(llm.format_chat(planning.PARSE.messages(question=question)))
    reply, tokens = llm.generate_ids(ids, max_tokens=3000, constraint=ir_constraint(question, 4))
    usage = reply.usage
    assert len(choices) == usage.generated_tokens, "every generated token was chosen from masked logits"
    assert usage.generated_tokens + usage.forced_tokens == len(tokens)
    assert llm.decode(tokens) in (reply.text, reply.text + "<|im_end|>")  # with the end token the model chose, if any
    assert usage.forced_tokens > 0 and usage.prompt_tokens == len(ids)


def test_the_parser_gets_valid_ir_on_the_first_attempt(llm):
    for question in QUESTIONS[:2]:
        result = parse_question(question, llm)
        assert result.constrained and result.attempts == 1 and result.repairs == 0
        assert result.usage.forced_tokens > 0 and result.mask_ms < result.decode_ms


def test_a_grammar_allowing_one_string_produces_it_without_sampling(llm, choices):
    text = 'q1 = (?director, "directed", "Jaws")\nanswer ?director'
    reply = llm.chat([ChatMessage("user", "Say anything.")], max_tokens=200, constraint=literal(text))
    assert reply.text == text and reply.finish_reason == "stop"
    assert reply.usage.generated_tokens == 0 and reply.usage.forced_tokens > 0 and choices == []
    # In a session the forced tokens become context like any other: the next step continues
    # from them exactly as a plain run on the same token ids does.
    session = llm.session(llm.format_chat([ChatMessage("user", "Write a triple.")]))
    forced = session.generate(max_tokens=200, constraint=literal(text))
    assert forced.text == text and session.text.endswith(text)
    context = session.token_ids
    nxt = session.generate(max_tokens=6)
    plain, _ = llm.generate_ids(context, max_tokens=6)
    assert nxt.text == plain.text


def test_where_the_grammar_allows_the_models_choice_the_reply_is_unchanged(llm):
    messages = [ChatMessage("user", "What is the capital of France? Answer in one word.")]
    free = llm.chat(messages, max_tokens=8)
    bound = llm.chat(messages, max_tokens=8, constraint=choice([free.text, free.text + " indeed", "London"]))
    assert bound.text == free.text


def test_relation_labels_come_only_from_the_allowed_set(llm):
    ask = llm_asker(llm, retries=0)
    query = Query(
        atoms=(
            Atom("q1", Var("d"), Const("directed"), Const("Jaws")),
            Atom("q2", Var("d"), Const("born in"), Var("city")),
            Atom("q3", Const("Jaws"), Const("released in"), Var("year")),
        ),
        answer=Var("city"),
        question=QUESTIONS[0],
    )
    for a, b in (("q1", "q2"), ("q2", "q1"), ("q1", "q3"), ("q3", "q2")):
        kind, usage = ask(query, query.atom(a), query.atom(b))
        assert kind in KINDS and usage.calls == 1
    odd = llm.chat([ChatMessage("user", "Write a poem about the sea.")], max_tokens=4, constraint=choice(KINDS))
    assert odd.text in KINDS


@pytest.mark.parametrize("llm", ["llama-cpp"], indirect=True)  # transformers runs one request at a time
def test_constrained_requests_decoded_together_equal_one_at_a_time(llm):
    """llama.cpp batches concurrent requests, forced runs included; outputs must not depend on it."""
    assert hasattr(llm, "runtime")
    prompts = [planning.PARSE.messages(question=q) for q in QUESTIONS]
    sequential = [
        llm.fork().chat(m, max_tokens=3000, constraint=ir_constraint(q, 4)).text for q, m in zip(QUESTIONS, prompts)
    ]
    start = threading.Barrier(len(prompts))

    def run(pair):
        question, messages = pair
        start.wait()
        return llm.fork().chat(messages, max_tokens=3000, constraint=ir_constraint(question, 4)).text

    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        batched = list(pool.map(run, zip(QUESTIONS, prompts)))
    assert batched == sequential
