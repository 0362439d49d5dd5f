#!/usr/bin/env bash
# What the cache trace and the streaming-perplexity monitor cost (run by
# hand, never part of the test suite), in alternating rounds on this machine:
#   pre       engine-driver of PRE (default 1c84a3d: before traces existed)
#   off       engine-driver of POST (default HEAD; both are checked out into
#             worktrees under WORK), tracing off (what every session runs)
#   on        the same with --trace 1 (attention masses collected every step,
#             as after a GET /v1/sessions/{id}/cache)
# for stories260K and the synthetic 134M F16 model (sinkd-mkmodel), at 1 and
# 8 streams and a prompt of PROMPT tokens (default 512: the trace's work
# grows with the resident tokens).  Decode tok/s; prints a table of every
# round, min/median of the ratios off/pre and on/off, and one JSON line.
# The generated-token monitor runs in the scheduler, not in engine-driver:
# its cost is the sched-inproc pair below (SCHED=1), pre against this tree.
#
# Environment: PRE (commit), ROUNDS (3), SECONDS_PER_RUN (3), PROMPT (512),
# STREAMS ("1 8"), THREADS (0 = one per core), SCHED (1: also the
# in-process scheduler pairs of tests/bench/sched-inproc.c).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${SINKD_SHARED:-$ROOT/../shared}
PRE=${PRE:-1c84a3d}
POST=${POST:-$(git -C "$ROOT" rev-parse --short HEAD)}
ROUNDS=${ROUNDS:-3}
SECS=${SECONDS_PER_RUN:-3}
PROMPT=${PROMPT:-512}
STREAMS=${STREAMS:-"1 8"}
THREADS=${THREADS:-0}
SCHED=${SCHED:-1}
WORK=${WORK:-/tmp/sinkd-trace-cost}
mkdir -p "$WORK"
log() { echo "trace-cost: $*" >&2; }

LIBS="$(pkg-config --libs libmicrohttpd libcrypto libcjson yaml-0.1 libpng) -lm -lpthread"
# build_tree DIR NAME: the library and the drivers of the tree at DIR
build_tree() {
	local dir=$1 name=$2
	if [ ! -f "$dir/build-bench/build.ninja" ]; then
		PATH=/usr/local/cuda/bin:$PATH meson setup "$dir/build-bench" "$dir" -Dcuda=disabled \
			-Dbuildtype=release >/dev/null
	fi
	ninja -C "$dir/build-bench" src/libsinkd.a src/tools/sinkd-mkmodel >/dev/null
	cc -O2 -std=c11 -D_GNU_SOURCE -I"$dir/src" $(pkg-config --cflags libcjson) \
		-o "$WORK/engine-driver-$name" "$dir/tests/bench/engine-driver.c" \
		"$dir/build-bench/src/libsinkd.a" $LIBS
	if [ "$SCHED" = 1 ]; then
		cc -O2 -std=c11 -D_GNU_SOURCE -I"$dir/src" $(pkg-config --cflags libcjson) \
			-o "$WORK/sched-inproc-$name" "$dir/tests/bench/sched-inproc.c" \
			"$dir/build-bench/src/libsinkd.a" $LIBS
	fi
}

for t in pre post; do
	c=$PRE
	[ "$t" = post ] && c=$POST
	[ -e "$WORK/$t/.git" ] || git -C "$ROOT" worktree add --detach "$WORK/$t" "$c" >/dev/null
	git -C "$WORK/$t" checkout -q --detach "$c"
	log "building $t ($c)"
	build_tree "$WORK/$t" "$t"
done

model134=$WORK/synth134M-f16.gguf
[ -f "$model134" ] || "$WORK/post/build-bench/src/tools/sinkd-mkmodel" --out "$model134" \
	--vocab "$SHARED/vocab/ggml-vocab-llama-spm.gguf" --dim 768 --layers 12 --heads 12 \
	--ffn 2048 --type f16 >/dev/null
models=("$SHARED/models/stories260K.gguf" "$model134")

run() { # DRIVER MODEL STREAMS TRACE → tok/s
	local extra=()
	[ "$4" = 1 ] && extra=(--trace 1)
	"$1" --model "$2" --streams "$3" --threads "$THREADS" --prompt-tokens "$PROMPT" \
		--gen-tokens 128 --seconds "$SECS" "${extra[@]}" | sed -n 's/.*"tok_s":\([0-9.]*\).*/\1/p'
}

printf '%-6s %-22s %-8s %12s %12s %12s\n' round model streams pre off on
rows=""
for r in $(seq 1 "$ROUNDS"); do
	for m in "${models[@]}"; do
		for n in $STREAMS; do
			pre=$(run "$WORK/engine-driver-pre" "$m" "$n" 0)
			off=$(run "$WORK/engine-driver-post" "$m" "$n" 0)
			on=$(run "$WORK/engine-driver-post" "$m" "$n" 1)
			name=$(basename "$m" .gguf)
			printf '%-6s %-22s %-8s %12s %12s %12s\n' "$r" "$name" "$n" "$pre" "$off" "$on"
			rows+="$name $n $pre $off $on"$'\n'
		done
	done
done

summary=$(printf '%s' "$rows" | python3 -c '
import sys, json, statistics as st
by = {}
for line in sys.stdin:
    m, n, pre, off, on = line.split()
    by.setdefault((m, int(n)), []).append((float(pre), float(off), float(on)))
out = []
for (m, n), v in sorted(by.items()):
    a = [off / pre for pre, off, on in v]
    b = [on / off for pre, off, on in v]
    print("# %-22s %2d streams: off/pre min %.3f median %.3f; on/off min %.3f median %.3f"
          % (m, n, min(a), st.median(a), min(b), st.median(b)), file=sys.stderr)
    out.append({"model": m, "streams": n, "off_over_pre": [round(x, 4) for x in a],
                "on_over_off": [round(x, 4) for x in b]})
print(json.dumps({"bench": "trace-cost", "prompt_tokens": '"$PROMPT"', "rows": out}))
' 2>&1)
printf '%s\n' "$summary"

if [ "$SCHED" = 1 ]; then
	printf '\n%-6s %-22s %-8s %12s %12s\n' round model streams pre post
	for r in $(seq 1 "$ROUNDS"); do
		for n in $STREAMS; do
			for t in pre post; do
				v=$("$WORK/sched-inproc-$t" "$model134" "$n" 128 "$THREADS" 0 "$SECS" \
					2>/dev/null | sed -n 's/.*"tok_s":\([0-9.]*\).*/\1/p')
				eval "sched_$t=\$v"
			done
			printf '%-6s %-22s %-8s %12s %12s\n' "$r" synth134M-f16 "$n" "$sched_pre" "$sched_post"
		done
	done
fi
