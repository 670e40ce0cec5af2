"""The model, its one context and the scheduler thread that owns every llama_decode call: requests
from any thread queue up, take a slot (:mod:`~nlqo.runtime.llm.llamacpp.kv`), have their prompts prefilled a
chunk at a time, and are decoded together, one token each, in one batch. Before each step the thread
consults each request's cancel check (:mod:`nlqo.runtime.llm.cancel`): a request given up on leaves
the queue or its slot at once, the others go on."""

from __future__ import annotations

import collections
import ctypes
import threading
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from nlqo.errors import LLMError, ModelNotAvailable
from nlqo.runtime.llm.constrain import LazyTokenizer, llamacpp_tokenizer
from nlqo.runtime.llm.llamacpp.kv import Slots
from nlqo.runtime.llm.llamacpp.loading import _LOG_LINES, PREFILL_CHUNK, _init_backend, _llama
from nlqo.runtime.llm.llamacpp.request import Request, choose, take


class _Runtime:
    """The model, its one context and the scheduler thread that owns every llama_decode call."""

    def __init__(
        self,
        path: Path,
        *,
        threads: int,
        n_seq: int,
        n_ctx_seq: int,
        flash_attn: bool = False,
        cpu_variant: str | None = None,
    ):
        ll = _llama()
        _init_backend(ll, model=path, cpu_variant=cpu_variant)
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
        self.kv = Slots(ll, self.ctx, self.mem, n_seq, name=path.name)
        self._cv = threading.Condition()
        self._pending: collections.deque[Request] = collections.deque()
        self._active: list[Request] = []
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

    def run(self, request: Request) -> Request:
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
            self.kv.forget(owner)

    # --- the scheduler thread ------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._active and not self._pending and not self.closed:
                    self._cv.wait()
                if self.closed and not self._active and not self._pending:
                    break
                self._drop_stopped()
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

    def _drop_stopped(self) -> None:
        """End the requests whose callers gave up (call with the lock held, between steps): a waiting
        one leaves the queue; a running one frees its slot, which keeps the tokens whose KV state it
        computed (a later request may reuse them), as a finished request's slot does."""
        for r in [r for r in self._pending if r.stopped()]:
            self._pending.remove(r)
            r.done.set()
        for r in [r for r in self._active if r.stopped()]:
            self._finish(r)

    def _admit(self) -> None:
        """Give waiting requests a slot each while there are idle slots (call with the lock held)."""
        while self._pending:
            idle = self.kv.idle()
            if not idle:
                return
            request = self._pending.popleft()
            try:
                self.kv.place(request, idle)
            except BaseException as exc:
                request.error = (
                    exc if isinstance(exc, LLMError) else LLMError(f"{self.path.name}: llama.cpp failed: {exc}")
                )
                if request.slot is not None:
                    self.kv.release(request.slot, (), clear=True)
                request.done.set()
                continue
            self._active.append(request)

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

    def _prefill_chunk(self, r: Request) -> None:
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
            self.kv.save(r, tuple(r.ids[: r.remember]))
        if last and token is not None:
            self._take_safely(r, token)

    def _decode_step(self, requests: list[Request]) -> None:
        """One batch: each request's reply tokens not yet computed (the last chosen one, and the
        tokens its grammar forced after it), at most a share of the batch each; a request whose
        run is complete gets its next token."""
        room = max(1, self.batch_size // len(requests))
        entries: list[tuple[int, int, int, bool]] = []
        fed: list[tuple[Request, int, int]] = []
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

    def _choose(self, r: Request, i: int) -> int | None:
        """The token to take at batch position ``i`` (None: ``r``'s grammar failed, and ``r`` is
        finished with the error)."""
        try:
            return choose(r, self._logits(i))
        except LLMError as exc:
            if r.matcher is None:
                raise
            r.error = exc
            self._finish(r, clear=True)
            return None

    def _take_safely(self, r: Request, token: int) -> None:
        """Take ``token`` and finish ``r`` if it is done; a grammar failure ends ``r`` alone, not the batch."""
        try:
            finished = take(r, token, piece=self.piece, is_end=self.is_end, n_ctx=self.n_ctx_seq)
        except LLMError as exc:
            if r.matcher is None:
                raise
            r.error = exc
            self._finish(r, clear=True)
            return
        if finished:
            self._finish(r)

    def _finish(self, r: Request, *, clear: bool = False) -> None:
        with self._cv:
            if r in self._active:
                self._active.remove(r)
            if r.slot is not None:
                self.kv.release(r.slot, tuple((r.ids + r.generated)[: r.pos]), clear=clear)
            self._cv.notify_all()
        r.done.set()
