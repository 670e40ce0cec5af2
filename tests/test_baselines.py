"""Control flow of each baseline with a scripted LLM and a fake retriever: what is retrieved, when
each stops, round caps, and what the trace records."""

from __future__ import annotations


import attrs
import pytest

from nlqo.errors import ConfigError
from nlqo.execution.trace import Trace
from nlqo.kinds import Operator
from nlqo.runtime.llm.base import Capabilities
from nlqo.runtime.llm.scripted import ScriptedLLM
from nlqo.common.passages import Hit, Passage
from nlqo.eval.strategy import STRATEGIES, Named, build_strategy, parse_spec, spec_name, split_specs
from nlqo.eval.baselines import IRCoT, IterRetGen, NoRag, SelfAsk, StandardRag
from nlqo.testing.fakes import HashEmbedder

Q = "Who was the husband of the author of Frankenstein?"


@attrs.define(eq=False)
class FakeRetriever:
    """Returns passages named after the query number: query i gives titles Ti.1 .. Ti.k, scores i + 1/rank."""

    queries: list[str] = attrs.field(factory=list)

    def search(self, query: str, k: int = 3) -> list[Hit]:
        self.queries.append(query)
        i = len(self.queries)
        return [Hit(Passage(f"p{i}.{r}", f"T{i}.{r}", f"text {i}.{r}"), i + 1 / r, r) for r in range(1, k + 1)]


@attrs.define(eq=False)
class Recording:
    """Wraps a ScriptedLLM and keeps the stop strings of every call."""

    inner: ScriptedLLM
    name: str = "recording"
    stops: list[tuple[str, ...]] = attrs.field(factory=list)

    @property
    def calls(self) -> list[str]:
        return self.inner.calls

    def complete(self, prompt, *, stop=(), max_tokens=256):
        self.stops.append(tuple(stop))
        return self.inner.complete(prompt, stop=stop, max_tokens=max_tokens)

    def chat(self, messages, *, stop=(), max_tokens=256):
        self.stops.append(tuple(stop))
        return self.inner.chat(messages, stop=stop, max_tokens=max_tokens)


def kinds(result):
    return [(s.node, s.kind) for s in result.trace]


def test_no_rag_answers_in_one_call_without_retrieval():
    llm = ScriptedLLM([("Question: Who", "\n Percy Bysshe Shelley\nHe was a poet.")])
    result = NoRag(llm).run(Q)
    assert result.answer == "Percy Bysshe Shelley"
    assert (result.hops, result.stop_reason, result.supporting) == (0, "answer", ())
    assert kinds(result) == [("answer", "llm"), ("answer", "stop")]
    assert "based on your own knowledge" in llm.calls[0]


def test_standard_rag_retrieves_once_and_answers_from_the_passages():
    llm, retriever = ScriptedLLM([("Doc 2\\(Title: T1.2\\) text 1.2", "Percy Bysshe Shelley")]), FakeRetriever()
    result = StandardRag(llm, retriever, k=2).run(Q)
    assert retriever.queries == [Q]
    assert result.answer == "Percy Bysshe Shelley"
    assert (result.hops, result.stop_reason) == (1, "answer")
    assert [p.title for p in result.supporting] == ["T1.1", "T1.2"]
    assert kinds(result) == [("round-1", "retrieve"), ("round-1", "llm"), ("round-1", "stop")]
    retrieval = result.trace[0]
    assert retrieval.text == Q and [p.id for p in retrieval.passages] == ["p1.1", "p1.2"]


def test_a_title_the_question_offers_is_not_cut_to_a_bare_no():
    """2Wiki's question 111: the reply named the first film, whose title starts with "No,"."""
    question = "Which film has the director died earlier, No, No, Nanette (1930 Film) or What'S Your Husband Doing??"
    offered = StandardRag(ScriptedLLM([], default="No, No, Nanette (1930 Film)"), FakeRetriever()).run(question)
    refused = StandardRag(ScriptedLLM([], default="No, it does not say."), FakeRetriever()).run(question)
    assert (offered.answer, refused.answer) == ("No, No, Nanette (1930 Film)", "no")


