"""Confidence on every generation (issue 50, part 1): the figures read from hand-made logits, the
scripted double's confidence reaching the trace, the result, EXPLAIN ANALYZE, ``nlqo ask --json``
and the records, a response cache replaying it, and the real llama.cpp runtime's figures."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from realmodels import load_or_skip

from nlqo import Engine, EngineConfig
from nlqo.cli import main
from nlqo.eval.datasets import Question
from nlqo.eval.records import make_record
from nlqo.execution.operators import OPERATORS
from nlqo.explain.formats import PhysicalView
from nlqo.runtime.llm.base import ChatMessage
from nlqo.runtime.llm.cache import CachedLLM, is_cache_hit
from nlqo.runtime.llm.confidence import Confidence, Tally, piece_offsets, read
from nlqo.runtime.llm.scripted import ScriptedLLM, word_confidence
from nlqo.testing import PASSAGES, HashEmbedder, KeywordRetriever

QUESTION = "In which city was the director of Jaws born?"
IR = 'q1 = (?d, "directed", "Jaws")\nq2 = (?d, "born in", ?city)\nanswer ?city'


def logits_of(probabilities) -> np.ndarray:
    """Logits whose softmax is ``probabilities`` (shifted, as a model's are)."""
    return (np.log(np.asarray(probabilities, dtype=np.float64)) + 7.0).astype(np.float32)


def entropy(probabilities) -> float:
    return -sum(p * math.log(p) for p in probabilities if p > 0)


# --- the figures --------------------------------------------------------------------------------

STEPS = ([0.5, 0.25, 0.125, 0.125], [0.1, 0.7, 0.1, 0.1], [0.25, 0.25, 0.25, 0.25])


def test_each_tokens_logprob_entropy_and_margin_come_from_its_logits():
    tally = Tally()
    chosen = [tally.choose(logits_of(p), position=i) for i, p in enumerate(STEPS)]
    assert chosen == [0, 1, 0]  # greedy, lowest id on a tie
    expected_lp = [math.log(0.5), math.log(0.7), math.log(0.25)]
    expected_h = [entropy(p) for p in STEPS]
    assert tally.logprobs == pytest.approx(expected_lp, abs=1e-5)
    assert tally.entropies == pytest.approx(expected_h, abs=1e-5)
    assert tally.margins == pytest.approx([math.log(2), math.log(7), 0.0], abs=1e-5)
    c = tally.confidence()
    assert c.tokens == 3 and c.basis == "logits"
    assert c.mean_logprob == pytest.approx(sum(expected_lp) / 3, abs=1e-5)
    assert c.min_logprob == pytest.approx(math.log(0.25), abs=1e-5)
    assert c.mean_entropy == pytest.approx(sum(expected_h) / 3, abs=1e-5)
    assert c.max_entropy == pytest.approx(math.log(4), abs=1e-5)
    assert c.first_margin == pytest.approx(math.log(2), abs=1e-5)
    assert c.probability == pytest.approx(math.exp(c.mean_logprob))


def test_a_large_vocabulary_is_read_exactly_and_in_place():
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal(49152) * 4).astype(np.float32)
    before = logits.copy()
    r = read(logits)
    exact = logits.astype(np.float64)
    log_total = np.log(np.exp(exact - exact.max()).sum()) + exact.max()
    p = np.exp(exact - log_total)
    assert r.log_total == pytest.approx(log_total, rel=1e-6)
    assert r.entropy == pytest.approx(-(p * np.log(p)).sum(), rel=1e-4)
    assert r.top == int(np.argmax(exact)) and r.runner_up == np.sort(exact)[-2]
    assert np.array_equal(logits, before)  # the logits are not written


def test_under_a_grammar_the_figures_are_of_the_unconstrained_distribution():
    probabilities = [0.6, 0.3, 0.1]

    def grammar(logits: np.ndarray) -> int:  # forbids token 0, masking in place as Matcher.choose does
        logits[0] = -np.inf
        return int(np.argmax(logits))

    tally = Tally()
    assert tally.choose(logits_of(probabilities), 0, grammar) == 1
    assert tally.logprobs == pytest.approx([math.log(0.3)], abs=1e-5)  # not renormalised to log(0.75)
    assert tally.entropies == pytest.approx([entropy(probabilities)], abs=1e-5)
    assert tally.margins == pytest.approx([math.log(0.3 / 0.6)], abs=1e-5)  # below the model's own choice


