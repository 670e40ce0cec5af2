"""A server's real concurrency: slots read from the llama.cpp server's ``/props`` / ``/slots``, else
measured by sending requests at once; ``auto`` lowers a branching plan to the tree on a server
that runs nodes together and to the linear template on one that runs them one by one.

The stub servers really serve requests over loopback HTTP with a fixed number of slots (a
semaphore) and a time per token, so what ``measure_profile`` measures is what they do. Tests
against real llama.cpp servers (``-m server``) are at the end.
"""

from __future__ import annotations

import json
import threading
import time

import attrs
import pytest
from loopback import Loopback, QuietHandler

from nlqo.optimizer.cost import load_cost_model
from nlqo.execution.physical import BackendProfile
from nlqo.planner.lower import (
    _PROBE_TEXT,
    concurrent_requests,
    lower,
    measure_profile,
    probe_concurrency,
    server_prefix_cache,
)
from nlqo.runtime.llm.base import Capabilities, capabilities
from nlqo.runtime.llm.cache import CachedLLM
from nlqo.runtime.llm.openai_compat import OpenAICompatLLM
from nlqo.optimizer.optimizer import Optimizer
from nlqo.ir.syntax import parse

BRANCHING = parse(
    'question "Who was born first, Ada Lovelace or Charles Babbage?"\n'
    'q1 = ("Ada Lovelace", "born on", ?d1)\nq2 = ("Charles Babbage", "born on", ?d2)\n'
    'q3 = (?first, "born before", ?d1)\nq4 = (?first, "born before", ?d2)\n'
    "relation q1 sibling q2\nrelation q3 sibling q4\nanswer ?first"
)