def test_iter_retgen_retrieves_with_question_plus_previous_generation():
    llm = ScriptedLLM(
        [("T3.1", "Percy Bysshe Shelley"), ("T2.1", "Mary Shelley's husband"), ("T1.1", "Mary Shelley\nwrote it")]
    )
    retriever = FakeRetriever()
    result = IterRetGen(llm, retriever).run(Q)
    assert retriever.queries == [Q, f"{Q} Mary Shelley\nwrote it", f"{Q} Mary Shelley's husband"]
    assert result.answer == "Percy Bysshe Shelley"
    assert (result.hops, result.stop_reason, len(result.llm_steps)) == (3, "max_rounds", 3)
    assert [p.title for p in result.supporting] == ["T3.1", "T3.2", "T3.3"]  # the last round's passages
    assert all(f"Question: {Q}" in call for call in llm.calls)  # every round answers the original question
    two = IterRetGen(ScriptedLLM([], default="x"), FakeRetriever(), rounds=2).run(Q)
    assert (two.hops, len(two.llm_steps)) == (2, 2)


def test_ircot_interleaves_thoughts_and_retrieval_and_stops_at_the_answer():
    thoughts = [
        " Frankenstein was written by Mary Shelley",
        " Mary Shelley married Percy Bysshe Shelley",
        " So the answer is: Percy Bysshe Shelley",
    ]
    llm, retriever = Recording(ScriptedLLM([("Thought:", thoughts)])), FakeRetriever()
    result = IRCoT(llm, retriever, k=2).run(Q)
    assert result.answer == "Percy Bysshe Shelley"
    assert (result.stop_reason, result.hops, len(result.llm_steps)) == ("answer", 3, 3)
    assert retriever.queries == [
        Q,
        "Frankenstein was written by Mary Shelley",
        "Mary Shelley married Percy Bysshe Shelley",
    ]
    assert all(stop == (".", "\n") for stop in llm.stops)  # one sentence per call
    # earlier thoughts are fed back after "Thought:", each with its period
    assert llm.calls[0].endswith(f"Question: {Q}\nThought:")
    assert llm.calls[2].endswith(
        "Thought: Frankenstein was written by Mary Shelley. Mary Shelley married Percy Bysshe Shelley."
    )
    # round 1 shows the first retrieval as ranked; later rounds the pool in ascending score (best last)
    assert llm.calls[0].index("T1.1") < llm.calls[0].index("T1.2")
    assert [
        llm.calls[2].index(t) < llm.calls[2].index(u) for t, u in (("T1.2", "T2.2"), ("T2.2", "T3.2"), ("T3.2", "T3.1"))
    ] == [True] * 3
    assert [p.title for p in result.supporting][:2] == ["T3.1", "T3.2"]  # supporting: best first
    assert kinds(result)[-1] == ("round-3", "stop")


def test_ircot_caps_rounds_and_answers_with_all_thoughts():
    llm, retriever = ScriptedLLM([("Thought:", "It is a novel. More text")]), FakeRetriever()
    result = IRCoT(llm, retriever).run(Q)
    assert (result.stop_reason, len(result.llm_steps), result.hops) == (
        "max_rounds",
        5,
        5,
    )  # no retrieval after the 5th thought
    assert result.answer == " ".join(["It is a novel"] * 5)
    capped = IRCoT(ScriptedLLM([("Thought:", "It is a novel")]), FakeRetriever(), max_rounds=2).run(Q)
    assert (capped.stop_reason, len(capped.llm_steps)) == ("max_rounds", 2)


def test_ircot_stops_when_the_model_writes_nothing():
    llm, retriever = ScriptedLLM([("Thought:", ["Mary Shelley wrote it", "\nanything"])]), FakeRetriever()
    result = IRCoT(llm, retriever).run(Q)
    assert (result.stop_reason, len(result.llm_steps), result.hops, result.answer) == (
        "empty",
        2,
        2,
        "Mary Shelley wrote it",
    )


