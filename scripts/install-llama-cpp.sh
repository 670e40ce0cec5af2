#!/usr/bin/env sh
# Install llama-cpp-python: nlqo's default runtime for GGUF models (in process) and its
# OpenAI-compatible server (`python -m llama_cpp.server`, used by the `server` tests).
# It builds from source (5 minutes on a fresh 2-core machine; pip caches the wheel afterwards).
# The native CPU build crashes with "Illegal instruction" on some machines, so target AVX2.
# Idempotent: does nothing when the pinned version is already importable with its server.
# Usage: scripts/install-llama-cpp.sh [PYTHON]   (default: python3; LLAMA_CPP_PYTHON_SPEC overrides the version)
set -eu
PYTHON="${1:-${PYTHON:-python3}}"
# The version the runtime and the server tests were measured with; a pinned version reuses pip's cached wheel.
VERSION=0.3.36
SPEC="${LLAMA_CPP_PYTHON_SPEC:-llama-cpp-python[server]==$VERSION}"

if "$PYTHON" -c "import llama_cpp, llama_cpp.server.app, sys; sys.exit(llama_cpp.__version__ != '$VERSION')" >/dev/null 2>&1; then
    echo "llama-cpp-python $VERSION is already installed for $PYTHON"
    exit 0
fi

echo "building llama-cpp-python $VERSION from source (about 5 minutes on 2 cores, once; pip caches the wheel) ..."
CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAVA_BUILD=OFF" \
    "$PYTHON" -m pip install --quiet "$SPEC"
"$PYTHON" -c "import llama_cpp, llama_cpp.server.app" && echo "llama-cpp-python installed for $PYTHON"
