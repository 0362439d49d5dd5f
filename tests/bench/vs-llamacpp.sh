#!/usr/bin/env bash
# sinkd's CPU engine side by side with llama.cpp on the same GGUF files (run
# by hand, never part of the test suite; nothing in CI builds llama.cpp).
#
#   tests/bench/vs-llamacpp.sh LLAMA_CPP_BUILD [MODEL.gguf ...]
#
# LLAMA_CPP_BUILD: a llama.cpp build made by hand from source, holding
# llama-bench (as bin/llama-bench or llama-bench; upstream's tools/llama-bench,
# its -o json output).  MODEL.gguf: the files to compare; without any, the
# synthetic 134M Llama of engine-bench.sh is made in Q8_0 and Q4_K with
# sinkd-mkmodel, and in F16 from which llama-quantize (LLAMA_QUANTIZE, else
# found beside llama-bench; skipped with a note where there is none) makes
# the Q4_K_M mix users download (Q4_K with Q6_K for the output head and
# half of attn_v / ffn_down).  With MOE_TYPES set (and no MODEL given), the
# synthetic mixture-of-experts models of moe-models.sh (gpt-oss and
# qwen3moe shapes, MOE_ARCHS) in those types instead: weight bytes and
# multiply-adds then count the k experts one token uses.
#
# For each model, REPEATS times, at each thread count of THREADS, in
# alternating order (llama.cpp first in odd repeats, sinkd first in even
# ones): decode of one stream (llama-bench tg of GEN tokens against the
# engine driver's GEN decode steps after a 1-token prompt) and prefill of a
# PROMPT-token prompt as one batch (llama-bench pp against the driver's
# prefill).  Ratios sinkd / llama.cpp are taken within a repeat, then min and
# median.  The ceiling of each row: a decode reads every weight once per
# token, so weight bytes x tok/s against the read-bandwidth probe
# (bwprobe.c --bandwidth, run before each repeat of each model, at that
# thread count); a prefill does every weight multiply-add once per token,
# so weight multiply-adds x tok/s against the int8 dot rate (bwprobe.c
# --int8: AVX-512 VNNI where the CPU has it, else AVX2 maddubs), for sinkd
# and llama.cpp both (the same file, so the same bytes and multiply-adds).
# Resident memory once per model: the sinkd daemon's peak (VmHWM) after
# one request (tests/bench/rss.sh) and llama-bench's peak (its tg run),
# each over the file.
# Prints a table and one JSON line.
#
# Environment: BUILD (sinkd build dir, default build-bench), REPEATS (4),
# THREADS ("1 2"; the probes measure 1 and 2 threads), PROMPT (512), GEN (128),
# LLAMA_QUANTIZE, MOE_TYPES (e.g. "q8_0 mxfp4"), MOE_ARCHS ("gpt-oss
# qwen3moe"), LLAMA_ENV (variables for llama-bench, e.g.
# OMP_WAIT_POLICY=passive: on a machine other work shares, the OpenMP
# threads of an OpenMP build spin at every barrier by default, and at 2
# threads that costs llama.cpp 10x when the other core is taken).
set -euo pipefail

