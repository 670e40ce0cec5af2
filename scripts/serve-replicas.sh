#!/usr/bin/env sh
# N replicas of `nlqo serve` on loopback behind nginx (round robin), for docs/serving.md.
#
# Usage: scripts/serve-replicas.sh [--replicas N] [--port P] [--model NAME] [--shared-model] INDEX
#   --replicas N     replicas (default 2), on ports P+1 .. P+N; nginx listens on P (default 8080)
#   --model NAME     each replica loads this model itself (default smollm2-135m) ...
#   --shared-model   ... or all replicas use one OpenAI-compatible llama-server on port P+100
#                    (scripts/serve-llama.sh), which batches their requests in its slots
#   NLQO=...         the nlqo command (default: nlqo)
#
# Runs in the foreground; Ctrl-C (or SIGTERM) stops nginx, the replicas and the model server.
# The replicas hold no state but the read-only index and statistics: any balancer works the same.
set -eu
NLQO="${NLQO:-nlqo}"
REPLICAS=2
PORT=8080
MODEL=smollm2-135m
SHARED=""
while [ $# -gt 1 ]; do
    case "$1" in
        --replicas) REPLICAS="$2"; shift 2 ;;
        --port) PORT="$2"; shift 2 ;;
        --model) MODEL="$2"; shift 2 ;;
        --shared-model) SHARED=1; shift ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
[ $# -eq 1 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
INDEX="$1"
command -v nginx >/dev/null || { echo "nginx is not installed (Debian: apt-get install nginx-light)" >&2; exit 1; }
RUN="$(mktemp -d "${TMPDIR:-/tmp}/nlqo-replicas-XXXXXX")"
PIDS=""
stop() {
    [ -f "$RUN/nginx.pid" ] && kill "$(cat "$RUN/nginx.pid")" 2>/dev/null || true
    for pid in $PIDS; do kill -TERM "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    echo "stopped; logs in $RUN" >&2
}
trap 'stop; exit 0' INT TERM

BACKEND="$MODEL"
if [ -n "$SHARED" ]; then
    MPORT=$((PORT + 100))
    sh "$(dirname "$0")/serve-llama.sh" --port "$MPORT" --slots 4 "$MODEL" 2>"$RUN/model.log" &
    PIDS="$PIDS $!"
    BACKEND="openai:$MODEL@http://127.0.0.1:$MPORT/v1"
    until curl -sf "http://127.0.0.1:$MPORT/health" >/dev/null 2>&1; do sleep 1; done
fi

UPSTREAM=""
i=1
while [ "$i" -le "$REPLICAS" ]; do
    P=$((PORT + i))
    THREADS=""
    [ -n "$SHARED" ] || THREADS="--threads $(( $(nproc) / REPLICAS > 0 ? $(nproc) / REPLICAS : 1 ))"
    # shellcheck disable=SC2086
    $NLQO serve --index "$INDEX" --model "$BACKEND" --port "$P" $THREADS 2>"$RUN/replica-$i.log" &
    PIDS="$PIDS $!"
    UPSTREAM="$UPSTREAM server 127.0.0.1:$P max_fails=1 fail_timeout=5s;"
    i=$((i + 1))
done
for i in $(seq 1 "$REPLICAS"); do
    until curl -sf "http://127.0.0.1:$((PORT + i))/v1/health" >/dev/null 2>&1; do sleep 1; done
done

cat >"$RUN/nginx.conf" <<EOF
worker_processes 1;
pid $RUN/nginx.pid;
error_log $RUN/nginx-error.log;
events { worker_connections 256; }
http {
    access_log $RUN/nginx-access.log;
    client_body_temp_path $RUN; proxy_temp_path $RUN; fastcgi_temp_path $RUN; uwsgi_temp_path $RUN; scgi_temp_path $RUN;
    upstream nlqo { $UPSTREAM }
    server {
        listen 127.0.0.1:$PORT;
        location / {
            proxy_pass http://nlqo;
            proxy_set_header Host \$host;       # the replicas serve loopback names only (their Host allow-list)
            proxy_http_version 1.1;
            proxy_buffering off;              # server-sent events stream through
            proxy_read_timeout 600s;
            proxy_next_upstream error timeout http_503 non_idempotent;   # a replica shutting down answers 503 before it runs anything: try the next
        }
    }
}
EOF
nginx -c "$RUN/nginx.conf"
echo "$REPLICAS replicas of nlqo serve ($BACKEND) behind nginx: http://127.0.0.1:$PORT (logs in $RUN)" >&2
while :; do sleep 3600 & wait $!; done
