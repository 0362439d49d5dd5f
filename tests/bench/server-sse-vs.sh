# Part 3 of tests/bench/server-sse.sh (sourced by it, not run alone):
# aggregate streaming throughput of sinkd against llama-server on the same
# GGUF file, at several concurrent stream counts, in alternating runs.  Uses
# server-sse.sh's ROOT, SHARED, BUILD, TMP, VS_PID (killed by its cleanup)
# and log; the environment is described at the top of server-sse.sh.

VS_TYPES=${VS_TYPES:-"q8_0 q4_k"}
VS_STREAMS=${VS_STREAMS:-"1 8 32"}
VS_REPEATS=${VS_REPEATS:-3}
VS_SECONDS=${VS_SECONDS:-10}
VS_TOKENS=${VS_TOKENS:-128}
VS_CTX=${VS_CTX:-512}
# e.g. OMP_WAIT_POLICY=passive: on a machine other work shares, OpenMP's
# threads spinning at every barrier (the default) cost llama-server more
# than its kernels do
VS_LLAMA_ENV=${VS_LLAMA_ENV:-}
VS_KEY=bench-key

vs_free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Waits for URL to answer 200 while VS_PID lives; $1 the URL, $2 the log.
vs_wait_ready() {
	for _ in $(seq 1 600); do
		kill -0 "$VS_PID" 2>/dev/null || { tail -5 "$2" >&2; log "server exited"; exit 1; }
		[ "$(curl -s -o /dev/null -w '%{http_code}' "$1")" = 200 ] && return 0
		sleep 0.1
	done
	log "server did not become ready: $1"
	exit 1
}

# engine model streams -> VS_PID, VS_PORT (plain HTTP on 127.0.0.1)
vs_start() {
	local engine=$1 model=$2 n=$3 threads=${ENGINE_THREADS:-0}
	VS_PORT=$(vs_free_port)
	if [ "$engine" = sinkd ]; then
		cat >"$TMP/vs-sinkd.yaml" <<YAML
server:
  listen: "127.0.0.1:$VS_PORT"
  api_keys: ["sha256:$(printf %s "$VS_KEY" | sha256sum | cut -d' ' -f1)"]
  tls: {enabled: false}
model:
  path: "$model"
engine: {threads: $threads}
logging: {level: warn}
YAML
		"$BUILD/src/sinkd" --config "$TMP/vs-sinkd.yaml" >"$TMP/vs-server.log" 2>&1 &
		VS_PID=$!
		vs_wait_ready "http://127.0.0.1:$VS_PORT/ready" "$TMP/vs-server.log"
	else
		[ "$threads" = 0 ] && threads=$(nproc)
		env $VS_LLAMA_ENV "$LLAMA_SERVER" -m "$model" --host 127.0.0.1 --port "$VS_PORT" -t "$threads" \
			--parallel "$n" -c $((n * VS_CTX)) --cont-batching --cache-prompt --no-webui \
			>"$TMP/vs-server.log" 2>&1 &
		VS_PID=$!
		vs_wait_ready "http://127.0.0.1:$VS_PORT/health" "$TMP/vs-server.log"
	fi
}

# SIGTERM, then SIGKILL after 10 s: llama-server can hang in its shutdown
# with slots still busy, and the run must go on.
vs_stop() {
	kill -TERM "$VS_PID" 2>/dev/null
	for _ in $(seq 100); do
		kill -0 "$VS_PID" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$VS_PID" 2>/dev/null
	wait "$VS_PID" 2>/dev/null || true
	VS_PID=
}

# engine model name streams repeat: one fresh server, a short warm-up, the
# window; appends a JSON line to $TMP/vs.jsonl.
vs_run() {
	local engine=$1 model=$2 name=$3 n=$4 r=$5 out
	log "vs: $name $n streams repeat $r: $engine"
	vs_start "$engine" "$model" "$n"
	PLAIN_HTTP=1 "$TMP/loadgen" "$VS_PORT" "$VS_KEY" 1 30 1 8 "$TMP/vs-prompt.txt" >/dev/null || true
	out=$(PLAIN_HTTP=1 "$TMP/loadgen" "$VS_PORT" "$VS_KEY" "$n" 120 "$VS_SECONDS" "$VS_TOKENS" \
		"$TMP/vs-prompt.txt") || log "vs: errors in the run: $out"
	vs_stop
	echo "{\"engine\":\"$engine\",\"model\":\"$name\",\"repeat\":$r,${out#\{}" >>"$TMP/vs.jsonl"
}