usage() {
	echo "usage: $0 LLAMA_CPP_BUILD [MODEL.gguf ...]" >&2
	echo "  LLAMA_CPP_BUILD holds llama-bench (bin/llama-bench or llama-bench)" >&2
	exit 2
}
[ $# -ge 1 ] || usage
LLAMA_DIR=$1
shift
BENCH=""
for c in "$LLAMA_DIR/bin/llama-bench" "$LLAMA_DIR/llama-bench"; do
	[ -x "$c" ] && BENCH=$c && break
done
if [ -z "$BENCH" ]; then
	echo "vs-llamacpp: no executable llama-bench in $LLAMA_DIR or $LLAMA_DIR/bin" >&2
	usage
fi
QUANTIZE=${LLAMA_QUANTIZE:-$(dirname "$BENCH")/llama-quantize}
for f in "$@"; do
	[ -r "$f" ] || { echo "vs-llamacpp: cannot read model $f" >&2; exit 2; }
done

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${SINKD_SHARED:-$ROOT/../shared}
BUILD=${BUILD:-$ROOT/build-bench}
REPEATS=${REPEATS:-4}
THREADS=${THREADS:-"1 2"}
PROMPT=${PROMPT:-512}
GEN=${GEN:-128}
LLAMA_ENV=${LLAMA_ENV:-}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
log() { echo "vs-llamacpp: $*" >&2; }

# ---- build sinkd's drivers
if [ ! -f "$BUILD/build.ninja" ]; then
	PATH=/usr/local/cuda/bin:$PATH meson setup "$BUILD" -Dcuda=disabled -Dbuildtype=release >/dev/null
fi
ninja -C "$BUILD" src/libsinkd.a src/tools/sinkd-mkmodel >/dev/null
LIBS="$(pkg-config --libs libmicrohttpd libcrypto libcjson yaml-0.1 hiredis gnutls libsystemd) -lm -lpthread"
for d in engine-driver; do
	cc -O2 -std=c11 -D_GNU_SOURCE -I"$ROOT/src" $(pkg-config --cflags libcjson) \
		-o "$TMP/$d" "$ROOT/tests/bench/$d.c" "$BUILD/src/libsinkd.a" $LIBS
done
cc -O3 -I"$ROOT/src" -o "$TMP/bwprobe" "$ROOT/tests/bench/bwprobe.c" "$ROOT/src/util/pages.c" -lpthread

mkmodel() { # type out
	"$BUILD/src/tools/sinkd-mkmodel" --out "$2" \
		--vocab "$SHARED/vocab/ggml-vocab-llama-spm.gguf" \
		--dim 768 --layers 12 --heads 12 --ffn 2048 --type "$1" >/dev/null
}
MODELS=("$@")
if [ ${#MODELS[@]} -eq 0 ] && [ -n "${MOE_TYPES:-}" ]; then
	source "$ROOT/tests/bench/moe-models.sh"
	log "making the MoE models (${MOE_ARCHS:-gpt-oss qwen3moe}; $MOE_TYPES)"
	mapfile -t MODELS < <(moe_models "$BUILD/src/tools/sinkd-mkmodel" \
		"$SHARED/vocab/ggml-vocab-llama-spm.gguf" "$TMP" "${MOE_ARCHS:-gpt-oss qwen3moe}" "$MOE_TYPES")
	[ ${#MODELS[@]} -gt 0 ] || { log "no MoE model made"; exit 1; }
elif [ ${#MODELS[@]} -eq 0 ]; then
	for type in q8_0 q4_k; do
		out="$TMP/synth134M-$type.gguf"
		log "making $out"
		mkmodel "$type" "$out"
		MODELS+=("$out")
	done
	if [ -x "$QUANTIZE" ]; then
		log "making $TMP/synth134M-q4_k_m.gguf with $QUANTIZE from an F16 file"
		mkmodel f16 "$TMP/synth134M-f16.gguf"
		"$QUANTIZE" "$TMP/synth134M-f16.gguf" "$TMP/synth134M-q4_k_m.gguf" Q4_K_M \
			>"$TMP/quantize.log" 2>&1 ||
			{ tail -20 "$TMP/quantize.log" >&2; log "llama-quantize failed"; exit 1; }
		rm -f "$TMP/synth134M-f16.gguf"
		MODELS+=("$TMP/synth134M-q4_k_m.gguf")
	else
		log "no llama-quantize at $QUANTIZE (set LLAMA_QUANTIZE): no Q4_K_M row"
	fi
fi
for model in "${MODELS[@]}"; do
	"$TMP/engine-driver" --model "$model" --threads 1 --prompt-tokens 1 --gen-tokens 1 \
		--seconds 0 >/dev/null ||
		{ log "sinkd cannot load $model"; exit 1; }
done

# ---- measurements, one JSON object per line
RESULTS="$TMP/results.jsonl"
: >"$RESULTS"
log "int8 dot rate probe"
for r in 1 2 3; do
	"$TMP/bwprobe" --int8 | sed 's/^{/{"kind":"int8",/' >>"$RESULTS"
done
# kind model threads repeat -> appends {"kind","model","threads","repeat","tok_s"}
llama_run() {
	local kind=$1 model=$2 t=$3 r=$4 args
	if [ "$kind" = decode ]; then args=(-p 0 -n "$GEN"); else args=(-p "$PROMPT" -n 0); fi
	env $LLAMA_ENV "$BENCH" -m "$model" -t "$t" "${args[@]}" -r 1 -o json 2>"$TMP/llama.err" >"$TMP/llama.json" ||
		{ cat "$TMP/llama.err" >&2; log "llama-bench failed on $model"; exit 1; }
	python3 - "$TMP/llama.json" "$kind" "$(basename "$model")" "$t" "$r" >>"$RESULTS" <<'EOF'
import json, sys
runs = json.load(open(sys.argv[1]))
print(json.dumps({"engine": "llama.cpp", "kind": sys.argv[2], "model": sys.argv[3],
                  "threads": int(sys.argv[4]), "repeat": int(sys.argv[5]),
                  "tok_s": runs[-1]["avg_ts"],
                  "build": f"{runs[-1].get('build_number', '?')} ({runs[-1].get('build_commit', '?')})"}))
EOF
}
sinkd_run() {
	local kind=$1 model=$2 t=$3 r=$4 out
	if [ "$kind" = decode ]; then
		out=$("$TMP/engine-driver" --model "$model" --threads "$t" --prompt-tokens 1 \
			--gen-tokens "$GEN" --seconds 2)
	else
		out=$("$TMP/engine-driver" --model "$model" --threads "$t" --prompt-tokens "$PROMPT" \
			--gen-tokens 1 --seconds 0)
	fi
	python3 -c '
import json, sys
d = json.loads(sys.argv[1])
kind = sys.argv[2]
print(json.dumps({"engine": "sinkd", "kind": kind, "model": sys.argv[3],
                  "threads": int(sys.argv[4]), "repeat": int(sys.argv[5]),
                  "tok_s": d["tok_s"] if kind == "decode" else d["prefill_tok_s"],
                  "weight_bytes": d["weight_bytes"], "weight_macs": d["weight_macs"]}))
' "$out" "$kind" "$(basename "$model")" "$t" "$r" >>"$RESULTS"
}

for model in "${MODELS[@]}"; do
	name=$(basename "$model")
	log "$name: resident memory"
	BUILD="$BUILD" "$ROOT/tests/bench/rss.sh" --jsonl "$model" | python3 -c 'import json,sys
d = next(r for r in map(json.loads, sys.stdin) if r["what"] == "daemon")
print(json.dumps({"engine": "sinkd", "kind": "rss", "model": sys.argv[1], "file_bytes": d["file_bytes"], "step_rss": d["vm_hwm"]}))' \
		"$name" >>"$RESULTS"
	python3 - "$BENCH" "$model" "$name" "$GEN" >>"$RESULTS" <<'EOF'
import json, os, resource, subprocess, sys
bench, model, name, gen = sys.argv[1:]
subprocess.run([bench, "-m", model, "-t", "1", "-p", "0", "-n", gen, "-r", "1", "-o", "json"],
               check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(json.dumps({"engine": "llama.cpp", "kind": "rss", "model": name,
                  "file_bytes": os.path.getsize(model), "step_rss": peak}))
EOF
	for r in $(seq "$REPEATS"); do
		log "$name repeat $r: bandwidth probe"
		"$TMP/bwprobe" --bandwidth |
			sed "s/^{/{\"kind\":\"probe\",\"model\":\"$name\",\"repeat\":$r,/" >>"$RESULTS"
		for t in $THREADS; do
			for kind in decode prefill; do
				log "$name repeat $r threads $t $kind"
				if [ $((r % 2)) = 1 ]; then
					llama_run "$kind" "$model" "$t" "$r"
					sinkd_run "$kind" "$model" "$t" "$r"
				else
					sinkd_run "$kind" "$model" "$t" "$r"
					llama_run "$kind" "$model" "$t" "$r"
				fi
			done
		done
	done
done

# ---- report
python3 - "$RESULTS" "$BENCH" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$LLAMA_ENV" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
bench, when = sys.argv[2], sys.argv[3]
version = next((r["build"] for r in rows if "build" in r), "?")
env = f" with {sys.argv[4]}" if sys.argv[4] else ""
print(f"run at {when}; {bench}{env}, llama.cpp build {version}; "
      f"1-min load average at the end: {open('/proc/loadavg').read().split()[0]}")
int8 = [r for r in rows if r["kind"] == "int8"]
# the int8 dot roof per thread count: VNNI where the CPU has it
dot_roof = {t: statistics.median(max(p[f"vnni{t}_gmacs"], p[f"maddubs{t}_gmacs"]) for p in int8)
            for t in (1, 2)}
probe = {(r["model"], r["repeat"]): r for r in rows if r["kind"] == "probe"}
print("int8 dot rate probe (median of %d): 1 thread %s, 2 threads %s GMAC/s" % (len(int8),
      " / ".join(f"{k} {statistics.median(p[f'{k}1_gmacs'] for p in int8):.0f}" for k in ("vnni", "maddubs")),
      " / ".join(f"{k} {statistics.median(p[f'{k}2_gmacs'] for p in int8):.0f}" for k in ("vnni", "maddubs"))))
bws = {t: [p[f"bw{t}_gbs"] for p in probe.values()] for t in (1, 2)}
for t in (1, 2):
    if bws[t]:
        print(f"read bandwidth probe, {t} thread(s), before each repeat of each model: "
              f"min {min(bws[t]):.1f}, median {statistics.median(bws[t]):.1f}, max {max(bws[t]):.1f} GB/s")
print("ceiling: decode = weight bytes x tok/s over that repeat's bandwidth probe; "
      "prefill = weight multiply-adds x tok/s over the int8 dot rate")
print(f"{'model':<32}{'threads':>8}{'what':>9}{'llama.cpp tok/s':>17}{'sinkd tok/s':>13}"
      f"{'sinkd/llama min':>17}{'median':>8}{'ceiling: sinkd':>16}{'llama.cpp':>11}")
summary = {"time": when, "llama_bench": version, "llama_env": sys.argv[4], "int8_gmacs": dot_roof,
           "bw_gbs": bws, "models": {}}
tok = {(r["engine"], r["kind"], r["model"], r["threads"], r["repeat"]): r["tok_s"]
       for r in rows if r["kind"] in ("decode", "prefill")}
size = {r["model"]: (r["weight_bytes"], r["weight_macs"]) for r in rows if "weight_macs" in r}
def ceiling(kind, m, t, r, tok_s):
    """Percent of the roof the row reaches in repeat r."""
    wb, macs = size[m]
    if kind == "decode":
        return 100 * wb * tok_s / 1e9 / probe[(m, r)][f"bw{t}_gbs"]
    return 100 * macs * tok_s / 1e9 / dot_roof[t]
models = list(dict.fromkeys(r["model"] for r in rows if "model" in r))
for m in models:
    ms = summary["models"].setdefault(m, {})
    for t in sorted({k[3] for k in tok if k[2] == m}):
        for kind in ("decode", "prefill"):
            reps = sorted(k[4] for k in tok if k[:4] == ("sinkd", kind, m, t))
            reps = [r for r in reps if ("llama.cpp", kind, m, t, r) in tok]
            if not reps:
                continue
            pairs = [(tok[("llama.cpp", kind, m, t, r)], tok[("sinkd", kind, m, t, r)]) for r in reps]
            ratio = [s / l for l, s in pairs]
            e = {"llama_tok_s_median": statistics.median(l for l, _ in pairs),
                 "sinkd_tok_s_median": statistics.median(s for _, s in pairs),
                 "ratio_min": min(ratio), "ratio_median": statistics.median(ratio),
                 "sinkd_ceiling_pct": statistics.median(
                     ceiling(kind, m, t, r, s) for r, (_, s) in zip(reps, pairs)),
                 "llama_ceiling_pct": statistics.median(
                     ceiling(kind, m, t, r, l) for r, (l, _) in zip(reps, pairs))}
            ms[f"{kind}_t{t}"] = e
            print(f"{m:<32}{t:>8}{kind:>9}{e['llama_tok_s_median']:>17.1f}{e['sinkd_tok_s_median']:>13.1f}"
                  f"{e['ratio_min']:>17.2f}{e['ratio_median']:>8.2f}"
                  f"{e['sinkd_ceiling_pct']:>15.1f}%{e['llama_ceiling_pct']:>10.1f}%")
print(f"{'model':<32}{'file MB':>11}{'sinkd RSS MB':>14}{'x file':>8}{'llama.cpp peak MB':>19}{'x file':>8}")
for m in models:
    rs = {r["engine"]: r for r in rows if r["kind"] == "rss" and r["model"] == m}
    if "sinkd" not in rs:
        continue
    fb = rs["sinkd"]["file_bytes"]
    s, l = rs["sinkd"]["step_rss"], rs.get("llama.cpp", {}).get("step_rss")
    summary["models"][m]["rss"] = {"file_bytes": fb, "sinkd_rss": s, "llama_peak_rss": l}
    lt = f"{l / 2**20:>19.1f}{l / fb:>8.2f}" if l else f"{'-':>19}{'-':>8}"
    print(f"{m:<32}{fb / 2**20:>11.1f}{s / 2**20:>14.1f}{s / fb:>8.2f}{lt}")
print("targets: decode and prefill >= 1.0x llama.cpp at 1 and 2 threads; sinkd daemon peak resident <= 1.1 x file + KV + 32 MB (rss.sh)")
print(json.dumps(summary, separators=(",", ":")))
EOF
