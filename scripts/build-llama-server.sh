#!/usr/bin/env sh
# Build llama.cpp's own HTTP server (`llama-server`, slots with continuous batching: -np N) from the
# llama.cpp sources that llama-cpp-python's source distribution vendors, so the server runs the same
# llama.cpp as nlqo's in-process runtime. llama-cpp-python's own server (`python -m llama_cpp.server`)
# serialises every request behind one lock and has no parallel slots (checked in 0.3.36).
#
# Needs cmake and a C++ compiler; the source comes from the package index through pip (the same
# version scripts/install-llama-cpp.sh installs). About 15 minutes on 2 idle cores (50 here beside other
# jobs); idempotent.
# The binary lands in $NLQO_LLAMA_SERVER_DIR (default ~/.cache/nlqo/llama-server)/bin/llama-server;
# scripts/serve-llama.sh finds it there.
# Usage: scripts/build-llama-server.sh [PYTHON]
set -eu
PYTHON="${1:-${PYTHON:-python3}}"
VERSION=0.3.36
ROOT="${NLQO_LLAMA_SERVER_DIR:-$HOME/.cache/nlqo/llama-server}"
BIN="$ROOT/bin/llama-server"
JOBS="${JOBS:-2}"

if [ -x "$BIN" ]; then
    echo "llama-server is already built: $BIN"
    exit 0
fi
mkdir -p "$ROOT/src"
SDIST="$ROOT/src/llama_cpp_python-$VERSION.tar.gz"
if [ ! -f "$SDIST" ]; then
    "$PYTHON" -m pip download --quiet "llama-cpp-python==$VERSION" --no-binary :all: --no-deps -d "$ROOT/src"
fi
SRC="$ROOT/src/llama_cpp_python-$VERSION/vendor/llama.cpp"
[ -d "$SRC" ] || tar -xzf "$SDIST" -C "$ROOT/src"

echo "building llama-server from $SRC (about 15 minutes on 2 idle cores, once) ..."
# Same CPU flags as scripts/install-llama-cpp.sh: the native build crashes with "Illegal instruction" here.
cmake -S "$SRC" -B "$ROOT/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
    -DBUILD_SHARED_LIBS=OFF >"$ROOT/cmake.log" 2>&1 || { tail -30 "$ROOT/cmake.log"; exit 1; }
cmake --build "$ROOT/build" --target llama-server -j "$JOBS" >"$ROOT/build.log" 2>&1 || { tail -30 "$ROOT/build.log"; exit 1; }
mkdir -p "$ROOT/bin"
cp "$ROOT/build/bin/llama-server" "$BIN"
"$BIN" --version 2>&1 | head -2
echo "built $BIN"
