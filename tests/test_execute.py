"""Execution with a scripted LLM: scheduler order and concurrency, the linear loop, lowering."""

from __future__ import annotations

import re
import threading

import attrs
import numpy as np
import pytest

from fakes import PASSAGES, HashEmbedder, KeywordRetriever
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nlqo.config import EngineConfig
from nlqo.optimizer.cost import load_cost_model
from nlqo.main.engine import Engine
from nlqo.execution.linear import LinearExecutor
from nlqo.execution.operators.iterate import estimate_rounds
from nlqo.execution.operators.template import estimate_linear
from nlqo.execution.operators.template import executor as template_executor
from nlqo.execution.operators.tree import estimate_tree
from nlqo.execution.physical import BackendProfile, Estimate
from nlqo.planner.lower import _PROBE_TEXT, lower, shape
from nlqo.execution.terminator import Terminator, hops_at, max_similarity
from nlqo.execution.tree import TreeExecutor
from nlqo.runtime.llm import ScriptedLLM
from nlqo.optimizer.optimizer import Optimizer
from nlqo.optimizer.plan import ROOT
from nlqo.runtime.prompts.execution import LINEAR, LINEAR_QUESTION_FIRST
from nlqo.ir.syntax import parse
from nlqo.testing.strategies import plan as plan_with
from nlqo.testing.strategies import queries

OLDER = parse(
    'question "Who was born first, Ada Lovelace or Charles Babbage?"\n'
    'q1 = ("Ada Lovelace", "born on", ?d1)\nq2 = ("Charles Babbage", "born on", ?d2)\n'
    'q3 = (?first, "born before", ?d1)\nq4 = (?first, "born before", ?d2)\n'
    "relation q1 sibling q2\nrelation q3 sibling q4\nanswer ?first"
)
CHAIN = parse(
    'question "In which city was the director of Jaws born?"\n'
    'q1 = (?d, "directed", "Jaws")\nq2 = (?d, "born in", ?city)\nanswer ?city'
)


def structural_plan(query):
    return Optimizer(cost_model=load_cost_model("structural")).optimize(query)


class NodeLLM:
    """Replies 'Q(atom)' to rewrites and 'A(question)' to answers; records the order of calls."""

    name = "node-llm"

    def __init__(self, barrier: threading.Barrier | None = None):
        self.events: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.barrier = barrier

    def chat(self, messages, *, stop=(), max_tokens=32):
        from nlqo.runtime.llm.base import Completion, Usage

        text = messages[-1].content
        if "Fact to look up:" in text:
            atom = text.split("Fact to look up: ")[1].split("\n")[0]
            with self.lock:
                self.events.append(("start", atom))
            if self.barrier is not None and "born on" in atom:
                self.barrier.wait(timeout=10)
            return Completion(f"Q({atom})", Usage(prompt_tokens=10, generated_tokens=3, calls=1))
        question = re.findall(r"Question: (.*)\nAnswer:", text)[-1]
        with self.lock:
            self.events.append(("done", question))
        return Completion(f"A({question})", Usage(prompt_tokens=20, generated_tokens=2, calls=1))


def test_tree_runs_children_before_parents_and_feeds_their_answers():
    plan = structural_plan(OLDER)
    llm = NodeLLM()
    result = TreeExecutor(llm, KeywordRetriever(PASSAGES), k=2, queries="rewrite").run(plan)
    done = [q for kind, q in llm.events if kind == "done"]
    starts = [a for kind, a in llm.events if kind == "start"]
    for child, parent in plan.tree.parent:
        if parent == ROOT:
            continue
        child_q = f"Q({plan.query.atom(child).text()})"
        parent_start = llm.events.index(("start", plan.query.atom(parent).text()))
        assert llm.events.index(("done", child_q)) < parent_start
    assert len(starts) == 4 and len(done) == 5
    assert result.answer == "A(Who was born first, Ada Lovelace or Charles Babbage?)"
    assert result.hops == 4
    root_answer = [s for s in result.trace if s.node == ROOT and s.kind == "retrieve"][0]
    assert "A(Q(Ada Lovelace born on ?d1))" not in root_answer.text  # the root retrieves with child answers...
    assert "A(Q(?first born before ?d1)" in root_answer.text  # ...of its own children


def test_tree_runs_independent_nodes_concurrently():
    plan = structural_plan(OLDER)
    # the two leaves meet at a barrier: with one worker this would time out
    llm = NodeLLM(barrier=threading.Barrier(2))
    TreeExecutor(llm, KeywordRetriever(PASSAGES), workers=2, queries="rewrite").run(plan)
    assert len([e for e in llm.events if e[0] == "start"]) == 4


def test_tree_one_at_a_time_when_parallel_is_off():
    plan = structural_plan(OLDER)
    llm = NodeLLM(barrier=threading.Barrier(2))
    with pytest.raises(threading.BrokenBarrierError):
        TreeExecutor(llm, KeywordRetriever(PASSAGES), parallel=False, queries="rewrite").run(plan)


