#!/usr/bin/env sh
# Serve a GGUF model over the OpenAI-compatible API on loopback, with several slots (requests
# decoded together with continuous batching), for nlqo's `openai:MODEL@URL` backend.
#
# Usage: scripts/serve-llama.sh [--slots N] [--port P] [--threads T] [--ctx-per-slot C] [--host H] MODEL
#   MODEL   a bundled model name (smollm2-135m, qwen2.5-coder-1.5b, ...) or a .gguf file
#   --slots N          parallel slots (default 4); each slot holds --ctx-per-slot tokens (default 4096)
#   --threads T        CPU threads of the server (default: all cores)
#   PYTHON=...         the Python that has nlqo installed (default python3), to find bundled models
#
# It runs llama.cpp's own server (`llama-server`, built by scripts/build-llama-server.sh) in the
# foreground. Without it, it falls back to llama-cpp-python's server (`python -m llama_cpp.server`),
# which has ONE slot whatever --slots says (it serialises requests behind a lock), and says so.
# Then point nlqo at it:  nlqo ask "..." --index idx/ --model openai:MODEL@http://127.0.0.1:PORT/v1
set -eu
PYTHON="${PYTHON:-python3}"
SLOTS=4
PORT=8080
HOST=127.0.0.1
THREADS=""
CTX=4096
while [ $# -gt 1 ]; do
    case "$1" in
        --slots) SLOTS="$2"; shift 2 ;;
        --port) PORT="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --ctx-per-slot) CTX="$2"; shift 2 ;;
        --host) HOST="$2"; shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
[ $# -eq 1 ] || { sed -n '2,16p' "$0" >&2; exit 2; }
MODEL="$1"
case "$MODEL" in
    *.gguf) GGUF="$MODEL"; ALIAS="$(basename "$MODEL" .gguf)" ;;
    *) GGUF="$("$PYTHON" -c "import sys; from nlqo.runtime.models.gguf import find_gguf; p = find_gguf(sys.argv[1], progress=False); print(p or '')" "$MODEL")"; ALIAS="$MODEL" ;;
esac
[ -n "$GGUF" ] && [ -f "$GGUF" ] || { echo "no GGUF file for $MODEL" >&2; exit 1; }
[ -n "$THREADS" ] || THREADS="$("$PYTHON" -c "import os; print(len(os.sched_getaffinity(0)))")"

BIN="${LLAMA_SERVER:-${NLQO_LLAMA_SERVER_DIR:-$HOME/.cache/nlqo/llama-server}/bin/llama-server}"
if [ -x "$BIN" ]; then
    echo "llama-server: $SLOTS slots x $CTX tokens, $THREADS threads: openai:$ALIAS@http://$HOST:$PORT/v1" >&2
    # -c is the context of all slots together; --no-kv-unified keeps one $CTX-token sequence per slot.
    exec "$BIN" --model "$GGUF" --alias "$ALIAS" --host "$HOST" --port "$PORT" \
        --parallel "$SLOTS" --ctx-size "$((SLOTS * CTX))" --no-kv-unified --cont-batching \
        --threads "$THREADS" --threads-batch "$THREADS" --no-webui
fi
echo "llama-server not built (scripts/build-llama-server.sh): falling back to llama-cpp-python's server, ONE slot (requests run one at a time): openai:$ALIAS@http://$HOST:$PORT/v1" >&2
exec "$PYTHON" -m llama_cpp.server --model "$GGUF" --model_alias "$ALIAS" --host "$HOST" --port "$PORT" \
    --n_ctx "$CTX" --n_threads "$THREADS" --n_threads_batch "$THREADS"
