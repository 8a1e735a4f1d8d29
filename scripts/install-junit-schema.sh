#!/usr/bin/env bash
# Installs what checks the JUnit XML the driver writes against the schema CI tools use:
# Debian's xmllint (package libxml2-utils) when missing, and Jenkins xunit-plugin's junit-10.xsd
# (MIT licence, Gregory Boissinot), which pytest's source distribution ships for its own tests,
# into .local/share/junit-10.xsd. The sdist is pinned by version and checksum.
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
LOCAL="${TRITON_STRESS_LOCAL:-$PWD/.local}"
xsd="$LOCAL/share/junit-10.xsd"
if ! command -v xmllint >/dev/null 2>&1; then
    echo "install-junit-schema.sh: installing Debian's libxml2-utils (xmllint)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libxml2-utils >/dev/null
fi
if [ -s "$xsd" ]; then
    exit 0
fi
version=8.3.4
sha256=965370d062bce11e73868e0335abac31b4d3de0e82f4007408d242b4f8610761
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "install-junit-schema.sh: fetching junit-10.xsd from pytest $version's sdist" >&2
python3 -m pip download --quiet --no-binary :all: --no-deps "pytest==$version" -d "$tmp"
echo "$sha256  $tmp/pytest-$version.tar.gz" | sha256sum --check --quiet
tar -xzf "$tmp/pytest-$version.tar.gz" -C "$tmp" "pytest-$version/testing/example_scripts/junit-10.xsd"
mkdir -p "$(dirname "$xsd")"
cp "$tmp/pytest-$version/testing/example_scripts/junit-10.xsd" "$xsd"
echo "install-junit-schema.sh: $xsd" >&2
