"""An :class:`~nlqo.runtime.llm.base.LLM` over the OpenAI-compatible HTTP API.

Speaks ``/v1/chat/completions`` and ``/v1/completions`` as served by vLLM, the llama.cpp server,
llama-cpp-python, Ollama and hosted APIs. Standard library only (``urllib``); one connection per
request, no shared mutable state, so one instance may be called from many threads. While it waits
for a reply it consults the cancel check in scope (:mod:`nlqo.runtime.llm.cancel`) every
:data:`CANCEL_POLL_S` seconds; when the caller gives up, the connection is closed (servers such as
llama.cpp's and vLLM stop generating for a request whose client left) and the check's reason raised.
"""

from __future__ import annotations

import email.utils
import functools
import http.client
import json
import math
import os
import random
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Mapping, Sequence

import attrs

from nlqo._version import __version__
from nlqo.errors import LLMError
from nlqo.runtime.llm.base import Capabilities, ChatMessage, Completion, Usage, cut_at_stop
from nlqo.runtime.llm.cancel import Check, check_cancelled, current
from nlqo.runtime.llm.confidence import Confidence, from_top_logprobs
from nlqo.runtime.llm.constrain import SERVER, ConstrainedCompletion, Constraint

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
"""HTTP statuses worth another attempt: timeouts, rate limits and transient server errors."""

CANCEL_POLL_S = 0.1
"""Seconds between two consultations of the cancel check while a reply is awaited."""

_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
_option = functools.partial(attrs.field, kw_only=True)


def api_base(url: str) -> str:
    """Normalise a server URL to the API root that ``/chat/completions`` is appended to.

    A bare host gets ``/v1``; a URL with a path is kept as given (hosted APIs vary).

    >>> api_base("http://127.0.0.1:8080")
    'http://127.0.0.1:8080/v1'
    >>> api_base("https://api.example.com/openai/v1/")
    'https://api.example.com/openai/v1'
    """
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise LLMError(f"not an http(s) server URL: {url!r}")
    path = parts.path.rstrip("/") or "/v1"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


