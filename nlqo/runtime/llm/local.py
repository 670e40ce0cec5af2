"""A local transformers model behind the :class:`~nlqo.runtime.llm.base.LLM` interface, with KV-cache sessions.

Decoding is greedy: one forward pass over the uncomputed prompt tokens, then one per generated
token, stopping at an end-of-sequence token, a stop string or ``max_tokens``.

Two ways to avoid recomputing prompt tokens:

* a **prefix cache** of KV states keyed by token ids (LRU, ``prefix_cache_size`` entries). A call
  reuses the longest common prefix of any entry (cropped copy), so prompts that share an
  instruction and few-shot block compute it once. ``complete(..., prefix_cache=True)`` uses it;
* a **session** (:class:`Session`): a token sequence plus its live KV state. ``append`` adds fixed
  text without sampling, ``generate`` continues it greedily and keeps the generated tokens,
  ``fork`` copies it. The model sees exactly ``session.token_ids``, so the output is the one
  plain generation gives for the same token ids.

Usage accounting: every ``generate``/``complete``/``chat`` returns a :class:`~nlqo.runtime.llm.base.Usage`
whose ``prompt_tokens`` is the whole context the model conditioned on and
``cached_prompt_tokens`` the part whose KV state already existed (prefix cache or the session's
earlier steps). Sums over calls therefore compare directly with plain, uncached calls.
Only ``generate``-type calls compute anything; ``append`` and ``fork`` are bookkeeping.

A call may carry a grammar (``constraint=``, :mod:`nlqo.runtime.llm.constrain`): the logits are masked
with numpy before the argmax, and the tokens the grammar forces go into the model in one forward
pass with the token before them, counted as forced rather than generated.

Every reply carries its confidence: each chosen token's log-probability and entropy, read from the
logits the loop computed anyway (:mod:`nlqo.runtime.llm.confidence`).

One lock serializes all model work, so a thread pool may share one instance; a single
:class:`Session` belongs to one thread at a time. The cancel check in scope
(:mod:`nlqo.runtime.llm.cancel`) is consulted before each forward pass: what it raises ends the
call, and a session keeps the tokens and KV state it had before it.
"""

from __future__ import annotations

import collections
import copy
import inspect
import threading
import time
from pathlib import Path
from typing import Any, ClassVar, Sequence

import attrs
import torch

from nlqo.config import default
from nlqo.errors import LLMError, ModelNotAvailable
from nlqo.runtime.llm.base import Capabilities, ChatMessage, Completion, Usage, cut_at_stop
from nlqo.runtime.llm.cancel import check_cancelled
from nlqo.runtime.llm.confidence import Confidence, Tally
from nlqo.runtime.llm.tokens import TokenLLM, TokenSegments, common_prefix
from nlqo.runtime.llm.constrain import TOKENS, Constraint, LazyTokenizer, Matcher, completion, hf_tokenizer
from nlqo.common.logs import tame_transformers