class CopyingLLM(NodeLLM):
    """Rewrites every atom into the main question, as small models often do."""

    def chat(self, messages, *, stop=(), max_tokens=32):
        from nlqo.runtime.llm.base import Completion, Usage

        text = messages[-1].content
        if "Fact to look up:" in text:
            main = text.split("Main question: ")[1].split("\n")[0]
            return Completion(main.lower() + " ", Usage(prompt_tokens=10, generated_tokens=9, calls=1))
        return super().chat(messages, stop=stop, max_tokens=max_tokens)


@pytest.mark.parametrize("guard", [False, True])
def test_guarded_rewrites_replace_a_copy_of_the_main_question_by_the_atom(guard):
    plan = structural_plan(CHAIN)
    retriever = KeywordRetriever(PASSAGES)
    result = TreeExecutor(CopyingLLM(), retriever, guard_rewrites=guard, queries="rewrite").run(plan)
    leaf, inner, root = retriever.queries
    if not guard:
        assert leaf == inner == "in which city was the director of jaws born?"
        return
    assert leaf == "?d directed Jaws"
    assert inner == "?d born in ?city A(?d directed Jaws)"  # the atom and its child's answer
    assert root.startswith("In which city was the director of Jaws born?")
    nodes = [s.text for s in result.trace if s.kind == "retrieve"]
    assert nodes == retriever.queries


def test_substituted_node_questions_carry_child_answers_and_skip_the_rewrite():
    plan = structural_plan(CHAIN)
    retriever = KeywordRetriever(PASSAGES)
    llm = NodeLLM()
    result = TreeExecutor(llm, retriever, queries="substitute").run(plan)
    assert [kind for kind, _ in llm.events] == ["done", "done", "done"]  # no rewrite call at all
    leaf, inner, root = retriever.queries
    assert leaf == "d directed Jaws"
    child = "A(What is ?d in: ?d directed Jaws?)"
    assert inner == f"{child} born in city"  # the child's answer in place of ?d
    assert [q for _, q in llm.events][1] == f"What is ?city in: {child} born in ?city?"
    notes = [s.note for s in result.trace if s.kind == "retrieve"]
    assert notes[:2] == [
        "question by substitution: What is ?d in: ?d directed Jaws?",
        f"question by substitution: What is ?city in: {child} born in ?city?",
    ]
    assert notes[2] == "" and root.startswith("In which city was the director of Jaws born?")
    assert len(result.llm_steps) == 3


class EmptyChildLLM(NodeLLM):
    """Answers nothing to the leaf: its parent cannot be filled in and falls back to the rewrite."""

    def chat(self, messages, *, stop=(), max_tokens=32):
        from nlqo.runtime.llm.base import Completion, Usage

        text = messages[-1].content
        if "Question: What is ?d in:" in text:
            return Completion("", Usage(prompt_tokens=10, generated_tokens=1, calls=1))
        return super().chat(messages, stop=stop, max_tokens=max_tokens)


def test_a_node_whose_child_gave_no_answer_is_rewritten_by_the_llm():
    plan = structural_plan(CHAIN)
    retriever = KeywordRetriever(PASSAGES)
    llm = EmptyChildLLM()
    TreeExecutor(llm, retriever, queries="substitute").run(plan)
    assert ("start", "?d born in ?city") in llm.events
    assert retriever.queries[1] == "Q(?d born in ?city)"


def test_tree_queries_is_an_engine_option_and_refuses_unknown_values():
    assert EngineConfig(tree_queries="substitute").with_options(tree_queries="rewrite").tree_queries == "rewrite"
    with pytest.raises(ValueError, match="tree_queries"):
        EngineConfig(tree_queries="guess")


def test_terminator_math():
    assert max_similarity(np.array([1.0, 0.0]), np.array([[0.6, 0.8], [0.0, 1.0]])) == pytest.approx(0.6)
    t = Terminator(HashEmbedder(), tau=0.85)
    t.start("who directed jaws")
    assert t.score("who directed jaws") == pytest.approx(1.0)
    assert t.score("where was steven spielberg born") < 0.5
    assert t.should_stop(0.85) and not t.should_stop(0.84)


def linear_llm():
    """Proposes two sub-questions, then repeats the main question."""

    def reply(prompt: str) -> str:
        if prompt.rstrip().endswith("Question:"):
            n = prompt.count("Based on the contexts,") - LINEAR.prefix.count(
                "Based on the contexts,"
            )  # the demonstrations' own
            return (
                [" Who directed the film Jaws?", " Where was Steven Spielberg born?"][n]
                if n < 2
                else " In which city was the director of Jaws born?"
            )
        if prompt.rstrip().endswith("Based on the contexts,"):
            return (
                " Steven Spielberg directed Jaws."
                if "directed the film Jaws?"
                in prompt.split("Main Question: In which city was the director of Jaws born?\n")[-1][-400:]
                else " Spielberg was born in Cincinnati."
            )
        return " Cincinnati.\nextra"

    return ScriptedLLM([("", reply)])


