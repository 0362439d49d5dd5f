#!/usr/bin/env bash
# Constrained-decoding benchmark (run by hand, never part of the test suite).
#
# Builds the library and two drivers in a release build directory of its
# own; makes the synthetic 134M Llama (dim 768, 12 layers, 12 heads, ffn
# 2048, F16, the 32,000-token vocabulary of ggml-vocab-llama-spm) with
# sinkd-mkmodel in a temporary directory; then, REPEATS times, in pairs run
# back to back: the decode step time of that model at 1 and 16 streams
# (engine-driver: one forward of 1 or 16 sequences per step), and the mask
# cost per step of a nested schema (objects in arrays in objects, enums,
# strings, integers, numbers, a date, an email) on the same vocabulary for 1
# stream and for 16 independent constrained streams (16 masks per step, one
# after another: grammar-mask, apply + accept per token).  The mask/decode
# ratio is taken within each pair (this machine's speed drifts), then min
# and median.  Prints a table, the target (mask under 10% of a decode step)
# and one JSON line.
#
# Environment: BUILD (build dir, default build-grammar-bench), REPEATS (3),
# RUN_SECONDS (3 per decode measurement), THREADS (0 = one per core),
# TOKENS (2000 masked tokens per stream per measurement).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${SINKD_SHARED:-$ROOT/../shared}
BUILD=${BUILD:-$ROOT/build-grammar-bench}
REPEATS=${REPEATS:-3}
RUN_SECONDS=${RUN_SECONDS:-3}
THREADS=${THREADS:-0}
TOKENS=${TOKENS:-2000}
VOCAB=$SHARED/vocab/ggml-vocab-llama-spm.gguf
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

log() { echo "grammar-mask: $*" >&2; }

# ---- build
if [ ! -f "$BUILD/build.ninja" ]; then
	meson setup "$BUILD" -Dcuda=disabled -Dbuildtype=release >/dev/null
fi
ninja -C "$BUILD" src/libsinkd.a src/tools/sinkd-mkmodel >/dev/null
LIBS="$(pkg-config --libs libmicrohttpd libcrypto libcjson yaml-0.1 hiredis gnutls libsystemd) -lm -lpthread"
CFLAGS="-O2 -std=c11 -D_GNU_SOURCE -I$ROOT/src $(pkg-config --cflags libcjson)"
cc $CFLAGS -o "$TMP/engine-driver" "$ROOT/tests/bench/engine-driver.c" "$BUILD/src/libsinkd.a" $LIBS
cc $CFLAGS -o "$TMP/grammar-mask" "$ROOT/tests/bench/grammar-mask.c" "$BUILD/src/libsinkd.a" $LIBS

# ---- model
MODEL=$TMP/synth134M-f16.gguf
log "making $MODEL"
"$BUILD/src/tools/sinkd-mkmodel" --out "$MODEL" --vocab "$VOCAB" \
	--dim 768 --layers 12 --heads 12 --ffn 2048 --type f16 >/dev/null

# ---- measurements: one JSON object per line
RESULTS=$TMP/results.jsonl
: >"$RESULTS"
for r in $(seq "$REPEATS"); do
	for n in 1 16; do
		log "repeat $r, $n stream(s): decode step, then masks"
		prompt=16
		[ "$n" = 1 ] && prompt=64
		"$TMP/engine-driver" --model "$MODEL" --streams "$n" --threads "$THREADS" \
			--prompt-tokens "$prompt" --seconds "$RUN_SECONDS" |
			sed "s/^{/{\"kind\":\"decode\",\"repeat\":$r,/" >>"$RESULTS"
		"$TMP/grammar-mask" --vocab "$VOCAB" --streams "$n" --tokens "$TOKENS" --seed "$r" |
			sed "s/^{/{\"kind\":\"mask\",\"repeat\":$r,/" >>"$RESULTS"
	done
done

# ---- report
python3 - "$RESULTS" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(nproc)" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
when, cores = sys.argv[2], sys.argv[3]
dec = {(r["streams"], r["repeat"]): r for r in rows if r["kind"] == "decode"}
msk = {(r["streams"], r["repeat"]): r for r in rows if r["kind"] == "mask"}
print(f"run at {when} on {cores} cores; 1-min load average at the end: {open('/proc/loadavg').read().split()[0]}")
print("model: synthetic 134M Llama F16, vocab 32000 (ggml-vocab-llama-spm); mask: nested schema, same vocabulary")
def mm(v):
    return min(v), statistics.median(v)
hdr = (f"{'streams':>7}{'decode ms/step':>18}{'mask ms/step':>16}{'mask/decode %':>16}"
       f"{'us/token':>10}{'cold us/tok':>13}{'p99 us':>9}{'max us':>9}")
print(hdr)
print(f"{'':>7}{'min / med':>18}{'min / med':>16}{'min / med':>16}{'med':>10}{'med':>13}{'med':>9}{'max':>9}")
summary = {"time": when, "cores": int(cores), "streams": {}}
for n in (1, 16):
    reps = sorted(k for (s, k) in dec if s == n and (s, k) in msk)
    step = [dec[(n, k)]["step_ms"] for k in reps]
    mstep = [msk[(n, k)]["ms_per_step"] for k in reps]
    ratio = [100 * msk[(n, k)]["ms_per_step"] / dec[(n, k)]["step_ms"] for k in reps]
    us = statistics.median(msk[(n, k)]["us_per_token"] for k in reps)
    cold = statistics.median(msk[(n, k)]["cold_us_per_token"] for k in reps)
    p99 = statistics.median(msk[(n, k)]["p99_us"] for k in reps)
    mx = max(msk[(n, k)]["max_us"] for k in reps)
    e = {"decode_step_ms_min": min(step), "decode_step_ms_median": statistics.median(step),
         "mask_ms_per_step_min": min(mstep), "mask_ms_per_step_median": statistics.median(mstep),
         "ratio_pct_min": min(ratio), "ratio_pct_median": statistics.median(ratio),
         "mask_us_per_token_median": us, "cold_us_per_token_median": cold,
         "p99_us_median": p99, "max_us": mx,
         "compile_ms": msk[(n, reps[0])]["compile_ms"], "trie_ms": msk[(n, reps[0])]["trie_ms"]}
    summary["streams"][str(n)] = e
    print(f"{n:>7}{min(step):>9.2f} /{statistics.median(step):>7.2f}"
          f"{min(mstep):>8.3f} /{statistics.median(mstep):>6.3f}"
          f"{min(ratio):>8.2f} /{statistics.median(ratio):>6.2f}"
          f"{us:>10.1f}{cold:>13.1f}{p99:>9.1f}{mx:>9.0f}")
e1 = summary["streams"]["1"]
print(f"schema compile {e1['compile_ms']:.1f} ms, vocabulary trie {e1['trie_ms']:.1f} ms (once per model)")
for n, e in summary["streams"].items():
    verdict = "met" if e["ratio_pct_median"] < 10 else "NOT met"
    print(f"target: {n} stream(s): mask {e['ratio_pct_median']:.2f}% (median) / {e['ratio_pct_min']:.2f}% (min) "
          f"of a decode step (target < 10%): {verdict}")
print(json.dumps(summary, separators=(",", ":")))
PY
