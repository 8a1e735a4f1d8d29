#!/usr/bin/env bash
# Stages the image's inputs from outside docker/tritonserver (run by scripts/k8s/images.sh with the
# build context as $1): the project's tritonserver 2.51 (scripts/install-tritonserver.sh, a no-op when
# installed) with the shared libraries it ships, and the repo's models/ and models-faulty/ with their
# symlinked model.py files resolved.
set -euo pipefail
ctx=${1:?usage: prepare.sh CONTEXT_DIR}
REPO_ROOT=${REPO_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
LOCAL="${TRITON_STRESS_LOCAL:-$REPO_ROOT/.local}"

"$REPO_ROOT/scripts/install-tritonserver.sh"
found=("$LOCAL"/venv/lib/python3*/site-packages/nvidia_pytriton.libs); libs=${found[0]}
[ -d "$libs" ] || { echo "prepare: nvidia_pytriton.libs not found under $LOCAL/venv" >&2; exit 1; }

# /opt/tritonserver as in NVIDIA's images: the server's default --backend-directory and
# --cache-directory are /opt/tritonserver/backends and /opt/tritonserver/caches, and its RPATH has
# ${ORIGIN}/../lib. Stubs for other Pythons than the image's 3.11 and bytecode caches are left out.
mkdir -p "$ctx/opt/tritonserver/lib"
# (2.44's wheel has no caches/.)
for d in bin backends caches; do
    [ ! -d "$LOCAL/tritonserver/$d" ] || cp -a "$LOCAL/tritonserver/$d" "$ctx/opt/tritonserver/"
done
find "$ctx/opt/tritonserver" -name __pycache__ -prune -exec rm -rf {} +
# every library of the wheel except the bundled libpython3.13 (nothing of the server links it)
find "$libs" -maxdepth 1 -type f ! -name 'libpython3*' -exec cp -a {} "$ctx/opt/tritonserver/lib/" \;

for m in models models-faulty; do
    cp -rL "$REPO_ROOT/$m" "$ctx/$m"
    find "$ctx/$m" -name __pycache__ -prune -exec rm -rf {} +
done
