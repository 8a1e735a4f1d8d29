#!/usr/bin/env bash
# Stages the image's inputs from outside docker/models (run by scripts/k8s/images.sh with the
# build context as $1): the repo's models/, with symlinked model.py files resolved and bytecode
# caches left out.
set -euo pipefail
ctx=${1:?usage: prepare.sh CONTEXT_DIR}
REPO_ROOT=${REPO_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}

cp -rL "$REPO_ROOT/models" "$ctx/models"
find "$ctx/models" -name __pycache__ -prune -exec rm -rf {} +
