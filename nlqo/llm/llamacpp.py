"""A GGUF model run in process by llama.cpp (llama-cpp-python's low-level API), greedy.

The same capabilities as :class:`~nlqo.llm.local.TransformersLLM`, so every strategy runs on it
unchanged: usage accounting on every call, stop strings and the vocabulary's end-of-generation
tokens, prefix reuse, sessions (append without sampling, generate, fork, truncate). It runs the
GGUF weights as they are (no de-quantized copy), which on a 2-core CPU answers like float32
transformers at a fraction of the time (docs/models.md).

How the model's work is organised:

* one llama.cpp context with ``n_seq`` **slots** (KV sequences, ``n_ctx_seq`` tokens each). A slot
  keeps the tokens of its last request resident, so a later request that shares a prefix with them
  (the next step of a session, another question on the same scaffold) computes only the rest;
* **saved prefixes**: with ``prefix_cache`` (and at a session's first generation) the KV state of the
  prompt (a chat prompt's scaffold, a session's fixed prefix) is copied to host memory, and restored
  into a slot for any later request that starts with it. Each :meth:`LlamaCppLLM.fork` has its own
  saved prefixes and slot affinity, so strategies measured side by side keep their own warm prefixes;
* one **scheduler thread** runs every llama_decode. Requests from several threads (the nodes of
  one tree wave) each take a slot; prompts are prefilled one chunk at a time, and all requests that
  are generating are decoded together, one token each, in one batch. On a CPU decoding is bound by
  memory bandwidth, so a batch of sequences costs less than as many separate steps.

Decoding is greedy (the lowest token id wins a tie, as ``argmax`` does), so a request's output does
not depend on what else was in its batch: ``tests/test_llamacpp.py`` checks batched against
sequential and restored prefixes against plain runs, token for token.

A request may carry a grammar (``constraint=``, :mod:`nlqo.llm.constrain`): its logits are masked
with numpy before the argmax, and the tokens the grammar forces are appended to the request without
sampling and computed in the next batch together with the token before them (counted as forced).
"""

from __future__ import annotations

import collections
import ctypes
import itertools
import logging
import os
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Sequence

import attrs
import numpy as np

from nlqo.errors import LLMError, ModelNotAvailable
from nlqo.llm.base import Capabilities, ChatMessage, Completion, Usage, cut_at_stop
from nlqo.llm.tokens import TokenLLM, TokenSegments, common_prefix
from nlqo.llm.constrain import TOKENS, Constraint, LazyTokenizer, Matcher, completion, llamacpp_tokenizer

GGUF_MAGIC = b"GGUF"

DEFAULT_N_SEQ = 4
"""Slots of one context: requests decoded together, and resident prefixes."""

DEFAULT_N_CTX_SEQ = 8192
"""Tokens one slot holds (prompt and generation)."""

PREFILL_CHUNK = 512
"""Prompt tokens per llama_decode call (also the context's batch size)."""


def default_threads() -> int:
    """The cores this process may run on (llama.cpp slows badly when given more threads than that)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def check_gguf(path: Path) -> None:
    """Raise :class:`ModelNotAvailable` naming ``path`` unless it exists and starts like a GGUF file."""
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise ModelNotAvailable(f"cannot read the GGUF model {path}: {exc.strerror or exc}") from None
    if magic != GGUF_MAGIC:
        raise ModelNotAvailable(
            f"{path} is not a GGUF file (it starts with {magic!r}, not {GGUF_MAGIC!r}): corrupt or the wrong file"
        )


def _llama():
    try:
        import llama_cpp
    except ImportError as exc:
        raise ModelNotAvailable(
            "the llama.cpp runtime needs llama-cpp-python: run `sh scripts/install-llama-cpp.sh` "
            f"(or choose --runtime transformers); import failed: {exc}"
        ) from None
    return llama_cpp


_BACKEND_READY = threading.Lock()
_backend_started = False

LOG = logging.getLogger("nlqo.llama_cpp")
"""llama.cpp's messages, one record per line ("llama_model_loader: ...", "control-looking token ...").
Nothing shows them unless logging is configured: the CLI sends them to its log file (:mod:`nlqo.logs`)."""
LOG.addHandler(logging.NullHandler())

_GGML_LEVELS = {1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
"""``ggml_log_level`` (ggml.h: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4; CONT 5 continues the last
message). llama-cpp-python's own callback maps an older order and prints warnings as errors."""
_GGML_CONT = 5


