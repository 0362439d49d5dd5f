#!/usr/bin/env bash
# CPU engine benchmark (run by hand, never part of the test suite).
#
# Builds the library, the benchmark driver and the read-bandwidth probe;
# makes the synthetic 134M Llama (dim 768, 12 layers, 12 heads, ffn 2048,
# vocab 32000 from ggml-vocab-llama-spm, separate output head) in F32 and F16
# with sinkd-mkmodel in a temporary directory; then measures, REPEATS times
# each, decode tok/s of 1 stream and batched throughput of 8 and 32 streams
# on stories260K and both 134M models, and the weight bandwidth a single
# stream achieves (weight bytes x tok/s) against the probe, and the fp32 FMA
# rate the batches achieve (weight multiply-adds x 2 x tok/s) against the
# probe's FMA peak.  Prints min and median, a table, the targets of the
# issue, and one JSON line.
#
# Environment: BUILD (build dir, default build-bench), REPEATS (3),
# RUN_SECONDS (3 per measurement), THREADS (0 = one per core),
# STREAMS ("1 8 32"), MATMUL_PERF=1 (also print kernel GB/s and GFLOP/s).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${SINKD_SHARED:-$ROOT/../shared}
BUILD=${BUILD:-$ROOT/build-bench}
REPEATS=${REPEATS:-3}
RUN_SECONDS=${RUN_SECONDS:-3}
THREADS=${THREADS:-0}
STREAMS=${STREAMS:-"1 8 32"}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

log() { echo "engine-bench: $*" >&2; }

# ---- build
if [ ! -f "$BUILD/build.ninja" ]; then
	PATH=/usr/local/cuda/bin:$PATH meson setup "$BUILD" -Dcuda=disabled -Dbuildtype=release >/dev/null
fi
ninja -C "$BUILD" src/libsinkd.a src/tools/sinkd-mkmodel >/dev/null
LIBS="$(pkg-config --libs libmicrohttpd libcrypto libcjson yaml-0.1) -lm -lpthread"
cc -O2 -std=c11 -D_GNU_SOURCE -I"$ROOT/src" $(pkg-config --cflags libcjson) \
	-o "$TMP/engine-driver" "$ROOT/tests/bench/engine-driver.c" "$BUILD/src/libsinkd.a" $LIBS
cc -O3 -o "$TMP/bwprobe" "$ROOT/tests/bench/bwprobe.c" -lpthread
if [ "${MATMUL_PERF:-0}" = 1 ]; then
	cc -O2 -std=c11 -D_GNU_SOURCE -I"$ROOT/src" -o "$TMP/matmul-perf" \
		"$ROOT/tests/bench/matmul-perf.c" "$BUILD/src/libsinkd.a" -lm -lpthread
	log "matmul kernels (threads=$THREADS)"
	"$TMP/matmul-perf" "$THREADS" >/dev/null
fi

# ---- models
MODELS=("$SHARED/models/stories260K.gguf")
for type in f32 f16; do
	out="$TMP/synth134M-$type.gguf"
	log "making $out"
	"$BUILD/src/tools/sinkd-mkmodel" --out "$out" --vocab "$SHARED/vocab/ggml-vocab-llama-spm.gguf" \
		--dim 768 --layers 12 --heads 12 --ffn 2048 --type "$type" >/dev/null
	MODELS+=("$out")
done

# ---- measurements: one JSON object per line in $TMP/results.jsonl
RESULTS="$TMP/results.jsonl"
: >"$RESULTS"
for r in $(seq "$REPEATS"); do
	log "bandwidth probe, repeat $r"
	"$TMP/bwprobe" | sed 's/^{/{"kind":"probe",/' >>"$RESULTS"
done
for model in "${MODELS[@]}"; do
	for n in $STREAMS; do
		prompt=16
		[ "$n" = 1 ] && prompt=64
		for r in $(seq "$REPEATS"); do
			log "$(basename "$model") streams=$n repeat $r"
			"$TMP/engine-driver" --model "$model" --streams "$n" --threads "$THREADS" \
				--prompt-tokens "$prompt" --seconds "$RUN_SECONDS" |
				sed 's/^{/{"kind":"decode",/' >>"$RESULTS"
		done
	done
done