def test_linear_loop_stops_on_the_terminator_and_answers():
    llm = linear_llm()
    retriever = KeywordRetriever(PASSAGES)
    result = LinearExecutor(llm, retriever, HashEmbedder(), k=2, kv_reuse=False).run(
        "In which city was the director of Jaws born?"
    )
    assert result.answer == "Cincinnati"
    assert result.hops == 2 and result.stop_reason == "terminator"
    assert retriever.queries == ["Who directed the film Jaws?", "Where was Steven Spielberg born?"]
    stop = [s for s in result.trace if s.kind == "stop"][0]
    assert stop.terminator_score >= 0.85
    assert all(
        s.terminator_score is not None and s.terminator_score < 0.85 for s in result.trace if s.kind == "retrieve"
    )
    # the scaffold is never generated: every generation is a sub-question, an evidence sentence or the answer
    generated = [s.text for s in result.trace if s.kind == "llm"]
    assert len(generated) == 2 * 2 + 2
    assert not any("To answer the Main Question" in g for g in generated)
    assert {p.id for p in result.supporting} <= {"p1", "p2", "p5"}


def test_question_first_retrieves_with_the_question_then_proposes_and_stops_on_a_repeat():
    llm = ScriptedLLM(
        [
            ("Question:$", [" Where was Steven Spielberg born?", " In which city was the director of Jaws born?"]),
            ("Based on the contexts,$", [" Steven Spielberg directed Jaws.", " Spielberg was born in Cincinnati."]),
            ("is:$", " Cincinnati. Cincinnati is a city in Ohio."),
        ]
    )
    retriever = KeywordRetriever(PASSAGES)
    question = "In which city was the director of Jaws born?"
    result = LinearExecutor(llm, retriever, HashEmbedder(), k=2, kv_reuse=False, template=LINEAR_QUESTION_FIRST).run(
        question
    )
    assert retriever.queries == [question, "Where was Steven Spielberg born?"]
    assert result.answer == "Cincinnati" and result.hops == 2 and result.stop_reason == "terminator"
    retrievals = [s for s in result.trace if s.kind == "retrieve"]
    assert [s.node for s in retrievals] == ["hop-1", "hop-2"] and retrievals[0].terminator_score is None
    # the question's contexts and fact come before the first proposal, which already sees that fact
    first_proposal = llm.calls[1]
    asked = first_proposal.split(f"Main Question: {question}\n")[-1]
    assert (
        asked.startswith("Contexts:\n[1] ") and "using the following facts:\n- Steven Spielberg directed Jaws." in asked
    )
    # a first proposal that repeats the question stops at once: one retrieval, the question's own
    repeat = ScriptedLLM(
        [
            ("Question:$", " " + question),
            ("Based on the contexts,$", " Spielberg directed Jaws."),
            ("is:$", " Cincinnati"),
        ]
    )
    retriever = KeywordRetriever(PASSAGES)
    once = LinearExecutor(repeat, retriever, HashEmbedder(), k=2, kv_reuse=False, template=LINEAR_QUESTION_FIRST).run(
        question
    )
    assert retriever.queries == [question] and once.hops == 1 and once.stop_reason == "terminator"


def test_question_first_demonstrations_read_the_question_contexts_before_any_proposal():
    for demo in LINEAR_QUESTION_FIRST.prefix.split("Main Question: ")[1:]:
        first, _, rest = demo.partition("\n")
        assert rest.startswith("Contexts:\n[1] ") and "I propose" in rest
    config = EngineConfig(cost_model="structural", measure_costs=False, question_first=True)
    engine = Engine.from_config(
        config, llm=ScriptedLLM([("", "x")]), retriever=KeywordRetriever(PASSAGES), embedder=HashEmbedder()
    )
    assert template_executor(engine).template is LINEAR_QUESTION_FIRST
    other = Engine.from_config(
        config.with_options(question_first=False),
        llm=ScriptedLLM([("", "x")]),
        retriever=KeywordRetriever(PASSAGES),
        embedder=HashEmbedder(),
    )
    assert template_executor(other).template is LINEAR
    assert template_executor(other) is template_executor(other)  # made once: it keeps the scaffold's KV state


def test_plan_steps_are_appended_as_the_hops_questions_and_retrieved_with_the_last_fact():
    llm = ScriptedLLM(
        [
            ("Question:$", " In which city was the director of Jaws born?"),
            ("Based on the contexts,$", [" Steven Spielberg directed Jaws.", " Spielberg was born in Cincinnati."]),
            ("is:$", " Cincinnati"),
        ]
    )
    retriever = KeywordRetriever(PASSAGES)
    executor = LinearExecutor(llm, retriever, HashEmbedder(), k=2, kv_reuse=False)
    result = executor.run(
        "In which city was the director of Jaws born?", steps=("?d directed Jaws", "?d born in ?city")
    )
    assert retriever.queries == ["d directed Jaws", "Steven Spielberg directed Jaws. d born in city"]
    assert result.answer == "Cincinnati" and result.hops == 2 and result.stop_reason == "terminator"
    generated = [s.text for s in result.trace if s.kind == "llm"]
    # two evidence sentences, the third hop's (generated) question that the terminator stops, the answer
    assert generated == [
        " Steven Spielberg directed Jaws.",
        " Spielberg was born in Cincinnati.",
        " In which city was the director of Jaws born?",
        " Cincinnati",
    ]
    final_prompt = llm.calls[-1]
    assert (
        "Question: ?d directed Jaws\nContexts:" in final_prompt
        and "Question: ?d born in ?city\nContexts:" in final_prompt
    )