class _Retryable(Exception):
    """One failed attempt that may succeed if repeated."""

    def __init__(self, reason: str, retry_after: float | None = None, *, timed_out: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after
        self.timed_out = timed_out


class _Deadline:
    """The end of one attempt: when ``seconds`` have passed, or when ``check`` (a cancel check,
    consulted every :data:`CANCEL_POLL_S` seconds) raises, the attempt's socket is shut down, so a
    server that stalls or trickles bytes (each read within the socket timeout) cannot hold it longer.
    ``expired`` says whether the time ran out, ``stopped`` what the check raised. Use as a context
    manager around the whole exchange."""

    def __init__(self, seconds: float, check: Check | None = None):
        self.expired = False
        self.stopped: BaseException | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._seconds, self._check = seconds, check
        self._over = threading.Event()
        self._watcher = threading.Thread(target=self._watch_time, name="nlqo-http-deadline", daemon=True)

    def __enter__(self) -> "_Deadline":
        self._watcher.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._over.set()

    def _watch_time(self) -> None:
        end = time.monotonic() + self._seconds
        while (left := end - time.monotonic()) > 0:
            if self._over.wait(left if self._check is None else min(left, CANCEL_POLL_S)):
                return
            if self._check is not None:
                try:
                    self._check()
                except BaseException as exc:  # noqa: BLE001 - the caller's reason to stop, raised by its own thread
                    self.stopped = exc
                    self._shut_all()
                    return
        self.expired = True
        self._shut_all()

    def opener(self, url: str) -> urllib.request.OpenerDirector:
        """An opener (see :func:`_opener`) whose connections this deadline watches."""
        return _opener(url, _DeadlineHTTP(self), _DeadlineHTTPS(self))

    def connection(
        self, http_class: Callable[..., http.client.HTTPConnection]
    ) -> Callable[..., http.client.HTTPConnection]:
        """A factory of ``http_class`` connections whose sockets are watched once connected."""

        def make(host: str, **kwargs: Any) -> http.client.HTTPConnection:
            conn = http_class(host, **kwargs)
            connect = conn.connect

            def watched() -> None:
                connect()
                self._watch(conn.sock)

            conn.connect = watched  # type: ignore[method-assign]
            return conn

        return make

    def _watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.expired or self.stopped is not None:
                _shut(sock)

    def _shut_all(self) -> None:
        with self._lock:
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    """Wake every read blocked on ``sock`` (the plain socket's shutdown, beneath any TLS layer)."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


class _DeadlineHTTP(urllib.request.HTTPHandler):
    def __init__(self, deadline: _Deadline):
        super().__init__()
        self.deadline = deadline

    def do_open(self, http_class, req, **kwargs):
        return super().do_open(self.deadline.connection(http_class), req, **kwargs)


class _DeadlineHTTPS(urllib.request.HTTPSHandler):
    def __init__(self, deadline: _Deadline):
        super().__init__()
        self.deadline = deadline

    def do_open(self, http_class, req, **kwargs):
        return super().do_open(self.deadline.connection(http_class), req, **kwargs)


@attrs.define(eq=False)
class OpenAICompatLLM:
    """A model behind an OpenAI-compatible server. Greedy (temperature 0) unless told otherwise.

    Failed attempts are retried up to ``max_attempts`` in all on HTTP 408/429/5xx, connection
    resets, replies cut short and timeouts, waiting ``backoff_s * 2**k`` (capped at
    ``max_delay_s``, plus up to ``jitter`` of it at random) or the server's ``Retry-After`` (capped
    the same way). A refused connection, a 4xx or a reply that is not JSON fails at once. Each
    attempt ends after ``timeout_s`` however the server behaves. ``Usage.wall_ms`` covers every
    attempt and wait.

    >>> llm = OpenAICompatLLM("http://127.0.0.1:8080", "smollm2")
    >>> llm.api_base, llm.temperature
    ('http://127.0.0.1:8080/v1', 0.0)
    """

    base_url: str
    """Server URL, e.g. ``http://127.0.0.1:8000/v1``; a bare host gets ``/v1``."""
    model: str
    """The ``model`` field of each request (the server's model id)."""
    api_key: str | None = _option(default=None, repr=False)
    """Sent as ``Authorization: Bearer``; local servers need none. See :meth:`from_env`."""
    name: str = _option(default="openai-compat")
    temperature: float = _option(default=0.0)
    seed: int | None = _option(default=None)
    timeout_s: float = _option(default=300.0)
    """Seconds one attempt may take in all (connect, headers, body): a server that never answers,
    stalls or trickles bytes is cut off then."""
    max_attempts: int = _option(default=4, validator=attrs.validators.ge(1))
    backoff_s: float = _option(default=0.5)
    max_delay_s: float = _option(default=30.0)
    jitter: float = _option(default=0.1)
    complete_via_chat: bool = _option(default=False)
    """Serve :meth:`complete` through the chat endpoint, for servers without ``/v1/completions``.
    The prompt becomes one user message, so the chat template is applied to it."""
    max_stop_sequences: int | None = _option(default=4)
    """Stop strings sent to the server (OpenAI accepts 4); all of them are applied locally."""
    extra_body: Mapping[str, Any] = _option(factory=dict, converter=dict)
    """Server-specific request fields, e.g. ``{"top_k": 1}`` or ``{"cache_prompt": True}``."""
    grammar_field: str | None = _option(default=None)
    """The request field a constraint's grammar is sent in, as GBNF: ``"grammar"`` for the
    llama.cpp server and llama-cpp-python's, ``"guided_grammar"`` for vLLM. None (the default, as
    servers do not say what they take): constraints are not sent and replies are validated after
    the fact, as for any unconstrained reply."""
    key_source: str | None = _option(default=None)
    """Where the key came from (an environment variable name), for error messages."""
    logprobs: int | None = _option(default=5)
    """Alternatives per token to ask for (``top_logprobs`` in chat, ``logprobs`` for completions),
    for each reply's confidence (:func:`parse_confidence`); None asks for none. A server that
    returns none gives replies without confidence; one that refuses the field (HTTP 400 naming it)
    is asked again without it, and not asked for it again."""
    sleep: Callable[[float], None] = _option(default=time.sleep, repr=False)
    _slots: int | None = attrs.field(init=False, default=None, repr=False)
    """The server's reported slots once asked (0: it reported none)."""
    _unsure_at: float | None = attrs.field(init=False, default=None, repr=False)
    """When the server last could not say (loading, unreachable): asked again only after a pause."""
    _logprobs_refused: bool = attrs.field(init=False, default=False, repr=False)
    """The server refused the log-probability fields once: they are no longer sent."""

    @classmethod
    def from_env(
        cls,
        base_url: str,
        model: str,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        env: Mapping[str, str] | None = None,
        **options: Any,
    ) -> "OpenAICompatLLM":
        """Build a backend whose API key is read now from ``env[api_key_env]`` (may be unset).

        >>> OpenAICompatLLM.from_env("http://h:1", "m", api_key_env="K", env={"K": "s"}).api_key
        's'
        """
        env = os.environ if env is None else env
        key = env.get(api_key_env) or None
        return cls(base_url, model, api_key=key, key_source=api_key_env, **options)

    @property
    def api_base(self) -> str:
        return api_base(self.base_url)

    def server_slots(self) -> int | None:
        """Requests the server runs at once, as it reports them (asked once): ``total_slots`` of the
        llama.cpp server's ``GET /props``, else the number of entries of its ``GET /slots``. None
        when the server reports neither (vLLM, llama-cpp-python's server, hosted APIs): then
        :func:`nlqo.planner.lower.measure_profile` measures by sending requests at once."""
        if self._slots is None:
            if self._unsure_at is not None and time.monotonic() - self._unsure_at < SLOTS_RETRY_S:
                return None  # capabilities are read on every call: do not ask a silent server each time
            slots = reported_slots(self.api_base, self.api_key, timeout_s=min(self.timeout_s, 10.0))
            if slots is _UNSURE:  # still loading, or unreachable: ask again later
                self._unsure_at = time.monotonic()
                return None
            self._slots = slots or 0
        return self._slots or None

    @property
    def concurrency(self) -> int:
        """Requests the server runs at once: its reported slots, else 1."""
        return self.server_slots() or 1

    def cache_identity(self) -> dict[str, Any]:
        """Everything besides the request itself that decides the output (for response caches)."""
        return {
            "model": self.model,
            "temperature": self.temperature,
            "seed": self.seed,
            "complete_via_chat": self.complete_via_chat,
            "extra_body": self.extra_body,
            "grammar_field": self.grammar_field,
        }

    @property
    def capabilities(self) -> Capabilities:
        """A server (its slots, asked once on first read, are the concurrency), a cache identity (the
        server's own prefix caching needs nothing from nlqo), and constraints passed to the server
        when ``grammar_field`` names where."""
        return Capabilities(
            concurrency=self.concurrency,
            server_slots=True,
            cache_identity=True,
            constraint=None if self.grammar_field is None else SERVER,
        )

    def complete(
        self, prompt: str, *, stop: Sequence[str] = (), max_tokens: int = 256, constraint: Constraint | None = None
    ) -> Completion:
        if self.complete_via_chat:
            return self.chat([ChatMessage("user", prompt)], stop=stop, max_tokens=max_tokens, constraint=constraint)
        return self._generate("/completions", {"prompt": prompt}, stop, max_tokens, constraint)

    def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        stop: Sequence[str] = (),
        max_tokens: int = 256,
        constraint: Constraint | None = None,
    ) -> Completion:
        """A chat reply; with ``constraint`` and a ``grammar_field`` the server gets the grammar
        (one grammar for the whole reply: ``Constraint.single``, in GBNF)."""
        body = {"messages": [{"role": m.role, "content": m.content} for m in messages]}
        return self._generate("/chat/completions", body, stop, max_tokens, constraint)

    def _generate(
        self,
        path: str,
        body: dict[str, Any],
        stop: Sequence[str],
        max_tokens: int,
        constraint: Constraint | None = None,
    ) -> Completion:
        chat = path == "/chat/completions"
        asked = self.logprobs is not None and not self._logprobs_refused
        logprobs: dict[str, Any] = {}
        if asked:
            logprobs = {"logprobs": True, "top_logprobs": self.logprobs} if chat else {"logprobs": self.logprobs}
        body = {
            **logprobs,
            **self.extra_body,
            **body,
            "model": self.model,
            "max_tokens": max_tokens,
            "temperature": self.temperature,
        }
        with_grammar = False
        if constraint is not None and self.grammar_field is not None:
            from nlqo.runtime.llm.gbnf import to_gbnf

            body[self.grammar_field] = to_gbnf(constraint.single)
            with_grammar = True
        if self.seed is not None:
            body["seed"] = self.seed
        sent = [s for s in stop if s][: self.max_stop_sequences]
        if sent:
            body["stop"] = sent
        start = time.perf_counter()
        try:
            reply = self._post(path, body)
        except LLMError as exc:
            if not (asked and _refuses_logprobs(str(exc))):
                raise
            self._logprobs_refused = True
            reply = self._post(path, {k: v for k, v in body.items() if k not in logprobs})
        wall_ms = (time.perf_counter() - start) * 1000.0
        url = self.api_base + path
        try:
            choice = reply["choices"][0]
            raw = choice["message"]["content"] if path == "/chat/completions" else choice["text"]
            if not isinstance(raw, (str, type(None))):
                raise TypeError(f"the text is a {type(raw).__name__}")
            usage = parse_usage(reply, wall_ms)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise LLMError(f"{url}: unexpected response shape ({exc!r}): {json.dumps(reply)[:500]}") from None
        text, stopped = cut_at_stop(raw or "", stop)
        finish = "length" if choice.get("finish_reason") == "length" and not stopped else "stop"
        confidence = parse_confidence(choice, f"top-{self.logprobs}") if asked else None
        if with_grammar:  # the server was asked to follow the grammar; the reply is still validated like any other
            return ConstrainedCompletion(
                text=text, usage=usage, finish_reason=finish, confidence=confidence, enforced=False
            )
        return Completion(text=text, usage=usage, finish_reason=finish, confidence=confidence)

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = self.api_base + path
        data = json.dumps(body).encode("utf-8")
        reasons: list[str] = []
        retry_after: float | None = None
        check = current()
        for attempt in range(self.max_attempts):
            if attempt:
                self._pause(self._delay(attempt, retry_after), check)
            check_cancelled()
            try:
                return self._attempt(url, data, check)
            except _Retryable as exc:
                reasons.append(exc.reason)
                retry_after = exc.retry_after
        raise LLMError(f"{url}: gave up after {self.max_attempts} attempts; last: {reasons[-1]}")

    def _pause(self, seconds: float, check: Check | None) -> None:
        """Wait ``seconds`` before the next attempt; with a cancel ``check``, in slices it is consulted between."""
        if check is None:
            self.sleep(seconds)
            return
        slices = max(1, math.ceil(seconds / CANCEL_POLL_S))
        for _ in range(slices):
            check()
            self.sleep(seconds / slices)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_delay_s)
        base = min(self.backoff_s * 2 ** (attempt - 1), self.max_delay_s)
        return base * (1.0 + self.jitter * random.random())

    def _attempt(self, url: str, data: bytes, check: Check | None = None) -> dict[str, Any]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": f"nlqo/{__version__}",
        }
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(url, data=data, headers=headers, method="POST")
        failure: Exception | None = None
        with _Deadline(self.timeout_s, check) as deadline:
            try:
                with deadline.opener(url).open(request, timeout=self.timeout_s) as response:
                    payload = response.read()
            except urllib.error.HTTPError as exc:
                failure = self._http_error(url, exc)
            except urllib.error.URLError as exc:
                failure = _connection_error(url, exc.reason)
            except (OSError, http.client.HTTPException) as exc:
                failure = _connection_error(url, exc)
        if deadline.stopped is not None:
            raise deadline.stopped
        if deadline.expired or isinstance(failure, _Retryable) and failure.timed_out:
            raise _Retryable(f"timed out: no complete response within {self.timeout_s:g} s (timeout_s)")
        if failure is not None:
            raise failure
        try:
            return json.loads(payload)
        except ValueError as exc:
            raise LLMError(f"{url}: response is not JSON ({exc}; {len(payload)} bytes): {payload[:500]!r}") from None

    def _http_error(self, url: str, exc: urllib.error.HTTPError) -> Exception:
        try:
            body = exc.read().decode("utf-8", "replace").strip()
        except (OSError, http.client.HTTPException):
            body = ""
        shown = f"HTTP {exc.code} {exc.reason}: {body[:2000] or '(empty body)'}"
        if exc.code in RETRY_STATUSES:
            return _Retryable(shown, _retry_after(exc.headers.get("Retry-After")))
        if exc.code in (401, 403):
            where = f"${self.key_source}" if self.key_source else "api_key"
            shown += f" (API key from {where}: {'set' if self.api_key else 'not set'})"
        return LLMError(f"{url}: {shown}")


