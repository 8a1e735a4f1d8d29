# Shared by the scripts/bench-*.sh benchmarks (sourced, not run): their messages, a scratch
# directory removed at exit (kept with BENCH_KEEP=1) together with the server they started
# (its pid in server_pid), and three free loopback ports for that server.

fail() { echo "bench: CANNOT MEASURE: $*" >&2; exit 1; }
log() { echo "bench: $*" >&2; }

TMP="$(mktemp -d)"
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    if [ -n "${BENCH_KEEP:-}" ]; then log "logs kept in $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

# Three free loopback ports, held open together so they differ.
read -r GRPC_PORT HTTP_PORT METRICS_PORT < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])
for s in ss: s.close()')