SINGLE = parse('question "Who directed Jaws?"\nq1 = (?d, "directed", "Jaws")\nanswer ?d')


def test_a_single_atom_plan_may_be_answered_by_one_retrieval_when_that_is_cheapest():
    plan = structural_plan(SINGLE)
    for profile in (
        BackendProfile(),
        BackendProfile(concurrency=8, kv_reuse=False, prefill_ms_per_token=0.2, decode_ms_per_token=20),
    ):
        physical = lower(plan, profile, simple="retrieve")
        assert physical.operator == "retrieve" and set(physical.estimates) == {"linear", "tree", "retrieve"}
        assert physical.estimates["retrieve"].llm_calls == 1 and physical.reason.startswith(
            "single plan: retrieve est."
        )
        assert lower(plan, profile, simple="linear").operator != "retrieve"  # only when allowed
    assert (
        lower(structural_plan(CHAIN), BackendProfile(), simple="retrieve").operator == "linear"
    )  # two atoms: not simple


def single_atom_engine(ir: str, **options) -> tuple[Engine, ScriptedLLM]:
    llm = ScriptedLLM([("nlqo IR", ir), ("given documents", "Steven Spielberg"), ("", " x")])
    config = EngineConfig(
        cost_model="structural", strategy="auto", measure_costs=False, repairs=0, policy="structural", **options
    )
    return Engine.from_config(config, llm=llm, retriever=KeywordRetriever(PASSAGES), embedder=HashEmbedder()), llm


def test_auto_answers_a_single_atom_plan_with_one_retrieval_and_explains_it():
    from nlqo.explain import analyze

    engine, llm = single_atom_engine('q1 = (?d, "directed", "Jaws")\nanswer ?d', simple_plans="retrieve")
    result = engine.ask("Who directed Jaws?")
    assert result.answer == "Steven Spielberg" and result.physical.operator == "retrieve"
    assert [s.kind for s in result.trace if s.node != "parse"] == ["retrieve", "llm", "stop"]
    text = analyze.text(result, result.physical)
    assert "Physical plan: Retrieve (standard RAG)" in text and "Retrieve: one retrieval, one answer" in text


def test_auto_answers_an_unparsed_question_with_one_retrieval_unless_told_to_use_the_template():
    engine, _ = single_atom_engine("not IR at all")
    result = engine.ask("Who directed Jaws?")
    assert result.answer == "Steven Spielberg" and result.stop_reason.startswith("parse_failed; ")
    assert not any(s.node.startswith("hop-") for s in result.trace)
    linear, _ = single_atom_engine("not IR at all", simple_plans="linear")
    assert any(s.node.startswith("hop-") for s in linear.ask("Who directed Jaws?").trace)


def test_linear_hop_cap():
    llm = ScriptedLLM([("Question:$", [" q one", " q two", " q three", " q four"]), ("", " x")])
    result = LinearExecutor(llm, KeywordRetriever(PASSAGES), HashEmbedder(), max_hops=3, kv_reuse=False).run("main")
    assert result.hops == 3 and result.stop_reason == "max_hops"


def test_lowering_by_shape_and_backend():
    chain, older = structural_plan(CHAIN), structural_plan(OLDER)
    assert shape(chain) == "chain" and shape(older) == "branching"
    local = BackendProfile(concurrency=1, kv_reuse=True)
    server = BackendProfile(concurrency=8, kv_reuse=False, prefill_ms_per_token=0.2, decode_ms_per_token=20)
    assert lower(chain, local).operator == "linear"
    assert lower(older, server).operator == "tree"
    assert "branching plan" in lower(older, server).reason
    assert lower(older, local, force="tree").operator == "tree"
    assert lower(chain, local).hints == ("?d directed Jaws", "?d born in ?city")


# 2 ms per prompt token, 30 ms per generated token, 7 ms per retrieval; k = 3 passages of 110 tokens
COSTS = BackendProfile(
    prefill_ms_per_token=2.0, decode_ms_per_token=30.0, retrieve_ms=7.0, concurrency=1, kv_reuse=True
)


