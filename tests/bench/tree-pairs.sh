#!/usr/bin/env bash
# Before/after pairs of two source trees (run by hand, never part of the
# test suite): builds each tree's library in release, its engine driver and
# its in-process scheduler benchmark, then runs PAIRS rounds that alternate
# the trees back to back (this shared machine's speed drifts within minutes,
# so only pairs run seconds apart compare): per round and tree, decode tok/s
# of 1 and 8 streams (tests/bench/engine-driver.c) and in-process scheduler
# tok/s and mean tick of 1 and 16 streams (tests/bench/sched-inproc.c), on
# stories260K and the synthetic 134M Llama in F16.  Prints every run, the
# per-tree min/median, the post/pre ratio of the medians, and one JSON line.
#
# usage: tests/bench/tree-pairs.sh PRE_TREE POST_TREE
# Environment: PAIRS (3), RUN_SECONDS (3: engine runs), SCHED_SECONDS (5),
# THREADS (0 = one per core), BUILD_NAME (build-bench: the build folder
# inside each tree).
set -euo pipefail

PRE=$(cd "${1:?usage: tree-pairs.sh PRE_TREE POST_TREE}" && pwd)
POST=$(cd "${2:?usage: tree-pairs.sh PRE_TREE POST_TREE}" && pwd)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${SINKD_SHARED:-$ROOT/../shared}
PAIRS=${PAIRS:-3}
RUN_SECONDS=${RUN_SECONDS:-3}
SCHED_SECONDS=${SCHED_SECONDS:-5}
THREADS=${THREADS:-0}
BUILD_NAME=${BUILD_NAME:-build-bench}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
log() { echo "tree-pairs: $*" >&2; }

LIBS="$(pkg-config --libs libmicrohttpd libcrypto libcjson yaml-0.1 hiredis gnutls libsystemd) -lm -lpthread"
build_tree() { # tree, tag
	local tree=$1 tag=$2 b=$1/$BUILD_NAME
	if [ ! -f "$b/build.ninja" ]; then
		PATH=/usr/local/cuda/bin:$PATH meson setup "$b" -Dcuda=disabled -Dbuildtype=release >/dev/null
	fi
	ninja -C "$b" src/libsinkd.a src/tools/sinkd-mkmodel >/dev/null
	for prog in engine-driver sched-inproc; do
		cc -O2 -std=c11 -D_GNU_SOURCE -I"$tree/src" $(pkg-config --cflags libcjson) \
			-o "$TMP/$prog-$tag" "$tree/tests/bench/$prog.c" "$b/src/libsinkd.a" $LIBS
	done
	git -C "$tree" rev-parse --short HEAD >"$TMP/rev-$tag"
}
log "building $PRE and $POST"
build_tree "$PRE" pre
build_tree "$POST" post

MODELS=("$SHARED/models/stories260K.gguf" "$TMP/synth134M-f16.gguf")
"$PRE/$BUILD_NAME/src/tools/sinkd-mkmodel" --out "$TMP/synth134M-f16.gguf" \
	--vocab "$SHARED/vocab/ggml-vocab-llama-spm.gguf" --dim 768 --layers 12 --heads 12 --ffn 2048 \
	--type f16 >/dev/null

RESULTS=$TMP/results.jsonl
: >"$RESULTS"
for p in $(seq "$PAIRS"); do
	for tag in pre post; do
		for model in "${MODELS[@]}"; do
			name=$(basename "$model" .gguf)
			log "pair $p $tag $name"
			for n in 1 8; do
				r=$("$TMP/engine-driver-$tag" --model "$model" --streams "$n" --threads "$THREADS" \
					--prompt-tokens 16 --seconds "$RUN_SECONDS")
				echo "{\"bench\":\"engine\",\"tree\":\"$tag\",\"pair\":$p,\"name\":\"$name\",${r#\{}" >>"$RESULTS"
			done
			for n in 1 16; do
				r=$("$TMP/sched-inproc-$tag" "$model" "$n" 128 "$THREADS" 0 "$SCHED_SECONDS" \
					scheduler.max_batch_tokens=512)
				echo "{\"bench\":\"sched\",\"tree\":\"$tag\",\"pair\":$p,\"name\":\"$name\",${r#\{}" >>"$RESULTS"
			done
		done
	done
done

python3 - "$RESULTS" "$(cat "$TMP/rev-pre")" "$(cat "$TMP/rev-post")" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
revs = {"pre": sys.argv[2], "post": sys.argv[3]}
def key(r):
    return (r["bench"], r["name"], r["streams"])
print(f"{'bench':<7}{'model':<16}{'streams':>8} {'tree':<5}{'pair':>5} {'tok/s':>10} {'tick ms':>8}")
for r in rows:
    tick = r.get("tick_ms")
    print(f"{r['bench']:<7}{r['name']:<16}{r['streams']:>8} {r['tree']:<5}{r['pair']:>5} {r['tok_s']:>10.1f} "
          f"{'' if tick is None else format(tick, '.3f'):>8}")
summary = {"pre": revs["pre"], "post": revs["post"], "runs": {}}
print(f"\n{'bench':<7}{'model':<16}{'streams':>8} {'pre min/median':>22} {'post min/median':>22} {'post/pre':>9}")
for k in dict.fromkeys(key(r) for r in rows):
    v = {t: [r["tok_s"] for r in rows if key(r) == k and r["tree"] == t] for t in ("pre", "post")}
    if not v["pre"] or not v["post"]:
        continue
    mp, mq = statistics.median(v["pre"]), statistics.median(v["post"])
    ratio = mq / mp if mp else 0
    print(f"{k[0]:<7}{k[1]:<16}{k[2]:>8} {min(v['pre']):>10.1f}/{mp:<11.1f} {min(v['post']):>10.1f}/{mq:<11.1f} {ratio:>9.3f}")
    summary["runs"][f"{k[0]}/{k[1]}/{k[2]}"] = {"pre_min": min(v["pre"]), "pre_median": mp,
                                             "post_min": min(v["post"]), "post_median": mq,
                                             "ratio": round(ratio, 3)}
print(json.dumps(summary, separators=(",", ":")))
PY
