"""Grammar-constrained decoding: one layer for every backend that holds the logits (llguidance inside).

A :class:`Constraint` says what a reply may be: a grammar in Lark syntax (llguidance reads it; the
grammars nlqo writes are plain Lark as well, so tests can generate strings from them), optionally
followed by a second stage whose grammar is built from the reply so far. The IR's answer line needs
that: it may name only variables the atoms mention, which no context-free grammar can say.

A local backend (:class:`~nlqo.runtime.llm.local.TransformersLLM`, :class:`~nlqo.runtime.llm.llamacpp.LlamaCppLLM`)
starts one :class:`Matcher` per request and, at each step:

1. appends the tokens the grammar forces (:meth:`Matcher.forced`) without sampling: they enter the
   model in the same forward pass as the token before them and are counted as *forced*
   (``Usage.forced_tokens``), not generated;
2. takes the greedy choice among the allowed tokens (:meth:`Matcher.choose`): the model's own
   choice when the grammar allows it (checking one token is cheap), else the argmax of the logits
   masked in place with numpy; so where the grammar allows the model's choice the output is the
   unconstrained one (the backend reads the logits for the reply's confidence before, unmasked:
   :mod:`nlqo.runtime.llm.confidence`);
3. ends the reply as soon as the grammar accepts nothing more, without sampling an end token.

An OpenAI-compatible server gets the grammar passed through where its API takes one
(``OpenAICompatLLM.grammar_field``); other backends answer unconstrained, and the caller validates
after the fact. :func:`constrained_chat` asks any backend; :func:`enforced` says what happened.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from typing import Any, Callable, Iterable, Sequence

import attrs
import numpy as np

from nlqo.errors import LLMError, ModelNotAvailable
from nlqo.runtime.llm.base import LLM, ChatMessage, Completion, capabilities


@attrs.frozen
class Constraint:
    """What one reply may be."""

    grammar: str
    """Lark grammar of the reply (of its first stage when ``then`` is set)."""
    name: str = "grammar"
    then: Callable[[str], str] | None = attrs.field(default=None, eq=False, repr=False)
    """Grammar of the second stage, from the reply's text when the first stage is complete."""
    whole: str | None = None
    """One grammar for the whole reply, a superset of the stages: for servers, which take one."""

    @property
    def single(self) -> str:
        """The grammar to hand to a server (``whole``, else ``grammar``)."""
        return self.whole or self.grammar

    def key(self) -> str:
        """A stable identity for response caches.

        >>> choice(["yes", "no"]).key() == choice(["yes", "no"]).key() != choice(["no", "yes"]).key()
        True
        """
        stage = "" if self.then is None else getattr(self.then, "__qualname__", repr(self.then))
        blob = json.dumps([self.name, self.grammar, self.whole, stage])
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def lark_literal(text: str) -> str:
    """``text`` as a Lark string literal.

    >>> lark_literal('say "hi"')
    '"say \\\\"hi\\\\""'
    """
    return json.dumps(text, ensure_ascii=False)


def choice(options: Iterable[str], *, name: str = "choice") -> Constraint:
    """A reply that is exactly one of ``options``.

    >>> print(choice(["yes", "no"]).grammar)
    start: "yes" | "no"
    """
    options = list(options)
    if not options:
        raise ValueError("choice() needs at least one option")
    return Constraint("start: " + " | ".join(lark_literal(o) for o in options), name=name)


def trie_choice(options: Iterable[str], *, name: str = "choice") -> Constraint:
    """A reply that is exactly one of ``options``, as :func:`choice`, but written as a trie of words:
    each rule offers the words that may come next, so the parser never holds more alternatives at
    once than the options have distinct next words. For thousands of options sharing words (every
    short span of some passages), where one flat alternation is more than llguidance's parser takes.

    >>> print(trie_choice(["a", "a b", "a c", "b"]).grammar)
    start: "a" s1? | "b"
    s1: " b" | " c"
    """
    trie: dict[str | None, dict] = {}
    for option in options:
        node = trie
        for piece in re.split(r"(?<=\S)(?= )", option):  # "a b c" -> "a", " b", " c"
            node = node.setdefault(piece, {})
        node[None] = {}  # an option ends here
    if not trie:
        raise ValueError("trie_choice() needs at least one option")
    rules: list[str] = []

    def alternatives(node: dict[str | None, dict]) -> str:
        out = []
        for piece, child in node.items():
            if piece is None:
                continue
            item = lark_literal(piece)
            if any(key is not None for key in child):
                rules.append("")  # the child's number, taken before its own children take theirs
                index = len(rules)
                rules[index - 1] = f"s{index}: " + alternatives(child)
                item += f" s{index}" + ("?" if None in child else "")
            out.append(item)
        return " | ".join(out)

    start = "start: " + alternatives(trie)
    return Constraint("\n".join([start, *rules]), name=name)


