#!/usr/bin/env bash
# Scheduler load benchmark (run by hand, never part of the test suite).
#
# Starts the real daemon (TLS on 127.0.0.1, one API key) per model and drives
# it with tests/bench/sched-loadgen.c: 1, 4, 16 and 64 concurrent streams,
# each a loop of streaming completions (one HTTPS connection per stream kept
# alive across its requests, as client libraries do; FRESH_CONNECTIONS=1: a
# new one per request), ignore_eos, MAX_TOKENS each; the first requests
# staggered so that prompts keep arriving at a steady rate), then 16
# streams again while one more
# client keeps sending a ~20k-token prompt.  Each run measures a steady
# window of SECONDS that opens once every stream has its first token (the
# start-up burst of prompts stays out; at most WARMUP seconds).  Reports
# aggregate generated tok/s, time to first token p50/p99 and inter-token
# latency p50/p99 in the window, as a table and one JSON line.
# The same load also runs in-process (tests/bench/sched-inproc.c: scheduler +
# engine, no HTTP, same window rule; also the mean tick period and forward
# time) so the server's share of the figures can be told apart.
# The 16-over-1 scaling is also measured as PAIRS back-to-back pairs of a
# 1-stream and a 16-stream window (this shared machine's speed drifts by up
# to 2x within minutes, so windows run minutes apart make a poor ratio);
# the report gives each pair's ratio and their min and median.
# Models: stories260K, and with MODELS_134M=1 the synthetic 134M Llama (F32
# and F16) made with sinkd-mkmodel.
#
# Environment: BUILD (build dir, default build-bench-sched), SECONDS_PER (5:
# window on stories260K), SECONDS_134M (20: window on the 134M models, ~15
# ticks per stream at 64 streams), WARMUP (120: longest wait for the window
# to open), MAX_TOKENS (128), STREAMS ("1 4 16 64"), THREADS (engine threads,
# 0 = all cores), MODELS_134M (0), LONG (1: the long-prefill run), BATCH (512:
# scheduler.max_batch_tokens), INPROC (1: also the in-process runs, each
# request generating INPROC_TOKENS, default MAX_TOKENS), ONLY (a grep -E
# pattern: only the models whose name matches), PAIRS (2), MAX_UNSENT
# (scheduler.max_unsent_tokens; default: the daemon's), SERVER_THREADS
# (server.threads, 4).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${SINKD_SHARED:-$ROOT/../shared}
BUILD=${BUILD:-$ROOT/build-bench-sched}
SECONDS_PER=${SECONDS_PER:-5}
SECONDS_134M=${SECONDS_134M:-20}
WARMUP=${WARMUP:-120}
MAX_TOKENS=${MAX_TOKENS:-128}
STREAMS=${STREAMS:-"1 4 16 64"}
THREADS=${THREADS:-0}
MODELS_134M=${MODELS_134M:-0}
LONG=${LONG:-1}
BATCH=${BATCH:-512}
INPROC=${INPROC:-1}
INPROC_TOKENS=${INPROC_TOKENS:-$MAX_TOKENS}
ONLY=${ONLY:-.}
PAIRS=${PAIRS:-2}
MAX_UNSENT=${MAX_UNSENT:-}
TMP=$(mktemp -d)
PID=
cleanup() {
	[ -n "$PID" ] && kill -TERM "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT
log() { echo "sched-load: $*" >&2; }

# ---- build
if [ ! -f "$BUILD/build.ninja" ]; then
	PATH=/usr/local/cuda/bin:$PATH meson setup "$BUILD" -Dcuda=disabled -Dbuildtype=release >/dev/null
fi
ninja -C "$BUILD" src/sinkd src/tools/sinkd-mkmodel >/dev/null
ninja -C "$BUILD" src/libsinkd.a >/dev/null
cc -O2 -std=c11 -D_GNU_SOURCE -Wall -o "$TMP/loadgen" "$ROOT/tests/bench/sched-loadgen.c" \
	-lssl -lcrypto
LIBS="$(pkg-config --libs libmicrohttpd libcrypto libcjson yaml-0.1 hiredis gnutls libsystemd) -lm -lpthread"
cc -O2 -std=c11 -D_GNU_SOURCE -I"$ROOT/src" $(pkg-config --cflags libcjson) -o "$TMP/inproc" \
	"$ROOT/tests/bench/sched-inproc.c" "$BUILD/src/libsinkd.a" $LIBS

# ---- TLS, key, prompts
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
	-keyout "$TMP/key.pem" -out "$TMP/cert.pem" 2>/dev/null
KEY=bench-key
DIGEST=$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)
printf 'Once upon a time, there was a little girl named Lily. She loved to' >"$TMP/prompt.txt"
# ~20k tokens of real text: the dev stories, one and a half times.
{ cat "$SHARED/data/tinystories-dev.txt"; head -c 30000 "$SHARED/data/tinystories-dev.txt"; } |
	tr '\n' ' ' >"$TMP/long.txt"

