"""Engine.from_config loads the model beside the index's embedder, and frees it when the index fails."""

from __future__ import annotations

import threading

import pytest

import nlqo.main.builder as builder
from nlqo import Engine, EngineConfig
from nlqo.errors import ConfigError
from nlqo.runtime.llm.scripted import ScriptedLLM
from nlqo.testing import PASSAGES, HashEmbedder, KeywordRetriever

CONFIG = EngineConfig(model="scripted", index="unused", strategy="retrieve")


class ClosableLLM(ScriptedLLM):
    closed = False

    def close(self) -> None:
        self.closed = True


def test_the_model_loads_while_the_index_opens(monkeypatch):
    """The model's load waits for the index to have started opening: loaded one after the other, it
    would wait in vain, and the embedder would never see the model's load under way."""
    index_opening, model_loading = threading.Event(), threading.Event()

    def load_model(config, **options):
        model_loading.set()
        assert index_opening.wait(10), "the model loaded before the index opened, not beside it"
        return ScriptedLLM([])

    def open_retrieval(config, embedder=None):
        index_opening.set()
        assert model_loading.wait(10), "the index opened before the model started loading, not beside it"
        return KeywordRetriever(PASSAGES), HashEmbedder()

    monkeypatch.setattr(builder, "load_model", load_model)
    monkeypatch.setattr(builder, "open_retrieval", open_retrieval)
    engine = Engine.from_config(CONFIG)
    assert isinstance(engine.llm, ScriptedLLM)
    assert engine.owned == (engine.retriever, engine.llm)


def test_an_index_that_fails_raises_its_own_error_and_frees_the_model(monkeypatch):
    loaded: list[ClosableLLM] = []
    done = threading.Event()

    def load_model(config, **options):
        loaded.append(ClosableLLM([]))
        return loaded[-1]

    def open_retrieval(config, embedder=None):
        raise ConfigError("no index at unused")

    monkeypatch.setattr(builder, "load_model", load_model)
    monkeypatch.setattr(builder, "open_retrieval", open_retrieval)
    with pytest.raises(ConfigError, match="no index at unused"):
        Engine.from_config(CONFIG)
    for _ in range(100):  # the load finishes in its thread; its model is closed when it does
        if loaded and loaded[0].closed:
            break
        done.wait(0.05)
    assert loaded and loaded[0].closed


def test_a_model_that_fails_to_load_raises_its_error(monkeypatch):
    def load_model(config, **options):
        raise ConfigError("no model configured")

    monkeypatch.setattr(builder, "load_model", load_model)
    monkeypatch.setattr(
        builder, "open_retrieval", lambda config, embedder=None: (KeywordRetriever(PASSAGES), HashEmbedder())
    )
    with pytest.raises(ConfigError, match="no model configured"):
        Engine.from_config(CONFIG)


def test_a_quiet_engine_loads_its_model_without_progress_bars(monkeypatch):
    """``nlqo ask -q`` builds the engine with progress=False: the model's verification bar stays off too."""
    given: list[dict] = []
    monkeypatch.setattr(builder, "load_model", lambda config, **options: given.append(options) or ScriptedLLM([]))
    monkeypatch.setattr(
        builder, "open_retrieval", lambda config, embedder=None: (KeywordRetriever(PASSAGES), HashEmbedder())
    )
    Engine.from_config(CONFIG, progress=False)
    Engine.from_config(CONFIG, progress=True)
    assert given == [{"progress": False}, {"progress": True}]
