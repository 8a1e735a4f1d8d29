#!/usr/bin/env bash
# The main job on one machine: installs a real CPU tritonserver (PyPI nvidia-pytriton) and
# perf_analyzer into .local/, builds the driver and worker, and runs the smoke matrix
# (test-matrices/smoke.yaml: one tritonserver, one gRPC worker with every scenario, ~60 s,
# embedded SQLite store). Extra arguments go to `driver run` (e.g. --duration 30s).
# Exit code: the driver's (0 pass, 1 stress failure, 2 bad input).
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
scripts/install-tritonserver.sh
cargo build --release -p driver -p worker
exec target/release/driver run test-matrices/smoke.yaml "$@"