def server_root(api_base_url: str) -> str:
    """The server's root, where llama.cpp serves ``/props`` and ``/slots`` (the API root without ``/v1``).

    >>> server_root("http://127.0.0.1:8080/v1"), server_root("http://h:1/api")
    ('http://127.0.0.1:8080', 'http://h:1/api')
    """
    return api_base_url[: -len("/v1")] if api_base_url.endswith("/v1") else api_base_url


def slots_in(props: Any, slots: Any) -> int | None:
    """Slots from a ``/props`` reply (``total_slots``) or else a ``/slots`` reply (a list, one per slot).

    >>> slots_in({"total_slots": 4}, None), slots_in(None, [{"id": 0}, {"id": 1}]), slots_in({"x": 1}, {"error": "no"})
    (4, 2, None)
    """
    total = props.get("total_slots") if isinstance(props, dict) else None
    if isinstance(total, int) and not isinstance(total, bool) and total > 0:
        return total
    if isinstance(slots, list) and slots:
        return len(slots)
    return None


SLOTS_RETRY_S = 30.0
"""Seconds before a server that could not report its slots is asked again."""
_UNSURE = object()
"""What :func:`reported_slots` returns when the server could not answer now (503 while loading, no connection)."""


def reported_slots(api_base_url: str, api_key: str | None = None, *, timeout_s: float = 10.0):
    """The slots a llama.cpp server at ``api_base_url`` reports; None when it has neither endpoint
    (or they say nothing about slots); ``_UNSURE`` when it could not answer now."""
    root = server_root(api_base_url)
    status, props = _get_json(root + "/props", api_key, timeout_s)
    if slots_in(props, None):
        return slots_in(props, None)
    status_slots, slots = _get_json(root + "/slots", api_key, timeout_s)
    if slots_in(None, slots):
        return slots_in(None, slots)
    if any(s is None or s in RETRY_STATUSES for s in (status, status_slots)):
        return _UNSURE
    return None