class SlotServer(Loopback):
    """A loopback OpenAI-style server with ``slots`` slots: a request waits for a free slot, then takes
    ``prefill_ms`` per computed prompt token (words) and ``decode_ms`` per generated token. A prompt
    equal to the last one a slot saw is served from that slot's cache (reported as cached tokens).
    ``report``: 'props' (``/props`` gives ``total_slots``), 'slots' (only ``/slots``) or None."""

    def __init__(
        self,
        slots: int,
        *,
        report: str | None = "props",
        prefill_ms: float = 2.0,
        decode_ms: float = 25.0,
        loading: int = 0,
    ):
        self.slots, self.report, self.gets, self.loading = slots, report, [], loading
        free = threading.Semaphore(slots)
        last: list[str] = [""] * slots
        taken = threading.Lock()
        stub = self

        class Handler(QuietHandler):
            def do_GET(self):
                stub.gets.append(self.path)
                if len(stub.gets) <= stub.loading:
                    self.reply(503, {"error": {"message": "Loading model", "code": 503}})
                elif self.path == "/props" and stub.report == "props":
                    self.reply(200, {"total_slots": stub.slots, "default_generation_settings": {}})
                elif self.path == "/slots" and stub.report in ("props", "slots"):
                    self.reply(200, [{"id": i} for i in range(stub.slots)])
                else:
                    self.reply(404, {"error": "not found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                prompt = body["prompt"]
                tokens = len(prompt.split())
                with free:
                    with taken:  # the slot whose last prompt matches, else any
                        slot = (
                            last.index(prompt)
                            if prompt in last
                            else next(i for i, p in enumerate(last) if p != "\0busy")
                        )
                        cached = tokens - 1 if last[slot] == prompt else 0
                        last[slot] = "\0busy"
                    time.sleep(((tokens - cached) * prefill_ms + body["max_tokens"] * decode_ms) / 1000)
                    with taken:
                        last[slot] = prompt
                usage = {
                    "prompt_tokens": tokens,
                    "completion_tokens": body["max_tokens"],
                    "prompt_tokens_details": {"cached_tokens": cached},
                }
                self.reply(200, {"choices": [{"text": " x", "finish_reason": "length"}], "usage": usage})

        super().__init__(Handler)


def server_profile(llm: OpenAICompatLLM) -> BackendProfile:
    """What :meth:`nlqo.Engine.from_config` measures for a server backend (``strategy="auto"``)."""
    return measure_profile(llm, BackendProfile(kv_reuse=False, concurrency=capabilities(llm).concurrency))


def test_slots_are_read_from_props_once():
    with SlotServer(3) as server:
        llm = OpenAICompatLLM(server.url, "m")
        assert (llm.server_slots(), llm.concurrency, llm.concurrency) == (3, 3, 3)
        assert server.gets == ["/props"]


def test_the_reported_slots_are_the_declared_concurrency_also_behind_a_response_cache(tmp_path):
    with SlotServer(3) as server:
        llm = OpenAICompatLLM(server.url, "m")
        assert capabilities(llm) == Capabilities(concurrency=3, server_slots=True, cache_identity=True)
        cached = CachedLLM(llm, tmp_path)
        assert (capabilities(cached).concurrency, capabilities(cached).server_slots, cached.server_slots()) == (
            3,
            True,
            3,
        )
        assert server.gets == ["/props"]


def test_a_server_still_loading_is_asked_again_after_a_pause(monkeypatch):
    import nlqo.runtime.llm.openai_compat as openai_compat

    with SlotServer(3, loading=2) as server:
        llm = OpenAICompatLLM(server.url, "m")
        assert llm.server_slots() is None  # 503 on /props and /slots: not known yet, not remembered
        assert (llm.server_slots(), llm.concurrency) == (None, 1)  # within the pause: not asked again
        assert server.gets == ["/props", "/slots"]
        monkeypatch.setattr(openai_compat, "SLOTS_RETRY_S", 0.0)
        assert (llm.server_slots(), llm.concurrency) == (3, 3)
        assert server.gets == ["/props", "/slots", "/props"]


def test_slots_are_read_from_slots_when_props_does_not_say():
    with SlotServer(2, report="slots") as server:
        assert OpenAICompatLLM(server.url, "m").server_slots() == 2
        assert server.gets == ["/props", "/slots"]


def test_a_server_that_reports_no_slots_has_concurrency_one_until_measured():
    with SlotServer(2, report=None) as server:
        llm = OpenAICompatLLM(server.url, "m")
        assert (llm.server_slots(), llm.concurrency) == (None, 1)


def test_reported_slots_make_auto_lower_a_branching_plan_to_the_tree():
    plan = Optimizer(cost_model=load_cost_model("structural")).optimize(BRANCHING)
    assert max(len(w) for w in plan.tree.levels()) >= 2
    with SlotServer(4) as four, SlotServer(1) as one:
        parallel, serial = server_profile(OpenAICompatLLM(four.url, "m")), server_profile(OpenAICompatLLM(one.url, "m"))
    assert (parallel.concurrency, parallel.concurrency_source) == (4, "server slots")
    assert (serial.concurrency, serial.concurrency_source) == (1, "server slots")
    assert parallel.kv_reuse and serial.kv_reuse  # both serve a repeated prompt from the slot's cache
    assert len(parallel.batch_speedup) == 4 and parallel.batch_speedup[1] > 1.6 and serial.batch_speedup == ()
    chosen = lower(plan, parallel)
    assert (
        chosen.operator == "tree"
        and "backend concurrency 4 (server slots), measured batch throughput 1:1.00x 2:" in chosen.reason
    )
    assert lower(plan, serial).operator == "linear"


@pytest.mark.parametrize("slots", [1, 2])
def test_a_server_that_does_not_report_slots_is_measured(slots):
    with SlotServer(slots, report=None) as server:
        profile = server_profile(OpenAICompatLLM(server.url, "m"))
    assert (profile.concurrency, profile.concurrency_source) == (slots, "measured")
    assert len(profile.batch_speedup) == (slots if slots > 1 else 0)


def test_a_prefix_cache_counts_only_for_a_prompt_the_server_still_holds():
    from nlqo.planner.lower import server_prefix_cache
    from nlqo.runtime.llm.scripted import ScriptedLLM

    prompt = "eight nine ten eleven twelve"
    with SlotServer(1) as server:
        llm = OpenAICompatLLM(server.url, "m")
        assert server_prefix_cache(llm, prompt) is False  # new to the server: computed
        assert server_prefix_cache(llm, prompt) is True  # its slot still holds it
        llm.complete("another prompt", max_tokens=1)
        assert server_prefix_cache(llm, prompt) is False  # the only slot moved on
    assert server_prefix_cache(ScriptedLLM([], default="x"), prompt) is False  # not a server


class SlotsLLM:
    """An in-process server backend for the probes, timed by what it reports: ``slots`` requests run at
    once, so request number i of requests sent together (``(i)`` or ``(round.i)`` in the prompt)
    finishes in tier ceil(i / slots); a request takes ``prefill_ms`` per computed prompt token (word)
    and ``decode_ms`` per generated token, and a prompt it served before comes from its cache but for
    the last token. ``server_slots()`` says ``reported`` (None: it does not say). ``barrier``: numbered
    requests wait there until that many are in flight. Every request is recorded in ``calls``."""

    name = "slots"

    def __init__(self, slots, *, reported=None, prefill_ms=2.0, decode_ms=25.0, barrier=None):
        self.slots, self.reported, self.prefill_ms, self.decode_ms, self.barrier = (
            slots, reported, prefill_ms, decode_ms, barrier,
        )  # fmt: skip
        self.capabilities = Capabilities(concurrency=reported or 1, server_slots=True)
        self.calls: list[tuple[str, int]] = []
        self.seen: set[str] = set()
        self.lock = threading.Lock()

    def server_slots(self):
        return self.reported

    def complete(self, prompt, *, stop=(), max_tokens=256):
        import math
        import re

        from nlqo.runtime.llm.base import Completion, Usage

        with self.lock:
            self.calls.append((prompt, max_tokens))
            tokens = len(prompt.split())
            cached = tokens - 1 if prompt in self.seen else 0
            self.seen.add(prompt)
        number = re.search(r"\((?:\d+\.)?(\d+)\)", prompt)
        if number and self.barrier is not None:
            self.barrier.wait(timeout=5)
        tier = math.ceil(int(number.group(1)) / self.slots) if number else 1
        wall = ((tokens - cached) * self.prefill_ms + max_tokens * self.decode_ms) * tier
        usage = Usage(prompt_tokens=tokens, cached_prompt_tokens=cached, generated_tokens=max_tokens, wall_ms=wall)
        return Completion(" x", usage)


PROBE = _PROBE_TEXT * 4


def test_measure_profile_takes_the_slots_a_server_reports_and_its_prefix_cache():
    llm = SlotsLLM(3, reported=3)
    profile = measure_profile(llm, BackendProfile(kv_reuse=False))
    assert (profile.concurrency, profile.concurrency_source, profile.kv_reuse, profile.source) == (
        3,
        "server slots",
        True,
        "measured",
    )
    assert (profile.prefill_ms_per_token, profile.decode_ms_per_token) == pytest.approx((2.0, 25.0))
    assert profile.batch_speedup == pytest.approx((1.0, 2.0, 3.0))
    # the two probes with the long one sent twice (served from the cache the second time), then the batch gain
    assert llm.calls[:3] == [(PROBE, 1), (PROBE, 1), ("Rivers:", 6)] and len(llm.calls) == 3 + 1 + 2 + 3


def test_measure_profile_measures_the_concurrency_of_a_server_that_does_not_report_it():
    llm = SlotsLLM(2)
    profile = measure_profile(llm, BackendProfile(kv_reuse=False))
    assert (profile.concurrency, profile.concurrency_source, profile.batch_speedup) == (2, "measured", (1.0, 2.0))
    warm_up = [(PROBE, 1), (PROBE, 1), ("Rivers:", 6), ("List of rivers:", 12)]
    assert llm.calls[:4] == warm_up
    # two rounds of four requests sent together, then one and two for the batch gain
    rounds = [sorted(llm.calls[4:8]), sorted(llm.calls[8:12])]
    assert rounds == [[(f"List of rivers ({r}.{i}):", 12) for i in (1, 2, 3, 4)] for r in (0, 1)]
    assert llm.calls[12] == ("List of rivers (1):", 12) and len(llm.calls) == 15


def test_a_server_that_still_holds_the_probe_prompts_measures_the_same_costs():
    llm = SlotsLLM(2, reported=2)
    first = measure_profile(llm, BackendProfile(kv_reuse=False))
    again = measure_profile(llm, BackendProfile(kv_reuse=False))  # every probe prompt is cached now
    assert (again.prefill_ms_per_token, again.decode_ms_per_token) == pytest.approx((2.0, 25.0))
    assert again == attrs.evolve(
        first, prefill_ms_per_token=again.prefill_ms_per_token, decode_ms_per_token=again.decode_ms_per_token
    )


def test_the_concurrency_probe_sends_its_requests_at_once_and_counts_those_that_finish_with_the_first():
    # 40 requests that only finish once all 40 are in flight: sent one pool worker each
    llm = SlotsLLM(40, barrier=threading.Barrier(40))
    assert probe_concurrency(llm, requests=40, rounds=1) == 40
    assert concurrent_requests([100.0, 150.0, 150.5]) == 2  # within 1.5 times the first, the bound included
    assert probe_concurrency(SlotsLLM(3)) == 3 and probe_concurrency(SlotsLLM(8)) == 4  # at most the requests sent


@pytest.mark.parametrize(
    "prompt_tokens, cached, served",
    [(0, 0, False), (1, 1, True), (4, 2, True), (5, 2, True), (4, 1, False), (6, 2, False), (9, 4, True)],
)
def test_a_prefix_cache_counts_when_at_least_half_the_prompt_comes_from_it(prompt_tokens, cached, served):
    from nlqo.runtime.llm.base import Completion, Usage

    class Reports(SlotsLLM):
        def complete(self, prompt, *, stop=(), max_tokens=256):
            self.calls.append((prompt, max_tokens))
            return Completion(" x", Usage(prompt_tokens=prompt_tokens, cached_prompt_tokens=cached, wall_ms=1.0))

    llm = Reports(1)
    assert server_prefix_cache(llm, "a prompt") is served
    assert llm.calls == [("a prompt", 1)]  # one request, one token


# --- real llama.cpp servers ----------------------------------------------------------------------

from llama_server import llama_server_fixture, run_slot_server  # noqa: E402

llama_server = llama_server_fixture()


def real_profile(url: str) -> BackendProfile:
    return server_profile(OpenAICompatLLM(url, "smollm2-135m", timeout_s=300.0))


@pytest.mark.server
@pytest.mark.parametrize("slots", [4, 1])
def test_llama_server_reports_its_slots_and_measure_profile_uses_them(slots):
    with run_slot_server(slots) as url:
        assert OpenAICompatLLM(url, "smollm2-135m").server_slots() == slots
        profile = real_profile(url)
    assert (profile.concurrency, profile.concurrency_source) == (slots, "server slots")
    assert profile.kv_reuse  # the server served the repeated probe prompt from its slot's cache
    assert len(profile.batch_speedup) == (slots if slots > 1 else 0)
    plan = Optimizer(cost_model=load_cost_model("structural")).optimize(BRANCHING)
    reason = lower(plan, profile).reason
    assert f"backend concurrency {slots} (server slots)" in reason


@pytest.mark.server
def test_llama_cpp_python_server_reports_no_slots_and_is_measured_to_run_one_request_at_a_time(llama_server):
    llm = OpenAICompatLLM(llama_server, "smollm2-135m", timeout_s=300.0)
    assert llm.server_slots() is None and llm.concurrency == 1
    profile = real_profile(llama_server)
    assert (profile.concurrency, profile.concurrency_source, profile.batch_speedup) == (1, "measured", ())
