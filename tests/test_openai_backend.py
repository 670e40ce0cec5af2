"""The OpenAI-compatible backend: request/response handling and retries against stub servers on
loopback, and generation against a real llama-cpp-python server (``-m server``)."""

from __future__ import annotations

import json
import math
from typing import Iterator

import pytest
from llama_server import MODEL_ALIAS, free_port, llama_server_fixture
from loopback import Loopback, QuietHandler

from nlqo.errors import LLMError
from nlqo.runtime.llm.base import LLM, ChatMessage
from nlqo.runtime.llm.cache import CachedLLM, is_cache_hit
from nlqo.runtime.llm.openai_compat import OpenAICompatLLM

CHAT_OK = {
    "choices": [{"message": {"role": "assistant", "content": "Paris. And more"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 8}},
}
COMPLETE_OK = {
    "choices": [{"text": " 4, 5", "finish_reason": "length"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 2},
}


class Stub(Loopback):
    """A loopback HTTP server answering POSTs from a script of (status, headers, body) replies.

    A reply of None drops the connection without answering. The last reply repeats.
    """

    def __init__(self, replies):
        self.replies = list(replies)
        self.requests: list[tuple[str, dict, dict]] = []
        stub = self

        class Handler(QuietHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                n = len(stub.requests)
                stub.requests.append((self.path, dict(self.headers), body))
                reply = stub.replies[min(n, len(stub.replies) - 1)]
                if reply is None:
                    self.close_connection = True
                    return
                status, headers, payload = reply
                self.reply(status, payload, headers)

        super().__init__(Handler)


def backend(url: str, sleeps: list[float] | None = None, **options) -> OpenAICompatLLM:
    """A backend that records its backoff waits instead of sleeping."""
    sleeps = [] if sleeps is None else sleeps
    return OpenAICompatLLM(url, "stub-model", sleep=sleeps.append, jitter=0.0, **options)


def test_is_an_llm():
    assert isinstance(OpenAICompatLLM("http://127.0.0.1:1", "m"), LLM)


def test_chat_request_and_response():
    with Stub([(200, {}, CHAT_OK)]) as stub:
        llm = OpenAICompatLLM.from_env(stub.url, "stub-model", api_key_env="MY_KEY", env={"MY_KEY": "sekret"})
        out = llm.chat(
            [ChatMessage("system", "Be brief."), ChatMessage("user", "Capital of France?")], stop=["."], max_tokens=7
        )
    path, headers, body = stub.requests[0]
    assert path == "/v1/chat/completions"
    assert headers["Authorization"] == "Bearer sekret"
    assert body == {
        "model": "stub-model",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"}],
        "max_tokens": 7,
        "temperature": 0.0,
        "stop": ["."],
        "logprobs": True,  # for the reply's confidence
        "top_logprobs": 5,
    }
    assert out.confidence is None  # the server returned no log-probabilities: no confidence, no error
    assert out.text == "Paris"  # stop strings are also applied locally
    assert out.finish_reason == "stop"
    assert (out.usage.prompt_tokens, out.usage.cached_prompt_tokens, out.usage.generated_tokens, out.usage.calls) == (
        12,
        8,
        4,
        1,
    )
    assert out.usage.wall_ms > 0


def test_complete_uses_completions_endpoint():
    with Stub([(200, {}, COMPLETE_OK)]) as stub:
        out = backend(stub.url, seed=3, extra_body={"top_k": 1}).complete("1, 2, 3,", max_tokens=2)
    path, headers, body = stub.requests[0]
    assert path == "/v1/completions"
    assert "Authorization" not in headers
    assert body == {
        "model": "stub-model",
        "prompt": "1, 2, 3,",
        "max_tokens": 2,
        "temperature": 0.0,
        "seed": 3,
        "top_k": 1,
        "logprobs": 5,  # the completions endpoint's form
    }
    assert (out.text, out.finish_reason) == (" 4, 5", "length")
    assert (out.usage.prompt_tokens, out.usage.cached_prompt_tokens, out.usage.generated_tokens) == (5, 0, 2)


def test_complete_via_chat():
    with Stub([(200, {}, CHAT_OK)]) as stub:
        out = backend(stub.url, complete_via_chat=True).complete("Capital of France?")
    path, _, body = stub.requests[0]
    assert path == "/v1/chat/completions"
    assert body["messages"] == [{"role": "user", "content": "Capital of France?"}]
    assert out.text == "Paris. And more"


CHAT_LOGPROBS = {
    "choices": [
        {
            "message": {"role": "assistant", "content": "Paris"},
            "finish_reason": "stop",
            "logprobs": {
                "content": [
                    {
                        "token": "Par",
                        "logprob": -0.1,
                        "top_logprobs": [{"token": "Par", "logprob": -0.1}, {"token": "Lon", "logprob": -2.5}],
                    },
                    {
                        "token": "is",
                        "logprob": -0.5,
                        "top_logprobs": [{"token": "is", "logprob": -0.5}, {"token": "ma", "logprob": -1.0}],
                    },
                ]
            },
        }
    ],
    "usage": {"prompt_tokens": 12, "completion_tokens": 2},
}


def top_entropy(*logprobs: float) -> float:
    """The entropy over reported alternatives, the rest of the probability one more outcome."""
    p = [math.exp(x) for x in logprobs]
    return -sum(x * math.log(x) for x in [*p, 1 - sum(p)])


def test_a_chat_replys_logprobs_become_its_confidence():
    with Stub([(200, {}, CHAT_LOGPROBS)]) as stub:
        out = backend(stub.url, logprobs=2).chat([ChatMessage("user", "Capital of France?")])
    body = stub.requests[0][2]
    assert (body["logprobs"], body["top_logprobs"]) == (True, 2)
    c = out.confidence
    assert (c.tokens, c.basis) == (2, "top-2")
    assert (c.mean_logprob, c.min_logprob, c.first_margin) == (pytest.approx(-0.3), -0.5, pytest.approx(2.4))
    assert c.mean_entropy == pytest.approx((top_entropy(-0.1, -2.5) + top_entropy(-0.5, -1.0)) / 2)
    assert c.max_entropy == pytest.approx(top_entropy(-0.5, -1.0))
    assert c.with_answer(out.text, "Paris").answer.tokens == 2


def test_a_completions_replys_logprobs_become_its_confidence():
    reply = {
        "choices": [
            {
                "text": " 4",
                "finish_reason": "stop",
                "logprobs": {"tokens": [" 4"], "token_logprobs": [-0.2], "top_logprobs": [{" 4": -0.2, " 5": -1.9}]},
            }
        ]
    }
    with Stub([(200, {}, reply)]) as stub:
        out = backend(stub.url).complete("1, 2, 3,")
    assert stub.requests[0][2]["logprobs"] == 5
    c = out.confidence
    assert (c.tokens, c.mean_logprob, c.first_margin, c.basis) == (1, -0.2, pytest.approx(1.7), "top-5")
    assert c.mean_entropy == pytest.approx(top_entropy(-0.2, -1.9))


def test_a_server_refusing_logprobs_is_asked_again_without_them_and_not_again():
    refusal = (400, {}, {"error": {"message": "logprobs are not supported by this model"}})
    with Stub([refusal, (200, {}, CHAT_OK)]) as stub:
        llm = backend(stub.url)
        first = llm.chat([ChatMessage("user", "Capital of France?")])
        second = llm.chat([ChatMessage("user", "Capital of France?")])
    assert len(stub.requests) == 3 and "logprobs" in stub.requests[0][2]
    assert all("logprobs" not in body and "top_logprobs" not in body for _, _, body in stub.requests[1:])
    assert first.text == second.text == "Paris. And more" and first.confidence is None


def test_logprobs_none_asks_for_none_and_a_400_for_another_reason_still_fails():
    with Stub([(200, {}, CHAT_LOGPROBS)]) as stub:
        out = backend(stub.url, logprobs=None).chat([ChatMessage("user", "?")])
    assert "logprobs" not in stub.requests[0][2] and out.confidence is None
    with Stub([(400, {}, "prompt too long")]) as stub, pytest.raises(LLMError, match="prompt too long"):
        backend(stub.url).chat([ChatMessage("user", "?")])


def test_only_four_stops_are_sent_but_all_apply():
    reply = {"choices": [{"text": "a b c d e f", "finish_reason": "length"}], "usage": {}}
    with Stub([(200, {}, reply)]) as stub:
        out = backend(stub.url).complete("x", stop=["1", "2", "3", "4", " e"])
    assert stub.requests[0][2]["stop"] == ["1", "2", "3", "4"]
    assert (out.text, out.finish_reason) == ("a b c d", "stop")
    assert out.usage.prompt_tokens == 0  # no counts in the usage block read as 0


def test_retries_503_then_succeeds():
    sleeps: list[float] = []
    with Stub([(503, {}, "busy"), (503, {}, "busy"), (200, {}, CHAT_OK)]) as stub:
        out = backend(stub.url, sleeps, max_attempts=4, backoff_s=0.01).chat([ChatMessage("user", "hi")])
    assert len(stub.requests) == 3
    assert out.text == "Paris. And more"
    assert sleeps == [0.01, 0.02]  # exponential backoff


def test_honours_retry_after():
    sleeps: list[float] = []
    with Stub([(429, {"Retry-After": "0"}, {"error": "slow down"}), (200, {}, CHAT_OK)]) as stub:
        backend(stub.url, sleeps, backoff_s=5.0).chat([ChatMessage("user", "hi")])
    assert len(stub.requests) == 2
    assert sleeps == [0.0]


def test_retry_after_is_capped():
    sleeps: list[float] = []
    with Stub([(429, {"Retry-After": "3600"}, ""), (200, {}, CHAT_OK)]) as stub:
        backend(stub.url, sleeps, max_delay_s=0.05).chat([ChatMessage("user", "hi")])
    assert sleeps == [0.05]


def test_always_500_gives_up_after_max_attempts():
    with Stub([(500, {}, "model crashed")]) as stub:
        with pytest.raises(LLMError) as err:
            backend(stub.url, max_attempts=3, backoff_s=0.001).chat([ChatMessage("user", "hi")])
    assert len(stub.requests) == 3
    message = str(err.value)
    assert stub.url + "/chat/completions" in message
    assert "3 attempts" in message and "HTTP 500" in message and "model crashed" in message


def test_connection_reset_is_retried():
    with Stub([None, (200, {}, CHAT_OK)]) as stub:
        out = backend(stub.url, backoff_s=0.001).chat([ChatMessage("user", "hi")])
    assert len(stub.requests) == 2
    assert out.text == "Paris. And more"


def test_4xx_fails_at_once_with_server_body():
    with Stub([(400, {}, {"error": {"message": "max_tokens is too large: 99999"}})]) as stub:
        with pytest.raises(LLMError) as err:
            backend(stub.url).chat([ChatMessage("user", "hi")], max_tokens=99999)
    assert len(stub.requests) == 1
    assert "HTTP 400" in str(err.value) and "max_tokens is too large: 99999" in str(err.value)
    assert stub.url in str(err.value)


def test_401_names_the_key_variable():
    with Stub([(401, {}, {"error": "invalid api key"})]) as stub:
        llm = OpenAICompatLLM.from_env(stub.url, "m", api_key_env="NLQO_TEST_KEY", env={})
        with pytest.raises(LLMError, match=r"\$NLQO_TEST_KEY: not set"):
            llm.chat([ChatMessage("user", "hi")])


def test_connection_refused_names_the_url():
    url = f"http://127.0.0.1:{free_port()}/v1"
    sleeps: list[float] = []
    with pytest.raises(LLMError) as err:
        backend(url, sleeps).complete("hi")
    assert f"{url}/completions" in str(err.value)
    assert "connection refused" in str(err.value)
    assert sleeps == []


def test_malformed_response():
    with Stub([(200, {}, {"choices": []})]) as stub:
        with pytest.raises(LLMError, match="unexpected response shape"):
            backend(stub.url).chat([ChatMessage("user", "hi")])


def test_bad_url():
    with pytest.raises(LLMError, match="not an http"):
        OpenAICompatLLM("127.0.0.1:8000", "m").complete("hi")


# --- against a real server -------------------------------------------------------------------

llama_server = llama_server_fixture()


@pytest.fixture(scope="module")
def real(llama_server: str) -> Iterator[OpenAICompatLLM]:
    yield OpenAICompatLLM(llama_server, MODEL_ALIAS, timeout_s=120.0)


QUESTION = [ChatMessage("user", "What is the capital of France? Answer in one sentence.")]


@pytest.mark.server
def test_real_chat_and_usage(real: OpenAICompatLLM):
    out = real.chat(QUESTION, max_tokens=24)
    assert out.text.strip()
    assert out.usage.calls == 1
    assert out.usage.prompt_tokens > 5
    assert 0 < out.usage.generated_tokens <= 24
    assert out.usage.wall_ms > 0


@pytest.mark.server
def test_real_complete(real: OpenAICompatLLM):
    out = real.complete("The first three months of the year are January, February and", max_tokens=8)
    assert out.text.strip()
    assert out.usage.prompt_tokens > 5
    assert 0 < out.usage.generated_tokens <= 8


@pytest.mark.server
@pytest.mark.parametrize("method", ["complete", "chat"])
def test_real_replies_carry_the_servers_logprobs_as_confidence(real: OpenAICompatLLM, method: str):
    out = real.chat(QUESTION, max_tokens=8) if method == "chat" else real.complete("One, two,", max_tokens=4)
    c = out.confidence
    assert c is not None and c.basis == "top-5" and 1 <= c.tokens <= out.usage.generated_tokens + 1
    assert math.isfinite(c.mean_logprob) and c.min_logprob <= c.mean_logprob <= 0.0
    assert 0.0 <= c.mean_entropy <= c.max_entropy <= math.log(7) + 1e-9  # five alternatives, the choice, the rest


@pytest.mark.server
def test_real_greedy_is_deterministic(real: OpenAICompatLLM):
    first = real.chat(QUESTION, max_tokens=24)
    second = real.chat(QUESTION, max_tokens=24)
    assert first.text == second.text
    a = real.complete("Once upon a time", max_tokens=16)
    b = real.complete("Once upon a time", max_tokens=16)
    assert a.text == b.text


@pytest.mark.server
def test_real_max_tokens_gives_length(real: OpenAICompatLLM):
    out = real.complete("Write a long story about a dragon.\n\n", max_tokens=5)
    assert out.finish_reason == "length"
    assert out.usage.generated_tokens == 5


@pytest.mark.server
@pytest.mark.parametrize("method", ["complete", "chat"])
def test_real_stop_strings(real: OpenAICompatLLM, method: str):
    def run(stop):
        if method == "chat":
            return real.chat([ChatMessage("user", "List five fruits, separated by commas.")], stop=stop, max_tokens=24)
        return real.complete("Here is a list of five fruits: apple,", stop=stop, max_tokens=24)

    full = run([]).text
    words = full.split()
    assert len(words) >= 3, full
    stop = words[2]  # a string known to occur in the greedy output
    cut = run([stop])
    assert stop not in cut.text
    assert cut.finish_reason == "stop"
    assert cut.text == full[: full.index(stop)]


@pytest.mark.server
def test_real_through_cache(real: OpenAICompatLLM, tmp_path):
    llm = CachedLLM(real, tmp_path)
    first = llm.chat(QUESTION, max_tokens=12)
    second = llm.chat(QUESTION, max_tokens=12)
    assert not is_cache_hit(first) and is_cache_hit(second)
    assert second.text == first.text
    assert second.usage.generated_tokens == first.usage.generated_tokens


@pytest.mark.server
def test_real_server_follows_a_grammar_passed_as_gbnf(llama_server: str):
    """llama.cpp's own GBNF parser takes nlqo's grammars: relation words and the IR's whole-reply grammar."""
    from nlqo.errors import IRSemanticError
    from nlqo.ir.grammar import ir_constraint
    from nlqo.runtime.llm.constrain import choice, constrained_chat
    from nlqo.runtime.prompts import planning
    from nlqo.optimizer.relations import KINDS
    from nlqo.ir.syntax import parse

    llm = OpenAICompatLLM(llama_server, MODEL_ALIAS, timeout_s=120.0, grammar_field="grammar")
    word = constrained_chat(llm, [ChatMessage("user", "Write a poem about the sea.")], choice(KINDS), max_tokens=8)
    assert word.text in KINDS
    question = "In which city was the director of the film Jaws born?"
    reply = constrained_chat(llm, planning.PARSE.messages(question=question), ir_constraint(question), max_tokens=200)
    if reply.finish_reason == "stop":
        try:
            parse(reply.text)
        except IRSemanticError as exc:  # the whole-reply grammar cannot tie the answer to the atoms
            assert "is not mentioned by any atom" in str(exc) or "answer names a target twice" in str(exc)
    assert reply.text.startswith("q1 = (")
