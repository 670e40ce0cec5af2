"""The handle strategies use: :class:`LlamaCppLLM` (the LLM protocol over a shared runtime, with
its own saved prefixes) and :class:`LlamaSession` (a token sequence continued call after call)."""

from __future__ import annotations

import collections
import itertools
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Sequence

import attrs

from nlqo.errors import LLMError
from nlqo.runtime.llm import cancel
from nlqo.runtime.llm.base import Capabilities, ChatMessage, Completion, Usage
from nlqo.runtime.llm.confidence import piece_offsets
from nlqo.runtime.llm.constrain import TOKENS, Constraint, Matcher, completion
from nlqo.runtime.llm.llamacpp.loading import DEFAULT_N_CTX_SEQ, DEFAULT_N_SEQ, check_gguf, default_threads
from nlqo.runtime.llm.llamacpp.loading import cpu_variant as running_variant
from nlqo.runtime.llm.llamacpp.request import Request
from nlqo.runtime.llm.llamacpp.runtime import _Runtime
from nlqo.runtime.llm.tokens import TokenLLM, TokenSegments

_handles = itertools.count(1)


@attrs.define(eq=False)
class LlamaCppLLM(TokenLLM):
    """A GGUF model on llama.cpp in this process: greedy, thread-safe, batched, with prefix reuse.

    Build it with :meth:`load` or :func:`nlqo.runtime.models.load_local` (bundled names, ``.gguf`` paths).
    """

    runtime: _Runtime
    name: str = "local"
    prefix_cache_size: int = 8
    """Saved prefix states this handle keeps (least recently used are dropped)."""
    total: Usage = Usage()
    """Running sum of the usage of every call."""
    _owner: int = attrs.field(init=False, factory=lambda: next(_handles))
    _saved: collections.OrderedDict = attrs.field(init=False, factory=collections.OrderedDict)
    _lock: Any = attrs.field(init=False, factory=threading.Lock)
    _template: Any = attrs.field(init=False, default=None)
    _finalizer: Any = attrs.field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        self.runtime.acquire()
        self._finalizer = weakref.finalize(self, self.runtime.release)
        self._finalizer.atexit = False  # the process ends anyway; freeing during shutdown only risks a crash

    def close(self) -> None:
        """Release this handle; the model and its context are freed when the last handle (see
        :meth:`fork`) is closed or garbage-collected."""
        self._finalizer()

    def __enter__(self) -> "LlamaCppLLM":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        name: str | None = None,
        threads: int | None = None,
        n_seq: int = DEFAULT_N_SEQ,
        n_ctx_seq: int = DEFAULT_N_CTX_SEQ,
        prefix_cache_size: int = 8,
        cpu_variant: str | None = None,
    ) -> "LlamaCppLLM":
        """Load a GGUF file with ``threads`` threads (default: the cores this process may use).

        ``cpu_variant``: the llama.cpp CPU backend variant (``haswell``, ``zen4``; default
        ``$NLQO_LLAMA_CPU_VARIANT``, else the best that runs here), chosen once per process
        (:mod:`~nlqo.runtime.llm.llamacpp.variants`)."""
        path = Path(path)
        check_gguf(path)
        runtime = _Runtime(
            path, threads=threads or default_threads(), n_seq=n_seq, n_ctx_seq=n_ctx_seq, cpu_variant=cpu_variant
        )
        return cls(runtime, name=name or path.stem, prefix_cache_size=prefix_cache_size)

    @property
    def capabilities(self) -> Capabilities:
        """Prefix reuse, sessions, forks, a cache identity, grammars applied token by token, and the slots as concurrency."""
        return Capabilities(
            prefix_cache=True,
            session=True,
            fork=True,
            concurrency=self.runtime.n_seq,
            cache_identity=True,
            constraint=TOKENS,
        )

    @property
    def concurrency(self) -> int:
        """Requests decoded together in one batch (the context's slots)."""
        return self.runtime.n_seq

    @property
    def threads(self) -> int:
        return self.runtime.threads

    def cache_identity(self) -> dict[str, Any]:
        """What a response cache keys on: the model file and this runtime (with its CPU variant, whose
        kernels may round differently; a build with the CPU backend linked in names none)."""
        identity = {"model": self.name, "runtime": "llama-cpp", "file": self.runtime.path.name}
        if (variant := running_variant()) is not None:
            identity["cpu_variant"] = variant
        return identity

    # --- text <-> tokens -----------------------------------------------------------------------

    def encode(self, text: str, *, special: bool = False) -> list[int]:
        """Token ids of ``text``; ``special`` adds the vocabulary's BOS as a prompt would.

        Special-token text (``<|im_start|>``) becomes the special token, as in transformers.
        """
        return self.runtime.tokenize(text, add_special=special)

    def decode(self, ids: Sequence[int]) -> str:
        return b"".join(self.runtime.piece(int(t)) for t in ids).decode("utf-8", "replace")

    def format_chat(self, messages: Sequence[ChatMessage], *, add_generation_prompt: bool = True) -> str:
        """``messages`` rendered with the chat template stored in the GGUF file."""
        if self._template is None:
            source = self.runtime.chat_template()
            if not source:
                raise LLMError(f"model {self.name} has no chat template; use complete()")
            self._template = _compile_template(source)
        rows = [{"role": m.role, "content": m.content} for m in messages]
        return self._template.render(
            messages=rows,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.runtime.special_token("bos"),
            eos_token=self.runtime.special_token("eos"),
        )

    # --- the LLM protocol ----------------------------------------------------------------------

    def generate_ids(
        self,
        ids: Sequence[int],
        *,
        stop: Sequence[str] = (),
        max_tokens: int = 256,
        prefix_cache: bool = False,
        remember: int | None = None,
        constraint: Constraint | None = None,
    ) -> tuple[Completion, tuple[int, ...]]:
        """Continue exactly the token sequence ``ids``; also return the generated token ids.

        With ``prefix_cache`` the longest prefix this handle has computed before is reused, and the
        state of ``ids[:remember]`` (default: all of ``ids``) is saved for later calls; without it
        every prompt token is computed. With ``constraint`` the reply follows its grammar
        (:mod:`nlqo.runtime.llm.constrain`); a reply the grammar forces whole is returned without running
        the model.
        """
        ids = [int(i) for i in ids]
        if not ids:
            raise LLMError(f"{self.name}: nothing to continue, the prompt is empty")
        if max_tokens <= 0:
            return Completion("", Usage(calls=1), "length"), ()
        start = time.perf_counter()
        matcher = None if constraint is None else Matcher.start(constraint, self.runtime.grammar_tokenizer.get())
        first = [] if matcher is None else matcher.forced(max_tokens)
        if matcher is not None and (matcher.done or len(first) >= max_tokens):
            text = self.decode(first)
            usage = Usage(forced_tokens=len(first), wall_ms=(time.perf_counter() - start) * 1000.0, calls=1)
            with self._lock:
                self.total = self.total + usage
            return completion(text, usage, "stop" if matcher.done else "length", matcher), tuple(first)
        keep = (len(ids) if remember is None else min(remember, len(ids))) if prefix_cache else 0
        request = Request(
            owner=self._owner,
            saved=self._saved,
            saved_size=self.prefix_cache_size,
            ids=ids,
            reuse=prefix_cache,
            remember=keep,
            stop=tuple(stop),
            max_tokens=max_tokens,
            matcher=matcher,
            generated=first,
            pieces=bytearray(b"".join(self.runtime.piece(t) for t in first)),
            check=cancel.current(),  # consulted on the scheduler thread, which does not see this context
        )
        self.runtime.run(request)
        forced = 0 if matcher is None else matcher.forced_tokens
        usage = Usage(
            prompt_tokens=len(ids),
            cached_prompt_tokens=request.cached,
            generated_tokens=len(request.generated) - forced,
            wall_ms=(time.perf_counter() - start) * 1000.0,
            calls=1,
            forced_tokens=forced,
        )
        with self._lock:
            self.total = self.total + usage
        pieces = [b"" if self.runtime.is_end(t) else self.runtime.piece(t) for t in request.generated]
        confidence = request.tally.confidence(piece_offsets(pieces))
        return completion(request.text, usage, request.finish, matcher, confidence=confidence), tuple(request.generated)

    # --- sessions and handles ------------------------------------------------------------------

    def session(self, prefix: str = "", *, special: bool = True, cache_prefix: bool = True) -> "LlamaSession":
        """A session starting with ``prefix`` (tokenized like a prompt when ``special``).

        With ``cache_prefix`` the prefix's KV state is saved at the first ``generate`` and restored
        for every later session (or ``complete(prefix_cache=True)``) that starts with it.
        """
        ids = self.encode(prefix, special=special)
        return LlamaSession(self, ids, len(ids) if cache_prefix else 0)

    def fork(self) -> "LlamaCppLLM":
        """A handle on the same model and context with its own, empty saved prefixes and slot
        affinity: strategies measured side by side keep their own warm prefixes."""
        return LlamaCppLLM(self.runtime, name=self.name, prefix_cache_size=self.prefix_cache_size)

    def clear_prefix_cache(self) -> None:
        self._saved.clear()
        self.runtime.forget(self._owner)

    def cached_prefixes(self) -> tuple[int, ...]:
        """Token counts of the saved prefixes, least recently used first."""
        return tuple(len(k) for k in list(self._saved))


