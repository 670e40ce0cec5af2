"""``nlqo serve``'s defences: the Host allow-list against DNS rebinding, the token from a file or the
environment, and ``--max-body`` enforced while the body is read. A real uvicorn on a loopback port."""

from __future__ import annotations

import http.client
import json
import socket

import pytest

pytest.importorskip("uvicorn")

from served import QUESTION, call, make_engine, serving  # noqa: E402
from nlqo.cli import build_parser, main  # noqa: E402
from nlqo.cli.serve import TOKEN_ENV, read_token  # noqa: E402
from nlqo.errors import ConfigError  # noqa: E402
from nlqo.serve.service import Service  # noqa: E402

ASK = {"question": QUESTION}


def test_without_a_token_a_request_for_a_name_that_is_not_loopback_is_refused():
    engine, llm = make_engine()
    with serving(Service(engine)) as address:
        port = address[1]
        status, _, body = call(address, "POST", "/v1/ask", ASK, headers={"Host": "attacker.example:18080"})
        page = call(address, "GET", "/", headers={"Host": "attacker.example:18080"})[0]
        served = [
            call(address, "POST", "/v1/ask", ASK, headers={"Host": host})[0]
            for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "LOCALHOST")
        ]
    assert status == 403 and body["error"]["type"] == "forbidden_host" and page == 403
    assert (
        "'attacker.example'" in body["error"]["message"] and "--allow-host attacker.example" in body["error"]["message"]
    )
    assert served == [200] * 4 and len(llm.calls) == 4  # the refused request never reached the model


def test_allow_host_adds_names_and_a_token_makes_the_host_irrelevant():
    engine, _ = make_engine()
    with serving(Service(engine), allow_hosts=("nlqo.internal",)) as address:
        allowed = call(address, "POST", "/v1/ask", ASK, headers={"Host": "NLQO.internal:8080"})[0]
        other = call(address, "POST", "/v1/ask", ASK, headers={"Host": "nlqo.internal.attacker.example"})[0]
    with serving(Service(engine), token="s3cret") as address:
        bearer = {"Host": "attacker.example:18080", "Authorization": "Bearer s3cret"}
        with_token = call(address, "POST", "/v1/ask", ASK, headers=bearer)[0]
    assert (allowed, other, with_token) == (200, 403, 200)


def serve_args(*argv: str):
    return build_parser().parse_args(["serve", "--index", "idx", *argv])


def test_the_token_comes_from_a_file_or_the_environment(tmp_path):
    secret = tmp_path / "token"
    secret.write_text("s3cret-from-file\n")
    assert read_token(serve_args("--token-file", str(secret)), {TOKEN_ENV: "from-env"}) == "s3cret-from-file"
    assert read_token(serve_args(), {TOKEN_ENV: "from-env"}) == "from-env"
    assert read_token(serve_args(), {}) is None
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        read_token(serve_args("--token-file", str(tmp_path / "empty")), {})
    with pytest.raises(ConfigError, match="cannot read --token-file"):
        read_token(serve_args("--token-file", str(tmp_path / "missing")), {})
    with pytest.raises(SystemExit):  # one source on the command line
        serve_args("--token-file", str(secret), "--token", "x")


def test_a_host_other_machines_reach_needs_a_token_before_anything_loads(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert main(["serve", "--index", str(tmp_path / "none"), "--host", "0.0.0.0"]) == 2
    assert "--token-file PATH" in capsys.readouterr().err


def test_a_chunked_body_past_max_body_is_answered_413_without_waiting_for_the_rest():
    engine, llm = make_engine()
    with serving(Service(engine), max_body=1000) as address:
        with socket.create_connection(address, timeout=10) as sock:
            head = "POST /v1/ask HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            sock.sendall(f"{head}Transfer-Encoding: chunked\r\n\r\n".encode())
            for _ in range(3):  # 1,500 bytes of a body that never ends
                sock.sendall(b"1f4\r\n" + b" " * 500 + b"\r\n")
            response = http.client.HTTPResponse(sock)
            response.begin()  # a server that reads the whole body first never answers: TimeoutError
            body = json.loads(response.read())
            closed = sock.recv(1) == b""
    assert response.status == 413 and "larger than 1,000 bytes" in body["error"]["message"]
    assert response.getheader("connection") == "close" and closed and llm.calls == []


def test_an_endless_chunked_body_is_cut_off_near_max_body():
    engine, _ = make_engine()
    chunk, sent, cut = b" " * 65536, 0, False
    with serving(Service(engine), max_body=1000) as address:
        with socket.create_connection(address, timeout=10) as sock:
            head = "POST /v1/ask HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            sock.sendall(f"{head}Transfer-Encoding: chunked\r\n\r\n".encode())
            try:
                while sent < 250 * 2**20:
                    sock.sendall(b"10000\r\n" + chunk + b"\r\n")
                    sent += len(chunk)
            except (BrokenPipeError, ConnectionResetError):  # the server answered 413 and closed the connection
                cut = True
    assert cut and sent < 64 * 2**20  # what the socket buffers held, not the 250 MB
