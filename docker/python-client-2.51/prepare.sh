#!/usr/bin/env bash
# Stages NVIDIA's tritonclient 2.51.0 and the project's Python client (scripts/stage-python-client.sh).
set -euo pipefail
REPO_ROOT=${REPO_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
exec "$REPO_ROOT/scripts/stage-python-client.sh" 2.51.0 "${1:?usage: prepare.sh CONTEXT_DIR}"
