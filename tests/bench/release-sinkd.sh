#!/usr/bin/env bash
# release-sinkd.sh BUILD_DIR: configures BUILD_DIR as a CPU-only release
# build when it is not one yet, builds src/sinkd there and prints its path
# (the perplexity benchmarks run it).
set -euo pipefail
build=$1
if [ ! -f "$build/build.ninja" ]; then
	PATH=/usr/local/cuda/bin:$PATH meson setup "$build" -Dcuda=disabled -Dbuildtype=release >/dev/null
fi
ninja -C "$build" src/sinkd >/dev/null
echo "$build/src/sinkd"
