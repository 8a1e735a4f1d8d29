#!/usr/bin/env bash
# Stages a Python client image's inputs into a build context (called by docker/python-client-*/
# prepare.sh): NVIDIA's tritonclient at VERSION with its dependencies, from the venv that
# scripts/install-tritonclient.sh makes (a no-op when installed; CPython 3.11 wheels, which
# Debian bookworm's python3 3.11 loads), at opt/tritonclient/site-packages, and the project's
# clients at opt/clients/.
#
# Usage: scripts/stage-python-client.sh VERSION CONTEXT_DIR
set -euo pipefail
version=${1:?usage: stage-python-client.sh VERSION CONTEXT_DIR}
ctx=${2:?usage: stage-python-client.sh VERSION CONTEXT_DIR}
REPO_ROOT=${REPO_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
LOCAL="${TRITON_STRESS_LOCAL:-$REPO_ROOT/.local}"

"$REPO_ROOT/scripts/install-tritonclient.sh" "$version"
sites=("$LOCAL/tritonclient-$version"/lib/python3.11/site-packages)
site=${sites[0]}
[ -d "$site/tritonclient" ] || { echo "stage: no CPython 3.11 tritonclient in $site" >&2; exit 1; }
mkdir -p "$ctx/opt/tritonclient/site-packages" "$ctx/opt/clients"
# The packages without the installer's own (pip, setuptools) and without tritonclient's bundled
# perf_analyzer (the worker image has one), bytecode caches left out.
tar -C "$site" --exclude='__pycache__' --exclude='pip' --exclude='pip-*' \
    --exclude='setuptools' --exclude='setuptools-*' --exclude='_distutils_hack' \
    --exclude='tritonclient/bin' -cf - . | tar -C "$ctx/opt/tritonclient/site-packages" -xf -
cp "$REPO_ROOT/clients/python/tritonclient_stress.py" "$ctx/opt/clients/"
