#!/usr/bin/env bash
# Install a real, CPU-only Triton Inference Server (python backend) and perf_analyzer
# into <repo>/.local (override with TRITON_STRESS_LOCAL). Idempotent: a second call
# with the same versions is a fast no-op ("already installed").
#
# Where the pieces come from (see shared/notes/real-components.md):
#   - PyPI nvidia-pytriton==0.7.0 ships tritonserver 2.51.0 (Triton 24.10) with the
#     python backend, the python backend stubs per Python version, and all its shared
#     libraries in site-packages/nvidia_pytriton.libs.
#   - PyPI tritonclient==2.51.0 ships a native perf_analyzer 2.51 (the newer
#     perf-analyzer wheels need glibc 2.38; bookworm has 2.36).
#
# Result:
#   .local/venv                 venv with nvidia-pytriton, numpy, tritonclient
#   .local/tritonserver         writable copy of the tritonserver folder (+ python stub)
#   .local/lib/perf_analyzer    symlinks making perf_analyzer's libs resolve
#   .local/bin/tritonserver     wrapper (exec) with --backend-directory/--cache-directory
#   .local/bin/perf_analyzer    wrapper (exec)
#   .local/.tritonserver-install-stamp
#
# Environment: TRITON_STRESS_LOCAL (install dir), PYTHON (interpreter for the venv,
# default python3; its X.Y must have a stub in nvidia-pytriton, e.g. 3.11),
# PYTRITON_VERSION (default 0.7.0: tritonserver 2.51.0). A second Triton release beside
# the default one, e.g. for a version sweep (docs/capacity.md):
#   PYTRITON_VERSION=0.5.5 TRITON_STRESS_LOCAL=.local/pytriton-0.5.5 scripts/install-tritonserver.sh
# (older nvidia-pytriton releases bundle older tritonserver builds; the version installed is
# read from the server's own startup and printed, and kept in .local/.../tritonserver-version).
set -euo pipefail

PYTRITON_VERSION="${PYTRITON_VERSION:-0.7.0}"
TRITONCLIENT_VERSION=2.51.0
# Bump when this script's layout changes so old installs are redone.
SCRIPT_LAYOUT=2

die() { echo "install-tritonserver: ERROR: $*" >&2; exit 1; }
log() { echo "install-tritonserver: $*" >&2; }
trap 'rc=$?; [ $rc -eq 0 ] || echo "install-tritonserver: FAILED (exit $rc) at line $LINENO" >&2' EXIT

SCRIPT_DIR="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
LOCAL="${TRITON_STRESS_LOCAL:-$REPO_ROOT/.local}"
mkdir -p "$LOCAL" || die "cannot create $LOCAL"
LOCAL="$(cd "$LOCAL" && pwd)"

PYTHON="${PYTHON:-python3}"
command -v "$PYTHON" >/dev/null 2>&1 || die "python interpreter '$PYTHON' not found (set PYTHON=...)"
PY_XY="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
    || die "cannot run $PYTHON"
PY_FULL="$("$PYTHON" -c 'import platform; print(platform.python_version())')"

VENV="$LOCAL/venv"
TS_DIR="$LOCAL/tritonserver"
PA_LIB="$LOCAL/lib/perf_analyzer"
BIN="$LOCAL/bin"
STAMP="$LOCAL/.tritonserver-install-stamp"
VERSION_FILE="$LOCAL/tritonserver-version"

STAMP_CONTENT="layout=$SCRIPT_LAYOUT
nvidia-pytriton=$PYTRITON_VERSION
tritonclient=$TRITONCLIENT_VERSION
perf_analyzer=2.51
python=$PY_FULL
local=$LOCAL"

# ---------------------------------------------------------------- fast path
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$STAMP_CONTENT" ] \
   && [ -x "$BIN/tritonserver" ] && [ -x "$BIN/perf_analyzer" ] \
   && [ -x "$TS_DIR/bin/tritonserver" ] && [ -x "$VENV/bin/python" ] && [ -s "$VERSION_FILE" ]; then
    echo "install-tritonserver: already installed in $LOCAL (tritonserver $(cat "$VERSION_FILE"), perf_analyzer 2.51, nvidia-pytriton $PYTRITON_VERSION)"
    exit 0
fi
rm -f "$STAMP"

# ---------------------------------------------------------------- Debian packages
# The python backend stub links the system libpython<X.Y>.so.1.0.
apt_missing=()
for pkg in "libpython$PY_XY"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        apt_missing+=("$pkg")
    fi
