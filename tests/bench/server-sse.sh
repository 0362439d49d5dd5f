#!/usr/bin/env bash
# HTTP/SSE path benchmark (run by hand, never part of the test suite).
#
# Starts the real daemon (TLS on 127.0.0.1, one API key, server.threads 2) on
# stories260K and measures with tests/bench/server-sse-client.c:
#  1. latency: LAT_REQ sequential streaming completions of MAX_TOKENS tokens
#     (new TLS connection each): time to first token from the request write,
#     and per token the delay from the engine emitting it (timestamp carried
#     in the event when the request has X-Sinkd-Timing) to the client parsing
#     the SSE event: the HTTP/SSE path's per-token overhead.
#  2. idle: one long stream holds the whole KV budget, N_IDLE more streaming
#     requests wait in the queue, each an open SSE connection that gets
#     ": keep-alive" comments every second; the daemon's thread count
#     (/proc/PID/status Threads) is read before, while they are open, after.
#  3. with LLAMA_SERVER (a llama-server binary built by hand; nothing here
#     builds it): aggregate throughput against llama-server on the same file,
#     the synthetic 134M Llama in each of VS_TYPES made with sinkd-mkmodel
#     (stories260K is too small for throughput to mean anything), at each
#     stream count of VS_STREAMS, VS_REPEATS times, sinkd and llama-server
#     alternating (sinkd first in odd repeats), each a fresh server on plain
#     HTTP: llama-server --parallel N (continuous batching, prompt cache on,
#     VS_CTX tokens per slot: -c is split over the slots) and sinkd with its
#     defaults.  tests/bench/sched-loadgen.c drives N streams, each a loop of
#     streaming completions of VS_TOKENS tokens (ignore_eos, greedy), over a
#     steady window of VS_SECONDS: generated tok/s in the window (text
#     events) and the inter-token latency p50/p99 of every stream's gaps.
#     Ratios sinkd / llama-server within a repeat, then min and median.
# Prints a table and one JSON line per part.
#
# Environment: BUILD (default build-bench-server), N_IDLE (1000), LAT_REQ (20),
# ENGINE_THREADS (engine.threads, 0 = one per core; llama-server gets the
# same count, all cores for 0), MAX_TOKENS (128), SINKD_SHARED (../shared),
# LLAMA_SERVER, VS_TYPES ("q8_0 q4_k"), VS_STREAMS ("1 8 32"), VS_REPEATS
# (3), VS_SECONDS (10), VS_TOKENS (128), VS_CTX (512), VS_ONLY (1: part 3 alone),
# VS_LLAMA_ENV (variables for llama-server, e.g. OMP_WAIT_POLICY=passive).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${SINKD_SHARED:-$ROOT/../shared}
BUILD=${BUILD:-$ROOT/build-bench-server}
N_IDLE=${N_IDLE:-1000}
LAT_REQ=${LAT_REQ:-20}
MAX_TOKENS=${MAX_TOKENS:-128}
TMP=$(mktemp -d)
PID=
BLOCKER=
VS_PID=
cleanup() {
	[ -n "$BLOCKER" ] && kill "$BLOCKER" 2>/dev/null
	[ -n "$PID" ] && kill -TERM "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
	[ -n "$VS_PID" ] && kill -TERM "$VS_PID" 2>/dev/null && wait "$VS_PID" 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT
log() { echo "server-sse: $*" >&2; }

if [ ! -f "$BUILD/build.ninja" ]; then
	PATH=/usr/local/cuda/bin:$PATH meson setup "$BUILD" -Dcuda=disabled -Dbuildtype=release >/dev/null
fi
ninja -C "$BUILD" -j2 src/sinkd src/tools/sinkd-mkmodel >/dev/null
gcc -O2 -Wall -Wextra -o "$TMP/client" "$ROOT/tests/bench/server-sse-client.c" -lssl -lcrypto
if [ -n "${LLAMA_SERVER:-}" ]; then
	[ -x "$LLAMA_SERVER" ] || { log "LLAMA_SERVER=$LLAMA_SERVER is not an executable"; exit 2; }
	source "$ROOT/tests/bench/server-sse-vs.sh"
	vs_llama_server
	[ "${VS_ONLY:-0}" = 1 ] && exit 0
fi

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=localhost \
	-keyout "$TMP/key.pem" -out "$TMP/cert.pem" 2>/dev/null
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
KEY=bench-key
DIGEST=$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)
cat >"$TMP/sinkd.yaml" <<YAML
server:
  listen: "127.0.0.1:$PORT"
  threads: 2
  max_connections: 4096
  sse_keepalive_s: 1
  api_keys: ["sha256:$DIGEST"]
  tls: {enabled: true, cert_file: "$TMP/cert.pem", key_file: "$TMP/key.pem"}
model:
  path: "$SHARED/models/stories260K.gguf"