def literal(text: str, *, name: str = "literal") -> Constraint:
    """A reply that is exactly ``text`` (every token of it forced)."""
    return Constraint("start: " + lark_literal(text), name=name)


# --- tokenizers -------------------------------------------------------------------------------------


def _llguidance():
    try:
        import llguidance
    except ImportError as exc:
        raise ModelNotAvailable(f"constrained decoding needs llguidance (pip install llguidance): {exc}") from None
    return llguidance


def hf_tokenizer(tokenizer: Any, *, n_vocab: int | None, eos: Sequence[int]) -> Any:
    """llguidance's tokenizer for a fast transformers tokenizer (about 1 s: build once per model)."""
    _llguidance()
    import llguidance.hf

    return llguidance.hf.from_tokenizer(tokenizer, n_vocab=n_vocab, eos_token=sorted(eos))


def llamacpp_tokenizer(vocab: Any, *, eos: Sequence[int]) -> Any:
    """llguidance's tokenizer for a llama.cpp vocabulary (about 1 s: build once per model)."""
    _llguidance()
    import warnings

    import llguidance.llamacpp

    with warnings.catch_warnings():  # it reads token attributes with a call llama-cpp-python marks deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        return llguidance.llamacpp.lltokenizer_from_vocab(vocab, eos_token=sorted(eos))


@attrs.define(eq=False)
class LazyTokenizer:
    """Builds llguidance's tokenizer on first use, once, for every thread and fork that shares it."""

    build: Callable[[], Any]
    _value: Any = None
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    def get(self) -> Any:
        with self._lock:
            if self._value is None:
                self._value = self.build()
            return self._value


# --- one request's state ----------------------------------------------------------------------------


def _matcher(tokenizer: Any, grammar: str) -> Any:
    llg = _llguidance()
    inner = llg.LLMatcher(tokenizer, llg.LLMatcher.grammar_from_lark(grammar), log_level=0)
    if inner.is_error():
        raise LLMError(f"constraint grammar rejected by llguidance: {inner.get_error()}")
    return inner