MODELS=("$SHARED/models/stories260K.gguf")
if [ "$MODELS_134M" = 1 ]; then
	for type in f32 f16; do
		echo "synth134M-$type" | grep -qE "$ONLY" || continue
		out="$TMP/synth134M-$type.gguf"
		log "making $out"
		"$BUILD/src/tools/sinkd-mkmodel" --out "$out" --vocab "$SHARED/vocab/ggml-vocab-llama-spm.gguf" \
			--dim 768 --layers 12 --heads 12 --ffn 2048 --type "$type" >/dev/null
		MODELS+=("$out")
	done
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start_daemon() { # model → sets PID, PORT
	PORT=$(free_port)
	cat >"$TMP/sinkd.yaml" <<YAML
server:
  listen: "127.0.0.1:$PORT"
  threads: ${SERVER_THREADS:-4}
  max_connections: 1024
  api_keys: ["sha256:$DIGEST"]
  tls:
    enabled: true
    cert_file: "$TMP/cert.pem"
    key_file: "$TMP/key.pem"
model:
  path: "$1"
engine:
  threads: $THREADS
scheduler:
  max_batch_tokens: $BATCH
${MAX_UNSENT:+  max_unsent_tokens: $MAX_UNSENT}
logging:
  level: warn
YAML
	"$BUILD/src/sinkd" --config "$TMP/sinkd.yaml" >"$TMP/sinkd.log" 2>&1 &
	PID=$!
	for _ in $(seq 1 600); do
		kill -0 "$PID" 2>/dev/null || { tail -5 "$TMP/sinkd.log" >&2; exit 1; }
		[ "$(curl -sk -o /dev/null -w '%{http_code}' "https://127.0.0.1:$PORT/ready")" = 200 ] && return 0
		sleep 0.1
	done
	log "daemon did not become ready"
	exit 1
}

stop_daemon() { kill -TERM "$PID" 2>/dev/null; wait "$PID" 2>/dev/null || true; PID=; }

: >"$TMP/results.jsonl"
for model in "${MODELS[@]}"; do
	name=$(basename "$model" .gguf)
	echo "$name" | grep -qE "$ONLY" || continue
	log "model $name"
	secs=$SECONDS_PER
	case "$name" in synth134M*) secs=$SECONDS_134M ;; esac
	start_daemon "$model"
	"$TMP/loadgen" "$PORT" "$KEY" 1 "$WARMUP" 1 8 "$TMP/prompt.txt" >/dev/null || true # warm-up
	for n in $STREAMS; do
		log "  $n streams"
		r=$("$TMP/loadgen" "$PORT" "$KEY" "$n" "$WARMUP" "$secs" "$MAX_TOKENS" "$TMP/prompt.txt") ||
			log "  errors in the run: $r"
		echo "{\"model\":\"$name\",\"mode\":\"https\",${r#\{}" >>"$TMP/results.jsonl"
	done
	for p in $(seq "$PAIRS"); do
		for n in 1 16; do
			log "  pair $p: $n streams"
			r=$("$TMP/loadgen" "$PORT" "$KEY" "$n" "$WARMUP" "$secs" "$MAX_TOKENS" "$TMP/prompt.txt") ||
				log "  errors in the run: $r"
			echo "{\"model\":\"$name\",\"mode\":\"https\",\"pair\":$p,${r#\{}" >>"$TMP/results.jsonl"
		done
	done
	if [ "$LONG" = 1 ]; then
		log "  16 streams + a ~20k-token prompt alongside"
		r=$("$TMP/loadgen" "$PORT" "$KEY" 16 "$WARMUP" "$secs" "$MAX_TOKENS" "$TMP/prompt.txt" "$TMP/long.txt") ||
			log "  errors in the run: $r"
		echo "{\"model\":\"$name\",\"mode\":\"https\",${r#\{}" >>"$TMP/results.jsonl"
	fi
	curl -sk -H "Authorization: Bearer $KEY" "https://127.0.0.1:$PORT/metrics" |
		grep -E '^sinkd_scheduler_(batch_tokens|batch_sequences)_(sum|count)' >&2 || true
	stop_daemon
	[ "$INPROC" = 1 ] || continue
	for n in $STREAMS; do
		log "  in-process, $n streams"
		r=$("$TMP/inproc" "$model" "$n" "$INPROC_TOKENS" "$THREADS" 0 "$secs" "scheduler.max_batch_tokens=$BATCH")
		echo "{\"model\":\"$name\",\"mode\":\"inproc\",\"long_prefill\":false,${r#\{}" >>"$TMP/results.jsonl"
	done
	if [ "$LONG" = 1 ]; then
		log "  in-process, 16 streams + a 20000-token prompt"
		r=$("$TMP/inproc" "$model" 16 "$INPROC_TOKENS" "$THREADS" 20000 "$secs" "scheduler.max_batch_tokens=$BATCH")
		echo "{\"model\":\"$name\",\"mode\":\"inproc\",\"long_prefill\":true,${r#\{}" >>"$TMP/results.jsonl"
	fi
