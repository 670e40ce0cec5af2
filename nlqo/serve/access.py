"""Who is served: with a token, clients that send it; without one, requests addressed to a loopback
name only, so that a web page whose name is rebound to 127.0.0.1 (DNS rebinding) cannot use the service."""

from __future__ import annotations

import hmac
from collections.abc import Iterable

import attrs

OPEN_PATHS = frozenset({"/", "/v1/health", "/docs", "/openapi.json"})
"""Paths answered without the bearer token: the console page (it asks for the token), the health
check load balancers poll, and the schema."""
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
"""Host names served without a token, besides the bound address and ``--allow-host``."""


def host_name(host: str) -> str:
    """The name in a ``Host`` header: lower case, without the port or an IPv6 address's brackets.

    >>> host_name("LocalHost:8080"), host_name("[::1]:8080"), host_name("127.0.0.1"), host_name("[::1]")
    ('localhost', '::1', '127.0.0.1', '::1')
    """
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if ":" in host else host


@attrs.frozen
class Refusal:
    """An answer in place of the app's: status, error type, message and headers."""

    status: int
    kind: str
    message: str
    headers: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class Access:
    """The bearer token required, or, when there is none, the host names served.

    >>> local = Access.of(None, allow=["nlqo.internal"])
    >>> local.refusal("/v1/ask", "127.0.0.1:8080", ""), local.refusal("/v1/ask", "NLQO.internal:80", "")
    (None, None)
    >>> local.refusal("/", "attacker.example:8080", "").status
    403
    >>> Access.of("s3cret").refusal("/v1/ask", "attacker.example", "Bearer s3cret")
    """

    token: str | None = None
    hosts: frozenset[str] = LOOPBACK_NAMES
    """Names (``host_name``) served without a token."""

    @classmethod
    def of(cls, token: str | None, *, allow: Iterable[str] = ()) -> Access:
        """``token`` required, or the loopback names and ``allow`` (names or ``name:port``) served."""
        return cls(token, LOOPBACK_NAMES | {host_name(name) for name in allow if name})

    def refusal(self, path: str, host: str | None, authorization: str) -> Refusal | None:
        """Why a request for ``path`` with these ``Host`` and ``Authorization`` headers is refused, if it is."""
        if self.token is not None:
            if path in OPEN_PATHS or hmac.compare_digest(authorization.encode(), f"Bearer {self.token}".encode()):
                return None
            return Refusal(
                401,
                "unauthorized",
                "a bearer token is required: send 'Authorization: Bearer TOKEN' (nlqo serve --token-file)",
                (("WWW-Authenticate", "Bearer"),),
            )
        if host is None or host_name(host) in self.hosts:  # no Host: HTTP/1.0, which no browser sends
            return None
        name = host_name(host)[:100]
        return Refusal(
            403,
            "forbidden_host",
            f"this server does not answer for host {name!r}: without a token it serves loopback names only "
            f"(localhost, 127.0.0.1, [::1]), so that no web page can reach it by DNS rebinding; "
            f"to serve this name, start it with --allow-host {name}",
        )