def test_the_estimates_count_the_calls_tokens_and_milliseconds_of_each_operator():
    chain, older, single = structural_plan(CHAIN), structural_plan(OLDER), structural_plan(SINGLE)
    no_reuse = attrs.evolve(COSTS, kv_reuse=False)
    # the template: per hop 390 prompt tokens (3 passages + 60) and 40 generated, plus the answer's 23;
    # without KV reuse each of its two calls per hop re-reads the whole text (700 tokens + 390 per hop so far)
    assert estimate_linear(chain, COSTS, 3) == Estimate(
        ms=4744.0, llm_calls=6, generated_tokens=103, computed_prompt_tokens=820
    )
    assert estimate_linear(chain, no_reuse, 3) == Estimate(
        ms=16184.0, llm_calls=6, generated_tokens=103, computed_prompt_tokens=6540
    )
    assert estimate_linear(single, COSTS, 3) == Estimate(
        ms=2757.0, llm_calls=4, generated_tokens=63, computed_prompt_tokens=430
    )
    assert estimate_linear(older, no_reuse, 3) == Estimate(
        ms=35118.0, llm_calls=10, generated_tokens=183, computed_prompt_tokens=14800
    )
    # the tree: every node (the root too) reads 700 prompt tokens and writes 23, one wave after another
    node_ms = 700 * 2.0 + 23 * 30.0 + 7.0
    assert estimate_tree(chain, COSTS, 3) == Estimate(
        ms=3 * node_ms, llm_calls=5, generated_tokens=69, computed_prompt_tokens=2100
    )
    assert estimate_tree(older, COSTS, 3) == Estimate(
        ms=5 * node_ms, llm_calls=9, generated_tokens=115, computed_prompt_tokens=3500
    )
    two_at_once = attrs.evolve(COSTS, concurrency=2)
    assert estimate_tree(older, two_at_once, 3).ms == 3 * node_ms  # waves of 2, 2 and 1 nodes
    assert estimate_tree(older, attrs.evolve(two_at_once, batch_speedup=(1.0, 1.6)), 3).ms == pytest.approx(
        2 * (2 * node_ms / 1.6) + node_ms
    )
    # one retrieval and one short answer; iterate repeats it
    assert estimate_rounds(COSTS, 3, 1) == Estimate(
        ms=1147.0, llm_calls=1, generated_tokens=8, computed_prompt_tokens=450
    )
    assert estimate_rounds(COSTS, 3, 3) == Estimate(
        ms=3441.0, llm_calls=3, generated_tokens=24, computed_prompt_tokens=1350
    )


def test_a_wave_costs_its_rounds_of_requests_divided_by_the_measured_batch_gain():
    assert BackendProfile(concurrency=1).wave_ms(2, 100.0) == 200.0  # one after the other
    assert BackendProfile(concurrency=3).wave_ms(7, 100.0) == 300.0  # 3 + 3 + 1
    gain = BackendProfile(concurrency=4, batch_speedup=(1.0, 1.25))
    assert gain.wave_ms(1, 100.0) == 100.0  # a node alone gains nothing
    assert gain.wave_ms(2, 100.0) == 160.0
    assert BackendProfile(concurrency=2, batch_speedup=(1.0, 1.6)).wave_ms(3, 100.0) == pytest.approx(250.0)
    # more at once than measured: the largest measured batch's gain
    assert BackendProfile(concurrency=8, batch_speedup=(1.0, 1.5)).wave_ms(4, 120.0) == 320.0
    # a backend that slows down when batched: the wave costs more than its nodes one by one
    assert BackendProfile(concurrency=2, batch_speedup=(1.0, 0.5)).wave_ms(2, 100.0) == 400.0


SLOW_DECODE = attrs.evolve(COSTS, decode_ms_per_token=1000.0)


def test_the_lowering_reason_gives_both_estimates_and_the_backend_they_assume():
    chain, older, single = structural_plan(CHAIN), structural_plan(OLDER), structural_plan(SINGLE)
    assert lower(chain, SLOW_DECODE, k=3).reason == (
        "chain plan: tree est. 73.2 s < linear est. 104.7 s (backend concurrency 1, KV reuse on, "
        "assumed per-token costs: prefill 2.0 ms, decode 1000 ms)"
    )
    measured = attrs.evolve(
        SLOW_DECODE, concurrency=2, concurrency_source="measured", batch_speedup=(1.0, 1.8), kv_reuse=False,
        source="measured",
    )  # fmt: skip
    assert lower(older, measured, k=3).reason == (
        "branching plan: tree est. 78.6 s < linear est. 212.6 s (backend concurrency 2 (measured), measured batch "
        "throughput 1:1.00x 2:1.80x, KV reuse off, measured per-token costs: prefill 2.0 ms, decode 1000 ms)"
    )
    # the runner-up of three is the cheaper of the other two
    physical = lower(single, SLOW_DECODE, k=3, simple="retrieve")
    assert physical.reason.startswith("single plan: retrieve est. 8.9 s < tree est. 48.8 s (")
    forced = lower(chain, SLOW_DECODE, k=3, force="linear")
    assert (forced.operator, forced.reason) == ("linear", "forced by --strategy linear")
    assert forced.estimates == {
        "linear": estimate_linear(chain, SLOW_DECODE, 3),
        "tree": estimate_tree(chain, SLOW_DECODE, 3),
    }
    assert forced.logical is chain and forced.waves == (("q1",), ("q2",), (ROOT,))


