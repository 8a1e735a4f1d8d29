#!/usr/bin/env bash
# A/B of two Triton releases on this machine: tritonserver 2.44 (side A) against 2.51 (side B),
# the same worker driving add_sub (Infer) and a sequence model (SequenceValid on
# sequence_nobatch) at concurrency 4, as a matrix `compare:` runs it: REPEATS runs of each side,
# interleaved A, B, A, B, … (DURATION each, fresh servers each). Prints compare.txt (each metric's
# change of 2.51 against 2.44 with its 95% interval and q-value, the call) and the wall time.
#
# Usage: scripts/bench-ab-versions.sh
# Env: REPEATS (3), DURATION (20s), DRIVER (target/release/driver; its worker beside it; both
# built unless given), BENCH_KEEP=1 keeps the runs.
# Exit: 0 after printing results, 1 when something could not be measured. Not run by CI.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
cd "$REPO_ROOT"

REPEATS="${REPEATS:-3}"
DURATION="${DURATION:-20s}"
source "$SCRIPT_DIR/bench-lib.sh"

scripts/install-tritonserver.sh >/dev/null
PYTRITON_VERSION=0.5.5 TRITON_STRESS_LOCAL="$REPO_ROOT/.local/pytriton-0.5.5" \
    scripts/install-tritonserver.sh >/dev/null
build_driver

cat >"$TMP/ab.yaml" <<YAML
version: 1
run: {name: ab-versions, duration: $DURATION, poll_interval: 1s, warmup: 2s}
server_templates:
  triton-2-44:
    tritonserver: {binary: $REPO_ROOT/.local/pytriton-0.5.5/bin/tritonserver}
    model_repositories: [$REPO_ROOT/models]
  triton-2-51:
    tritonserver: {binary: $REPO_ROOT/.local/bin/tritonserver}
    model_repositories: [$REPO_ROOT/models]
server_groups:
  triton: {template: triton-2-44, instances: 1}
client_templates:
  mix:
    worker: {binary: auto}
    protocol: grpc
    concurrency: 4
    scenarios: {Infer: 50, SequenceValid: 50}
    models: [{name: add_sub}]
client_groups:
  clients: {template: mix, instances: 1, target: triton}
regression: {min_requests: 100}
compare: {a: triton-2-44, b: triton-2-51, repeats: $REPEATS}
YAML

log "A/B: tritonserver 2.44 (A) against 2.51 (B), $REPEATS runs each of $DURATION, interleaved"
start=$(date +%s)
set +e
"$DRIVER" run "$TMP/ab.yaml" --runs-dir "$TMP/runs" --run-id ab --no-progress >"$TMP/ab.log" 2>&1
rc=$?
set -e
wall=$(( $(date +%s) - start ))
[ -f "$TMP/runs/ab/compare.txt" ] || fail "no compare.txt (exit $rc, log $TMP/ab.log)"
cat "$TMP/runs/ab/compare.txt"
echo "wall time: ${wall} s for $((2 * REPEATS)) runs (exit $rc)"
