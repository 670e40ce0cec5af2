"""The extractive compressor (issue 54, item 4): each retrieved passage keeps the sentences that
match the step's query best (embedder and BM25 fused), in their order; off by default; a setting of
the engine (``--compress N``) and an option of every bench strategy (``standard-rag[compress=1]``)."""

from __future__ import annotations

import numpy as np
import pytest

from fakes import HashEmbedder, KeywordRetriever
from nlqo.common.passages import Hit, Passage
from nlqo.config import EngineConfig
from nlqo.errors import ConfigError
from nlqo.eval.strategy import build_strategy
from nlqo.index.compress import CompressingRetriever, compress, sentences
from nlqo.main.builder import engine_identity
from nlqo.main.engine import Engine
from nlqo.runtime.llm import ScriptedLLM

SPIELBERG = Passage(
    "p2",
    "Steven Spielberg",
    "Steven Spielberg is an American film director. He was born in Cincinnati, Ohio. "
    "His films include Jaws and E.T. the Extra-Terrestrial. He won three Academy Awards.",
)
JAWS = Passage("p1", "Jaws (film)", "Jaws is a 1975 thriller film directed by Steven Spielberg.")
SHARK = Passage(
    "p6", "Sharks", "Sharks are fish. They have no bones. Great whites live in cold seas. Some sharks are big."
)


class TopicEmbedder:
    """Embeds a text as counts of a few topic words, so the dense side is known exactly."""

    TOPICS = ("born", "city", "film", "award")

    def encode(self, texts, kind="passage"):
        rows = np.array([[t.lower().count(w) + 1e-3 for w in self.TOPICS] for t in texts], dtype=np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def hits(*passages: Passage) -> list[Hit]:
    return [Hit(p, 1.0 / (i + 1), i + 1) for i, p in enumerate(passages)]


def test_sentences_split_at_ends_not_at_abbreviations_initials_or_dotted_letters():
    assert sentences(SPIELBERG.text) == [
        "Steven Spielberg is an American film director.",
        "He was born in Cincinnati, Ohio.",
        "His films include Jaws and E.T. the Extra-Terrestrial.",
        "He won three Academy Awards.",
    ]
    assert sentences("Mr. Smith met Dr. No in St. Louis on Jan. 5. Then he left.") == [
        "Mr. Smith met Dr. No in St. Louis on Jan. 5.",
        "Then he left.",
    ]
    assert sentences('He said "Go." She went.') == ['He said "Go."', "She went."]
    assert sentences("") == [] and sentences("no end") == ["no end"]


def test_each_passage_keeps_the_sentences_that_match_the_query_best_in_their_order():
    out = compress(hits(SPIELBERG, SHARK), "In which city was Steven Spielberg born?", TopicEmbedder(), keep=2)
    assert out[0].passage.text == "Steven Spielberg is an American film director. He was born in Cincinnati, Ohio."
    assert (out[0].passage.id, out[0].passage.title, out[0].score, out[0].rank) == ("p2", "Steven Spielberg", 1.0, 1)
    assert len(sentences(out[1].passage.text)) == 2 and out[1].passage.id == "p6"
    # each step compresses for its own query: the awards sentence wins when asked about awards
    (awards,) = compress(hits(SPIELBERG), "How many awards did Spielberg win?", TopicEmbedder(), keep=1)
    assert awards.passage.text == "He won three Academy Awards."


def test_short_passages_and_keep_zero_are_left_whole():
    few = hits(JAWS, SPIELBERG)
    assert compress(few, "Who directed Jaws?", TopicEmbedder(), keep=4) == few  # no passage is longer
    assert compress(few, "Who directed Jaws?", TopicEmbedder(), keep=0) == few
    out = compress(few, "Who directed Jaws?", TopicEmbedder(), keep=1)
    assert out[0] == few[0] and out[1].passage.text != SPIELBERG.text


def test_a_query_sharing_no_word_with_any_sentence_still_ranks_by_the_embedder():
    (out,) = compress(hits(SPIELBERG), "birthplace? born", TopicEmbedder(), keep=1)
    assert out.passage.text == "He was born in Cincinnati, Ohio."
    (out,) = compress(hits(SPIELBERG), "zzz qqq", HashEmbedder(), keep=1)
    assert out.passage.text in sentences(SPIELBERG.text)


def test_the_engine_setting_compresses_what_every_operator_reads_and_is_off_by_default():
    assert EngineConfig().compress == 0
    question = "In which city was Steven Spielberg born?"
    for keep, shown in ((0, SPIELBERG.text), (1, "He was born in Cincinnati, Ohio.")):
        llm = ScriptedLLM([("given documents", "Cincinnati")])
        config = EngineConfig(cost_model="structural", measure_costs=False, compress=keep, k=1)
        engine = Engine.from_config(config, llm=llm, retriever=KeywordRetriever([SPIELBERG]), embedder=TopicEmbedder())
        assert isinstance(engine.retriever, CompressingRetriever) is bool(keep)
        result = engine.ask(question, strategy="retrieve")
        assert shown in llm.calls[0] and (keep == 0 or "Academy" not in llm.calls[0])
        assert result.answer == "Cincinnati"


def test_statistics_of_whole_passages_do_not_describe_a_compressing_engine():
    assert "compress" not in engine_identity(EngineConfig())
    assert engine_identity(EngineConfig(compress=2))["compress"] == 2


@pytest.mark.parametrize("spec", ["standard-rag[compress=1]", "iter-retgen[compress=1]", "retrieve[compress=1]"])
def test_every_bench_strategy_takes_the_compress_option(spec):
    llm = ScriptedLLM([("given documents", "Cincinnati")])
    strategy = build_strategy(
        spec,
        llm,
        KeywordRetriever([SPIELBERG]),
        embedder=TopicEmbedder(),
        k=1,
        config=EngineConfig(cost_model="structural", measure_costs=False),
    )
    strategy.run("In which city was Steven Spielberg born?")
    assert "He was born in Cincinnati, Ohio." in llm.calls[0] and "Academy" not in llm.calls[0]
    assert strategy.name == spec


@pytest.mark.parametrize("bad", [-1, 1.5, "two", True])
def test_a_bad_compress_value_is_a_config_error_that_says_what_to_give(bad):
    with pytest.raises(ConfigError, match="compress"):
        build_strategy(f"standard-rag[compress={bad}]", ScriptedLLM([]), KeywordRetriever([]), embedder=HashEmbedder())
    with pytest.raises(ConfigError, match="whole number"):
        EngineConfig().with_options(compress=bad)


def test_the_bench_compares_whole_and_compressed_passages_side_by_side():
    from nlqo.cli.bench import expand_ablations

    assert expand_ablations("standard-rag[compress=2],retrieve", {"compress": "0,2"}) == [
        "standard-rag[compress=2]",
        "retrieve[compress=0]",
        "retrieve[compress=2]",
    ]
