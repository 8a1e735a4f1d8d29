#!/usr/bin/env bash
# Installs Apache Otava 0.8.0 (change-point detection for performance history, PyPI
# apache-otava) into .local/otava-venv: the tests run it on the CSV `driver history --format csv`
# writes and compare its change points with the driver's. Idempotent.
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
LOCAL="${TRITON_STRESS_LOCAL:-$PWD/.local}"
venv="$LOCAL/otava-venv"
version=0.8.0
if [ -x "$venv/bin/otava" ] && "$venv/bin/pip" show apache-otava 2>/dev/null | grep -qx "Version: $version"; then
    exit 0
fi
echo "install-otava.sh: installing apache-otava $version into $venv" >&2
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet "apache-otava==$version"
echo "install-otava.sh: $venv/bin/otava" >&2