def _crop(cache: Any, length: int) -> None:
    """Drop KV entries beyond the first ``length`` tokens, in place."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


_END_OF_TURN = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<end_of_turn>", "<|end|>")
"""Special tokens that end a turn in common chat vocabularies; generation stops at any present."""


def _end_tokens(model: Any, tokenizer: Any) -> frozenset:
    """Ids that end generation: the configured EOS ids plus the vocabulary's end-of-turn specials.

    Qwen's generation config names only ``<|im_end|>``, yet the model also emits
    ``<|endoftext|>`` and then keeps writing a new turn.
    """
    ids: set[int] = set()
    for value in (getattr(model.generation_config, "eos_token_id", None), tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif value:
            ids.update(int(v) for v in value)
    vocab = tokenizer.get_vocab()
    special = set(getattr(tokenizer, "all_special_tokens", ())) | {
        str(t) for t in getattr(tokenizer, "added_tokens_decoder", {}).values()
    }
    ids.update(vocab[t] for t in _END_OF_TURN if t in vocab and t in special)
    return frozenset(ids)


def quantized(model: Any, quantize: str) -> Any:
    """``model`` with its linear layers quantized as ``quantize`` says (``"none"``: unchanged).

    Quantizes in place: a copy would hold the float32 weights in memory beside the int8 ones.
    """
    if quantize == "none":
        return model
    if quantize != "int8":
        from nlqo.kinds import QUANTIZATIONS

        raise ValueError(f"unknown quantization {quantize!r}; choose one of {', '.join(QUANTIZATIONS)}")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)


@attrs.define(eq=False)
class TransformersLLM(TokenLLM):
    """A causal LM from transformers, greedy, thread-safe, with prefix caching and sessions.

    Build it with :meth:`load` (a local model directory) or
    :func:`nlqo.runtime.models.load_transformers` (bundled names, GGUF files, hub ids).
    """

    capabilities: ClassVar[Capabilities] = Capabilities(
        prefix_cache=True, session=True, fork=True, concurrency=1, constraint=TOKENS
    )
    """Prefix KV cache, KV sessions, forks, grammars applied token by token; one generation at a
    time (a lock serializes them)."""

    model: Any
    tokenizer: Any
    name: str = "local"
    prefix_cache_size: int = 8
    """How many prefix KV states to keep (least recently used are dropped)."""
    total: Usage = Usage()
    """Running sum of the usage of every call."""
    _prefixes: collections.OrderedDict = attrs.field(init=False, factory=collections.OrderedDict)
    _lock: Any = attrs.field(init=False, factory=threading.RLock)
    _eos: frozenset = attrs.field(init=False, default=frozenset())
    _forward_kwargs: dict = attrs.field(init=False, factory=dict)
    _cache_arg: str = attrs.field(init=False, default="past_key_values")
    _grammar_tokenizer: LazyTokenizer = attrs.field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        self._eos = _end_tokens(self.model, self.tokenizer)
        self._grammar_tokenizer = LazyTokenizer(
            lambda: hf_tokenizer(
                self.tokenizer, n_vocab=max(self.model.config.vocab_size, len(self.tokenizer)), eos=sorted(self._eos)
            )
        )
        params = inspect.signature(self.model.forward).parameters
        self._forward_kwargs = {"use_cache": True}
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        if "logits_to_keep" in params:
            self._forward_kwargs["logits_to_keep"] = 1

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        name: str | None = None,
        dtype: Any = None,
        quantize: str = default("quantize"),
        prefix_cache_size: int = 8,
    ) -> "TransformersLLM":
        """Load a transformers model directory offline (float32 unless ``dtype`` says otherwise).

        ``quantize="int8"`` swaps every linear layer for torch's dynamically quantized int8 one
        (weights int8 per channel, activations quantized per call): on a 2-core AVX2 CPU the
        1.5B model prefills about 2x and decodes about 3x faster than float32. Activation scales
        are computed over each forward pass's tokens, so a prompt prefilled in pieces (KV reuse)
        is not bit-identical to one prefilled at once; answers usually agree, not always.
        """
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tame_transformers()  # the CLI's log file gets its messages and its "Loading weights" bar
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype or torch.float32, local_files_only=True)
        except (OSError, ValueError) as exc:
            raise ModelNotAvailable(f"cannot load a model from {path}: {exc}") from exc
        model.eval()
        model = quantized(model, quantize)
        return cls(model, tokenizer, name=name or Path(path).name, prefix_cache_size=prefix_cache_size)

    @property
    def concurrency(self) -> int:
        """Generations that run at once: one (a lock serializes them)."""
        return 1

    # --- text <-> tokens ---------------------------------------------------------------------

    def encode(self, text: str, *, special: bool = False) -> list[int]:
        """Token ids of ``text``; ``special`` adds the tokenizer's BOS/EOS as a prompt would."""
        return list(self.tokenizer(text, add_special_tokens=special)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def format_chat(self, messages: Sequence[ChatMessage], *, add_generation_prompt: bool = True) -> str:
        """``messages`` rendered with the model's own chat template."""
        if not getattr(self.tokenizer, "chat_template", None):
            raise LLMError(f"model {self.name} has no chat template; use complete()")
        rows = [{"role": m.role, "content": m.content} for m in messages]
        return self.tokenizer.apply_chat_template(rows, tokenize=False, add_generation_prompt=add_generation_prompt)

    # --- the LLM protocol --------------------------------------------------------------------

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

        With ``prefix_cache`` the longest cached prefix is reused and the KV state of
        ``ids[:remember]`` (default: all of ``ids``) is remembered for later calls; without it
        every prompt token is computed. With ``constraint`` the reply follows its grammar; a reply
        the grammar forces whole is returned without running the model.
        """
        ids = list(ids)
        if done := self._nothing_to_do(ids, max_tokens):
            return done, ()
        with self._lock, torch.inference_mode():
            start = time.perf_counter()
            matcher, first = self._start(constraint, max_tokens)
            if matcher is not None and (matcher.done or len(first) >= max_tokens):
                return self._forced_whole(matcher, first, max_tokens, start), tuple(first)
            cache, cached = self._lookup(ids) if prefix_cache else (None, 0)
            remember = (len(ids) if remember is None else min(remember, len(ids))) if prefix_cache else 0
            generated, text, finish, confidence = self._generate(
                ids, cache, cached, stop, max_tokens, remember, matcher, first
            )
            usage = self._account(len(ids), cached, len(generated), start, matcher)
        return completion(text, usage, finish, matcher, confidence=confidence), tuple(generated)

    def _start(self, constraint: Constraint | None, max_tokens: int) -> tuple[Matcher | None, list[int]]:
        """A matcher for ``constraint`` (None without one) and the reply's first tokens it forces."""
        if constraint is None:
            return None, []
        matcher = Matcher.start(constraint, self._grammar_tokenizer.get())
        return matcher, matcher.forced(max_tokens)

    def _forced_whole(self, matcher: Matcher, first: list[int], max_tokens: int, start: float) -> Completion:
        """The reply when the grammar forces all of it: the model sees nothing and computes nothing."""
        usage = self._account(0, 0, len(first), start, matcher)
        return completion(self.decode(first), usage, "stop" if matcher.done else "length", matcher)

    # --- sessions ----------------------------------------------------------------------------

    def session(self, prefix: str = "", *, special: bool = True, cache_prefix: bool = True) -> "Session":
        """A session starting with ``prefix`` (tokenized like a prompt when ``special``).

        With ``cache_prefix`` the prefix's KV state goes into the prefix cache at the first
        ``generate`` and is reused by every later session (or ``complete(prefix_cache=True)``)
        that starts with the same tokens.
        """
        ids = self.encode(prefix, special=special)
        return Session(self, ids, len(ids) if cache_prefix else 0)

    def fork(self) -> "TransformersLLM":
        """A backend on the same weights (and the same lock, so calls still run one at a time)
        with its own, empty prefix cache: strategies measured side by side each keep their own
        warm prefixes instead of evicting or borrowing one another's."""
        other = attrs.evolve(self, total=Usage())
        other._lock = self._lock
        other._grammar_tokenizer = self._grammar_tokenizer
        return other

    def clear_prefix_cache(self) -> None:
        with self._lock:
            self._prefixes.clear()

    def cached_prefixes(self) -> tuple[int, ...]:
        """Token counts of the prefix-cache entries, least recently used first."""
        with self._lock:
            return tuple(len(k) for k in self._prefixes)

    # --- internals (call with the lock held, in inference mode) --------------------------------

    def _new_cache(self) -> Any:
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def _forward(self, cache: Any, ids: Sequence[int]) -> torch.Tensor:
        """Feed ``ids`` after the tokens already in ``cache``; the logits of the last position."""
        out = self.model(
            input_ids=torch.tensor([list(ids)], dtype=torch.long), **{self._cache_arg: cache}, **self._forward_kwargs
        )
        return out.logits[0, -1]

    def _lookup(self, ids: Sequence[int]) -> tuple[Any, int]:
        """A private copy of the cached KV state of the longest cached prefix of ``ids``.

        At least one token is left uncached, since generation needs the logits of the last one.
        """
        best_key, best = None, 0
        for key in self._prefixes:
            n = common_prefix(key, ids)
            if n > best:
                best_key, best = key, n
        reuse = min(best, len(ids) - 1)
        if best_key is None or reuse <= 0:
            return None, 0
        self._prefixes.move_to_end(best_key)
        cache = copy.deepcopy(self._prefixes[best_key])
        _crop(cache, reuse)
        return cache, reuse

    def _remember(self, ids: tuple[int, ...], cache: Any) -> None:
        if ids in self._prefixes:
            self._prefixes.move_to_end(ids)
            return
        if self.prefix_cache_size <= 0:
            return
        self._prefixes[ids] = copy.deepcopy(cache)
        while len(self._prefixes) > self.prefix_cache_size:
            self._prefixes.popitem(last=False)

    def _generate(
        self,
        ids: list[int],
        cache: Any,
        cached: int,
        stop: Sequence[str],
        max_tokens: int,
        remember: int,
        matcher: Matcher | None = None,
        first: Sequence[int] = (),
    ) -> tuple[list[int], str, str, Confidence | None]:
        """Greedy continuation of ``ids``, whose first ``cached`` tokens are in ``cache``: the reply's
        tokens, its text, how it finished and its confidence (read from each choice's logits).

        ``cache`` is extended in place (it ends holding all but the last generated token). When
        ``remember`` exceeds ``cached``, the KV state of ``ids[:remember]`` is stored in the
        prefix cache on the way. With a ``matcher`` the reply starts with the forced tokens
        ``first``, each choice is masked, and forced tokens follow the chosen one in its forward pass.
        The cancel check in scope is consulted before every forward pass.
        """
        if cache is None:
            cache, cached = self._new_cache(), 0
        logits = None
        check_cancelled()
        if remember > cached:
            logits = self._forward(cache, ids[cached:remember])
            self._remember(tuple(ids[:remember]), cache)
            cached = remember
            check_cancelled()
        if cached < len(ids) or first:
            logits = self._forward(cache, ids[cached:] + list(first))
        generated: list[int] = list(first)
        tally = Tally()
        assert logits is not None  # at least the last prompt token is computed
        while True:
            token = tally.choose(logits.float().numpy(), len(generated), None if matcher is None else matcher.choose)
            generated.append(token)
            if token in self._eos:
                return generated, self.decode(generated[:-1]), "stop", self._confidence(tally, generated)
            run = [token]
            if matcher is not None:
                matcher.advance(token)
                run += matcher.forced(max_tokens - len(generated))
                generated += run[1:]
            text, hit = cut_at_stop(self.decode(generated), stop)
            if hit or (matcher is not None and matcher.done):
                return generated, text, "stop", self._confidence(tally, generated)
            if len(generated) >= max_tokens:
                return generated, text, "length", self._confidence(tally, generated)
            check_cancelled()
            if matcher is None:
                logits = self._forward(cache, run)
            else:
                started = time.perf_counter()
                logits = self._forward(cache, run)
                matcher.decode_ms += (time.perf_counter() - started) * 1000.0

    def _confidence(self, tally: Tally, generated: list[int]) -> Confidence | None:
        """The reply's confidence, each chosen token placed in the decoded text (by the lengths of
        the decoded prefixes: the tokenizer's decoding of a whole is not the sum of its pieces)."""
        lengths = {0: 0}

        def upto(n: int) -> int:
            if n not in lengths:
                lengths[n] = len(self.decode(generated[:n]))
            return lengths[n]

        offsets = [(0, 0)] * len(generated)
        for p in tally.positions:
            offsets[p] = (upto(p), upto(p + 1))
        return tally.confidence(offsets)

    def _nothing_to_do(self, ids: Sequence[int], max_tokens: int) -> Completion | None:
        """Reject an empty context; answer ``max_tokens <= 0`` without touching the model."""
        if not ids:
            raise LLMError(f"{self.name}: nothing to continue, the prompt is empty")
        if max_tokens <= 0:
            return Completion("", Usage(calls=1), "length")
        return None

    def _account(self, prompt: int, cached: int, generated: int, start: float, matcher: Matcher | None = None) -> Usage:
        """Usage of one call; ``generated`` counts every reply token, of which ``matcher`` forced some."""
        forced = 0 if matcher is None else matcher.forced_tokens
        usage = Usage(
            prompt_tokens=prompt,
            cached_prompt_tokens=cached,
            generated_tokens=generated - forced,
            wall_ms=(time.perf_counter() - start) * 1000.0,
            calls=1,
            forced_tokens=forced,
        )
        self.total = self.total + usage
        return usage


@attrs.define(eq=False)
class Session(TokenSegments):
    """A token sequence with its live KV state; see the module docstring.

    Made by :meth:`TransformersLLM.session`. ``usage`` sums this session's ``generate`` calls
    (a fork starts from zero).
    """

    llm: TransformersLLM
    _ids: list[int]
    _prefix_len: int
    """Tokens of the fixed prefix to store in the prefix cache (0: do not)."""
    _cache: Any = None
    """KV state of all but (at least) the last token, or None before the first generate."""
    usage: Usage = Usage()

    @property
    def cached_tokens(self) -> int:
        """How many of the tokens have a computed KV state."""
        return 0 if self._cache is None else self._cache.get_seq_length()

    def generate(
        self, *, stop: Sequence[str] = (), max_tokens: int = 256, constraint: Constraint | None = None
    ) -> Completion:
        """Continue greedily (under ``constraint`` when given); the generated and forced tokens
        (stop text and end token included) stay in the session, the returned text is cut before
        the stop string."""
        llm = self.llm
        if done := llm._nothing_to_do(self._ids, max_tokens):
            return done
        with llm._lock, torch.inference_mode():
            start = time.perf_counter()
            matcher, first = llm._start(constraint, max_tokens)
            if matcher is not None and (matcher.done or len(first) >= max_tokens):
                out = llm._forced_whole(matcher, first, max_tokens, start)
                self._ids.extend(first)
                self.usage = self.usage + out.usage
                return out
            n = len(self._ids)
            remember = 0
            if self._cache is None:
                self._cache, cached = llm._lookup(self._ids)
                if self._cache is None:
                    self._cache = llm._new_cache()
                remember = self._prefix_len
            cached = self._cache.get_seq_length()
            try:
                generated, text, finish, confidence = llm._generate(
                    self._ids, self._cache, cached, stop, max_tokens, remember, matcher, first
                )
            except BaseException:  # interrupted (or failed): the session keeps what it had
                _crop(self._cache, min(cached, n - 1))
                raise
            self._ids.extend(generated)
            usage = llm._account(n, cached, len(generated), start, matcher)
        self.usage = self.usage + usage
        return completion(text, usage, finish, matcher, confidence=confidence)

    def fork(self) -> "Session":
        """An independent copy (tokens and KV state) to continue differently."""
        with self.llm._lock, torch.inference_mode():
            cache = None if self._cache is None else copy.deepcopy(self._cache)
        return Session(self.llm, list(self._ids), self._prefix_len, cache)

    def truncate(self, length: int) -> None:
        """Forget every token after the first ``length`` (e.g. to roll back a generation)."""
        if not 0 <= length <= len(self._ids):
            raise ValueError(f"cannot truncate a session of {len(self._ids)} tokens to {length}")
        del self._ids[length:]
        self._prefix_len = min(self._prefix_len, length)
        if self._cache is not None:
            if length == 0:
                self._cache = None
            else:
                with self.llm._lock, torch.inference_mode():
                    _crop(self._cache, min(self._cache.get_seq_length(), length - 1))