vs_report() {
	python3 - "$TMP/vs.jsonl" "$LLAMA_SERVER" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$VS_LLAMA_ENV" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
when = sys.argv[3]
print(f"\nsinkd against llama-server ({sys.argv[2]}{', env ' + sys.argv[4] if sys.argv[4] else ''}), run at {when}; "
      f"1-min load average at the end: {open('/proc/loadavg').read().split()[0]}")
print(f"{'model':<20}{'streams':>8}{'llama tok/s':>13}{'sinkd tok/s':>13}{'sinkd/llama min':>17}"
      f"{'median':>8}{'ITL p50/p99 ms llama':>22}{'sinkd':>14}{'errors':>8}")
summary = {"bench": "server-sse-vs-llama-server", "time": when, "llama_env": sys.argv[4], "models": {}}
get = {(r["engine"], r["model"], r["streams"], r["repeat"]): r for r in rows}
for m in dict.fromkeys(r["model"] for r in rows):
    for n in sorted({r["streams"] for r in rows if r["model"] == m}):
        reps = sorted({r["repeat"] for r in rows if r["model"] == m and r["streams"] == n})
        pairs = [(get[("llama-server", m, n, k)], get[("sinkd", m, n, k)]) for k in reps
                 if ("llama-server", m, n, k) in get and ("sinkd", m, n, k) in get]
        if not pairs:
            continue
        ratio = [s["tok_s"] / l["tok_s"] for l, s in pairs if l["tok_s"] > 0]
        med = lambda eng, key: statistics.median(p[eng][key] for p in pairs)
        e = {"llama_tok_s_median": med(0, "tok_s"), "sinkd_tok_s_median": med(1, "tok_s"),
             "ratio_min": min(ratio) if ratio else None,
             "ratio_median": statistics.median(ratio) if ratio else None,
             "llama_itl_p50_ms": med(0, "itl_p50_ms"), "llama_itl_p99_ms": med(0, "itl_p99_ms"),
             "sinkd_itl_p50_ms": med(1, "itl_p50_ms"), "sinkd_itl_p99_ms": med(1, "itl_p99_ms"),
             "errors": sum(p[0]["errors"] + p[1]["errors"] for p in pairs), "repeats": len(pairs)}
        summary["models"].setdefault(m, {})[str(n)] = e
        rs = f"{e['ratio_min']:>17.2f}{e['ratio_median']:>8.2f}" if ratio else f"{'-':>17}{'-':>8}"
        print(f"{m:<20}{n:>8}{e['llama_tok_s_median']:>13.1f}{e['sinkd_tok_s_median']:>13.1f}{rs}"
              f"{e['llama_itl_p50_ms']:>13.1f}/{e['llama_itl_p99_ms']:<8.1f}"
              f"{e['sinkd_itl_p50_ms']:>7.1f}/{e['sinkd_itl_p99_ms']:<6.1f}{e['errors']:>8}")
print("target: sinkd's aggregate tok/s at 8 and 32 streams >= llama-server's (median of the ratios)")
print(json.dumps(summary, separators=(",", ":")))
PY
}

vs_llama_server() {
	cc -O2 -std=c11 -D_GNU_SOURCE -Wall -o "$TMP/loadgen" "$ROOT/tests/bench/sched-loadgen.c" \
		-lssl -lcrypto
	printf 'Once upon a time, there was a little girl named Lily. She loved to' >"$TMP/vs-prompt.txt"
	: >"$TMP/vs.jsonl"
	for type in $VS_TYPES; do
		local model="$TMP/synth134M-$type.gguf" name="synth134M-$type"
		log "vs: making $model"
		"$BUILD/src/tools/sinkd-mkmodel" --out "$model" \
			--vocab "$SHARED/vocab/ggml-vocab-llama-spm.gguf" \
			--dim 768 --layers 12 --heads 12 --ffn 2048 --type "$type" >/dev/null
		for r in $(seq "$VS_REPEATS"); do
			for n in $VS_STREAMS; do
				if [ $((r % 2)) = 1 ]; then
					vs_run sinkd "$model" "$name" "$n" "$r"
					vs_run llama-server "$model" "$name" "$n" "$r"
				else
					vs_run llama-server "$model" "$name" "$n" "$r"
					vs_run sinkd "$model" "$name" "$n" "$r"
				fi
			done
		done
		rm -f "$model"
	done
	vs_report
}
