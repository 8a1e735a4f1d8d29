# Shared by the scripts/bench-*.sh benchmarks (sourced, not run): their messages, a scratch
# directory removed at exit (kept with BENCH_KEEP=1) together with the server they started
# (its pid in server_pid), three free loopback ports for that server, and the steps several
# benchmarks share (checks, builds, CPU pinning, starting the server).

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

# positive_ints VAR...: fails unless each named variable holds a positive integer.
positive_ints() {
    local v
    for v in "$@"; do
        [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || fail "$v must be a positive integer, got '${!v}'"
    done
}

# build_driver: the release driver and worker built into DRIVER, unless DRIVER was given; fails
# without a driver at $DRIVER.
build_driver() {
    if [ -z "${DRIVER:-}" ]; then
        DRIVER="${CARGO_TARGET_DIR:-target}/release/driver"
        cargo build --release -q -p driver -p worker || fail "the release build failed"
    fi
    [ -x "$DRIVER" ] || fail "no driver at $DRIVER"
}

# build_worker: the release worker, unless WORKER was given (WORKER_GIVEN): an existing binary
# may predate the working tree.
build_worker() {
    [ -z "$WORKER_GIVEN" ] || return 0
    log "building the worker (release)"
    cargo build --release -p worker >&2 || fail "cargo build --release -p worker failed"
    [ -x "$WORKER" ] || fail "$WORKER still missing after the build"
}

# pin_cpus: server_pin and client_pin, the taskset prefixes that pin the server to SERVER_CPUS
# and the clients to CLIENT_CPUS (empty: not pinned).
pin_cpus() {
    server_pin=(); client_pin=()
    if [ -n "$SERVER_CPUS" ]; then server_pin=(taskset -c "$SERVER_CPUS"); fi
    if [ -n "$CLIENT_CPUS" ]; then client_pin=(taskset -c "$CLIENT_CPUS"); fi
}

# start_server MODEL: scripts/start-tritonserver.sh on the free ports, pinned by server_pin, its
# log in $TMP/server.log and its pid in server_pid; fails unless MODEL is ready within 120 s.
start_server() {
    local model="$1" ready=0
    "${server_pin[@]}" "$SCRIPT_DIR/start-tritonserver.sh" --grpc-port "$GRPC_PORT" --http-port "$HTTP_PORT" \
        --metrics-port "$METRICS_PORT" >"$TMP/server.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 1 240); do
        kill -0 "$server_pid" 2>/dev/null || { tail -20 "$TMP/server.log" >&2; fail "tritonserver exited"; }
        if curl -sf "http://127.0.0.1:$HTTP_PORT/v2/models/$model/ready" >/dev/null 2>&1; then
            ready=1; break
        fi
        sleep 0.5
    done
    [ "$ready" -eq 1 ] || { tail -20 "$TMP/server.log" >&2; fail "model $model not ready after 120 s"; }
}

# measured_served OUT CMD...: `measured OUT` of CMD pinned by client_pin; in served, the
# requests of MODEL the server counted meanwhile.
measured_served() {
    local out="$1" before after; shift
    before="$(server_count "$MODEL")" || fail "cannot read the server's metrics"
    measured "$out" "${client_pin[@]}" "$@"
    after="$(server_count "$MODEL")" || fail "cannot read the server's metrics"
    served=$((after - before))
}
