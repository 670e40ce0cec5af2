"""Traced LLM and retriever calls shared by the baseline strategies.

LLM calls ask the backend to reuse its prefix KV cache, as the engine's own calls do (a server
with automatic prefix caching would do the same for any client); what only the linear template
has is a transcript that grows in one KV state.
"""

from __future__ import annotations

import time
from typing import Iterable, Sequence

from nlqo.execution.trace import PassageRef, Step, Trace
from nlqo.kinds import StepKind
from nlqo.runtime.llm.base import LLM, chat_reusing_prefix, complete_reusing_prefix
from nlqo.common.passages import Hit, Retriever
from nlqo.runtime.prompts import Prompt
from nlqo.runtime.prompts.baselines import TextPrompt


def chat(llm: LLM, prompt: Prompt, trace: Trace, node: str, **inputs: str) -> str:
    """Send a chat prompt; record the call; return the generated text."""
    messages, started = prompt.messages(**inputs), trace.now_ms()
    completion = chat_reusing_prefix(llm, messages, stop=prompt.stop, max_tokens=prompt.max_tokens)
    trace.record(
        Step.llm(node, completion.usage, completion.text, started, prompt=messages, confidence=completion.confidence)
    )
    return completion.text


def complete(llm: LLM, prompt: TextPrompt, trace: Trace, node: str, *, stop: Sequence[str] = (), **inputs: str) -> str:
    """Continue a raw text prompt (its stop strings plus ``stop``); record the call."""
    text, started = prompt.text(**inputs), trace.now_ms()
    completion = complete_reusing_prefix(llm, text, stop=(*prompt.stop, *stop), max_tokens=prompt.max_tokens)
    trace.record(
        Step.llm(node, completion.usage, completion.text, started, prompt=text, confidence=completion.confidence)
    )
    return completion.text


def retrieve(retriever: Retriever, query: str, k: int, trace: Trace, node: str) -> list[Hit]:
    """Search the top ``k`` for ``query``; record the call with its passages."""
    started = trace.now_ms()
    clock = time.perf_counter()
    hits = retriever.search(query, k)
    trace.record(Step.retrieve(node, query, hits, (time.perf_counter() - clock) * 1000, started))
    return hits


def stop(trace: Trace, node: str, reason: str) -> str:
    """Record why the strategy stopped; return the reason."""
    trace.record(Step(node=node, kind=StepKind.STOP, text=reason))
    return reason


def refs(hits: Iterable[Hit]) -> tuple[PassageRef, ...]:
    return tuple(PassageRef.from_hit(h) for h in hits)
