#!/usr/bin/env bash
# Installs Prometheus (Debian's package `prometheus`) when it is not on PATH: the autoscaler
# tests (driver/tests/autoscale.rs) start their own on a free loopback port, scraping a real
# tritonserver. The package's service is not used (the tests run the binary themselves).
set -euo pipefail
if command -v prometheus >/dev/null 2>&1; then
    exit 0
fi
echo "install-prometheus.sh: installing Debian's prometheus package" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null
command -v prometheus >/dev/null
