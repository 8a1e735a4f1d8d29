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

# measured OUT CMD...: runs CMD with its output in OUT.log and writes "wall_s user_s sys_s rc"
# to OUT: the wall time and CMD's own CPU time (getrusage of the wrapper's children: CMD and
# whatever it started and waited for).
measured() {
    local out="$1"; shift
    python3 -c '
import resource, subprocess, sys, time
out, cmd = sys.argv[1], sys.argv[2:]
t = time.monotonic()
with open(out + ".log", "w") as log:
    rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
wall = time.monotonic() - t
r = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(out, "w") as f:
    print(f"{wall:.3f} {r.ru_utime:.3f} {r.ru_stime:.3f} {rc}", file=f)
' "$out" "$@"
}

# server_count MODEL: successful inferences of MODEL counted by the server (metrics port
# METRICS_PORT), to charge each client's CPU to the requests the server saw.
server_count() {
    curl -sf "http://127.0.0.1:$METRICS_PORT/metrics" |
        awk -v m="model=\"$1\"" '/^nv_inference_request_success\{/ && index($0, m) { s += $NF } END { printf "%d\n", s }'
}