@attrs.define(eq=False)
class LlamaSession(TokenSegments):
    """A token sequence continued by :class:`LlamaCppLLM`; the same API as :class:`nlqo.runtime.llm.local.Session`.

    Its tokens stay resident in a slot between calls, so each ``generate`` computes only what was
    appended since. ``usage`` sums this session's ``generate`` calls (a fork starts from zero).
    """

    llm: LlamaCppLLM
    _ids: list[int]
    _prefix_len: int
    """Tokens of the fixed prefix to save at the first generation (0: do not)."""
    usage: Usage = Usage()

    def generate(
        self, *, stop: Sequence[str] = (), max_tokens: int = 256, constraint: Constraint | None = None
    ) -> Completion:
        """Continue greedily (under ``constraint`` when given); the generated and forced tokens stay
        in the session, the text is cut before the stop string."""
        out, generated = self.llm.generate_ids(
            self._ids,
            stop=stop,
            max_tokens=max_tokens,
            prefix_cache=True,
            remember=self._prefix_len,
            constraint=constraint,
        )
        self._ids.extend(generated)
        self.usage = self.usage + out.usage
        return out

    def fork(self) -> "LlamaSession":
        """An independent copy to continue differently (it reuses the state computed so far)."""
        return LlamaSession(self.llm, list(self._ids), self._prefix_len)

    def truncate(self, length: int) -> None:
        """Forget every token after the first ``length``."""
        if not 0 <= length <= len(self._ids):
            raise ValueError(f"cannot truncate a session of {len(self._ids)} tokens to {length}")
        del self._ids[length:]
        self._prefix_len = min(self._prefix_len, length)


def _compile_template(source: str):
    """A chat template compiled as transformers compiles it (sandboxed Jinja, the same helpers)."""
    import json
    from datetime import datetime

    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise LLMError(f"chat template: {message}")

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)
