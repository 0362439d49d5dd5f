#!/usr/bin/env bash
# Flat decode cost of the sliding-window sink cache (run by hand, never part
# of the test suite): per-token decode time at stream positions 1k, 10k and
# 100k with the default geometry (4 sinks + window 4096, bfloat16).
#   model: stories260K through the whole CPU forward pass (synthetic token
#          ids streamed through one session up to each position, then 256
#          single-token decode steps timed; reaching 100k takes a few minutes:
#          every token attends to 4,100 others);
#   cache: one layer of a Llama-3-8B-shaped cache (32 query heads, 8 KV heads,
#          head_dim 128) in bf16 and in int8 (128 recent tokens full
#          precision): sinkcache_append + sinkcache_attend per token, the
#          stream index jumped to the position with the test hook and the
#          window filled before timing 256 tokens.
# A flat cache shows the same time at 10k and 100k (at 1k the window is not
# full yet).  The table shows process CPU time per token (what stays flat on
# a shared machine); the JSON line has wall and CPU seconds.  Prints a table
# and one JSON line.
#
# Environment: BUILD (default build-bench), THREADS (model run, default 1 so
# that CPU time is the work; 0 = one per core), POSITIONS ("1000 10000 100000").
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${SINKD_SHARED:-$ROOT/../shared}
BUILD=${BUILD:-$ROOT/build-bench}
THREADS=${THREADS:-1}
POSITIONS=${POSITIONS:-"1000 10000 100000"}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

if [ ! -f "$BUILD/build.ninja" ]; then
	PATH=/usr/local/cuda/bin:$PATH meson setup "$BUILD" -Dcuda=disabled -Dbuildtype=release >/dev/null
fi
ninja -C "$BUILD" src/libsinkd.a >/dev/null
LIBS="$(pkg-config --libs libmicrohttpd libcrypto libcjson yaml-0.1 hiredis gnutls libsystemd) -lm -lpthread"
cc -O2 -std=c11 -D_GNU_SOURCE -I"$ROOT/src" -o "$TMP/cache-driver" \
	"$ROOT/tests/bench/cache-driver.c" "$BUILD/src/libsinkd.a" $LIBS

# shellcheck disable=SC2086
"$TMP/cache-driver" model "$SHARED/models/stories260K.gguf" 4096 4 "$THREADS" $POSITIONS \
	>"$TMP/model.txt"
# shellcheck disable=SC2086
"$TMP/cache-driver" cache 32 8 128 4096 4 2 0 $POSITIONS >"$TMP/bf16.txt"
# shellcheck disable=SC2086
"$TMP/cache-driver" cache 32 8 128 4096 4 2 8 $POSITIONS >"$TMP/int8.txt"

printf '%-10s %22s %24s %24s %26s\n' position "stories260K ms/token" "8B-shape layer bf16 us" \
	"8B-shape layer int8 us" "stories260K KV resident/bound"
col() { awk -v p="$2" -v c="$3" '$1 == p { print $c }' "$TMP/$1.txt"; }
json='{"bench":"cache-flat","window":4096,"sinks":4,"model_threads":'$THREADS',"rows":['
sep=
for p in $POSITIONS; do
	printf '%-10s %22.3f %24.1f %24.1f %26s\n' "$p" "$(echo "$(col model "$p" 3) * 1000" | bc -l)" \
		"$(echo "$(col bf16 "$p" 3) * 1000000" | bc -l)" "$(echo "$(col int8 "$p" 3) * 1000000" | bc -l)" \
		"$(col model "$p" 4)/$(col model "$p" 5)"
	json+="$sep{\"position\":$p"
	for kind in model bf16 int8; do
		json+=",\"${kind}_wall_s\":$(col $kind "$p" 2),\"${kind}_cpu_s\":$(col $kind "$p" 3)"
		json+=",\"${kind}_kv_resident_bytes\":$(col $kind "$p" 4),\"${kind}_kv_bound_bytes\":$(col $kind "$p" 5)"
	done
	json+="}"
	sep=,
done
echo "$json]}"
