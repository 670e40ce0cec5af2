"""Backends declare what they can do, and come as packages (entry points ``nlqo.backends``)."""

from __future__ import annotations

import sys

import pytest

from nlqo.config import EngineConfig
from nlqo.errors import ConfigError
from nlqo.runtime.llm.backends import backends, load_llm
from nlqo.runtime.llm.base import NO_CAPABILITIES, Capabilities, capabilities, chat_reusing_prefix
from nlqo.runtime.llm.cache import CachedLLM, request_key
from nlqo.runtime.llm.scripted import ScriptedLLM
from nlqo.runtime.llm.session import TextSession, open_session
from nlqo.testing import PASSAGES, HashEmbedder, KeywordRetriever

PACKAGE = """
from nlqo.runtime.llm.base import Capabilities, Completion, Usage

class EchoLLM:
    capabilities = Capabilities(concurrency=4, cache_identity=True)

    def __init__(self, spec, options):
        self.name, self.spec, self.options = "echo", spec, options

    def cache_identity(self):
        return {"spec": self.spec}

    def complete(self, prompt, *, stop=(), max_tokens=256):
        return Completion(prompt[-10:], Usage(calls=1))

    def chat(self, messages, *, stop=(), max_tokens=256):
        return self.complete(messages[-1].content, stop=stop, max_tokens=max_tokens)

def load(spec, **options):
    return EchoLLM(spec, options)
"""


@pytest.fixture
def echo_package(tmp_path, monkeypatch):
    """An installed package that registers the backend 'echo' (a dist-info folder on sys.path)."""
    (tmp_path / "echo_backend.py").write_text(PACKAGE)
    info = tmp_path / "echo_backend-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-backend\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[nlqo.backends]\necho = echo_backend:load\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("echo_backend", None)


def test_a_backend_package_is_found_by_its_entry_point(echo_package):
    assert "echo" in backends() and "openai" in backends()
    llm = load_llm("echo:some-model", quantize="int8", threads=2)
    assert (llm.name, llm.spec, llm.options) == (
        "echo",
        "some-model",
        {"runtime": "auto", "quantize": "int8", "threads": 2},
    )


def test_the_engine_reads_a_backends_declared_capabilities(echo_package, monkeypatch):
    from nlqo import Engine

    engine = Engine.from_config(
        EngineConfig(model="echo:m", measure_costs=False), retriever=KeywordRetriever(PASSAGES), embedder=HashEmbedder()
    )
    assert engine.llm.name == "echo" and engine.profile.concurrency == 4 and engine.profile.kv_reuse is False


def test_an_unknown_backend_scheme_is_a_clear_error():
    with pytest.raises(ConfigError, match="no backend 'nope' for model 'nope:x' \\(installed backends: .*openai"):
        load_llm("nope:x")


def test_a_runtime_that_cannot_run_the_model_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match="llama.cpp runtime needs a GGUF model"):
        load_llm(str(tmp_path), runtime="llama-cpp")
    with pytest.raises(ConfigError, match="unknown runtime 'vllm'"):
        load_llm(str(tmp_path), runtime="vllm")


class Undeclared(ScriptedLLM):
    """Has a session method and a prefix_cache keyword, but declares neither: they are not used."""

    def session(self, prefix):
        raise AssertionError("session() of a backend that does not declare sessions")

    def chat(self, messages, *, stop=(), max_tokens=256, prefix_cache=False):
        assert not prefix_cache, "prefix_cache asked of a backend that does not declare it"
        return super().chat(messages, stop=stop, max_tokens=max_tokens)


def test_capabilities_are_declared_not_probed():
    llm = Undeclared([], default="x")
    assert capabilities(llm) == NO_CAPABILITIES
    assert isinstance(open_session(llm, "prefix"), TextSession)
    assert chat_reusing_prefix(llm, []).text == "x"


def test_a_wrong_capabilities_attribute_is_a_type_error():
    class Bad:
        capabilities = {"session": True}

    with pytest.raises(TypeError, match="must be an nlqo.runtime.llm.base.Capabilities"):
        capabilities(Bad())


def test_the_response_cache_keys_on_the_declared_identity(tmp_path):
    class Server(ScriptedLLM):
        capabilities = Capabilities(cache_identity=True)
        model = "m1"

        def cache_identity(self):
            return {"model": self.model}

    a, b = Server([], default="x"), Server([], default="x")
    b.model = "m2"
    assert request_key(a, "complete", "p", (), 8)[0] != request_key(b, "complete", "p", (), 8)[0]
    assert request_key(ScriptedLLM([]), "complete", "p", (), 8)[1]["identity"] == {}
    cached = CachedLLM(a, tmp_path)
    assert cached.capabilities == Capabilities(prefix_cache=True, fork=True, concurrency=1, cache_identity=True)


def test_the_local_and_server_backends_declare_their_capabilities():
    from nlqo.runtime.llm.openai_compat import OpenAICompatLLM

    # nothing listens on port 1: no slots reported, concurrency 1
    assert OpenAICompatLLM("http://127.0.0.1:1", "m").capabilities == Capabilities(
        server_slots=True, cache_identity=True
    )
    told = OpenAICompatLLM("http://127.0.0.1:1", "m", grammar_field="grammar")
    assert told.capabilities == Capabilities(server_slots=True, cache_identity=True, constraint="server")
    try:
        from nlqo.runtime.llm.local import TransformersLLM
    except ImportError:  # pragma: no cover - torch is a dependency
        pytest.skip("torch is not installed")
    assert TransformersLLM.capabilities == Capabilities(
        prefix_cache=True, session=True, fork=True, concurrency=1, constraint="tokens"
    )
