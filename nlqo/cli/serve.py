"""``nlqo serve --index DIR``: the engine as an HTTP service with a web console (docs/serving.md)."""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

from nlqo.cli import common
from nlqo.config import STRATEGIES
from nlqo.errors import ConfigError
from nlqo.common.extras import need

TOKEN_ENV = "NLQO_SERVE_TOKEN"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "serve",
        help="serve questions over HTTP, with a web console",
        description="Load the model and the index once and answer over HTTP: POST /v1/ask (stream: true for "
        "server-sent events), /v1/explain, /v1/retrieve; GET /v1/health, /v1/stats, /metrics (Prometheus); "
        "the console at /, the API schema at /docs. Requests beyond the backend's slots wait in a bounded "
        "queue; beyond that they are answered 429.",
        epilog="Example: nlqo serve --index .nlqo/demo-index --port 8080, then\n"
        '  curl -s localhost:8080/v1/ask -H "Content-Type: application/json" -d \'{"question": "Who wrote The Hobbit?"}\'',
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    common.add_engine_options(p, ir=False)
    group = p.add_argument_group("service")
    group.add_argument(
        "--host",
        default="127.0.0.1",
        help=f"address to listen on; any but loopback needs a token (--token-file or ${TOKEN_ENV}) (default: %(default)s)",
    )
    group.add_argument(
        "--port", type=int, default=8080, help="port; 0 picks a free one and prints it (default: %(default)s)"
    )
    secret = group.add_mutually_exclusive_group()
    secret.add_argument(
        "--token-file",
        type=Path,
        metavar="PATH",
        help=f"require 'Authorization: Bearer TOKEN' on every endpoint but the console page and /v1/health, with "
        f"TOKEN the first line of this file (default: ${TOKEN_ENV}; none on loopback)",
    )
    secret.add_argument(
        "--token",
        default=None,
        help="the same with the token on the command line, where every user of the machine sees it (ps): "
        f"prefer --token-file or ${TOKEN_ENV}",
    )
    group.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="without a token, only requests for a loopback host name (localhost, 127.0.0.1, [::1]) or the bound "
        "address are served, against DNS rebinding; this serves NAME too (repeatable), e.g. a reverse proxy's name",
    )
    group.add_argument(
        "--capacity",
        type=int,
        default=None,
        metavar="N",
        help="requests run at once (default: the backend's slots: llama.cpp's sequences or the server's)",
    )
    group.add_argument(
        "--queue",
        type=int,
        default=16,
        metavar="N",
        help="requests that may wait for a slot; more are answered 429 (default: %(default)s)",
    )
    group.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="a request's longest run; a request may ask for less (default: %(default)s)",
    )
    group.add_argument(
        "--grace",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="on shutdown, running requests get this long to finish; then they are answered 503 (default: %(default)s)",
    )
    group.add_argument(
        "--max-body",
        type=int,
        default=65536,
        metavar="BYTES",
        help="largest request body; past it the answer is 413, without reading the rest (default: %(default)s)",
    )
    p.set_defaults(func=run)


def loopback(host: str) -> bool:
    """True for an address only this machine reaches.

    >>> loopback("127.0.0.1"), loopback("localhost"), loopback("::1"), loopback("0.0.0.0"), loopback("10.0.0.5")
    (True, True, True, False, False)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_token(args: argparse.Namespace, environ: Mapping[str, str]) -> str | None:
    """The bearer token of ``--token-file``, ``--token`` or ``$NLQO_SERVE_TOKEN``, in that order; None without one."""
    if args.token_file is not None:
        try:
            lines = Path(args.token_file).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"cannot read --token-file {args.token_file}: {getattr(exc, 'strerror', None) or exc}"
            ) from None
        token = lines[0].strip() if lines else ""
        if not token:
            raise ConfigError(f"--token-file {args.token_file} is empty: write the token on its first line")
        return token
    if args.token:
        print(
            f"nlqo: warning: --token shows the token to every user of this machine (ps); prefer --token-file or ${TOKEN_ENV}",
            file=sys.stderr,
        )
        return args.token
    return environ.get(TOKEN_ENV) or None


def run(args: argparse.Namespace) -> int:
    token = read_token(args, os.environ)
    if not loopback(args.host) and token is None:
        raise ConfigError(
            f"--host {args.host} is reachable from other machines: give --token-file PATH (or ${TOKEN_ENV}) so that only your clients are served"
        )
    for name, value in (("--queue", args.queue), ("--max-body", args.max_body)):
        if value < 0 or (name == "--max-body" and value == 0):
            raise ConfigError(f"{name} must be positive, not {value}")
    if args.capacity is not None and args.capacity < 1:
        raise ConfigError(f"--capacity must be at least 1, not {args.capacity}")
    if args.timeout <= 0 or args.grace < 0:
        raise ConfigError("--timeout must be positive and --grace not negative")
    need("fastapi", "serve")
    need("uvicorn", "serve")
    import uvicorn

    from nlqo.serve.app import create_app
    from nlqo.serve.server import GracefulServer
    from nlqo.serve.service import Service

    listener = bind(args.host, args.port)  # before the model loads: a port in use fails at once
    engine = common.build_engine(args)
    from nlqo.runtime.llm.base import capabilities

    capacity = args.capacity or max(1, capabilities(engine.llm).concurrency)
    service = Service(engine, capacity=capacity, queue_limit=args.queue, timeout=args.timeout)
    redact = secret_paths(args)
    bound = listener.getsockname()[0]
    app = create_app(
        service,
        token=token,
        allow_hosts=(args.host, bound, *args.allow_host),
        max_body=args.max_body,
        strategy=args.strategy,
        strategies=STRATEGIES,
        model=str(args.model),
        redact=redact,
    )
    host, port = listener.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(
        f"nlqo: serving on http://{shown}:{port} ({capacity} at once, {args.queue} waiting; console at /, API schema at /docs; Ctrl-C stops)",
        file=sys.stderr,
        flush=True,
    )

    config = uvicorn.Config(
        app, log_config=None, log_level="info", timeout_graceful_shutdown=int(args.grace) + 2, access_log=True
    )
    GracefulServer(config, service=service, grace=args.grace).run(sockets=[listener])
    finished = service.close(0)
    if finished:  # a request still running holds the model; the process exit frees it then
        engine.close()
    print("nlqo: stopped" + ("" if finished else " (some requests had not finished)"), file=sys.stderr)
    return 0


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, or a clear error."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def secret_paths(args: argparse.Namespace) -> tuple[str, ...]:
    """Texts no error message may show: the index and model paths, the cache, home and working folders."""
    paths = {str(args.index), str(Path(args.index).resolve()), os.getcwd(), str(Path.home())}
    model = Path(str(args.model))
    if model.exists():
        paths |= {str(args.model), str(model.resolve())}
    from nlqo.runtime.models.convert import cache_root

    paths.add(str(cache_root()))
    return tuple(p for p in paths if len(p) > 1)
