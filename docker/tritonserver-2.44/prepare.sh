#!/usr/bin/env bash
# Stages tritonserver 2.44.0 (nvidia-pytriton 0.5.5, installed beside 2.51 into .local/pytriton-0.5.5
# by scripts/install-tritonserver.sh) as docker/tritonserver/prepare.sh stages 2.51, with its wrapper.
set -euo pipefail
ctx=${1:?usage: prepare.sh CONTEXT_DIR}
REPO_ROOT=${REPO_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
cp "$REPO_ROOT/docker/tritonserver/tritonserver.sh" "$ctx/"
PYTRITON_VERSION=0.5.5 TRITON_STRESS_LOCAL="$REPO_ROOT/.local/pytriton-0.5.5" \
    exec "$REPO_ROOT/docker/tritonserver/prepare.sh" "$ctx"
