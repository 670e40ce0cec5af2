"""The on-disk LLM response cache: hits and misses, key sensitivity, concurrent writers."""

from __future__ import annotations

import json
import multiprocessing
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from nlqo.errors import LLMError
from nlqo.runtime.llm.base import LLM, Capabilities, ChatMessage, Usage
from nlqo.runtime.llm.cache import CachedLLM, is_cache_hit, request_key, with_cache
from nlqo.runtime.llm.openai_compat import OpenAICompatLLM
from nlqo.runtime.llm.scripted import ScriptedLLM

BIG = 50_000
"""Reply length in the concurrency tests: large enough that a non-atomic write would be seen torn."""


def echo(prompt: str) -> str:
    return f"echo {prompt}"


def big_reply(prompt: str) -> str:
    """One long word (ScriptedLLM cuts replies at max_tokens words)."""
    return prompt.replace(" ", "_") * (BIG // len(prompt))


def test_is_an_llm(tmp_path):
    assert isinstance(CachedLLM(ScriptedLLM([]), tmp_path), LLM)


def test_miss_then_hit(tmp_path):
    inner = ScriptedLLM([], default=echo)
    llm = CachedLLM(inner, tmp_path / "cache")
    miss = llm.complete("a b c", stop=["\n"], max_tokens=5)
    hit = llm.complete("a b c", stop=["\n"], max_tokens=5)
    assert len(inner.calls) == 1
    assert (llm.hits, llm.misses) == (1, 1)
    assert not is_cache_hit(miss) and is_cache_hit(hit)
    assert (hit.text, hit.finish_reason) == (miss.text, miss.finish_reason) == ("echo a b c", "stop")
    # a hit keeps the original token counts and calls; only wall_ms is the lookup's
    assert hit.original_usage == miss.usage
    assert attrs_without_wall(hit.usage) == attrs_without_wall(miss.usage) == (3, 0, 4, 1)


def attrs_without_wall(u: Usage) -> tuple[int, int, int, int]:
    return (u.prompt_tokens, u.cached_prompt_tokens, u.generated_tokens, u.calls)


def test_chat_hit_and_persistence_across_instances(tmp_path):
    messages = [ChatMessage("system", "s"), ChatMessage("user", "u")]
    first_inner = ScriptedLLM([], default=echo)
    CachedLLM(first_inner, tmp_path).chat(messages)
    second_inner = ScriptedLLM([], default=echo)
    out = CachedLLM(second_inner, tmp_path).chat(messages)
    assert is_cache_hit(out) and out.text == "echo s\nu"
    assert second_inner.calls == []


def test_finish_reason_is_kept(tmp_path):
    llm = CachedLLM(ScriptedLLM([], default="one two three"), tmp_path)
    llm.complete("p", max_tokens=2)
    hit = llm.complete("p", max_tokens=2)
    assert (hit.text, hit.finish_reason) == ("one two", "length")


def key(llm, method="complete", payload="prompt", stop=("\n",), max_tokens=16) -> str:
    return request_key(llm, method, payload, stop, max_tokens)[0]


def test_key_sensitivity():
    scripted = ScriptedLLM([])
    base = key(scripted)
    assert key(scripted) == base
    assert key(scripted, payload="prompt ") != base
    assert key(scripted, max_tokens=17) != base
    assert key(scripted, stop=("\n", ".")) != base
    assert key(scripted, stop=()) != base
    assert key(scripted, method="chat") != base
    assert key(ScriptedLLM([], name="other")) != base
    # the order and repetition of stop strings do not change the result, nor the key
    assert key(scripted, stop=(".", "\n")) == key(scripted, stop=("\n", ".", "\n"))
    user = [{"role": "user", "content": "x"}]
    assert key(scripted, "chat", user) != key(scripted, "chat", [{"role": "system", "content": "x"}])


def test_key_covers_backend_settings_but_not_the_url():
    http = OpenAICompatLLM("http://127.0.0.1:1", "model-a")
    base = key(http)
    assert key(OpenAICompatLLM("http://127.0.0.1:2/v1", "model-a")) == base
    assert key(OpenAICompatLLM("http://127.0.0.1:1", "model-b")) != base
    assert key(OpenAICompatLLM("http://127.0.0.1:1", "model-a", temperature=0.7)) != base
    assert key(OpenAICompatLLM("http://127.0.0.1:1", "model-a", seed=1)) != base
    assert key(OpenAICompatLLM("http://127.0.0.1:1", "model-a", extra_body={"top_k": 1})) != base
    assert key(OpenAICompatLLM("http://127.0.0.1:1", "model-a", complete_via_chat=True)) != base


def test_different_parameters_miss(tmp_path):
    inner = ScriptedLLM([], default=echo)
    llm = CachedLLM(inner, tmp_path)
    llm.complete("p", max_tokens=5)
    llm.complete("p", max_tokens=6)
    llm.complete("p", max_tokens=5, stop=["x"])
    llm.chat([ChatMessage("user", "p")], max_tokens=5)
    assert len(inner.calls) == 4
    assert (llm.hits, llm.misses) == (0, 4)
    assert len(entries(tmp_path)) == 4


def test_errors_are_not_cached(tmp_path):
    llm = CachedLLM(ScriptedLLM([]), tmp_path)
    with pytest.raises(LLMError):
        llm.complete("nothing scripted")
    assert entries(tmp_path) == []


def test_corrupt_entry_is_a_miss_and_is_rewritten(tmp_path):
    inner = ScriptedLLM([], default=echo)
    llm = CachedLLM(inner, tmp_path)
    llm.complete("p")
    [path] = entries(tmp_path)
    path.write_text('{"trunc', encoding="utf-8")
    again = llm.complete("p")
    assert not is_cache_hit(again) and again.text == "echo p"
    assert json.loads(path.read_text(encoding="utf-8"))["text"] == "echo p"
    assert len(inner.calls) == 2


def test_with_cache_off_returns_the_backend(tmp_path):
    inner = ScriptedLLM([])
    assert with_cache(inner, None) is inner
    assert isinstance(with_cache(inner, tmp_path), CachedLLM)


def test_no_io_until_first_call(tmp_path):
    CachedLLM(ScriptedLLM([]), tmp_path / "later")
    assert not (tmp_path / "later").exists()


def entries(directory: Path) -> list[Path]:
    return sorted(directory.rglob("*.json"))


def leftovers(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file() and p.suffix != ".json"]


def test_concurrent_threads_same_and_different_keys(tmp_path):
    llm = CachedLLM(ScriptedLLM([], default=big_reply), tmp_path)
    prompts = [f"shared {i % 3}" if i % 2 else f"own {i}" for i in range(64)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        texts = list(pool.map(lambda p: llm.complete(p).text, prompts))
    assert texts == [big_reply(p) for p in prompts]
    assert llm.hits + llm.misses == 64
    assert len(entries(tmp_path)) == len(set(prompts))
    assert leftovers(tmp_path) == []
    for path in entries(tmp_path):
        entry = json.loads(path.read_text(encoding="utf-8"))
        assert entry["text"] == big_reply(entry["request"]["input"])


def write_rounds(directory: str, worker: int, rounds: int, start) -> None:
    """One writer process: in each round, the same key as every other writer and one of its own.

    The shared entry is deleted before being asked for again, so writers keep racing on it.
    """
    start.wait()
    llm = CachedLLM(ScriptedLLM([], default=big_reply), directory)
    for r in range(rounds):
        for prompt in (f"shared {r % 4}", f"own {worker} {r}"):
            out = llm.complete(prompt)
            if out.text != big_reply(prompt):
                raise AssertionError(f"worker {worker} got a wrong reply for {prompt!r}")
        llm.path_of(request_key(llm.inner, "complete", f"shared {r % 4}", (), 256)[0]).unlink(missing_ok=True)


def scan_until(directory: str, stop, torn) -> None:
    """A reader process: parse every entry over and over; count any that is not complete JSON."""
    while not stop.is_set():
        for path in Path(directory).rglob("*.json"):
            try:
                text = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                continue
            try:
                json.loads(text)
            except ValueError:
                with torn.get_lock():
                    torn.value += 1


def test_concurrent_processes_same_and_different_keys(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    workers, rounds = 4, 25
    start, stop, torn = ctx.Barrier(workers), ctx.Event(), ctx.Value("i", 0)
    reader = ctx.Process(target=scan_until, args=(str(tmp_path), stop, torn))
    reader.start()
    writers = [ctx.Process(target=write_rounds, args=(str(tmp_path), w, rounds, start)) for w in range(workers)]
    for p in writers:
        p.start()
    for p in writers:
        p.join(timeout=300)
    stop.set()
    reader.join(timeout=60)
    assert [p.exitcode for p in writers] == [0] * workers
    assert reader.exitcode == 0
    assert torn.value == 0
    assert leftovers(tmp_path) == []
    found = {json.loads(p.read_text(encoding="utf-8"))["request"]["input"]: p for p in entries(tmp_path)}
    own = {f"own {w} {r}" for w in range(workers) for r in range(rounds)}
    assert own <= set(found)
    for prompt in found:
        assert json.loads(found[prompt].read_text(encoding="utf-8"))["text"] == big_reply(prompt)
    # every process reads the others' entries back
    inner = ScriptedLLM([])
    llm = CachedLLM(inner, tmp_path)
    assert all(llm.complete(p).text == big_reply(p) for p in sorted(own))
    assert inner.calls == []


def test_concurrent_threads_race_on_one_key(tmp_path):
    """Many threads miss the same key at once; each gets the right text and one entry remains."""
    barrier = threading.Barrier(8)

    def slow(prompt: str) -> str:
        barrier.wait()
        return big_reply(prompt)

    inner = ScriptedLLM([], default=slow)
    llm = CachedLLM(inner, tmp_path)
    with ThreadPoolExecutor(max_workers=8) as pool:
        texts = list(pool.map(lambda _: llm.complete("same").text, range(8)))
    assert texts == [big_reply("same")] * 8
    assert llm.misses == 8
    assert len(entries(tmp_path)) == 1 and leftovers(tmp_path) == []


class PrefixLLM(ScriptedLLM):
    """A scripted backend that records whether it was asked to reuse its prefix KV cache, and forks."""

    capabilities = Capabilities(prefix_cache=True, fork=True)

    def __init__(self, forks: list | None = None) -> None:
        super().__init__([], default=echo)
        self.prefix_requests: list[bool] = []
        self.forks = forks if forks is not None else []

    def complete(self, prompt, *, stop=(), max_tokens=256, prefix_cache=False):
        self.prefix_requests.append(prefix_cache)
        return super().complete(prompt, stop=stop, max_tokens=max_tokens)

    def fork(self):
        child = PrefixLLM(self.forks)
        self.forks.append(child)
        return child


def test_prefix_cache_requests_reach_the_backend_on_a_miss(tmp_path):
    from nlqo.runtime.llm.base import complete_reusing_prefix

    inner = PrefixLLM()
    llm = CachedLLM(inner, tmp_path)
    complete_reusing_prefix(llm, "a b")
    llm.complete("c d")
    assert inner.prefix_requests == [True, False]
    assert is_cache_hit(complete_reusing_prefix(llm, "c d"))  # the key does not depend on the request for reuse
    assert inner.prefix_requests == [True, False]


def test_a_fork_shares_the_folder_over_a_forked_backend(tmp_path):
    inner = PrefixLLM()
    llm = CachedLLM(inner, tmp_path)
    llm.complete("a b")
    forked = llm.fork()
    assert forked.inner is inner.forks[0] and forked.directory == llm.directory
    assert is_cache_hit(forked.complete("a b")) and inner.forks[0].calls == []
    plain = CachedLLM(ScriptedLLM([], default=echo), tmp_path).fork()
    assert isinstance(plain.inner, ScriptedLLM) and is_cache_hit(plain.complete("a b"))