done
if [ ${#apt_missing[@]} -gt 0 ]; then
    log "installing Debian packages: ${apt_missing[*]}"
    [ "$(id -u)" -eq 0 ] || die "need root to apt-get install ${apt_missing[*]}"
    command -v apt-get >/dev/null || die "apt-get not found; install ${apt_missing[*]} by hand"
    apt-get update -qq || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${apt_missing[@]}" \
        || die "apt-get install ${apt_missing[*]} failed"
fi

# ---------------------------------------------------------------- venv + wheels
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1 \
   || [ "$("$VENV/bin/python" -c 'import platform; print(platform.python_version())')" != "$PY_FULL" ]; then
    log "creating venv $VENV with $PYTHON ($PY_FULL)"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV" || die "python -m venv failed (on Debian's own python: apt-get install python3-venv)"
fi
log "installing nvidia-pytriton==$PYTRITON_VERSION numpy tritonclient==$TRITONCLIENT_VERSION (pip)"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check \
    "nvidia-pytriton==$PYTRITON_VERSION" numpy "tritonclient==$TRITONCLIENT_VERSION" \
    || die "pip install failed"

SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
PT_TS="$SITE/pytriton/tritonserver"
PT_LIBS="$SITE/nvidia_pytriton.libs"
[ -x "$PT_TS/bin/tritonserver" ] || die "tritonserver binary not found in $PT_TS/bin (nvidia-pytriton layout changed?)"
[ -d "$PT_LIBS" ] || die "$PT_LIBS not found"
STUB="$PT_TS/python_backend_stubs/$PY_XY/triton_python_backend_stub"
[ -f "$STUB" ] || die "no python backend stub for Python $PY_XY in $PT_TS/python_backend_stubs (have: $(ls "$PT_TS/python_backend_stubs" 2>/dev/null | tr '\n' ' ')); set PYTHON to a supported version"

# ---------------------------------------------------------------- writable tritonserver copy
log "copying tritonserver to $TS_DIR"
rm -rf "$TS_DIR.tmp"
cp -a "$PT_TS" "$TS_DIR.tmp" || die "copy of $PT_TS failed"
cp "$STUB" "$TS_DIR.tmp/backends/python/triton_python_backend_stub" || die "copy of python stub failed"
chmod +x "$TS_DIR.tmp/backends/python/triton_python_backend_stub" "$TS_DIR.tmp/bin/tritonserver"
rm -rf "$TS_DIR"
mv "$TS_DIR.tmp" "$TS_DIR"

# ---------------------------------------------------------------- perf_analyzer
PA_REAL=""
for cand in "$VENV/bin/perf_analyzer" "$SITE/tritonclient/bin/perf_analyzer"; do
    if [ -f "$cand" ] && head -c 4 "$cand" | grep -q $'\x7fELF'; then PA_REAL="$cand"; break; fi
done
[ -n "$PA_REAL" ] || die "native perf_analyzer not found in the tritonclient $TRITONCLIENT_VERSION wheel"

# perf_analyzer needs libb64.so.0d and libcudart.so.12: point at the copies that
# nvidia-pytriton vendors (auditwheel-renamed, e.g. libb64-<hash>.so.0d).
rm -rf "$PA_LIB"
mkdir -p "$PA_LIB"
link_vendored() { # <soname> <glob in nvidia_pytriton.libs>
    local soname="$1" glob="$2" f
    f="$(ls "$PT_LIBS"/$glob 2>/dev/null | head -n1 || true)"
    if [ -n "$f" ]; then
        ln -sf "$f" "$PA_LIB/$soname"
    elif [ -e "/usr/lib/x86_64-linux-gnu/$soname" ]; then
        ln -sf "/usr/lib/x86_64-linux-gnu/$soname" "$PA_LIB/$soname"
    else
        die "no $soname for perf_analyzer (not in $PT_LIBS; Debian: apt-get install libb64-0d)"
    fi
}
link_vendored libb64.so.0d 'libb64*.so.0d*'
link_vendored libcudart.so.12 'libcudart*.so.12*'

# ---------------------------------------------------------------- wrappers
mkdir -p "$BIN"
# Paths under $LOCAL are written relative to the wrapper's own place, so a .local reached through
# a symlink (a git worktree's) or moved keeps working.
under_local() { case "$1" in "$LOCAL"/*) printf '%s' "\$LOCAL_DIR${1#"$LOCAL"}" ;; *) printf '%s' "$1" ;; esac; }
FIND_LOCAL='LOCAL_DIR="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)"'
cat > "$BIN/tritonserver.tmp" <<EOF
#!/usr/bin/env bash
# Generated by scripts/install-tritonserver.sh: runs the real tritonserver
# from nvidia-pytriton $PYTRITON_VERSION. exec keeps the PID, so signals reach it.
$FIND_LOCAL
export LD_LIBRARY_PATH="$(under_local "$PT_LIBS")\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
# venv first: the python backend stub's interpreter must find numpy.
export PATH="$(under_local "$VENV")/bin:\$PATH"
exec "$(under_local "$TS_DIR")/bin/tritonserver" --backend-directory="$(under_local "$TS_DIR")/backends" --cache-directory="$(under_local "$TS_DIR")/caches" "\$@"
EOF
cat > "$BIN/perf_analyzer.tmp" <<EOF
#!/usr/bin/env bash
# Generated by scripts/install-tritonserver.sh: runs perf_analyzer 2.51 from the
# tritonclient $TRITONCLIENT_VERSION wheel with its libb64/libcudart resolved.
$FIND_LOCAL
export LD_LIBRARY_PATH="$(under_local "$PA_LIB")\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$(under_local "$PA_REAL")" "\$@"
EOF
chmod +x "$BIN/tritonserver.tmp" "$BIN/perf_analyzer.tmp"
mv "$BIN/tritonserver.tmp" "$BIN/tritonserver"
mv "$BIN/perf_analyzer.tmp" "$BIN/perf_analyzer"

# ---------------------------------------------------------------- verify
check_ldd() { # <binary> <LD_LIBRARY_PATH>
    local out
    out="$(LD_LIBRARY_PATH="$2" ldd "$1" 2>&1)" || die "ldd $1 failed: $out"
    if echo "$out" | grep -q "not found"; then
        die "unresolved libraries for $1:
$(echo "$out" | grep "not found")"
    fi
}
check_ldd "$TS_DIR/bin/tritonserver" "$PT_LIBS"
check_ldd "$TS_DIR/backends/python/triton_python_backend_stub" "$PT_LIBS"
check_ldd "$PA_REAL" "$PA_LIB"

ts_help="$("$BIN/tritonserver" --help 2>&1 || true)"
echo "$ts_help" | grep -q -- "--model-repository" || die "tritonserver --help did not run:
$(echo "$ts_help" | tail -n 20)"
pa_help="$("$BIN/perf_analyzer" --help 2>&1 || true)"
echo "$pa_help" | grep -q -- "--concurrency-range" || die "perf_analyzer --help did not run:
$(echo "$pa_help" | tail -n 20)"
"$VENV/bin/python" -c 'import numpy, tritonclient' || die "venv cannot import numpy/tritonclient"

# The release this wheel bundles, as the server itself states it at startup (no listeners, an
# empty repository: it prints its options table, then is stopped).
EMPTY_REPO="$(mktemp -d)"
TS_LOG="$(mktemp)"
"$BIN/tritonserver" --model-repository="$EMPTY_REPO" --allow-http=false --allow-grpc=false \
    --allow-metrics=false > "$TS_LOG" 2>&1 &
ts_pid=$!
TS_VERSION=""
for _ in $(seq 1 100); do
    TS_VERSION="$(sed -n 's/^| server_version *| *\([0-9][0-9.]*\) .*/\1/p' "$TS_LOG" | head -n1)"
    [ -n "$TS_VERSION" ] && break
    kill -0 "$ts_pid" 2>/dev/null || break
    sleep 0.1
done
kill "$ts_pid" 2>/dev/null || true
wait "$ts_pid" 2>/dev/null || true
[ -n "$TS_VERSION" ] || die "tritonserver did not state its version at startup:
$(tail -n 20 "$TS_LOG")"
rm -rf "$EMPTY_REPO" "$TS_LOG"
printf '%s\n' "$TS_VERSION" > "$VERSION_FILE"

printf '%s\n' "$STAMP_CONTENT" > "$STAMP"
echo "install-tritonserver: installed in $LOCAL"
echo "  tritonserver : $BIN/tritonserver ($TS_VERSION, python backend, stub for Python $PY_XY)"
echo "  perf_analyzer: $BIN/perf_analyzer (2.51)"
