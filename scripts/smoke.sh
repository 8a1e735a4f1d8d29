#!/usr/bin/env bash
# The main job on one machine: installs a real CPU tritonserver (PyPI nvidia-pytriton) and
# perf_analyzer into .local/, builds the driver and worker, and runs the smoke matrix
# (test-matrices/smoke.yaml: one tritonserver, one gRPC worker with every scenario, ~60 s,
# embedded SQLite store). Extra arguments go to `driver run` (e.g. --duration 30s).
# Exit code: the driver's (0 pass, 1 stress failure, 2 bad input).
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
# The install (mostly download and unpacking) runs beside the release build, so that on a
# new machine its downloads overlap the compiles.
install_log=$(mktemp)
scripts/install-tritonserver.sh >"$install_log" 2>&1 &
install=$!
built=0
# The `quick` profile (Cargo.toml): a fresh build in three quarters of a release build's time.
cargo build --profile quick -p driver -p worker || built=$?
installed=0
wait "$install" || installed=$?
cat "$install_log" >&2
rm -f "$install_log"
[ "$installed" = 0 ] && [ "$built" = 0 ] || exit 1
exec "${CARGO_TARGET_DIR:-target}/quick/driver" run test-matrices/smoke.yaml "$@"
