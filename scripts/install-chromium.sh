#!/usr/bin/env bash
# Installs Debian's chromium when /usr/bin/chromium is missing: the HTML report's browser test
# (driver/tests/html.rs) opens report.html in it, headless, through the DevTools protocol.
# Debian's package, not a browser build fetched by a crate: the machines reach only the package
# registries.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
    exit 0
fi
echo "install-chromium.sh: installing Debian's chromium package" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
test -x /usr/bin/chromium