profiles = st.builds(
    BackendProfile,
    prefill_ms_per_token=st.floats(0.01, 50),
    decode_ms_per_token=st.floats(1, 500),
    retrieve_ms=st.floats(0, 200),
    concurrency=st.integers(1, 8),
    kv_reuse=st.booleans(),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queries(max_atoms=6), st.integers(0, 3), profiles)
def test_lowering_picks_the_cheaper_estimate_and_more_concurrency_never_slows_the_tree(query, seed, profile):
    plan = plan_with(query, seed=seed)
    physical = lower(plan, profile)
    ms = {op: e.ms for op, e in physical.estimates.items()}
    assert ms[physical.operator] == min(ms.values())
    assert lower(plan, profile) == physical  # deterministic
    assert sorted(physical.hints) == sorted(plan.query.atom(n).text() for n in plan.tree.nodes if n != ROOT)
    assert [n for wave in physical.waves for n in wave if n != ROOT] and all(physical.waves)
    wider = lower(plan, attrs.evolve(profile, concurrency=profile.concurrency + 1))
    assert wider.estimates["tree"].ms <= physical.estimates["tree"].ms
    assert wider.estimates["linear"] == physical.estimates["linear"]  # the template runs one call at a time
    assert {lower(plan, profile, force=op).operator for op in ("linear", "tree")} == {"linear", "tree"}


def test_the_relations_step_carries_the_relation_calls_tokens_and_counts_each_call():
    ir = (
        'q1 = (?band, "released", "Counterparts")\n'
        'q2 = (?drummer, "drummer of", ?band)\n'
        'q3 = (?band, "is", "Canadian")\n'
        "answer ?band"
    )

    def reply(prompt: str) -> str:
        if "Relation of A" in prompt:
            return "sibling"
        if "Rewrite the question as atomic queries" in prompt or "nlqo IR" in prompt:
            return ir
        return "Rush"

    llm = ScriptedLLM([("", reply)])
    engine = Engine.from_config(
        EngineConfig(kv_reuse=False, policy="structural"),
        llm=llm,
        retriever=KeywordRetriever(PASSAGES),
        embedder=HashEmbedder(),
        profile=BackendProfile(),
    )
    result = engine.ask("Which Canadian band released Counterparts and had a famous drummer?", strategy="tree")
    relation_prompts = [c for c in llm.calls if "Relation of A" in c]
    assert result.plan is not None and result.plan.stats.llm_calls == len(relation_prompts) >= 2
    (step,) = [s for s in result.trace if s.node == "relations"]
    assert step.calls == len(relation_prompts) and step.prompt_tokens == sum(len(c.split()) for c in relation_prompts)
    retrieval = next(s for s in result.trace if s.kind == "retrieve")
    assert step.to_dict()["calls"] == step.calls and "calls" not in retrieval.to_dict()
    assert result.stats()["llm_calls"] == len(llm.calls)
    assert result.stats()["prompt_tokens"] == sum(len(c.split()) for c in llm.calls)


def test_engine_auto_plans_lowers_and_runs():
    ir = 'q1 = (?d, "directed", "Jaws")\nq2 = (?d, "born in", ?city)\nanswer ?city'

    def reply(prompt: str) -> str:
        if "Rewrite the question as atomic queries" in prompt or "nlqo IR" in prompt:
            return ir
        if "Fact to look up" in prompt or "Answer:" in prompt[-10:]:
            return "Steven Spielberg"
        return linear_llm()._reply(prompt)

    llm = ScriptedLLM([("", reply)])
    # costed as a local backend with KV reuse: the chain goes to the linear template
    engine = Engine.from_config(
        EngineConfig(kv_reuse=False, policy="structural"),
        llm=llm,
        retriever=KeywordRetriever(PASSAGES),
        embedder=HashEmbedder(),
        profile=BackendProfile(),
    )
    result = engine.ask("In which city was the director of Jaws born?", strategy="auto")
    assert result.physical.operator == "linear"
    assert result.plan is not None and dict(result.plan.tree.parent) == {"q1": "q2", "q2": ROOT}
    assert "(Plan step 1: ?d directed Jaws)" in llm.calls[-1]
    assert result.planning_ms > 0 and result.stats()["llm_calls"] >= 3
    tree = engine.ask("In which city was the director of Jaws born?", strategy="tree")
    assert tree.physical.operator == "tree" and tree.answer == "Steven Spielberg"
    plain = Engine.from_config(
        EngineConfig(kv_reuse=False, plan_hints=False, policy="structural"),
        llm=llm,
        retriever=KeywordRetriever(PASSAGES),
        embedder=HashEmbedder(),
        profile=BackendProfile(),
    )
    unhinted = plain.ask("In which city was the director of Jaws born?", strategy="auto")
    assert unhinted.physical.operator == "linear" and unhinted.physical.hints  # the plan still has them ...
    assert "Plan step" not in llm.calls[-1]  # ... but the template is not shown them


