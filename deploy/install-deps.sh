#!/usr/bin/env bash
# Installs the Debian 12 packages sinkd needs to build and test, only those
# that are missing.  Run as root (or with sudo available).
set -euo pipefail

packages=(gcc pkg-config meson ninja-build libmicrohttpd-dev libssl-dev libcjson-dev
          libyaml-dev check openssl curl ca-certificates python3 libsystemd-dev systemd
          libgnutls28-dev nginx haproxy python3-yaml sslscan libpng-dev)
# The fuzz smoke (tests/fuzz): clang and its sanitizer + libFuzzer runtimes
# (only recommended by clang-14, so named here).
packages+=(clang-14 libclang-rt-14-dev)
# The JavaScript client test needs node + npm; keep an existing install.
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)
# The web console's browser test (tests/integration/test-console.sh) drives
# Debian's Chromium with puppeteer-core; it downloads no browser of its own.
packages+=(chromium)
# The session store's Redis/Valkey backend (hiredis for RESP) and its test's server.
packages+=(libhiredis-dev redis-server)

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
	exit 0
fi
echo "sinkd: installing missing packages: ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
