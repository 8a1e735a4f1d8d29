#!/usr/bin/env bash
# Start the tritonserver installed by scripts/install-tritonserver.sh in the
# foreground (exec: this PID becomes tritonserver, so signals reach it), bound to
# 127.0.0.1, serving <repo>/models (and <repo>/models-faulty with --with-faulty).
#
# Usage: scripts/start-tritonserver.sh [--with-faulty] [--http-port N]
#            [--grpc-port N] [--metrics-port N] [extra tritonserver args...]
# Unknown arguments are passed to tritonserver unchanged (after ours, so e.g. a
# later --log-verbose=1 or --trace-config works). Install dir: TRITON_STRESS_LOCAL
# (default <repo>/.local).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
LOCAL="${TRITON_STRESS_LOCAL:-$REPO_ROOT/.local}"
SERVER="$LOCAL/bin/tritonserver"

die() { echo "start-tritonserver: ERROR: $*" >&2; exit 2; }

need_value() { [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value"; }
check_port() {
    [[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -ge 1 ] && [ "$2" -le 65535 ] || die "$1: bad port '$2'"
}

with_faulty=0
http_port=8000
grpc_port=8001
metrics_port=8002
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --with-faulty) with_faulty=1; shift ;;
        --http-port) need_value "$@"; http_port="$2"; shift 2 ;;
        --http-port=*) http_port="${1#*=}"; shift ;;
        --grpc-port) need_value "$@"; grpc_port="$2"; shift 2 ;;
        --grpc-port=*) grpc_port="${1#*=}"; shift ;;
        --metrics-port) need_value "$@"; metrics_port="$2"; shift 2 ;;
        --metrics-port=*) metrics_port="${1#*=}"; shift ;;
        -h|--help)
            sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
            exit 0 ;;
        *) extra+=("$1"); shift ;;
    esac
done
check_port --http-port "$http_port"
check_port --grpc-port "$grpc_port"
check_port --metrics-port "$metrics_port"

[ -x "$SERVER" ] || die "$SERVER not found: run scripts/install-tritonserver.sh first"
[ -d "$REPO_ROOT/models" ] || die "$REPO_ROOT/models not found"

repos=(--model-repository "$REPO_ROOT/models")
if [ "$with_faulty" -eq 1 ]; then
    [ -d "$REPO_ROOT/models-faulty" ] || die "$REPO_ROOT/models-faulty not found"
    repos+=(--model-repository "$REPO_ROOT/models-faulty")
fi

exec "$SERVER" \
    "${repos[@]}" \
    --http-address=127.0.0.1 --http-port="$http_port" \
    --grpc-address=127.0.0.1 --grpc-port="$grpc_port" \
    --metrics-address=127.0.0.1 --metrics-port="$metrics_port" \
    --allow-gpu-metrics=false --allow-cpu-metrics=true \
    --pinned-memory-pool-byte-size=0 \
    ${extra[@]+"${extra[@]}"}