@attrs.define(eq=False)
class Matcher:
    """The state of one constrained reply: which tokens may come next, and its accounting.

    Backends call :meth:`forced` and append what it returns, :meth:`choose` on the logits of each
    sampled position, :meth:`advance` with the chosen token, and stop when :attr:`done`.
    """

    constraint: Constraint
    tokenizer: Any
    _inner: Any
    _stage: int = 0
    _reply: bytearray = attrs.Factory(bytearray)
    _bits: np.ndarray = attrs.field(init=False)
    forced_tokens: int = 0
    """Tokens :meth:`forced` returned."""
    mask_ms: float = 0.0
    """Time spent computing and applying token masks."""
    decode_ms: float = 0.0
    """Time of the model's forward passes after the prompt (the backend adds it)."""

    def __attrs_post_init__(self) -> None:
        self._bits = np.zeros((self.tokenizer.vocab_size + 31) // 32, dtype=np.int32)
        self._settle()

    @classmethod
    def start(cls, constraint: Constraint, tokenizer: Any) -> "Matcher":
        return cls(constraint, tokenizer, _matcher(tokenizer, constraint.grammar))

    @property
    def text(self) -> str:
        """The reply so far (forced and chosen tokens)."""
        return self._reply.decode("utf-8", "replace")

    @property
    def done(self) -> bool:
        """The reply is complete: the grammar accepts no further token."""
        return self._inner.is_stopped()

    def forced(self, limit: int | None = None) -> list[int]:
        """Consume and return the tokens the grammar forces now (at most ``limit``)."""
        out: list[int] = []
        while not self.done and (limit is None or len(out) < limit):
            run = self._inner.compute_ff_tokens()
            if limit is not None:
                run = run[: limit - len(out)]
            if not run:
                break
            if not self._inner.consume_tokens(run):
                self._fail()
            self._reply += self.tokenizer.decode_bytes(run)
            out += run
            self._settle()
        self.forced_tokens += len(out)
        return out

    def choose(self, logits: np.ndarray) -> int:
        """The greedy token among the allowed ones.

        The model's own choice is checked first (one token: cheap); only when the grammar rejects
        it is the whole mask computed and applied to ``logits`` in place. Either way the result is
        the argmax of the masked logits, lowest id first on ties, as :meth:`masked_argmax` gives.
        """
        started = time.perf_counter()
        top = int(np.argmax(logits))
        if top < self.tokenizer.vocab_size and self._inner.validate_tokens([top]) == 1:
            token = top
        else:
            token = self.masked_argmax(logits)
        self.mask_ms += (time.perf_counter() - started) * 1000.0
        return token

    def masked_argmax(self, logits: np.ndarray) -> int:
        """Mask ``logits`` (a numpy vector) in place with the grammar's token mask; its argmax."""
        self._inner.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        if self._inner.is_error():
            self._fail()
        n = min(len(logits), self.tokenizer.vocab_size)
        allowed = np.unpackbits(self._bits.view(np.uint8), count=n, bitorder="little").view(bool)
        np.copyto(logits[:n], -np.inf, where=~allowed)
        logits[n:] = -np.inf
        token = int(np.argmax(logits))
        if not np.isfinite(logits[token]):
            raise LLMError(f"constraint {self.constraint.name}: no token is allowed after {self.text[-80:]!r}")
        return token

    def advance(self, token: int) -> None:
        """Feed the chosen ``token``; an end token only ends the reply."""
        if not self._inner.consume_token(token):
            self._fail()
        if token not in self.tokenizer.eos_tokens:
            self._reply += self.tokenizer.decode_bytes([token])
        self._settle()

    def _settle(self) -> None:
        """Start the second stage once the first is complete."""
        if (
            self._stage == 0
            and self.constraint.then is not None
            and self._inner.is_stopped()
            and not self._inner.is_error()
        ):
            self._stage = 1
            self._inner = _matcher(self.tokenizer, self.constraint.then(self.text))
        if self._inner.is_error():
            self._fail()

    def _fail(self):
        raise LLMError(
            f"constraint {self.constraint.name}: {self._inner.get_error() or 'token not allowed'} after {self.text[-80:]!r}"
        )


@attrs.frozen
class ConstrainedCompletion(Completion):
    """A reply to a constrained request: ``usage.forced_tokens`` counts the forced tokens."""

    enforced: bool = True
    """True when this process applied the grammar token by token, so the reply follows it; False
    when a server was asked to (its reply is validated like any other)."""
    mask_ms: float = 0.0
    """Time spent computing and applying token masks."""
    decode_ms: float = 0.0
    """Time of the forward passes after the prompt (sampled and forced tokens)."""


def completion(text: str, usage, finish: str, matcher: Matcher | None, *, confidence=None) -> Completion:
    """What a backend returns: a plain :class:`Completion`, or a constrained one with the matcher's
    figures; with its ``confidence`` (:mod:`nlqo.runtime.llm.confidence`) when the backend read it."""
    if matcher is None:
        return Completion(text, usage, finish, confidence=confidence)
    return ConstrainedCompletion(
        text,
        usage,
        finish,
        confidence=confidence,
        enforced=True,
        mask_ms=matcher.mask_ms,
        decode_ms=matcher.decode_ms,
    )


# --- asking any backend -----------------------------------------------------------------------------


TOKENS = "tokens"
"""``Capabilities.constraint`` of a backend that applies grammars token by token in this process."""
SERVER = "server"
"""``Capabilities.constraint`` of a backend that passes grammars to a server."""


def can_constrain(llm: LLM) -> bool:
    """Whether ``llm`` declares it applies a constraint: token by token (the local runtimes) or by
    passing its grammar to a server that takes one (``Capabilities.constraint``)."""
    return capabilities(llm).constraint in (TOKENS, SERVER)


def token_level(llm: LLM) -> bool:
    """Whether ``llm`` applies constraints token by token, so every reply follows its grammar and
    a token budget the grammar cannot exceed may be given."""
    return capabilities(llm).constraint == TOKENS


def constrained_chat(
    llm: LLM,
    messages: Sequence[ChatMessage],
    constraint: Constraint | None,
    *,
    stop: Sequence[str] = (),
    max_tokens: int = 256,
    prefix_cache: bool = True,
) -> Completion:
    """``llm.chat`` under ``constraint`` where the backend applies one (:func:`can_constrain`),
    unconstrained otherwise.

    Backends that keep a prefix KV cache are asked to reuse it (see ``chat_reusing_prefix``).

    >>> from nlqo.runtime.llm.scripted import ScriptedLLM
    >>> reply = constrained_chat(ScriptedLLM([], default="maybe"), [ChatMessage("user", "?")], choice(["yes", "no"]))
    >>> reply.text, enforced(reply)
    ('maybe', False)
    """
    options: dict[str, Any] = {}
    if prefix_cache and capabilities(llm).prefix_cache:
        options["prefix_cache"] = True
    if constraint is not None and can_constrain(llm):
        options["constraint"] = constraint
    return llm.chat(messages, stop=stop, max_tokens=max_tokens, **options)


def enforced(reply: Completion) -> bool:
    """Whether ``reply`` was produced under its constraint token by token, so it follows the grammar."""
    return isinstance(reply, ConstrainedCompletion) and reply.enforced
