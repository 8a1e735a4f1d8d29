#!/usr/bin/env bash
# The worker on its own against a real local tritonserver, as in the README:
#   1. scripts/install-tritonserver.sh (a fast no-op once installed),
#   2. a tritonserver serving models/ on free 127.0.0.1 ports, in the background,
#   3. the worker (cargo run --release -p worker) for ${DURATION:-60s} with every
#      scenario at its default weight and --perf-analyzer .local/bin/perf_analyzer,
#   4. the worker's table on stdout; the server is stopped on every exit path.
# Exit code: the worker's (0 pass, 1 a scenario failed, 2 bad input or unusable
# server); 2 as well when the server cannot be started.
#
# Usage: scripts/worker-demo.sh [extra worker flags...]
#   e.g. DURATION=5m scripts/worker-demo.sh --concurrency 8 --report-json report.json
# Environment: DURATION (default 60s), PROTOCOL (grpc or http, default grpc),
#   READY_TIMEOUT seconds for the server to load its models (default 180),
#   CARGO_TARGET_DIR as cargo reads it.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
DURATION="${DURATION:-60s}"
PROTOCOL="${PROTOCOL:-grpc}"
READY_TIMEOUT="${READY_TIMEOUT:-180}"

log() { echo "worker-demo: $*" >&2; }
die() { log "ERROR: $*"; exit 2; }

case "$PROTOCOL" in grpc|http) ;; *) die "PROTOCOL must be grpc or http, not '$PROTOCOL'" ;; esac
[[ "$READY_TIMEOUT" =~ ^[0-9]+$ ]] || die "READY_TIMEOUT must be a number of seconds"

"$REPO_ROOT/scripts/install-tritonserver.sh" >&2 || die "installing tritonserver failed"
PERF_ANALYZER="$REPO_ROOT/.local/bin/perf_analyzer"
[ -x "$PERF_ANALYZER" ] || die "$PERF_ANALYZER not found after the install"

# Three distinct free loopback ports (held together while they are picked).
read -r HTTP_PORT GRPC_PORT METRICS_PORT < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
') || die "cannot pick free ports"

WORK_DIR="$(mktemp -d "${TMPDIR:-/tmp}/worker-demo.XXXXXX")"
SERVER_LOG="$WORK_DIR/tritonserver.log"
SERVER_PID=""

stop_server() {
    [ -n "$SERVER_PID" ] || return 0
    if kill -0 "$SERVER_PID" 2>/dev/null; then
        log "stopping tritonserver (pid $SERVER_PID)"
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 1 75); do
            kill -0 "$SERVER_PID" 2>/dev/null || break
            sleep 0.2
        done
        kill -KILL "$SERVER_PID" 2>/dev/null || true
    fi
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
}
trap stop_server EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start-tritonserver.sh execs tritonserver, so $! is the server itself.
"$SCRIPT_DIR/start-tritonserver.sh" \
    --http-port "$HTTP_PORT" --grpc-port "$GRPC_PORT" --metrics-port "$METRICS_PORT" \
    >"$SERVER_LOG" 2>&1 &
SERVER_PID=$!
log "tritonserver pid $SERVER_PID: http 127.0.0.1:$HTTP_PORT, grpc 127.0.0.1:$GRPC_PORT, log $SERVER_LOG"

# GET /v2/health/ready over bash's /dev/tcp: 0 when the server answers 200.
server_ready() {
    local status
    status="$(
        exec 2>/dev/null
        exec 3<>"/dev/tcp/127.0.0.1/$HTTP_PORT" || exit 1
        printf 'GET /v2/health/ready HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' >&3
        head -n 1 <&3
    )" || return 1
    [[ "$status" == *" 200 "* ]]
}

deadline=$((SECONDS + READY_TIMEOUT))
until server_ready; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
        tail -n 20 "$SERVER_LOG" >&2 || true
        die "tritonserver exited before it was ready (log: $SERVER_LOG)"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
        tail -n 20 "$SERVER_LOG" >&2 || true
        die "tritonserver not ready after ${READY_TIMEOUT}s (log: $SERVER_LOG)"
    fi
    sleep 0.5
done
log "tritonserver ready"

if [ "$PROTOCOL" = grpc ]; then
    SERVER="127.0.0.1:$GRPC_PORT"
else
    SERVER="127.0.0.1:$HTTP_PORT"
fi

# Upstream's weights, except SequenceNoStart: at 7 per mille it often gets no test in 60 s.
SCENARIOS="${SCENARIOS:-SequenceValid:295,SequenceValidValid:68,SequenceValidNoEnd:68,SequenceNoEnd:62,SequenceNoStart:40,Timeout:60,CrashingClient:60,ImageClassification:80,Load:200,PerfAnalyzer:100}"
log "worker: every scenario for $DURATION over $PROTOCOL ($SCENARIOS)"
cd "$REPO_ROOT"
set +e
cargo run --quiet --release -p worker -- \
    --servers "$SERVER" --protocol "$PROTOCOL" --duration "$DURATION" \
    --scenarios "$SCENARIOS" --perf-analyzer "$PERF_ANALYZER" "$@"
rc=$?
set -e
log "worker exited with $rc"
if [ "$rc" -ne 0 ]; then
    log "tritonserver log kept: $SERVER_LOG"
else
    stop_server
    rm -rf "$WORK_DIR"
fi
exit "$rc"