def test_self_ask_follows_up_retrieves_and_stops_at_the_final_answer():
    replies = [
        "Follow up: Who wrote Frankenstein?\nIntermediate answer: (cut: the model must not answer its own follow-up)",
        "\nIntermediate answer: Frankenstein was written by Mary Shelley.\nFollow up: (cut: asked in the next round)",
        "\nFollow up: Who was the husband of Mary Shelley?\nIntermediate answer: (cut)",
        "\nIntermediate answer: Percy Bysshe Shelley.\nSo the final answer is: Percy Bysshe Shelley.\n#\nContext1: (cut)",
    ]
    llm, retriever = Recording(ScriptedLLM([("Are follow up questions needed here: Yes.", replies)])), FakeRetriever()
    result = SelfAsk(llm, retriever).run(Q)
    assert result.answer == "Percy Bysshe Shelley"
    assert (result.stop_reason, len(result.llm_steps)) == ("answer", 4)
    assert retriever.queries == [Q, "Who wrote Frankenstein?", "Who was the husband of Mary Shelley?"]
    assert result.hops == 3
    # the stop marker alternates: the model may only ask, then only answer, and so on
    assert [s[-1] for s in llm.stops] == ["Intermediate answer:", "Follow up:", "Intermediate answer:", "Follow up:"]
    assert all(s[:2] == ("\nContext", "#") for s in llm.stops)
    # each call sees the passages retrieved for the latest follow-up and the scratchpad so far
    assert "Context1: T2.1: text 2.1" in llm.calls[1] and "T1.1" not in llm.calls[1]
    assert llm.calls[1].endswith("Are follow up questions needed here: Yes.\nFollow up: Who wrote Frankenstein?")
    assert llm.calls[2].endswith(
        "Follow up: Who wrote Frankenstein?\nIntermediate answer: Frankenstein was written by Mary Shelley."
    )
    assert llm.calls[3].endswith("Mary Shelley.\nFollow up: Who was the husband of Mary Shelley?")
    assert "Context1: T3.1: text 3.1" in llm.calls[3]
    assert "(cut" not in "".join(s.text for s in result.llm_steps)
    assert [p.title for p in result.supporting] == ["T3.1", "T3.2", "T3.3"]
    assert kinds(result)[-1] == ("round-4", "stop")


def test_self_ask_caps_rounds_and_gives_no_answer_without_the_marker():
    replies = ["Follow up: A?\n", "\nIntermediate answer: B.\n"]
    llm, retriever = ScriptedLLM([("Are follow up", replies * 3)]), FakeRetriever()
    result = SelfAsk(llm, retriever).run(Q)
    assert (result.stop_reason, len(result.llm_steps), result.answer) == ("max_rounds", 5, "")
    assert retriever.queries == [Q, "A?", "A?"]  # follow-ups of rounds 1 and 3; round 5's is not retrieved
    assert result.hops == 3


def test_self_ask_stops_when_nothing_is_generated():
    llm, retriever = ScriptedLLM([("Are follow up", "#\nContext1:")]), FakeRetriever()
    result = SelfAsk(llm, retriever).run(Q)
    assert (result.stop_reason, len(result.llm_steps), result.hops, result.answer) == ("empty", 1, 1, "")


def test_direct_final_answer_without_follow_ups():
    llm = ScriptedLLM([("Are follow up", "So the final answer is: Percy Bysshe Shelley\n#")])
    result = SelfAsk(llm, FakeRetriever()).run(Q)
    assert (result.answer, result.stop_reason, result.hops) == ("Percy Bysshe Shelley", "answer", 1)


def test_a_given_trace_collects_the_steps():
    trace = Trace()
    result = StandardRag(ScriptedLLM([], default="A"), FakeRetriever()).run(Q, trace)
    assert trace.freeze() == result.trace and len(trace.steps) == 3
    llm_step = result.trace[1]
    assert llm_step.prompt_tokens > 0 and llm_step.generated_tokens == 1 and llm_step.text == "A"


