#!/usr/bin/env bash
# Fail-fast at scale (local launcher): a run of SERVERS tritonservers and WORKERS workers (each
# worker targets every server; Load and Infer at a modest open-loop rate), one tritonserver
# SIGKILLed once every worker reports, and the time from the kill to the driver's exit. Prints
# that time against the 2 s target, the driver's exit status (1 expected), and the report's
# verdict line naming the member blamed (the killed server expected first). ROUNDS repeats.
#
# Usage: scripts/bench-fail-fast.sh
# Env: SERVERS (2), WORKERS (8), ROUNDS (1), DRIVER (target/release/driver; its worker is
# target/release/worker; both built unless given), BENCH_KEEP=1 keeps the run directories.
# LAUNCHER=kube runs the same on the test cluster instead (scripts/k8s/ci.sh: root, the cluster
# built once, about 10 minutes more for the images; one round; Load only, the kube test
# bench_fail_fast_on_the_cluster).
# Exit: 0 after printing results (target met or not), 1 when something could not be measured.
# Not run by CI.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
cd "$REPO_ROOT"

SERVERS="${SERVERS:-2}"
WORKERS="${WORKERS:-8}"
ROUNDS="${ROUNDS:-1}"
DRIVER_GIVEN="${DRIVER:-}"
DRIVER="${DRIVER:-${CARGO_TARGET_DIR:-target}/release/driver}"

source "$SCRIPT_DIR/bench-lib.sh"

if [ "${LAUNCHER:-local}" = kube ]; then
    # On the test cluster (scripts/k8s/: built, brought up, images imported, torn down after):
    # the ignored kube test bench_fail_fast_on_the_cluster does the same with pods.
    positive_ints SERVERS WORKERS
    export TRITON_STRESS_K8S_IMAGES="${TRITON_STRESS_K8S_IMAGES:-docker/tritonserver docker/worker docker/driver docker/postgres docker/models}"
    exec "$SCRIPT_DIR/k8s/ci.sh" "BENCH_SERVERS=$SERVERS BENCH_WORKERS=$WORKERS cargo test -p driver \
--test kube -- --ignored --exact --nocapture bench_fail_fast_on_the_cluster"
fi

positive_ints SERVERS WORKERS ROUNDS
command -v python3 >/dev/null || fail "python3 not found"
# Built unless given: an existing binary may predate the working tree.
if [ -z "$DRIVER_GIVEN" ]; then
    log "building the driver and the worker (release)"
    cargo build --release -p driver -p worker >&2 || fail "cargo build --release failed"
fi

cat >"$TMP/matrix.yaml" <<YAML
version: 1
run:
  name: failfast
  duration: 10m
  poll_interval: 1s
  warmup: 1s
  server_ready_timeout: 180s
server_templates:
  cpu:
    tritonserver: { binary: auto }
    model_repositories: [$REPO_ROOT/models]
    args: ["--log-verbose=0"]
server_groups:
  triton:
    template: cpu
    instances: $SERVERS
client_templates:
  load:
    worker: { binary: auto }
    protocol: grpc
    scenarios: { Load: 1 }
    concurrency: 1
    load: { rate: 20 }
client_groups:
  clients:
    template: load
    instances: $WORKERS
    target: triton
YAML

shm_regions() { find /dev/shm -maxdepth 1 -name 'triton_python_backend_shm_region_*' 2>/dev/null | wc -l; }
stubs() { { pgrep -f triton_python_backend_stub 2>/dev/null || true; } | wc -l; }
results=()
for round in $(seq 1 "$ROUNDS"); do
    shm_before="$(shm_regions)"; stubs_before="$(stubs)"
    runs="$TMP/runs.$round"
    log "round $round/$ROUNDS: $SERVERS servers x $WORKERS workers"
    "$DRIVER" run "$TMP/matrix.yaml" --runs-dir "$runs" --no-progress \
        >"$TMP/driver.$round.out" 2>"$TMP/driver.$round.err" &
    driver_pid=$!
    # Every worker reports: one progress line shows WORKERS workers with QPS.
    up=0
    for _ in $(seq 1 600); do
        kill -0 "$driver_pid" 2>/dev/null || break
        if python3 - "$runs" "$WORKERS" <<'PY'
import glob, sqlite3, sys
runs, want = sys.argv[1], int(sys.argv[2])
dbs = glob.glob(f"{runs}/*/store.sqlite")
if not dbs:
    sys.exit(1)
try:
    db = sqlite3.connect(f"file:{dbs[0]}?mode=ro", uri=True, timeout=1)
    n = db.execute("SELECT COUNT(DISTINCT member_id) FROM qps_samples WHERE qps > 0").fetchone()[0]
except sqlite3.Error:
    sys.exit(1)
sys.exit(0 if n >= want else 1)
PY
        then up=1; break; fi
        sleep 0.5
    done
    if [ "$up" -ne 1 ]; then
        kill "$driver_pid" 2>/dev/null || true
        wait "$driver_pid" 2>/dev/null || true
        tail -20 "$TMP/driver.$round.err" >&2
        fail "round $round: the $WORKERS workers did not all report"
    fi
    victim="$(pgrep -P "$driver_pid" -x tritonserver | head -1 || true)"
    [ -n "$victim" ] || fail "round $round: no tritonserver child of the driver ($driver_pid)"
    t0="$(date +%s.%N)"
    kill -KILL "$victim"
    rc=0
    wait "$driver_pid" || rc=$?
    t1="$(date +%s.%N)"
    # The verdict line and the root cause (the member blamed first).
    verdict="$(grep -h -m1 -E '^Run ' "$runs"/*/report.txt 2>/dev/null | sed -E 's/^Run [^:]*: //' || true)"
    root="$(grep -h -A1 -m1 '^== Root cause ==' "$runs"/*/report.txt 2>/dev/null | tail -1 || true)"
    verdict="verdict: ${verdict:-no report}; root cause: ${root:-none}"
    elapsed="$(python3 -c "print(f'{$t1 - $t0:.2f}')")"
    left="left behind: $(( $(stubs) - stubs_before )) model processes, $(( $(shm_regions) - shm_before )) shared-memory regions"
    results+=("round $round: killed tritonserver $victim; driver exited $elapsed s later with status $rc; $verdict; $left")
done

echo
echo "fail-fast, local launcher: $SERVERS servers x $WORKERS workers ($(nproc) cores, nothing pinned)"
for r in "${results[@]}"; do
    echo "$r"
    s="$(sed -E 's/.* exited ([0-9.]+) s later.*/\1/' <<<"$r")"
    python3 -c "import sys; s=float(sys.argv[1]); print(f'  kill to exit {s:.2f} s (target <= 2 s: {\"PASS\" if s <= 2 else \"MISS\"})')" "$s"
done