def test_explain_of_an_unparseable_question_is_a_clear_error(monkeypatch, tmp_path, capsys):
    from nlqo.cli import common, main

    llm = ScriptedLLM([("", "I cannot write that.")])
    engine = Engine.from_config(
        EngineConfig(kv_reuse=False, measure_costs=False, policy="structural"),
        llm=llm,
        retriever=KeywordRetriever(PASSAGES),
        embedder=HashEmbedder(),
    )
    monkeypatch.setattr(common, "build_engine", lambda args: engine)
    code = main(["explain", "zzz", "--index", str(tmp_path), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert "could not be parsed into a plan" in err and "--ir FILE" in err
    assert "I cannot write that." not in err  # the replies are not dumped, only the last error
    assert "the last error: <llm>: empty IR" in err


def test_ask_falls_back_to_the_template_when_parsing_fails():
    llm = ScriptedLLM([("nlqo IR", "nonsense"), ("Question:$", " who?"), ("", " Cincinnati")])
    engine = Engine.from_config(
        EngineConfig(kv_reuse=False, max_hops=2, measure_costs=False, policy="structural"),
        llm=llm,
        retriever=KeywordRetriever(PASSAGES),
        embedder=HashEmbedder(),
    )
    result = engine.ask("In which city was the director of Jaws born?", strategy="auto")
    assert result.stop_reason.startswith("parse_failed; ")
    assert result.answer == "Cincinnati" and result.plan is None


def test_hop_counts_at_lower_taus_can_be_read_off_one_run():
    subs = [
        "alpha beta gamma delta",
        "zeta eta",
        "alpha beta zeta",
        "alpha beta gamma delta epsilon zeta",
        "alpha beta gamma delta epsilon",
    ]

    def run(tau: float):
        def reply(prompt: str) -> str:
            if prompt.rstrip().endswith("Question:"):
                n = prompt.count("Based on the contexts,") - LINEAR.prefix.count(
                    "Based on the contexts,"
                )  # the demonstrations' own
                return " " + subs[min(n, len(subs) - 1)]
            return " fact." if prompt.rstrip().endswith("Based on the contexts,") else " answer"

        executor = LinearExecutor(
            ScriptedLLM([("", reply)]), KeywordRetriever(PASSAGES), HashEmbedder(), tau=tau, max_hops=6, kv_reuse=False
        )
        return executor.run("alpha beta gamma delta epsilon")

    top = run(0.99)
    scores = [
        s.terminator_score for s in top.trace if s.kind in ("retrieve", "stop") and s.terminator_score is not None
    ]
    assert len(scores) == top.hops + 1 and top.stop_reason == "terminator"
    seen = set()
    for tau in (0.2, 0.4, 0.6, 0.8, 0.95):
        actual = run(tau).hops
        assert hops_at(scores, tau, top.hops) == actual
        seen.add(actual)
    assert len(seen) >= 3  # the taus really stop at different hops


class TimedLLM:
    """A backend whose reported wall time is exactly ``prefill_ms`` (3) per computed prompt token + ``decode_ms``
    (90) per generated one. A prompt's tokens are its words, unless ``tokens`` counts them; it generates
    ``max_tokens``, unless ``generated`` says how many. Every request is recorded in ``calls``."""

    def __init__(self, report_time: bool = True, *, prefill_ms=3.0, decode_ms=90.0, tokens=None, generated=None):
        self.report_time, self.prefill_ms, self.decode_ms = report_time, prefill_ms, decode_ms
        self.tokens = tokens or (lambda prompt: len(prompt.split()))
        self.generated = generated or (lambda max_tokens: max_tokens)
        self.calls: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    def complete(self, prompt, *, stop=(), max_tokens=256):
        from nlqo.runtime.llm.base import Completion, Usage

        with self.lock:
            self.calls.append((prompt, max_tokens))
        prompt_tokens, generated = self.tokens(prompt), self.generated(max_tokens)
        wall = self.prefill_ms * prompt_tokens + self.decode_ms * generated if self.report_time else 0.0
        return Completion("x", Usage(prompt_tokens=prompt_tokens, generated_tokens=generated, wall_ms=wall, calls=1))


def test_backend_costs_are_measured_by_two_probes():
    from nlqo.planner.lower import measure_profile

    base = BackendProfile(concurrency=4, kv_reuse=False)
    llm = TimedLLM()
    measured = measure_profile(llm, base)
    assert measured.source == "measured"
    # a long prompt with one token to generate, a short one with six, then 1 + 2 + 3 + 4 requests for the batch gain
    assert llm.calls[:2] == [(_PROBE_TEXT * 4, 1), ("Rivers:", 6)] and len(llm.calls) == 2 + 10
    assert measured.prefill_ms_per_token == pytest.approx(3.0) and measured.decode_ms_per_token == pytest.approx(90.0)
    assert (measured.concurrency, measured.kv_reuse) == (4, False)  # what was not measured is kept
    assert measure_profile(TimedLLM(report_time=False), base) == base  # no timings: stay with the assumption
    plan = structural_plan(CHAIN)
    reason = lower(plan, measured).reason
    assert "measured per-token costs: prefill 3.0 ms, decode 90 ms" in reason


def test_the_bench_auto_strategy_lowers_on_measured_costs_and_the_others_do_not_probe():
    from nlqo.eval.strategy import build_strategy

    built = {
        name: build_strategy(name, TimedLLM(), KeywordRetriever(PASSAGES), embedder=HashEmbedder())
        for name in ("auto", "tree")
    }
    assert built["auto"].engine.profile.source == "measured" and built[
        "auto"
    ].engine.profile.decode_ms_per_token == pytest.approx(90.0)
    assert built["tree"].engine.profile.source == "assumed"


class BatchingLLM(TimedLLM):
    """A TimedLLM that reports what batching would do: the probe sends prompts numbered 1..n
    together, and request number i reports ``i / gain(i)`` times its solo time (gain 1: requests
    sent together take as long as one after another; gain n: they cost one request)."""

    def __init__(self, gain, **timing):
        super().__init__(**timing)
        self.gain = gain

    def complete(self, prompt, *, stop=(), max_tokens=256):
        import re

        out = super().complete(prompt, stop=stop, max_tokens=max_tokens)
        found = re.search(r"\((\d+)\)", prompt)
        if found is None:
            return out
        i = int(found.group(1))
        return attrs.evolve(out, usage=attrs.evolve(out.usage, wall_ms=out.usage.wall_ms * i / self.gain(i)))


@pytest.mark.parametrize("gain, tree_wins", [(lambda n: 1.0, False), (lambda n: float(n), True)])
def test_the_measured_batch_gain_decides_whether_a_wave_costs_less_than_its_nodes(gain, tree_wins):
    from nlqo.planner.lower import measure_batch_speedup, measure_profile

    speedup = measure_batch_speedup(BatchingLLM(gain), 4)
    assert len(speedup) == 4 and speedup[0] == 1.0
    assert speedup == pytest.approx(tuple(gain(n) for n in (1, 2, 3, 4)))
    profile = measure_profile(BatchingLLM(gain), BackendProfile(concurrency=4, kv_reuse=False))
    plan = structural_plan(OLDER)
    widest = max(len(w) for w in plan.tree.levels())
    solo = attrs.evolve(profile, concurrency=1, batch_speedup=())
    ratio = lower(plan, profile).estimates["tree"].ms / lower(plan, solo).estimates["tree"].ms
    assert widest >= 2
    if tree_wins:
        assert ratio < 1.0 and "measured batch throughput 1:1.00x 2:2.00x" in lower(plan, profile).reason
    else:
        assert ratio == pytest.approx(1.0)  # no gain measured: a wave costs what its nodes cost one by one


@pytest.mark.parametrize(
    "timing, costs",
    [
        (dict(prefill_ms=0.001, decode_ms=0.1), (0.001, 0.1)),  # calls of less than a millisecond
        (dict(generated=lambda n: 2 * n), (3.0, 90.0)),  # more tokens than asked for: the ones it reports count
        # the smallest system with one solution (determinant 1): a backend that answers in one token
        (dict(tokens=lambda p: 2 if p.startswith("The river") else 1, generated=lambda n: 1), (3.0, 90.0)),
        (dict(prefill_ms=0.0), None),  # the time does not grow with the prompt: no prefill cost to solve for
        (dict(decode_ms=0.0), None),  # nor with the tokens generated
        (dict(tokens=lambda p: 0), None),  # no token counts: the system has no single solution
    ],
)
def test_the_probes_measure_a_backend_exactly_when_its_two_costs_come_out_positive(timing, costs):
    from nlqo.planner.lower import measure_profile

    base = BackendProfile(concurrency=1, kv_reuse=True)
    measured = measure_profile(TimedLLM(**timing), base)
    if costs is None:
        assert measured == base
        return
    assert (measured.prefill_ms_per_token, measured.decode_ms_per_token) == pytest.approx(costs)
    assert (measured.source, measured.kv_reuse, measured.concurrency, measured.batch_speedup) == (
        "measured",
        True,
        1,
        (),
    )


def test_the_batch_gain_is_measured_up_to_four_requests_also_on_a_fast_backend():
    from nlqo.planner.lower import measure_batch_speedup

    llm = BatchingLLM(lambda n: float(n), prefill_ms=0.001, decode_ms=0.01)  # a request takes 0.124 ms
    assert measure_batch_speedup(llm, 8) == pytest.approx((1.0, 2.0, 3.0, 4.0))
    assert sorted(llm.calls) == sorted(
        [("List of rivers (1):", 12)] * 4 + [("List of rivers (2):", 12)] * 3 + [("List of rivers (3):", 12)] * 2
        + [("List of rivers (4):", 12)]
    )  # fmt: skip
    assert measure_batch_speedup(TimedLLM(report_time=False), 4) == ()  # no timings: nothing measured
