#!/usr/bin/env bash
# CUDA backend benchmark (on a GPU machine; run by hand, never part of the
# test suite).  Builds sinkd-mkmodel and the driver (tests/bench/cuda-bench.c)
# unless BIN names a folder holding both (cuda-gpu-pack.sh makes one); makes
# the synthetic 1.1B Llama of issue 7 (dim 2048, 22 layers, 32 heads, 4 KV
# heads, ffn 5632, vocab 32000, bf16) with sinkd-mkmodel on this machine;
# then the driver measures decode tok/s vs batch 1..256, batch 1's weight
# bandwidth against the device peak and a copy-kernel probe, attention
# kernel time vs window size, bytes per session, and the L2 sink window off
# vs on.  Prints a table and one JSON line ({"bench":"cuda",...}).
# Sized for < 10 minutes on an H200 (model making ~1 min, driver ~2 min).
#
# Environment: BIN (prebuilt binaries), BUILD (build dir, default
# build-cuda-bench), BENCH_ARGS (extra driver options, e.g.
# "--batches 1,64 --steps 16"), PEAK_GBPS (4800, the H200 datasheet),
# TIMEOUT (driver seconds, 420), MODEL (an existing GGUF: skips making one).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build-cuda-bench}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
log() { echo "cuda-bench: $*" >&2; }

if [ -n "${BIN:-}" ]; then
	MKMODEL=$BIN/sinkd-mkmodel
	DRIVER=$BIN/cuda-bench
else
	if [ ! -f "$BUILD/build.ninja" ]; then
		PATH=/usr/local/cuda/bin:$PATH meson setup "$BUILD" -Dcuda=enabled -Dbuildtype=release \
			-Dgpu_sm=90 >/dev/null
	fi
	PATH=/usr/local/cuda/bin:$PATH ninja -C "$BUILD" src/tools/sinkd-mkmodel \
		tests/unit/cuda/cuda-bench >/dev/null
	MKMODEL=$BUILD/src/tools/sinkd-mkmodel
	DRIVER=$BUILD/tests/unit/cuda/cuda-bench
fi

if [ -z "${MODEL:-}" ]; then
	MODEL=$TMP/synth1.1B-bf16.gguf
	log "making $MODEL"
	t0=$(date +%s)
	"$MKMODEL" --out "$MODEL" --dim 2048 --layers 22 --heads 32 --kv-heads 4 --ffn 5632 \
		--vocab-size 32000 --type bf16 --seed 1 >/dev/null
	log "model made in $(($(date +%s) - t0)) s"
fi

log "running the driver"
# shellcheck disable=SC2086
timeout "${TIMEOUT:-420}" "$DRIVER" --model "$MODEL" --peak-gbps "${PEAK_GBPS:-4800}" ${BENCH_ARGS:-}