def test_registry_builds_baselines_and_variants():
    assert STRATEGIES[:5] == ("no-rag", "standard-rag", "iter-retgen", "ircot", "self-ask")
    assert STRATEGIES[5:] == ("auto", *Operator.values())  # every registered operator, forced by its name
    llm, retriever = ScriptedLLM([("Thought:", "So the answer is: X")]), FakeRetriever()
    plain = build_strategy("ircot", llm, retriever, k=4)
    assert isinstance(plain, IRCoT) and plain.k == 4 and plain.name == "ircot"
    variant = build_strategy("ircot[max_rounds=2]", llm, retriever)
    assert isinstance(variant, Named) and variant.inner.max_rounds == 2
    assert variant.run(Q).strategy == "ircot[max_rounds=2]"
    with pytest.raises(ConfigError, match="has no option tau"):
        build_strategy("ircot[tau=0.8]", llm, retriever)
    with pytest.raises(ConfigError, match="max_rounds must be at least 1"):
        build_strategy("ircot", llm, retriever, max_rounds=0)
    with pytest.raises(ConfigError, match="unknown strategy 'flare'"):
        build_strategy("flare", llm, retriever)
    with pytest.raises(ConfigError, match="bad strategy"):
        build_strategy("ircot[", llm, retriever)


def test_planned_strategies_come_from_the_executor_module(monkeypatch):
    built = {}

    def build(mode, llm, retriever, *, embedder, k, config=None, **options):
        built.update(options, mode=mode, k=k, embedder=embedder)
        return NoRag(llm)

    monkeypatch.setattr("nlqo.main.by_name.build", build)
    strategy = build_strategy("linear[tau=0.8,kv_reuse=off]", ScriptedLLM([]), FakeRetriever(), embedder="E", k=5)
    assert built == {"tau": 0.8, "kv_reuse": False, "mode": "linear", "k": 5, "embedder": "E"}
    assert strategy.name == "linear[tau=0.8,kv_reuse=off]"


def test_every_operator_is_a_strategy_the_harness_builds():
    from nlqo.execution.operators import OPERATORS
    from nlqo.eval.strategy import STRATEGIES

    assert {str(o) for o in OPERATORS} | {"auto"} <= set(STRATEGIES)
    for name in (*map(str, OPERATORS), "auto"):
        strategy = build_strategy(name, ScriptedLLM([], default="x"), FakeRetriever(), embedder=HashEmbedder())
        assert strategy.name == name and strategy.engine.config.strategy == name


def test_spec_parsing_round_trips():
    assert parse_spec(" tree [parallel=on, alpha=5] ") == ("tree", {"parallel": True, "alpha": 5})
    assert spec_name(*parse_spec("auto[relation_cache=off,tau=0.9]")) == "auto[relation_cache=off,tau=0.9]"
    assert split_specs("no-rag,,linear[tau=0.8,alpha=1], auto") == ["no-rag", "linear[tau=0.8,alpha=1]", "auto"]
    with pytest.raises(ConfigError, match="write option=value"):
        parse_spec("linear[tau]")


def test_baselines_ask_the_backend_to_reuse_its_prefix_cache():
    """Like the engine's calls, so every strategy gets the same backend features."""

    class PrefixLLM(ScriptedLLM):
        capabilities = Capabilities(prefix_cache=True)

        def __init__(self):
            super().__init__([], default=lambda prompt: " So the answer is: Paris.")
            self.flags = []

        def chat(self, messages, *, stop=(), max_tokens=256, prefix_cache=False):
            self.flags.append(prefix_cache)
            return super().chat(messages, stop=stop, max_tokens=max_tokens)

        def complete(self, prompt, *, stop=(), max_tokens=256, prefix_cache=None):
            if prefix_cache is not None:  # None: ScriptedLLM.chat calling its own complete
                self.flags.append(prefix_cache)
            return super().complete(prompt, stop=stop, max_tokens=max_tokens)

    for name in ("no-rag", "standard-rag", "iter-retgen", "ircot", "self-ask"):
        llm = PrefixLLM()
        build_strategy(name, llm, FakeRetriever(), k=2).run("Q1: capital of France?")
        assert llm.calls and llm.flags == [True] * len(llm.calls), name


def test_each_strategy_of_a_bench_gets_its_own_fork_of_a_backend_that_declares_forks():
    from nlqo.runtime.llm.base import forked

    class Forkable:
        capabilities = Capabilities(fork=True)

        def fork(self):
            return Forkable()

    class Undeclared:  # has the method, declares nothing: not forked
        def fork(self):
            raise AssertionError("fork() of a backend that does not declare it")

    llm, plain, undeclared = Forkable(), ScriptedLLM([]), Undeclared()
    assert forked(llm) is not llm and isinstance(forked(llm), Forkable)
    assert forked(plain) is plain and forked(undeclared) is undeclared
