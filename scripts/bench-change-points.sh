#!/usr/bin/env bash
# Planted change over a nightly history: RUNS runs (DURATION each) of one model the project does
# not ship ("planted": python backend, a fixed delay of DELAY_MS per request on 2 instances,
# driven by one worker at concurrency 2), the model made SLOWER times slower from run CHANGE_AT
# on (its config's delay raised; the repository path, so the matrix's fingerprint, unchanged).
# Then the driver's change points (`driver history --format json`) and Apache Otava 0.8's at its
# default settings on the series the driver exports (`driver history --format csv`), side by
# side: where each finds a change in the model's p50 and p99, and its size.
# Target: found at run CHANGE_AT (±1), its size within 3 points of the planted one, Otava alike.
#
# Usage: scripts/bench-change-points.sh
# Env: RUNS (20), CHANGE_AT (11), DURATION (20s), DELAY_MS (40), SLOWER (1.10), DRIVER
# (target/release/driver; its worker beside it; both built unless given), OTAVA (otava; else
# installed into a venv under the scratch dir), BENCH_KEEP=1 keeps the runs and the CSV.
# Exit: 0 after printing results, 1 when something could not be measured. Not run by CI.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
cd "$REPO_ROOT"

RUNS="${RUNS:-20}"
CHANGE_AT="${CHANGE_AT:-11}"
DURATION="${DURATION:-20s}"
DELAY_MS="${DELAY_MS:-40}"
SLOWER="${SLOWER:-1.10}"
source "$SCRIPT_DIR/bench-lib.sh"

positive_ints RUNS
scripts/install-tritonserver.sh >/dev/null
build_driver
OTAVA="${OTAVA:-}"
if [ -z "$OTAVA" ]; then
    python3 -m venv "$TMP/otava-venv" >/dev/null || fail "no python3 venv"
    "$TMP/otava-venv/bin/pip" install -q apache-otava==0.8.0 >/dev/null ||
        fail "apache-otava 0.8.0 not installed from PyPI"
    OTAVA="$TMP/otava-venv/bin/otava"
fi

repo="$TMP/repo"
mkdir -p "$repo/planted/1"
cp models/fixed_capacity/1/model.py "$repo/planted/1/model.py"
model_config() {
    sed -e 's/name: "fixed_capacity"/name: "planted"/' \
        -e "s/string_value: \"50\"/string_value: \"$1\"/" \
        models/fixed_capacity/config.pbtxt >"$repo/planted/config.pbtxt"
}
slow_ms=$(python3 -c "print(round($DELAY_MS * $SLOWER))")
cat >"$TMP/planted.yaml" <<EOF
version: 1
run: {name: planted, duration: $DURATION, poll_interval: 1s, warmup: 2s}
server_templates:
  cpu: {tritonserver: {binary: auto}, model_repositories: ["$repo"]}
server_groups:
  triton: {template: cpu, instances: 1}
client_templates:
  infer: {worker: {binary: auto}, protocol: grpc, concurrency: 2, models: [{name: planted}]}
client_groups:
  clients: {template: infer, instances: 1, target: triton}
EOF

runs_dir="$TMP/runs"
log "$RUNS runs of the model 'planted' for $DURATION each: ${DELAY_MS} ms per request, ${slow_ms} ms from run $CHANGE_AT"
for i in $(seq -w 1 "$RUNS"); do
    if [ "$((10#$i))" -lt "$CHANGE_AT" ]; then model_config "$DELAY_MS"; else model_config "$slow_ms"; fi
    set +e
    "$DRIVER" run "$TMP/planted.yaml" --runs-dir "$runs_dir" --run-id "planted-$i" \
        --no-progress >"$TMP/planted-$i.log" 2>&1
    rc=$?
    set -e
    [ -f "$runs_dir/planted-$i/report.json" ] || fail "run planted-$i wrote no report (exit $rc)"
    log "run planted-$i: exit $rc"
done

"$DRIVER" history --matrix planted --runs-dir "$runs_dir" --format json --min-effect 0 \
    >"$TMP/history.json" ||
    fail "driver history failed"
"$DRIVER" history --matrix planted --runs-dir "$runs_dir" --format csv >"$TMP/history.csv" ||
    fail "driver history --format csv failed"
metrics=$(head -1 "$TMP/history.csv" | tr ',' '\n' | tail -n +4 | grep -E '^p(50|99)_ms Infer/planted$' || true)
[ -n "$metrics" ] || fail "the CSV has no p50/p99 column of the model: $(head -1 "$TMP/history.csv")"
{
    echo "tests:"
    echo "  planted:"
    echo "    type: csv"
    echo "    file: $TMP/history.csv"
    echo "    time_column: time"
    echo "    attributes: [run]"
    echo "    metrics:"
    while read -r m; do echo "      - \"$m\""; done <<<"$metrics"
} >"$TMP/otava.yaml"
OTAVA_CONFIG="$TMP/otava.yaml" "$OTAVA" analyze planted --output json >"$TMP/otava.json" \
    2>"$TMP/otava.log" || fail "otava analyze failed: $(tail -3 "$TMP/otava.log")"

python3 - "$TMP/history.json" "$TMP/otava.json" "$CHANGE_AT" "$SLOWER" "$metrics" <<'EOF'
import json, sys
ours, theirs, change_at, slower = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3]), float(sys.argv[4])
metrics = sys.argv[5].splitlines()
runs = ours["change_points"]["runs"]
planted = f"planted-{change_at:02d}"
print(f"planted: {(slower - 1) * 100:+.1f}% from run {planted} (of {len(runs)} runs)")
print(f"{'metric':<24} {'driver: run':<14} {'size':>7} {'p':>9}   {'otava: run':<14} {'size':>7} {'p':>9}")
for m in metrics:
    mine = [s for s in ours["change_points"]["shifts"] if s["metric"] == m]
    # Otava's JSON: {test: [{time, attributes: {run: [...]}, changes: [{metric, forward_change_percent, pvalue}]}]}
    otava = [(cp["attributes"].get("run"), c) for cp in theirs.get("planted", [])
             for c in cp["changes"] if c["metric"] == m]
    rows = max(len(mine), len(otava), 1)
    for i in range(rows):
        a = mine[i] if i < len(mine) else None
        b = otava[i] if i < len(otava) else None
        left = f"{a['run_id']:<14} {a['change'] * 100:+6.1f}% {a['p_value']:9.1e}" if a else f"{'none':<14} {'':>7} {'':>9}"
        right = f"{str(b[0]):<14} {float(b[1]['forward_change_percent']):+6.1f}% {float(b[1]['pvalue']):9.1e}" if b else "none"
        print(f"{m if i == 0 else '':<24} {left}   {right}")
EOF
