#!/usr/bin/env bash
# Installs the pinned dependencies of DIR/package.json into DIR/node_modules
# when any of them is missing there, and does nothing otherwise: what the
# install.sh beside each npm-based test's package.json runs.  Usage:
# npm-pinned.sh DIR WHAT (WHAT: how the message names them).  Needs node
# and npm.
set -euo pipefail
dir=$(cd "${1:?usage: $0 DIR WHAT}" && pwd)
what=${2:?usage: $0 DIR WHAT}
for tool in node npm; do
	command -v "$tool" >/dev/null 2>&1 || { echo "install.sh: $tool is missing" >&2; exit 1; }
done
missing=0
while IFS= read -r p; do
	[ -f "$dir/node_modules/$p/package.json" ] || missing=1
done < <(node -e 'for (const p of Object.keys(require(process.argv[1]).dependencies)) console.log(p)' \
	"$dir/package.json")
[ "$missing" -eq 1 ] || exit 0
echo "sinkd: installing $what into $dir/node_modules" >&2
cd "$dir" && npm install --no-audit --no-fund --loglevel=error