def test_an_answer_span_has_the_figures_of_its_own_tokens():
    pieces = [b"The", b" answer", b":", b" Caf", b"\xc3\xa9", b" Rouge", b"."]
    tally = Tally()
    for i, p in enumerate([[0.9, 0.1]] * 3 + [[0.6, 0.4], [0.5, 0.5], [0.8, 0.2], [0.9, 0.1]]):
        tally.choose(logits_of(p), i)
    text = b"".join(pieces).decode()
    c = tally.confidence(piece_offsets(pieces)).with_answer(text, "Café Rouge")
    assert c.answer.tokens == 3
    assert c.answer.mean_logprob == pytest.approx((math.log(0.6) + math.log(0.5) + math.log(0.8)) / 3, abs=1e-5)
    assert c.answer.first_margin == pytest.approx(math.log(0.6 / 0.4), abs=1e-5)
    assert c.tokens == 7 and c.answer.answer is None
    assert c.with_answer(text, "Paris") is c  # not in the reply: no answer part


# --- through the engine ---------------------------------------------------------------------------


def scripted() -> ScriptedLLM:
    """Writes the IR, answers 'Cincinnati' at log-probability -0.7, every other word at -0.1."""
    return ScriptedLLM(
        [("nlqo IR", IR), ("", "Cincinnati, Ohio.")],
        confidence=lambda text: word_confidence(text, words={"Cincinnati,": -0.7}, entropy=0.25, margin=1.5),
    )


def engine(llm) -> Engine:
    config = EngineConfig(cost_model="structural", strategy="tree", measure_costs=False)
    return Engine.from_config(config, llm=llm, retriever=KeywordRetriever(PASSAGES), embedder=HashEmbedder())


def test_the_scripted_confidence_reaches_every_llm_step_and_the_result():
    result = engine(scripted()).ask(QUESTION)
    assert result.answer == "Cincinnati, Ohio"
    answering = [s for s in result.llm_steps if s.node not in ("parse", "relations")]
    assert [s.node for s in answering] == ["q1", "q2", "$root"]
    for step in answering:
        assert step.confidence is not None and step.confidence.tokens == len(step.text.split())
        assert step.to_dict()["confidence"]["mean_entropy"] == 0.25
    c = result.confidence
    assert (c.tokens, c.min_logprob) == (2, -0.7)
    assert (c.mean_logprob, c.first_margin) == (pytest.approx(-0.4), pytest.approx(1.5))
    assert (c.answer.tokens, c.answer.mean_logprob) == (2, pytest.approx(-0.4))  # 'Cincinnati, Ohio' both words
    assert result.to_dict()["confidence"]["answer"]["min_logprob"] == -0.7


def test_without_a_confidence_from_the_backend_everything_says_none():
    result = engine(ScriptedLLM([("nlqo IR", IR), ("", "Cincinnati")])).ask(QUESTION)
    assert result.answer == "Cincinnati" and result.confidence is None
    assert all(s.to_dict()["confidence"] is None for s in result.llm_steps)
    assert result.to_dict()["confidence"] is None


def test_explain_analyze_shows_each_nodes_confidence_in_json_text_and_html():
    from nlqo.explain import formats

    e = engine(scripted())
    planned = e.plan(QUESTION)
    result = e.execute(QUESTION, planned)
    view = PhysicalView.of(e.optimizer, planned.physical, result)
    data = view.to_dict()
    nodes = {n["id"]: n for n in data["nodes"]}
    assert nodes["q1"]["actual"]["confidence"]["mean_logprob"] == pytest.approx(-0.4)
    assert nodes["$root"]["actual"]["confidence"]["min_logprob"] == -0.7
    assert data["analyze"]["confidence"]["answer"]["tokens"] == 2
    text = formats.render(view, "text")
    assert "logprob=-0.40/-0.70 entropy=0.25/0.25 margin=1.50" in text
    assert "Confidence: logprob mean -0.40 min -0.70" in text and "of the answer's tokens" in text
    page = formats.render(view, "html")
    assert '"confidence": {"tokens": 2' in page and "function confText" in page


