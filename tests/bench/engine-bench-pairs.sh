# Pairs mode of tests/bench/engine-bench.sh (sourced by it when BUILD_A and
# BUILD_B are both set; not run alone): the same measurements on two builds,
# alternating per repeat (A first in odd repeats, B first in even ones), so
# that "B is no slower than A" can be shown on a machine whose speed drifts.
# BUILD_A and BUILD_B are meson build directories, each of its own source
# tree (read from meson-info): each gets its own engine driver, built from
# that tree against that build's library; the models are made once with
# A's sinkd-mkmodel and read by both.  Per model, stream count and repeat
# the ratio B / A of decode tok/s and of prefill tok/s, then min and median.
# Uses engine-bench.sh's ROOT, SHARED, TMP, REPEATS, RUN_SECONDS, THREADS,
# STREAMS and log; PAIR_TYPES ("f32 f16": the 134M models, besides
# stories260K), PAIR_GEN (32: decode steps per round of the driver; its
# default 128 makes one 32-stream round of the 134M F32 take tens of
# seconds).

PAIR_TYPES=${PAIR_TYPES:-"f32 f16"}
PAIR_GEN=${PAIR_GEN:-32}

# The source tree a meson build directory was configured from.
pairs_source() {
	python3 -c 'import json, sys
print(json.load(open(sys.argv[1] + "/meson-info/meson-info.json"))["directories"]["source"])' "$1"
}

# label build: builds its library and engine driver as $TMP/engine-driver-label
pairs_build() {
	local label=$1 build=$2 src
	[ -f "$build/build.ninja" ] || { log "BUILD_$label=$build is not a meson build directory"; exit 2; }
	src=$(pairs_source "$build")
	log "build $label: $build (source $src, commit $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo '?'))"
	ninja -C "$build" src/libsinkd.a src/tools/sinkd-mkmodel >/dev/null
	cc -O2 -std=c11 -D_GNU_SOURCE -I"$src/src" $(pkg-config --cflags libcjson) \
		-o "$TMP/engine-driver-$label" "$src/tests/bench/engine-driver.c" "$build/src/libsinkd.a" $LIBS
}

# label model streams repeat: one measurement, appended to $TMP/pairs.jsonl
pairs_measure() {
	local label=$1 model=$2 n=$3 r=$4 prompt=16
	[ "$n" = 1 ] && prompt=64
	"$TMP/engine-driver-$label" --model "$model" --streams "$n" --threads "$THREADS" \
		--prompt-tokens "$prompt" --gen-tokens "$PAIR_GEN" --seconds "$RUN_SECONDS" |
		sed "s/^{/{\"build\":\"$label\",\"repeat\":$r,/" >>"$TMP/pairs.jsonl"
}

pairs_report() {
	python3 - "$TMP/pairs.jsonl" "$BUILD_A" "$BUILD_B" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
build_a, build_b, when = sys.argv[2:5]
print(f"run at {when}; A = {build_a}, B = {build_b}; "
      f"1-min load average at the end: {open('/proc/loadavg').read().split()[0]}")
print(f"{'model':<18}{'streams':>8}{'A tok/s med':>13}{'B tok/s med':>13}{'B/A min':>9}{'median':>8}"
      f"{'prefill B/A min':>17}{'median':>8}")
get = {(r["build"], r["model"], r["streams"], r["repeat"]): r for r in rows}
summary = {"time": when, "build_a": build_a, "build_b": build_b, "models": {}}
for m in dict.fromkeys(r["model"] for r in rows):
    for n in sorted({r["streams"] for r in rows if r["model"] == m}):
        reps = sorted({k[3] for k in get if k[1] == m and k[2] == n})
        pairs = [(get[("A", m, n, k)], get[("B", m, n, k)]) for k in reps
                 if ("A", m, n, k) in get and ("B", m, n, k) in get]
        if not pairs:
            continue
        dec = [b["tok_s"] / a["tok_s"] for a, b in pairs]
        pre = [b["prefill_tok_s"] / a["prefill_tok_s"] for a, b in pairs]
        e = {"a_tok_s_median": statistics.median(a["tok_s"] for a, _ in pairs),
             "b_tok_s_median": statistics.median(b["tok_s"] for _, b in pairs),
             "ratio_min": min(dec), "ratio_median": statistics.median(dec),
             "prefill_ratio_min": min(pre), "prefill_ratio_median": statistics.median(pre),
             "repeats": len(pairs)}
        summary["models"].setdefault(m, {})[str(n)] = e
        print(f"{m:<18}{n:>8}{e['a_tok_s_median']:>13.1f}{e['b_tok_s_median']:>13.1f}"
              f"{e['ratio_min']:>9.2f}{e['ratio_median']:>8.2f}"
              f"{e['prefill_ratio_min']:>17.2f}{e['prefill_ratio_median']:>8.2f}")
print("no slowdown: B/A medians ~1.0 or above (this machine's noise: see a run of two builds of one commit)")
print(json.dumps(summary, separators=(",", ":")))
EOF
}

engine_bench_pairs() {
	pairs_build A "$BUILD_A"
	pairs_build B "$BUILD_B"
	local models=("$SHARED/models/stories260K.gguf") type out name
	for type in $PAIR_TYPES; do
		out="$TMP/synth134M-$type.gguf"
		log "making $out"
		"$BUILD_A/src/tools/sinkd-mkmodel" --out "$out" \
			--vocab "$SHARED/vocab/ggml-vocab-llama-spm.gguf" \
			--dim 768 --layers 12 --heads 12 --ffn 2048 --type "$type" >/dev/null
		models+=("$out")
	done
	: >"$TMP/pairs.jsonl"
	for model in "${models[@]}"; do
		name=$(basename "$model" .gguf)
		for r in $(seq "$REPEATS"); do
			for n in $STREAMS; do
				log "$name repeat $r: $n streams, A and B"
				if [ $((r % 2)) = 1 ]; then
					pairs_measure A "$model" "$n" "$r"
					pairs_measure B "$model" "$n" "$r"
				else
					pairs_measure B "$model" "$n" "$r"
					pairs_measure A "$model" "$n" "$r"
				fi
			done
		done
	done
	pairs_report
}