done

python3 - "$TMP/results.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
pair_rows = [r for r in rows if 'pair' in r]
rows = [r for r in rows if 'pair' not in r]
print(f"{'model':<16} {'mode':<7} {'streams':>7} {'long':>5} {'tok/s':>9} {'TTFT p50':>9} {'TTFT p99':>9} "
      f"{'ITL p50':>8} {'ITL p99':>8} {'p99/p50':>7} {'reqs':>5} {'err':>4}")
for r in rows:
    ratio = r['itl_p99_ms'] / r['itl_p50_ms'] if r['itl_p50_ms'] else 0
    print(f"{r['model']:<16} {r['mode']:<7} {r['streams']:>7} {'yes' if r['long_prefill'] else 'no':>5} "
          f"{r['tok_s']:>9.1f} {r['ttft_p50_ms']:>7.1f}ms {r['ttft_p99_ms']:>7.1f}ms {r['itl_p50_ms']:>6.2f}ms "
          f"{r['itl_p99_ms']:>6.2f}ms {ratio:>7.2f} {r.get('requests', r['streams']):>5} {r.get('errors', 0):>4}")
by = {}
for r in rows:
    if not r['long_prefill']:
        by[(r['model'] + ' ' + r['mode'], r['streams'])] = r['tok_s']
scal = {m: round(by[(m, 16)] / by[(m, 1)], 2) for (m, n) in by if n == 16 and (m, 1) in by and by[(m, 1)]}
print("scaling 16 streams / 1 stream (the runs above, minutes apart):", scal)
pairs = {}
for m in dict.fromkeys(r['model'] for r in pair_rows):
    got = {(r['pair'], r['streams']): r['tok_s'] for r in pair_rows if r['model'] == m}
    ratios = [got[(p, 16)] / got[(p, 1)] for p in sorted({k[0] for k in got})
              if (p, 1) in got and (p, 16) in got and got[(p, 1)]]
    if not ratios:
        continue
    pairs[m] = {"ratios": [round(x, 2) for x in ratios], "min": round(min(ratios), 2),
                "median": round(statistics.median(ratios), 2)}
    detail = ", ".join(f"{got[(p, 1)]:.1f} -> {got[(p, 16)]:.1f}" for p in sorted({k[0] for k in got})
                       if (p, 1) in got and (p, 16) in got)
    print(f"scaling 16/1 back to back, {m} https: {detail} tok/s; ratio min {min(ratios):.2f}, "
          f"median {statistics.median(ratios):.2f}")
for r in rows:
    if r['mode'] == 'inproc':
        print(f"inproc {r['model']} {r['streams']} streams{' +long' if r['long_prefill'] else ''}: "
              f"tick {r['tick_ms']:.2f} ms (forward {r['forward_ms']:.2f} ms), "
              f"{r['tokens_per_tick']:.1f} tokens/tick")
print(json.dumps({"bench": "sched-load", "results": rows, "scaling_16_over_1": scal,
                  "pairs": pair_rows, "scaling_16_over_1_pairs": pairs}))
PY