def test_ask_json_returns_the_answers_confidence(monkeypatch, capsys):
    import nlqo.main.builder as builder

    monkeypatch.setattr(builder, "load_llm", lambda name, **options: scripted())
    monkeypatch.setattr(
        builder, "open_retrieval", lambda config, embedder=None: (KeywordRetriever(PASSAGES), HashEmbedder())
    )
    assert main(["ask", QUESTION, "--index", "unused", "--strategy", "tree", "--json", "--quiet"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["answer"] == "Cincinnati, Ohio"
    figures = {"mean_logprob": -0.4, "min_logprob": -0.7, "mean_entropy": 0.25, "max_entropy": 0.25}
    figures["first_margin"] = 1.5
    reply, answer = data["confidence"], data["confidence"]["answer"]
    assert (reply["tokens"], reply["basis"], answer["tokens"], answer["answer"]) == (2, "logits", 2, None)
    assert {k: reply[k] for k in figures} == pytest.approx(figures)
    assert {k: answer[k] for k in figures} == pytest.approx(figures)
    assert all(s["confidence"] is not None for s in data["trace"] if s["kind"] == "llm" and s["node"] != "parse")


def test_a_benchmark_record_holds_the_answers_confidence():
    result = engine(scripted()).ask(QUESTION)
    record = make_record(Question("q", QUESTION, ("Cincinnati",)), 0, "tree", result, 1.0)
    assert record["confidence"]["answer"]["min_logprob"] == -0.7
    assert record["plan"]["nodes"][0]["actual"]["confidence"]["tokens"] == 2
    assert json.loads(json.dumps(record))["confidence"] == record["confidence"]
    assert make_record(Question("q", QUESTION, ("x",)), 0, "tree", None, 1.0, error="boom")["confidence"] is None


def test_a_response_cache_replays_the_confidence_with_its_tokens(tmp_path):
    llm = CachedLLM(scripted(), tmp_path)
    first = llm.chat([ChatMessage("user", "Where?")])
    again = llm.chat([ChatMessage("user", "Where?")])
    assert is_cache_hit(again) and again.confidence == first.confidence
    assert again.confidence.with_answer(again.text, "Ohio").answer.mean_logprob == pytest.approx(-0.1)


def test_a_confidence_round_trips_through_json():
    c = word_confidence("Rush.", words={"Rush.": -0.3}).with_answer("Rush.", "Rush")
    assert Confidence.from_dict(json.loads(json.dumps(c.to_dict()))) == c


# --- the real runtime ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llm():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (sh scripts/install-llama-cpp.sh)")
    from nlqo.runtime.models import load_local

    return load_or_skip(lambda: load_local("smollm2-135m", runtime="llama-cpp", threads=2, progress=False))


@pytest.mark.real_model
def test_a_real_answers_confidence_is_finite_in_range_and_greedy(llm):
    messages = [
        ChatMessage("system", "Answer with one word."),
        ChatMessage("user", "What is the capital of France?"),
    ]
    out = llm.fork().chat(messages, max_tokens=12)
    c = out.confidence
    assert c is not None and c.basis == "logits"
    assert c.tokens == out.usage.generated_tokens >= 1  # every chosen token, the end token included
    figures = [c.mean_logprob, c.min_logprob, c.mean_entropy, c.max_entropy, c.first_margin]
    assert all(math.isfinite(x) for x in figures)
    assert c.min_logprob <= c.mean_logprob <= 0.0
    assert 0.0 <= c.mean_entropy <= c.max_entropy <= math.log(llm.runtime.n_vocab)
    # greedy decoding: each chosen token is the argmax, so its log-probability is the largest
    assert c.first_margin >= 0.0 and min(c.detail.margins) >= 0.0
    assert len(c.detail) == c.tokens and c.detail.ends[-1] >= len(out.text)
    word = out.text.strip().split()[0].strip(".")
    part = c.with_answer(out.text, word).answer
    assert part is not None and 1 <= part.tokens < c.tokens and part.min_logprob >= c.min_logprob


@pytest.mark.real_model
def test_a_constrained_real_reply_has_the_unconstrained_figures(llm):
    pytest.importorskip("llguidance")
    from nlqo.runtime.llm.constrain import choice

    messages = [ChatMessage("user", "Is Paris in France? Answer yes or no.")]
    out = llm.fork().chat(messages, max_tokens=4, constraint=choice(["Yes", "No"]))
    c = out.confidence
    assert out.text in ("Yes", "No") and c is not None and c.tokens == out.usage.generated_tokens
    assert all(math.isfinite(x) for x in (c.mean_logprob, c.mean_entropy, c.first_margin))
    assert c.mean_logprob <= 0.0 and 0.0 <= c.mean_entropy <= math.log(llm.runtime.n_vocab)


@pytest.mark.real_model
def test_the_transformers_runtime_reads_the_same_confidence(llm):
    """transformers (float32, the reference) and llama.cpp (the same weights quantized) choose the
    same tokens with nearly the same figures, the answer's place in the text included."""
    from nlqo.runtime.models import load_transformers

    reference = load_or_skip(lambda: load_transformers("smollm2-135m", progress=False))
    messages = [ChatMessage("system", "Answer in one sentence."), ChatMessage("user", "What is the capital of France?")]
    ours, theirs = llm.fork().chat(messages, max_tokens=16), reference.chat(messages, max_tokens=16)
    assert ours.text == theirs.text and ours.confidence.tokens == theirs.confidence.tokens
    # quantization moves single tokens' figures (measured: extremes by up to 0.3, the first margin by 0.7)
    # and the means little (0.05)
    for figure, tolerance in (("mean_logprob", 0.1), ("mean_entropy", 0.1), ("min_logprob", 0.5), ("max_entropy", 0.5)):
        assert getattr(ours.confidence, figure) == pytest.approx(getattr(theirs.confidence, figure), abs=tolerance)
    word = ours.text.rstrip(".").split()[-1]
    a, b = (c.confidence.with_answer(c.text, word).answer for c in (ours, theirs))
    assert a is not None and b is not None and a.tokens == b.tokens
    assert min(theirs.confidence.detail.margins) >= 0.0  # greedy there too


@pytest.mark.parametrize("strategy", [str(o) for o in OPERATORS])
def test_every_operator_records_each_generations_confidence(strategy):
    """Every call site of an LLM step passes its completion's confidence on (linear's session, the
    tree's nodes, the baselines' calls that retrieve and iterate make)."""
    result = engine(scripted()).ask(QUESTION, strategy=strategy)
    answering = [s for s in result.llm_steps if s.node not in ("parse", "relations")]
    assert answering and all(s.confidence is not None for s in answering)
    assert result.confidence is not None and result.confidence.answer.min_logprob == -0.7


def test_an_answer_asked_again_has_the_confidence_of_that_generation():
    from nlqo.execution.fallback import answer_or_fallback
    from nlqo.execution.trace import PassageRef, RunResult, Step
    from nlqo.execution.choice import held_to_options

    passages = (PassageRef("d1", "Jaws", 1.0, text="Jaws is a 1975 film. Alien is a 1979 film."),)
    retrieval = Step(node="$root", kind="retrieve", text="q", passages=passages)
    llm = ScriptedLLM([("", "Jaws.")], confidence=lambda text: word_confidence(text, words={"Jaws.": -0.3}))
    empty = RunResult("Which film is older?", "", "tree", trace=(retrieval,))
    assert answer_or_fallback(empty, llm).confidence.answer.mean_logprob == -0.3
    year = RunResult("Which film came out first, Jaws or Alien?", "1975", "tree", trace=(retrieval,))
    held = held_to_options(year, llm)
    assert held.answer == "Jaws" and held.confidence.answer.mean_logprob == -0.3
    assert [s.node for s in held.trace if s.confidence is not None] == ["choice"]