def _get_json(url: str, api_key: str | None, timeout_s: float) -> tuple[int | None, Any]:
    """(HTTP status, JSON body or None) of ``GET url``; status None when there was no answer."""
    headers = {"Accept": "application/json", "User-Agent": f"nlqo/{__version__}"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    try:
        with (
            _Deadline(timeout_s) as deadline,
            deadline.opener(url).open(urllib.request.Request(url, headers=headers), timeout=timeout_s) as response,
        ):
            status, payload = response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (OSError, http.client.HTTPException):
        return None, None
    if deadline.expired:
        return None, None
    try:
        return status, json.loads(payload)
    except ValueError:
        return status, None


def parse_usage(reply: Mapping[str, Any], wall_ms: float) -> Usage:
    """Usage from a response's ``usage`` block; cached prompt tokens from
    ``usage.prompt_tokens_details.cached_tokens`` (OpenAI, vLLM) or ``timings.cache_n``
    (llama.cpp server). Missing counts read as 0.

    >>> parse_usage({"usage": {"prompt_tokens": 9, "completion_tokens": 3,
    ...              "prompt_tokens_details": {"cached_tokens": 8}}}, 5.0)
    Usage(prompt_tokens=9, cached_prompt_tokens=8, generated_tokens=3, wall_ms=5.0, calls=1, forced_tokens=0)
    """
    usage = reply.get("usage") or {}
    prompt = int(usage.get("prompt_tokens") or 0)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    if cached is None:
        cached = (reply.get("timings") or {}).get("cache_n")
    return Usage(
        prompt_tokens=prompt,
        cached_prompt_tokens=min(int(cached or 0), prompt),
        generated_tokens=int(usage.get("completion_tokens") or 0),
        wall_ms=wall_ms,
        calls=1,
    )


def parse_confidence(choice: Mapping[str, Any], basis: str) -> Confidence | None:
    """A reply's confidence from a choice's ``logprobs``: chat's ``{"content": [{"token", "logprob",
    "top_logprobs": [{"token", "logprob"}]}]}`` or the completions endpoint's ``{"tokens",
    "token_logprobs", "top_logprobs": [{token: logprob}]}``; None when the server sent none or a
    shape it cannot read (never an error: confidence is optional).

    >>> chat = {"logprobs": {"content": [{"token": "Paris", "logprob": -0.1,
    ...          "top_logprobs": [{"token": "Paris", "logprob": -0.1}, {"token": "Lyon", "logprob": -2.6}]}]}}
    >>> c = parse_confidence(chat, "top-2")
    >>> c.tokens, c.mean_logprob, c.first_margin, c.basis
    (1, -0.1, 2.5, 'top-2')
    >>> parse_confidence({"text": "x"}, "top-2") is None, parse_confidence({"logprobs": {"content": "?"}}, "top-2") is None
    (True, True)
    """
    data = choice.get("logprobs")
    if not isinstance(data, Mapping):
        return None
    tokens: list[tuple[str, float, dict[str, float]]] = []
    try:
        if isinstance(data.get("content"), list):
            for entry in data["content"]:
                alternatives = {str(a["token"]): float(a["logprob"]) for a in entry.get("top_logprobs") or ()}
                tokens.append((str(entry["token"]), float(entry["logprob"]), alternatives))
        elif isinstance(data.get("token_logprobs"), list):
            tops = data.get("top_logprobs") or []
            for i, (token, logprob) in enumerate(zip(data["tokens"], data["token_logprobs"])):
                if logprob is None:  # an echoed prompt's first token
                    continue
                alternatives = {str(t): float(v) for t, v in (tops[i] or {}).items()} if i < len(tops) else {}
                tokens.append((str(token), float(logprob), alternatives))
        else:
            return None
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return None
    return from_top_logprobs(tokens, basis)


def _refuses_logprobs(message: str) -> bool:
    """Whether a failed request's message is a server refusing the log-probability fields: an HTTP
    error naming them (a 400, or a 500 after the retries from a server that raised on them).

    >>> _refuses_logprobs("http://h/v1/chat/completions: HTTP 400 Bad Request: logprobs is not supported")
    True
    >>> _refuses_logprobs("http://h/v1/chat/completions: HTTP 400 Bad Request: prompt too long")
    False
    """
    return "HTTP " in message and "logprob" in message.lower()


def _opener(url: str, *handlers: urllib.request.BaseHandler) -> urllib.request.OpenerDirector:
    """An opener (with ``handlers``) that never sends loopback traffic through an environment proxy."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if host in _LOOPBACK:
        return urllib.request.build_opener(urllib.request.ProxyHandler({}), *handlers)
    return urllib.request.build_opener(*handlers)


def _connection_error(url: str, reason: object) -> Exception:
    """Classify a transport failure: resets, replies cut short and timeouts retry; the rest fail with the URL."""
    if isinstance(reason, ConnectionRefusedError):
        return LLMError(f"cannot connect to {url}: connection refused (is the server running?)")
    if isinstance(reason, socket.gaierror):
        return LLMError(f"cannot connect to {url}: unknown host ({reason})")
    if isinstance(reason, TimeoutError):
        return _Retryable("timed out", timed_out=True)
    if isinstance(reason, http.client.RemoteDisconnected):
        return _Retryable("the server closed the connection without answering")
    if isinstance(reason, http.client.IncompleteRead):
        more = f", {reason.expected} more expected" if reason.expected is not None else ""
        return _Retryable(f"the server closed the connection mid-response ({len(reason.partial)} bytes read{more})")
    if isinstance(reason, (ConnectionError, http.client.HTTPException)):
        return _Retryable(f"{type(reason).__name__}: {reason}")
    return LLMError(f"cannot connect to {url}: {reason}")


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or HTTP date).

    >>> _retry_after("2"), _retry_after(None), _retry_after("soon"), _retry_after("nan")
    (2.0, None, None, None)
    """
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)
