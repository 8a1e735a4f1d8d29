#!/usr/bin/env bash
# Installs NVIDIA's Python tritonclient at one version into a venv of its own, beside the others:
#   .local/tritonclient-<VERSION>/bin/python   (tritonclient[grpc,http]==VERSION, numpy)
# so that client groups can pin the client library they test (docs/clients.md). A second call
# with the same version is a no-op.
#
# Usage: scripts/install-tritonclient.sh [VERSION]   (default 2.44.0)
# Environment: TRITON_STRESS_LOCAL (install dir, default <repo>/.local), PYTHON (interpreter).
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)"
LOCAL="${TRITON_STRESS_LOCAL:-$REPO_ROOT/.local}"
VERSION="${1:-2.44.0}"
PYTHON="${PYTHON:-python3}"
VENV="$LOCAL/tritonclient-$VERSION"
log() { echo "install-tritonclient.sh: $*" >&2; }

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - "$VERSION" <<'PY' 2>/dev/null
import importlib.metadata, sys
import numpy, tritonclient.grpc, tritonclient.http
sys.exit(importlib.metadata.version("tritonclient") != sys.argv[1])
PY
then
    log "tritonclient $VERSION: $VENV/bin/python"
    exit 0
fi
log "installing tritonclient[grpc,http]==$VERSION into $VENV"
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check \
    "tritonclient[grpc,http]==$VERSION" numpy
"$VENV/bin/python" -c 'import numpy, tritonclient.grpc, tritonclient.http'
log "tritonclient $VERSION: $VENV/bin/python"
