#!/usr/bin/env sh
# Install llama-cpp-python's OpenAI-compatible server (used by the `server` tests).
# It builds from source (about 6 minutes on 2 cores); pip caches the wheel afterwards.
# The native CPU build crashes with "Illegal instruction" on some machines, so target AVX2.
# Idempotent: does nothing when `llama_cpp.server` is already importable.
# Usage: scripts/install-llama-server.sh [PYTHON]   (default: python3; LLAMA_CPP_PYTHON_SPEC overrides the version)
set -eu
PYTHON="${1:-${PYTHON:-python3}}"
# The version the server tests were run with; a pinned version reuses pip's cached wheel.
SPEC="${LLAMA_CPP_PYTHON_SPEC:-llama-cpp-python[server]==0.3.36}"

if "$PYTHON" -c "import llama_cpp.server.app" >/dev/null 2>&1; then
    echo "llama-cpp-python[server] is already installed for $PYTHON"
    exit 0
fi

CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAVA_BUILD=OFF" \
    "$PYTHON" -m pip install "$SPEC"
"$PYTHON" -c "import llama_cpp.server.app" && echo "llama-cpp-python[server] installed for $PYTHON"