class _LogLines:
    """A llama.cpp log callback: pieces of text joined into lines, each logged to :data:`LOG` at its level."""

    def __init__(self) -> None:
        self.pending = ""
        self.level = logging.INFO
        self.lock = threading.Lock()
        self.first_error = ""
        """The first error line since :meth:`said` was last called (why a model did not load)."""

    def said(self) -> str:
        """``"; llama.cpp said: LINE"`` for the first error line logged since the last call, else ``""``."""
        with self.lock:
            line, self.first_error = self.first_error, ""
        return f"; llama.cpp said: {line}" if line else ""

    def __call__(self, level: int, text: bytes | None, user_data: Any) -> None:
        try:  # an exception must not cross into C (ctypes would print it to stderr)
            with self.lock:
                if level != _GGML_CONT:
                    self._emit(self.pending)
                    self.pending, self.level = "", _GGML_LEVELS.get(level, logging.INFO)
                *lines, self.pending = (self.pending + (text or b"").decode("utf-8", "replace")).split("\n")
                for line in lines:
                    self._emit(line)
        except BaseException:  # noqa: BLE001 - a log line lost is better than a crash in C
            pass

    def _emit(self, line: str) -> None:
        if line.strip():
            LOG.log(self.level, line.rstrip())
            if self.level >= logging.ERROR and not self.first_error:
                self.first_error = line.strip()


_LOG_LINES = _LogLines()
_LOG_CALLBACK: Any = None
"""The ctypes callback given to llama.cpp (kept here: llama.cpp holds only a pointer to it)."""


def _init_backend(ll) -> None:
    """Start llama.cpp once per process, its messages sent to :data:`LOG` instead of stderr."""
    global _backend_started, _LOG_CALLBACK
    with _BACKEND_READY:
        if _backend_started:
            return
        _LOG_CALLBACK = ll.llama_log_callback(_LOG_LINES)
        ll.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))
        ll.llama_backend_init()
        _backend_started = True


@attrs.define(eq=False)
class _Slot:
    """One KV sequence of the context and the tokens whose state it holds (positions 0..n-1)."""

    seq: int
    tokens: tuple[int, ...] = ()
    owner: int = -1
    """The handle (:meth:`LlamaCppLLM.fork`) that used it last; only that handle reuses its tokens."""
    busy: bool = False
    used: int = 0


@attrs.define(eq=False)
class _Request:
    owner: int
    saved: "collections.OrderedDict[tuple[int, ...], bytes]"
    saved_size: int
    ids: list[int]
    reuse: bool
    remember: int
    """Save the KV state of the first ``remember`` prompt tokens (0: none)."""
    stop: Sequence[str]
    max_tokens: int
    matcher: Matcher | None = None
    """The request's grammar state (None: unconstrained)."""
    slot: _Slot | None = None
    pos: int = 0
    """Tokens (prompt, then generated) whose KV state is in the slot."""
    cached: int = 0
    generated: list[int] = attrs.Factory(list)
    """Reply tokens: chosen ones and, with a grammar, forced ones (the last ones may wait to be computed)."""
    pieces: bytearray = attrs.Factory(bytearray)
    text: str = ""
    finish: str = "stop"
    error: BaseException | None = None
    done: threading.Event = attrs.Factory(threading.Event)

    @property
    def prefilling(self) -> bool:
        return self.pos < len(self.ids)

    @property
    def seq(self) -> int:
        """The KV sequence of the request's slot (it has one once admitted)."""
        if self.slot is None:
            raise LLMError("internal: a request without a slot reached the decoder")
        return self.slot.seq