inference:
  cache: {window_size: 1020, global_cache_limit: "1MiB"}
scheduler: {max_queue: $((N_IDLE + 16)), max_queue_wait_s: 600}
limits: {max_tokens: 1000000}
logging: {level: warn}
engine: {threads: ${ENGINE_THREADS:-0}}
YAML
"$BUILD/src/sinkd" --config "$TMP/sinkd.yaml" 2>"$TMP/daemon.log" &
PID=$!
BASE="https://127.0.0.1:$PORT"
for _ in $(seq 1 200); do
	[ "$(curl -sk -o /dev/null -w '%{http_code}' "$BASE/ready")" = 200 ] && break
	sleep 0.05
done
threads() { awk '/^Threads:/ {print $2}' "/proc/$PID/status"; }
metric() { curl -sk -H "Authorization: Bearer $KEY" "$BASE/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
T_START=$(threads)

log "latency: $LAT_REQ requests x $MAX_TOKENS tokens"
printf '{"prompt":"Once upon a time","max_tokens":%d,"ignore_eos":true,"temperature":0,"stream":true}' \
	"$MAX_TOKENS" >"$TMP/lat.json"
LAT=$("$TMP/client" latency "$PORT" "$KEY" "$LAT_REQ" "$TMP/lat.json")

log "idle: one stream holds the budget, $N_IDLE streams wait in the queue"
curl -skN -H "Authorization: Bearer $KEY" -d \
	'{"prompt":"Once upon a time","max_tokens":1000000,"ignore_eos":true,"stream":true}' \
	"$BASE/v1/completions" >/dev/null 2>&1 &
BLOCKER=$!
for _ in $(seq 1 100); do [ "$(metric sinkd_scheduler_running)" = 1 ] && break; sleep 0.05; done
T_BEFORE=$(threads)
printf '{"prompt":"Once","max_tokens":1,"stream":true}' >"$TMP/idle.json"
"$TMP/client" idle "$PORT" "$KEY" "$N_IDLE" "$TMP/idle.json" "$TMP/ready" "$TMP/release" >"$TMP/idle.out" &
CLIENT=$!
while [ ! -f "$TMP/ready" ] && kill -0 "$CLIENT" 2>/dev/null; do sleep 0.1; done
T_DURING=$(threads)
OPEN=$(metric sinkd_open_streams)
QUEUED=$(metric sinkd_scheduler_queue_depth)
FDS=$(ls "/proc/$PID/fd" | wc -l)
RSS_KB=$(awk '/^VmRSS:/ {print $2}' "/proc/$PID/status")
touch "$TMP/release"
wait "$CLIENT" || true
IDLE=$(cat "$TMP/idle.out")
kill "$BLOCKER" 2>/dev/null
wait "$BLOCKER" 2>/dev/null || true
BLOCKER=
for _ in $(seq 1 100); do [ "$(metric sinkd_open_streams)" = 0 ] && break; sleep 0.05; done
T_AFTER=$(threads)

j() { echo "$1" | sed -n "s/.*\"$2\":\([0-9.-]*\).*/\1/p"; }
printf '\n%-44s %s\n' "measure" "value"
printf '%-44s %s\n' "daemon threads at start" "$T_START"
printf '%-44s %s\n' "threads with 1 running stream" "$T_BEFORE"
printf '%-44s %s\n' "threads with $N_IDLE idle SSE streams open" "$T_DURING"
printf '%-44s %s\n' "threads after they closed" "$T_AFTER"
printf '%-44s %s\n' "idle streams with a keep-alive received" "$(j "$IDLE" keepalive_seen)"
printf '%-44s %s\n' "open streams (/metrics) while idle" "$OPEN"
printf '%-44s %s\n' "queued requests (/metrics) while idle" "$QUEUED"
printf '%-44s %s\n' "daemon fds / RSS KiB while idle" "$FDS / $RSS_KB"
printf '%-44s %s\n' "TTFT p50 / p99 (ms)" "$(j "$LAT" ttft_ms_p50) / $(j "$LAT" ttft_ms_p99)"
printf '%-44s %s\n' "emit->client per token mean/p50/p99 (us)" \
	"$(j "$LAT" emit_to_client_us_mean) / $(j "$LAT" emit_to_client_us_p50) / $(j "$LAT" emit_to_client_us_p99)"
printf '%-44s %s\n' "tokens measured" "$(j "$LAT" tokens)"
echo "{\"bench\":\"server-sse\",\"n_idle\":$N_IDLE,\"threads_start\":$T_START,\"threads_before\":$T_BEFORE,\"threads_during\":$T_DURING,\"threads_after\":$T_AFTER,\"open_streams\":${OPEN:-0},\"fds\":$FDS,\"rss_kib\":$RSS_KB,\"idle\":$IDLE,\"latency\":$LAT}"