# ---- report
python3 - "$RESULTS" "$THREADS" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
threads, when = int(sys.argv[2]), sys.argv[3]
probe = [r for r in rows if r["kind"] == "probe"]
bw1 = statistics.median(p["bw1_gbs"] for p in probe)
bw2 = statistics.median(p["bw2_gbs"] for p in probe)
fma1 = statistics.median(p["fma1_gflops"] for p in probe)
fma2 = statistics.median(p["fma2_gflops"] for p in probe)
roof = bw1 if threads == 1 else bw2
flop_roof = fma1 if threads == 1 else fma2
print(f"run at {when}; 1-min load average at the end: {open('/proc/loadavg').read().split()[0]}")
print(f"read bandwidth probe (1 GiB): 1 thread {bw1:.1f} GB/s, 2 threads {bw2:.1f} GB/s (median of {len(probe)})")
print(f"fp32 FMA peak probe: 1 thread {fma1:.0f} GFLOP/s, 2 threads {fma2:.0f} GFLOP/s (median of {len(probe)})")
dec = [r for r in rows if r["kind"] == "decode"]
models = list(dict.fromkeys(r["model"] for r in dec))
summary = {"time": when, "threads": threads, "probe_bw1_gbs": bw1, "probe_bw2_gbs": bw2,
           "probe_fma1_gflops": fma1, "probe_fma2_gflops": fma2, "models": {}}
print(f"{'model':<22}{'streams':>8}{'tok/s min':>12}{'tok/s med':>12}{'GB/s':>8}{'% roof':>8}{'GFLOP/s':>9}{'% FMA':>7}{'prefill':>10}{'cpu ms/step':>12}{'wall ms/step':>13}")
for m in models:
    ms = {}
    for n in sorted({r["streams"] for r in dec if r["model"] == m}):
        rs = [r for r in dec if r["model"] == m and r["streams"] == n]
        toks = [r["tok_s"] for r in rs]
        med = statistics.median(toks)
        wb = rs[0]["weight_bytes"]
        steps_s = med / n  # forwards per second: each reads the weights once
        gbs = wb * steps_s / 1e9
        pre = statistics.median(r["prefill_tok_s"] for r in rs)
        cpu = statistics.median(r["cpu_ms_per_step"] for r in rs)
        wall = statistics.median(r["step_ms"] for r in rs)
        gflops = 2 * rs[0]["weight_macs"] * med / 1e9
        ms[str(n)] = {"tok_s_min": min(toks), "tok_s_median": med, "weight_gbs": gbs,
                      "roof_pct": 100 * gbs / roof, "gflops": gflops,
                      "fma_pct": 100 * gflops / flop_roof, "prefill_tok_s": pre,
                      "weight_bytes": wb, "weight_macs": rs[0]["weight_macs"],
                      "cpu_ms_per_step": cpu, "step_ms": wall}
        print(f"{m:<22}{n:>8}{min(toks):>12.1f}{med:>12.1f}{gbs:>8.1f}{100*gbs/roof:>8.1f}{gflops:>9.1f}{100*gflops/flop_roof:>7.1f}{pre:>10.0f}{cpu:>12.3f}{wall:>13.3f}")
    if "1" in ms and "32" in ms:
        ms["batch32_speedup"] = ms["32"]["tok_s_median"] / ms["1"]["tok_s_median"]
    summary["models"][m] = ms
print("targets:")
for m, ms in summary["models"].items():
    if "1" not in ms:
        continue
    if m.startswith("stories260K"):
        print(f"  {m}: single stream {ms['1']['tok_s_median']:.0f} tok/s (target >= 4000)")
    else:
        print(f"  {m}: single stream {ms['1']['roof_pct']:.0f}% of the bandwidth roof (target >= 90%)")
    if "batch32_speedup" in ms:
        # the most a batch can reach: every multiply-add at the FMA peak
        ceiling = flop_roof * 1e9 / (2 * ms["1"]["weight_macs"]) / ms["1"]["tok_s_median"]
        ms["batch32_ceiling"] = ceiling
        print(f"  {m}: 32 streams = {ms['batch32_speedup']:.1f}x single stream (target >= 6x; "
              f"the FMA peak allows at most {ceiling:.1f}x over this single-stream rate)")
print(json.dumps(summary, separators=(",", ":")))
EOF
