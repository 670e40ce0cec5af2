#!/usr/bin/env sh
# Install llama-cpp-python with every x86 CPU variant, dispatched at run time: the opt-in build of issue 54
# (not yet the default: scripts/install-llama-cpp.sh builds for AVX2). Its AVX-512 variants prefill faster
# but round differently, and greedy answers can fork from the float32 reference
# (tests/test_llamacpp.py::test_greedy_answers_equal_the_transformers_float32_reference fails on zen4);
# benchmarks/kernels.py measures both. llama-cpp-python's own server needs
# GGML_BACKEND_PATH=$(python -m nlqo.runtime.llm.llamacpp.variants --model GGUF) with this build.
#
# It builds from source with llama.cpp's CPU backend compiled once per x86 instruction-set level
# (GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS: x64, SSE4.2, AVX, AVX2 "haswell", AVX-512 "skylakex" ...
# "zen4", AMX "sapphirerapids"), loaded at run time: nlqo loads the best one this CPU runs, after a
# probe in a child process shows it does not crash, or the one NLQO_LLAMA_CPU_VARIANT names
# (nlqo/runtime/llm/llamacpp/variants.py). A native build crashed with "Illegal instruction" on one
# machine and an AMX one with SIGSEGV on another; the AVX2-only build left AVX-512 unused.
#
# The build compiles the CPU backend 14 times: 15.5 minutes on 2 cores niced beside other jobs (20
# minutes under heavier load; the AVX2-only build took 5), once per machine: the wheel is kept in
# $NLQO_CACHE/wheels (default ~/.cache/nlqo/wheels), and a later venv installs it in 14 seconds.
# pip's own wheel cache is bypassed: it may hold an AVX2-only build of the same version, which it
# would reinstall.
# Idempotent: does nothing when the pinned version is already importable with its server and its CPU
# variants; an installed AVX2-only build of the same version is replaced.
# Usage: scripts/install-llama-cpp-variants.sh [PYTHON]   (default: python3; LLAMA_CPP_PYTHON_SPEC overrides the version)
set -eu
PYTHON="${1:-${PYTHON:-python3}}"
# The version the runtime and the server tests were measured with.
VERSION=0.3.36
SPEC="${LLAMA_CPP_PYTHON_SPEC:-llama-cpp-python[server]==$VERSION}"
CMAKE_ARGS="${CMAKE_ARGS:--DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF}"
export CMAKE_ARGS
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
WHEELS="${NLQO_CACHE:-$HOME/.cache/nlqo}/wheels/llama-cpp-python-$VERSION-cpu-variants"

# The CPU variants lie in llama_cpp's library folder or, as this wheel installs them, in site-packages/bin.
HAS_VARIANTS="import llama_cpp, llama_cpp.server.app, pathlib, sys
lib = pathlib.Path(llama_cpp.llama_cpp._base_path)
variants = [p for d in (lib, lib.parent.parent / 'bin') for p in d.glob('libggml-cpu-*.so')]
sys.exit(0 if llama_cpp.__version__ == '$VERSION' and variants else 1)"

if "$PYTHON" -c "$HAS_VARIANTS" >/dev/null 2>&1; then
    echo "llama-cpp-python $VERSION (CPU variants) is already installed for $PYTHON"
    exit 0
fi

if [ -n "${LLAMA_CPP_PYTHON_SPEC:-}" ]; then  # another version: built for this venv only
    "$PYTHON" -m pip install --quiet --no-cache-dir --force-reinstall --no-deps "$SPEC"
    "$PYTHON" -m pip install --quiet "$SPEC"
else
    WHEEL=$(ls "$WHEELS"/llama_cpp_python-"$VERSION"-*.whl 2>/dev/null | head -1 || true)
    if [ -z "$WHEEL" ]; then
        echo "building llama-cpp-python $VERSION with its CPU variants from source (15-20 minutes on 2 cores, once per machine) ..."
        mkdir -p "$(dirname "$WHEELS")"
        TMP=$(mktemp -d "$WHEELS.XXXXXX")
        "$PYTHON" -m pip wheel --quiet --no-cache-dir --no-deps -w "$TMP" "llama-cpp-python==$VERSION"
        rm -rf "$WHEELS" && mv "$TMP" "$WHEELS"
        WHEEL=$(ls "$WHEELS"/llama_cpp_python-"$VERSION"-*.whl | head -1)
    fi
    "$PYTHON" -m pip install --quiet "$WHEEL[server]"  # the server's dependencies (a no-op for llama_cpp itself when 0.3.36 is there)
    "$PYTHON" -m pip install --quiet --force-reinstall --no-deps "$WHEEL"  # replaces an AVX2-only build of the same version
fi
"$PYTHON" -c "$HAS_VARIANTS" && echo "llama-cpp-python $VERSION (CPU variants) installed for $PYTHON"