class _Runtime:
    """The model, its one context and the scheduler thread that owns every llama_decode call."""

    def __init__(self, path: Path, *, threads: int, n_seq: int, n_ctx_seq: int, flash_attn: bool = False):
        ll = _llama()
        _init_backend(ll)
        self.ll = ll
        self.path = path
        self.threads = threads
        self.n_seq = n_seq
        self.n_ctx_seq = n_ctx_seq
        mparams = ll.llama_model_default_params()
        mparams.n_gpu_layers = 0
        _LOG_LINES.said()  # forget errors logged before this load
        self.model = ll.llama_model_load_from_file(str(path).encode(), mparams)
        if not self.model:
            raise ModelNotAvailable(
                f"llama.cpp could not load the model {path} (a truncated, corrupt or unsupported GGUF file){_LOG_LINES.said()}"
            )
        self.vocab = ll.llama_model_get_vocab(self.model)
        self.n_vocab = ll.llama_vocab_n_tokens(self.vocab)
        cparams = ll.llama_context_default_params()
        cparams.n_ctx = n_seq * n_ctx_seq
        cparams.n_batch = PREFILL_CHUNK
        cparams.n_ubatch = PREFILL_CHUNK
        cparams.n_seq_max = n_seq
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.kv_unified = False
        cparams.flash_attn_type = ll.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else ll.LLAMA_FLASH_ATTN_TYPE_DISABLED
        cparams.no_perf = True
        self.ctx = ll.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            ll.llama_model_free(self.model)
            raise ModelNotAvailable(
                f"llama.cpp could not create a context of {n_seq} x {n_ctx_seq} tokens for {path}{_LOG_LINES.said()}"
            )
        self.mem = ll.llama_get_memory(self.ctx)
        self.batch_size = max(PREFILL_CHUNK, n_seq)
        self.batch = ll.llama_batch_init(self.batch_size, 0, 1)
        self.slots = [_Slot(seq) for seq in range(n_seq)]
        self._clock = itertools.count(1)
        self._cv = threading.Condition()
        self._pending: collections.deque[_Request] = collections.deque()
        self._active: list[_Request] = []
        self._eog_cache: dict[int, bool] = {}
        self._piece_cache: dict[int, bytes] = {}
        self.grammar_tokenizer = LazyTokenizer(self._grammar_tokenizer)
        self._handles = 0
        self.closed = False
        self.freed = False
        self._thread = threading.Thread(target=self._loop, name="nlqo-llama", daemon=True)
        self._thread.start()

    # --- lifetime -------------------------------------------------------------------------------

    def acquire(self) -> None:
        """One more handle uses this runtime."""
        with self._cv:
            self._handles += 1

    def release(self) -> None:
        """A handle is closed or collected; the last one closes the runtime."""
        with self._cv:
            self._handles -= 1
            last = self._handles <= 0
        if last:
            self.close()

    def close(self) -> None:
        """Finish the queued requests, stop the scheduler thread and free the context and model.

        Idempotent; later requests fail with :class:`~nlqo.errors.LLMError`. The scheduler thread
        frees the llama.cpp objects itself as it exits, so a close from any thread is safe."""
        with self._cv:
            if self.closed:
                return
            self.closed = True
            self._cv.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _check_open(self) -> None:
        if self.freed:
            raise LLMError(f"{self.path.name}: the model was closed")

    def _free(self) -> None:
        self.freed = True
        self.ll.llama_batch_free(self.batch)
        self.ll.llama_free(self.ctx)
        self.ll.llama_model_free(self.model)

    # --- text <-> tokens -----------------------------------------------------------------------

    def tokenize(self, text: str, *, add_special: bool) -> list[int]:
        self._check_open()
        data = text.encode("utf-8")
        n_max = len(data) + 8
        buf = (self.ll.llama_token * n_max)()
        n = self.ll.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special, True)
        if n < 0:
            n_max = -n
            buf = (self.ll.llama_token * n_max)()
            n = self.ll.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special, True)
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        cached = self._piece_cache.get(token)
        if cached is not None:
            return cached
        self._check_open()
        size = 64
        while True:
            buf = ctypes.create_string_buffer(size)
            n = self.ll.llama_token_to_piece(self.vocab, token, buf, size, 0, True)
            if n >= 0:
                out = buf.raw[:n]
                self._piece_cache[token] = out
                return out
            size = -n

    def is_end(self, token: int) -> bool:
        end = self._eog_cache.get(token)
        if end is None:
            end = self._eog_cache[token] = bool(self.ll.llama_vocab_is_eog(self.vocab, token))
        return end

    def _grammar_tokenizer(self) -> Any:
        """llguidance's view of this vocabulary; every end-of-generation token ends a constrained reply."""
        eog = [t for t in range(self.n_vocab) if self.is_end(t)]
        return llamacpp_tokenizer(self.vocab, eos=eog)

    def chat_template(self) -> str | None:
        self._check_open()
        raw = self.ll.llama_model_chat_template(self.model, None)
        return raw.decode("utf-8") if raw else None

    def special_token(self, which: str) -> str:
        self._check_open()
        token = getattr(self.ll, f"llama_vocab_{which}")(self.vocab)
        return self.piece(token).decode("utf-8", "replace") if token >= 0 else ""

    # --- requests ------------------------------------------------------------------------------

    def run(self, request: _Request) -> _Request:
        """Queue ``request`` and wait until it is finished (or failed)."""
        if len(request.ids) + 1 > self.n_ctx_seq:
            raise LLMError(
                f"{self.path.name}: a prompt of {len(request.ids)} tokens does not fit a context of "
                f"{self.n_ctx_seq} tokens per sequence (raise n_ctx_seq)"
            )
        with self._cv:
            if self.closed:
                raise LLMError(f"{self.path.name}: the model was closed")
            self._pending.append(request)
            self._cv.notify_all()
        request.done.wait()
        if request.error is not None:
            raise request.error
        return request

    def forget(self, owner: int) -> None:
        """Stop reusing the tokens of ``owner``'s idle slots."""
        with self._cv:
            for slot in self.slots:
                if slot.owner == owner and not slot.busy:
                    slot.owner = -1

    # --- the scheduler thread ------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._active and not self._pending and not self.closed:
                    self._cv.wait()
                if self.closed and not self._active and not self._pending:
                    break
                self._admit()
                active = list(self._active)
            prefilling = [r for r in active if r.prefilling]
            decoding = [r for r in active if not r.prefilling]
            try:
                if prefilling:
                    self._prefill_chunk(prefilling[0])
                if decoding:
                    self._decode_step(decoding)
            except BaseException as exc:  # a failed decode ends the requests it touched, never the thread
                for r in prefilling[:1] + decoding:
                    if not r.done.is_set():
                        r.error = (
                            exc if isinstance(exc, LLMError) else LLMError(f"{self.path.name}: llama.cpp failed: {exc}")
                        )
                        self._finish(r, clear=True)
        self._free()

    def _admit(self) -> None:
        """Give waiting requests a slot each while there are idle slots (call with the lock held)."""
        while self._pending:
            idle = [s for s in self.slots if not s.busy]
            if not idle:
                return
            request = self._pending.popleft()
            try:
                self._place(request, idle)
            except BaseException as exc:
                request.error = (
                    exc if isinstance(exc, LLMError) else LLMError(f"{self.path.name}: llama.cpp failed: {exc}")
                )
                if request.slot is not None:
                    self._release(request.slot, (), clear=True)
                request.done.set()
                continue
            self._active.append(request)

    def _place(self, r: _Request, idle: list[_Slot]) -> None:
        """Choose ``r``'s slot and make its KV state hold the longest reusable prefix of ``r.ids``."""
        ll, limit = self.ll, len(r.ids) - 1  # the last prompt token is always computed: its logits start generation
        best_slot, best_n = None, 0
        best_saved: tuple[int, ...] | None = None
        if r.reuse:
            for slot in idle:
                if slot.owner == r.owner:
                    n = min(common_prefix(slot.tokens, r.ids), limit)
                    if n > best_n:
                        best_slot, best_n = slot, n
            for key in r.saved:
                n = min(common_prefix(key, r.ids), limit)
                if n > best_n:
                    best_slot, best_saved, best_n = None, key, n
        if best_slot is None:
            # the least recently used idle slot, preferring one that holds nothing of this owner
            best_slot = min(idle, key=lambda s: (s.owner == r.owner and bool(s.tokens), s.used))
            ll.llama_memory_seq_rm(self.mem, best_slot.seq, -1, -1)
            best_slot.tokens = ()
            if best_saved is not None:
                state = r.saved[best_saved]
                r.saved.move_to_end(best_saved)
                buf = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
                if ll.llama_state_seq_set_data(self.ctx, buf, len(state), best_slot.seq) == 0:
                    raise LLMError(f"{self.path.name}: could not restore a saved prefix of {len(best_saved)} tokens")
                best_slot.tokens = best_saved
            else:
                best_n = 0
        if best_n < len(best_slot.tokens):
            if not ll.llama_memory_seq_rm(self.mem, best_slot.seq, best_n, -1):
                ll.llama_memory_seq_rm(self.mem, best_slot.seq, -1, -1)
                best_n = 0
        best_slot.tokens = tuple(r.ids[:best_n])
        best_slot.busy, best_slot.owner = True, r.owner
        r.slot, r.pos, r.cached = best_slot, best_n, best_n

    def _fill(self, entries: Sequence[tuple[int, int, int, bool]]) -> None:
        """Put ``(token, position, sequence, wants_logits)`` entries into the batch and decode it."""
        batch = self.batch
        for i, (token, pos, seq, logits) in enumerate(entries):
            batch.token[i] = token
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = logits
        batch.n_tokens = len(entries)
        status = self.ll.llama_decode(self.ctx, batch)
        if status != 0:
            raise LLMError(f"{self.path.name}: llama_decode returned {status} (context full or invalid batch)")

    def _logits(self, i: int) -> np.ndarray:
        return np.ctypeslib.as_array(self.ll.llama_get_logits_ith(self.ctx, i), shape=(self.n_vocab,))

    def _prefill_chunk(self, r: _Request) -> None:
        """Compute the next chunk of ``r``'s prompt; at its end, take the first generated token."""
        end = len(r.ids)
        if r.remember > r.pos:
            end = min(end, r.remember)
        end = min(end, r.pos + PREFILL_CHUNK)
        last = end == len(r.ids) and not r.generated  # forced tokens waiting: the decode batch computes them next
        seq, start = r.seq, r.pos
        self._fill([(r.ids[p], p, seq, last and p == end - 1) for p in range(start, end)])
        r.pos = end
        if last:  # read the logits before anything else runs on the context
            token = self._choose(r, end - start - 1)
        if r.remember and r.pos == r.remember:
            self._save(r, tuple(r.ids[: r.remember]))
        if last and token is not None:
            self._take_safely(r, token)

    def _decode_step(self, requests: list[_Request]) -> None:
        """One batch: each request's reply tokens not yet computed (the last chosen one, and the
        tokens its grammar forced after it), at most a share of the batch each; a request whose
        run is complete gets its next token."""
        room = max(1, self.batch_size // len(requests))
        entries: list[tuple[int, int, int, bool]] = []
        fed: list[tuple[_Request, int, int]] = []
        for r in requests:
            done = r.pos - len(r.ids)
            run = r.generated[done : done + room]
            take = done + len(run) == len(r.generated)
            seq, pos = r.seq, r.pos
            for k, token in enumerate(run):
                entries.append((token, pos + k, seq, take and k == len(run) - 1))
            fed.append((r, len(run), len(entries) - 1 if take else -1))
        started = time.perf_counter()
        self._fill(entries)
        spent = (time.perf_counter() - started) * 1000.0
        for r, n, i in fed:
            r.pos += n
            if r.matcher is not None:
                r.matcher.decode_ms += spent
            if i >= 0 and (chosen := self._choose(r, i)) is not None:
                self._take_safely(r, chosen)

    def _choose(self, r: _Request, i: int) -> int | None:
        """The greedy token at batch position ``i`` among those ``r``'s grammar allows (None: the
        grammar failed, and ``r`` is finished with the error)."""
        if r.matcher is None:
            return int(np.argmax(self._logits(i)))
        try:
            return r.matcher.choose(self._logits(i))
        except LLMError as exc:
            r.error = exc
            self._finish(r, clear=True)
            return None

    def _take_safely(self, r: _Request, token: int) -> None:
        """:meth:`_take`; a grammar failure ends ``r`` alone, not the batch."""
        if r.matcher is None:
            return self._take(r, token)
        try:
            self._take(r, token)
        except LLMError as exc:
            r.error = exc
            self._finish(r, clear=True)
        return None

    def _save(self, r: _Request, key: tuple[int, ...]) -> None:
        if r.saved_size <= 0 or key in r.saved:
            if key in r.saved:
                r.saved.move_to_end(key)
            return
        ll, seq = self.ll, r.seq
        size = ll.llama_state_seq_get_size(self.ctx, seq)
        buf = (ctypes.c_uint8 * size)()
        written = ll.llama_state_seq_get_data(self.ctx, buf, size, seq)
        r.saved[key] = bytes(buf[:written])
        while len(r.saved) > r.saved_size:
            r.saved.popitem(last=False)

    def _take(self, r: _Request, token: int) -> None:
        """Append the chosen ``token`` to ``r`` (and what its grammar forces after it); finish ``r``
        when it ends generation."""
        r.generated.append(token)
        if self.is_end(token):
            r.text, r.finish = bytes(r.pieces).decode("utf-8", "replace"), "stop"
            return self._finish(r)
        r.pieces += self.piece(token)
        if r.matcher is not None:
            r.matcher.advance(token)
            for t in r.matcher.forced(r.max_tokens - len(r.generated)):
                r.generated.append(t)
                r.pieces += self.piece(t)
        text = bytes(r.pieces).decode("utf-8", "ignore")
        cut, hit = cut_at_stop(text, r.stop)
        if hit or (r.matcher is not None and r.matcher.done):
            r.text, r.finish = cut, "stop"
            return self._finish(r)
        if len(r.generated) >= r.max_tokens or len(r.ids) + len(r.generated) >= self.n_ctx_seq:
            r.text, r.finish = bytes(r.pieces).decode("utf-8", "replace"), "length"
            return self._finish(r)
        return None

    def _finish(self, r: _Request, *, clear: bool = False) -> None:
        with self._cv:
            if r in self._active:
                self._active.remove(r)
            if r.slot is not None:
                self._release(r.slot, tuple((r.ids + r.generated)[: r.pos]), clear=clear)
            self._cv.notify_all()
        r.done.set()

    def _release(self, slot: _Slot, tokens: tuple[int, ...], *, clear: bool) -> None:
        if clear:
            self.ll.llama_memory_seq_rm(self.mem, slot.seq, -1, -1)
            tokens = ()
        slot.tokens, slot.busy, slot.used = tokens, False, next(self._clock)


_handles = itertools.count(1)


@attrs.define(eq=False)
class LlamaCppLLM(TokenLLM):
    """A GGUF model on llama.cpp in this process: greedy, thread-safe, batched, with prefix reuse.

    Build it with :meth:`load` or :func:`nlqo.models.load_local` (bundled names, ``.gguf`` paths).
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
    ) -> "LlamaCppLLM":
        """Load a GGUF file with ``threads`` threads (default: the cores this process may use)."""
        path = Path(path)
        check_gguf(path)
        runtime = _Runtime(path, threads=threads or default_threads(), n_seq=n_seq, n_ctx_seq=n_ctx_seq)
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
        """What a response cache keys on: the model file and this runtime."""
        return {"model": self.name, "runtime": "llama-cpp", "file": self.runtime.path.name}

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
        (:mod:`nlqo.llm.constrain`); a reply the grammar forces whole is returned without running
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
        request = _Request(
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
        return completion(request.text, usage, request.finish, matcher), tuple(request.generated)

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
    """A token sequence continued by :class:`LlamaCppLLM`; the same API as :class:`nlqo.llm.local.Session`.

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
