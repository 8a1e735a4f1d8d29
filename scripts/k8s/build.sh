#!/usr/bin/env bash
# Build Kubernetes (apiserver, controller-manager, scheduler, kubelet, kube-proxy, kubectl) from
# Debian bookworm's `kubernetes` source package and cache the binaries outside the repository:
#   ${TRITON_STRESS_CACHE:-$HOME/.cache/triton-stress}/kubernetes/<deb-version>/bin
# Also installs the Debian runtime packages the node needs. A second call is a no-op.
#
# Env: K8S_DEB_VERSION (source version to build; default pinned in lib.sh),
#      K8S_BUILD_NICE (default 15), K8S_KEEP_BUILD_TREE=1 (keep source + Go cache after success).
set -eu
. "$(dirname "$0")/lib.sh"
need_root

apt_ensure $K8S_RUNTIME_PACKAGES

if k8s_binaries_present; then
    log "kubernetes $K8S_VERSION_RESOLVED already built: $K8S_BIN"
    exit 0
fi
# One build at a time: a second call (e.g. ci.sh while a build started by hand still runs)
# waits for the first and then finds its binaries, instead of building into the same tree.
mkdir -p "$K8S_CACHE_ROOT"
exec 9>"$K8S_CACHE_ROOT/build.lock"
if ! flock -n 9; then
    log "another build of kubernetes is running: waiting for it"
    flock 9
fi
if k8s_binaries_present; then
    log "kubernetes $K8S_VERSION_RESOLVED already built: $K8S_BIN"
    exit 0
fi

apt_ensure golang-go golang-github-modern-go-reflect2-dev dpkg-dev build-essential rsync jq git

WORK="$K8S_CACHE_ROOT/build"
APT_DIR="$WORK/apt"
mkdir -p "$APT_DIR/sources.list.d" "$APT_DIR/lists/partial"
# deb-src list kept outside /etc/apt: the system's apt configuration is left alone.
cat > "$APT_DIR/sources.list.d/bookworm-src.sources" <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
APT_OPTS=(-o Dir::Etc::sourcelist=/dev/null -o "Dir::Etc::sourceparts=$APT_DIR/sources.list.d"
          -o "Dir::State::lists=$APT_DIR/lists" -o DPkg::Lock::Timeout=600)
log "updating deb-src index (kept in $APT_DIR)"
apt-get "${APT_OPTS[@]}" update -qq

want="${K8S_DEB_VERSION:-$K8S_DEB_VERSION_DEFAULT}"
avail="$(apt-cache "${APT_OPTS[@]}" showsrc kubernetes | sed -n 's/^Version: //p' | sort -V | tail -1)"
[ -n "$avail" ] || die "no kubernetes source package found in bookworm"
if ! apt-cache "${APT_OPTS[@]}" showsrc kubernetes | grep -qx "Version: $want"; then
    [ -n "${K8S_DEB_VERSION:-}" ] && die "kubernetes source $want not available (archive has $avail)"
    log "WARNING: pinned source $want is gone from the archive; building $avail instead"
    want="$avail"
fi
K8S_BIN="$K8S_CACHE_ROOT/$want/bin"

SRC_DIR="$WORK/src-$want"
if [ ! -f "$SRC_DIR/.unpacked" ]; then
    rm -rf "$SRC_DIR"; mkdir -p "$SRC_DIR"
    log "fetching source package kubernetes=$want"
    ( cd "$SRC_DIR" && apt-get "${APT_OPTS[@]}" source -qq "kubernetes=$want" >/dev/null )
    touch "$SRC_DIR/.unpacked"
fi
TREE="$(find "$SRC_DIR" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*' | head -1)"
[ -d "$TREE/vendor" ] || die "unexpected source layout in $SRC_DIR"

# The one vendored-dependency fix: reflect2 1.0.1 crashes with Go >= 1.18 (unsafe map iteration);
# replace it by Debian's 1.0.2.
R2_SRC=/usr/share/gocode/src/github.com/modern-go/reflect2
R2_DST="$TREE/vendor/github.com/modern-go/reflect2"
[ -d "$R2_SRC" ] || die "$R2_SRC missing (golang-github-modern-go-reflect2-dev)"
if ! cmp -s "$R2_SRC/reflect2.go" "$R2_DST/reflect2.go"; then
    log "replacing vendored modern-go/reflect2 by Debian's copy"
    rm -rf "$R2_DST"; mkdir -p "$R2_DST"
    find "$R2_SRC" -maxdepth 1 -type f ! -name '*_test.go' -exec cp {} "$R2_DST/" \;
    [ -f "$R2_SRC/go.mod" ] && cp "$R2_SRC/go.mod" "$R2_DST/" || true
fi

# No .git in a source package: give the build its version explicitly.
cat > "$WORK/version.env" <<VER
KUBE_GIT_COMMIT='faecb196815e248d3ecfb03c680a4507229c2a56'
KUBE_GIT_TREE_STATE='clean'
KUBE_GIT_VERSION='$K8S_UPSTREAM_VERSION'
KUBE_GIT_MAJOR='1'
KUBE_GIT_MINOR='20'
VER

export GOCACHE="$WORK/go-cache" GOPATH="$WORK/gopath" GOFLAGS=-mod=vendor GOTOOLCHAIN=local
export KUBE_GIT_VERSION_FILE="$WORK/version.env"
nice_level="${K8S_BUILD_NICE:-15}"
log "building $K8S_BINARIES with $(go version | cut -d' ' -f3) (nice $nice_level; ~15 min on 2 cores)"
start=$(date +%s)
( cd "$TREE" && nice -n "$nice_level" make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler cmd/kubelet cmd/kube-proxy cmd/kubectl" ) \
    || die "kubernetes build failed"
log "build took $(( $(date +%s) - start )) s"

OUT_DIR="$TREE/_output/local/bin/linux/amd64"
[ -d "$OUT_DIR" ] || OUT_DIR="$TREE/_output/bin"
tmp_bin="$K8S_BIN.tmp"
rm -rf "$tmp_bin"; mkdir -p "$tmp_bin"
for b in $K8S_BINARIES; do
    [ -x "$OUT_DIR/$b" ] || die "$b not produced in $OUT_DIR"
    cp "$OUT_DIR/$b" "$tmp_bin/"
done
"$tmp_bin/kubectl" version --client --short 2>/dev/null || "$tmp_bin/kubectl" version --client
touch "$tmp_bin/.complete"
rm -rf "$K8S_BIN"; mv "$tmp_bin" "$K8S_BIN"
echo "$want" > "$K8S_CACHE_ROOT/current"

if [ "${K8S_KEEP_BUILD_TREE:-0}" != 1 ]; then
    log "removing build tree and Go cache (set K8S_KEEP_BUILD_TREE=1 to keep)"
    chmod -R u+w "$WORK" 2>/dev/null || true
    rm -rf "$WORK"
fi
log "kubernetes $want cached in $K8S_BIN"
