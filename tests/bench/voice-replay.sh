#!/usr/bin/env bash
# Voice-assistant replay: N concurrent voice conversations against sinkd
# (persistent sessions, prefix cache on and off) and against llama-server
# (run by hand, never part of the test suite).
#
#   tests/bench/voice-replay.sh            (QUICK=1 for a short check)
#
# Each conversation (driver: tests/bench/voice-replay.py, one thread and one
# keep-alive connection per conversation) opens at a seeded offset of 0-200
# ms from the run's start with the same system prompt of about SYS_TOKENS
# tokens, then speaks UTTERANCES utterances: the ASR text of each is sent in
# bursts of 3-8 tokens every 100-300 ms, a third of the bursts first revising
# the last 1-4 tokens (the ASR correcting itself), and the utterance's end
# asks for a 30-token reply (greedy, ignore_eos, streamed SSE).  The next
# utterance starts 200-600 ms after the reply's last token.  Everything (the
# prompt, the words, revisions, times) comes from SEED and is the same for
# every server.
#
#   sinkd-on / sinkd-off  sinkd over HTTPS with inference.prefix_cache.
#       max_bytes 256MiB / 0: PUT /v1/sessions/{id}, then the opening request
#       POST .../append {"text": system, "pin_prefix_tokens": its tokens}
#       (append-only, no reply), each burst an append ("revise_last_tokens"
#       where the ASR revised), the last burst with "generate".
#   llama-plain / llama-ahead  llama-server over HTTP (the same GGUF,
#       --parallel N, continuous batching) driven as its clients are: at each
#       utterance's end the whole conversation as chat messages (system
#       prompt first, then the user and assistant turns) to
#       /v1/chat/completions with cache_prompt; "ahead" also sends the system
#       prompt alone (max_tokens 1, cache_prompt) as the conversation opens.
#
# Figures per run (times on the client's monotonic clock; a token's time is
# when its SSE event was read):
#   new_ttft     new-session time to first token: from the send of the
#                conversation's first request (sinkd: the PUT; llama-ahead:
#                the system-prompt request; llama-plain: the instant the
#                others send theirs, the conversation's scheduled opening,
#                sending nothing) to the first token of the first reply.  The
#                first utterance is spoken from that instant on, so new_ttft
#                includes its speech (speech1, the same for every server).
#   first_after_speech  the first reply's first token after the first
#                utterance ended (new_ttft - speech1): what the server adds.
#   utt_end      utterance end to first reply token, utterances 2..U: from
#                the scheduled end of the utterance (when the last burst is
#                due; a client still busy is late, which counts) to the
#                reply's first token.
#   itl          inter-token gaps within every reply (p99).
#   KV per session (sinkd): mean bytes_resident / bytes_reserved of GET
#                /v1/sessions/{id} after the last reply, and /metrics
#                sinkd_prefix_cache_bytes and _shared_sessions (absent
#                before the prefix cache exists: printed as -).
#   errors       failed requests (replies whose events were not 30 are
#                counted apart, other_length_replies in the JSON).
# WARM=1 (the default): before the timed conversations one conversation
# opens with the system prompt, gets a 1-token reply and closes (sinkd: its
# session deleted), untimed, on every server: the server has seen the
# prompt once, as one that has been running (the issue's figures: llama-
# server keeps it in a slot and its host-memory prompt cache).  WARM=0: a
# cold start, where N conversations opened at once wait for the one
# computation of the prompt (sinkd-off / sinkd-on is then at most about N).
# Runs alternate (sinkd-on, sinkd-off, llama-plain, llama-ahead in odd
# repeats, reversed in even ones), each on a freshly started server; the
# table shows medians over REPEATS, the ratios are taken within a repeat
# and their median printed:
#   new conversation: sinkd-on new_ttft / llama-plain's and llama-ahead's
#     (the issue wants <= 0.5), and the same for first_after_speech;
#   prefix cache: sinkd-off new_ttft / sinkd-on's (wants >= 10), the same
#     for first_after_speech;
#   utterance end p50: sinkd-on / llama-ahead (wants <= 0.2).
# Without LLAMA_SERVER the llama rows are left out (the script says why).
# Writes OUT.md (table, ratios, JSON line) and OUT.json (the JSON line) and
# prints both.
#
# Environment: LLAMA_SERVER (a llama-server binary built by hand),
# BUILD (sinkd build dir, default build-bench-voice, configured and built
# here when missing; the synthetic 134M Q8_0 model is made by sinkd-mkmodel
# into BUILD/models once), MODELS ("synth134M-q8_0 stories260K"), NS
# ("8 32"), UTTERANCES (10), REPEATS (2), SYS_TOKENS (1000), SEED (43), WARM (1),
# THREADS (engine threads and llama-server -t, default nproc),
# OUT (tests/bench/results/voice-replay), SINKD_SHARED (../shared).
# QUICK=1: NS 8, UTTERANCES 3, REPEATS 1, OUT under BUILD.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${SINKD_SHARED:-$ROOT/../shared}
BUILD=${BUILD:-$ROOT/build-bench-voice}
QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
	NS=${NS:-8}
	UTTERANCES=${UTTERANCES:-3}
	REPEATS=${REPEATS:-1}
	OUT=${OUT:-$BUILD/voice-replay-quick}
fi
NS=${NS:-"8 32"}
UTTERANCES=${UTTERANCES:-10}
REPEATS=${REPEATS:-2}
OUT=${OUT:-$ROOT/tests/bench/results/voice-replay}
MODELS=${MODELS:-"synth134M-q8_0 stories260K"}
SYS_TOKENS=${SYS_TOKENS:-1000}
SEED=${SEED:-43}
WARM=${WARM:-1}
THREADS=${THREADS:-$(nproc)}
LLAMA_SERVER=${LLAMA_SERVER:-}
DRIVER=$ROOT/tests/bench/voice-replay.py
log() { echo "voice-replay: $*" >&2; }
SPID=
TMP=$(mktemp -d)
trap '[ -n "$SPID" ] && stop_server; rm -rf "$TMP"' EXIT

[ -f "$BUILD/build.ninja" ] ||
	PATH=/usr/local/cuda/bin:$PATH meson setup "$BUILD" -Dcuda=disabled -Dbuildtype=release >/dev/null
ninja -C "$BUILD" -j2 src/sinkd src/tools/sinkd-mkmodel >/dev/null

model_path() { # NAME → GGUF path (the synthetic one made once into BUILD/models)
	case $1 in
	stories260K) echo "$SHARED/models/stories260K.gguf" ;;
	synth134M-q8_0)
		local out=$BUILD/models/synth134M-q8_0.gguf
		if [ ! -f "$out" ]; then
			mkdir -p "$BUILD/models"
			log "making $out"
			"$BUILD/src/tools/sinkd-mkmodel" --out "$out.tmp" \
				--vocab "$SHARED/vocab/ggml-vocab-llama-spm.gguf" \
				--dim 768 --layers 12 --heads 12 --ffn 2048 --type q8_0 >/dev/null
			mv "$out.tmp" "$out"
		fi
		echo "$out"
		;;
	*) log "unknown model $1 (synth134M-q8_0 or stories260K)"; exit 2 ;;
	esac
}

LLAMA_NOTE=
if [ -z "$LLAMA_SERVER" ]; then
	LLAMA_NOTE="LLAMA_SERVER is not set: llama-server rows left out (build one by hand and point LLAMA_SERVER at it)"
elif [ ! -x "$LLAMA_SERVER" ]; then
	LLAMA_NOTE="LLAMA_SERVER=$LLAMA_SERVER is not an executable: llama-server rows left out"
fi
[ -n "$LLAMA_NOTE" ] && log "$LLAMA_NOTE"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=localhost \
	-keyout "$TMP/key.pem" -out "$TMP/cert.pem" 2>/dev/null
KEY=bench-key
DIGEST=$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_server VARIANT MODEL N → $SPID, $BASE, $SKEY (the server answering)
start_server() {
	local variant=$1 model=$2 n=$3 port url
	port=$(free_port)
	case $variant in
	sinkd-*)
		local bytes=256MiB
		[ "$variant" = sinkd-off ] && bytes=0
		cat >"$TMP/sinkd.yaml" <<YAML
server:
  listen: "127.0.0.1:$port"
  threads: 2
  max_connections: 1024
  api_keys: ["sha256:$DIGEST"]
  tls: {enabled: true, cert_file: "$TMP/cert.pem", key_file: "$TMP/key.pem"}
model:
  path: "$model"
inference:
  cache: {window_size: 2048, max_pinned_tokens: $((SYS_TOKENS + 16)), global_cache_limit: auto}
  prefix_cache: {max_bytes: $bytes}
scheduler: {max_queue: 1024, max_queue_wait_s: 600}
logging: {level: warn}
engine: {threads: $THREADS}
YAML
		"$BUILD/src/sinkd" --config "$TMP/sinkd.yaml" 2>"$TMP/server.log" &
		SPID=$!
		BASE="https://127.0.0.1:$port"
		SKEY=$KEY
		url=$BASE/ready
		;;
	llama-*)
		# a slot holds the whole conversation: system prompt, 10 utterances
		# and replies come to about 1,800 tokens, and a chat template whose
		# markers the vocabulary lacks adds some per message
		"$LLAMA_SERVER" -m "$model" --host 127.0.0.1 --port "$port" --parallel "$n" \
			--cont-batching -c $((n * 3072)) -t "$THREADS" --no-webui 2>"$TMP/server.log" >&2 &
		SPID=$!
		BASE="http://127.0.0.1:$port"
		SKEY=
		url=$BASE/health
		;;
	esac
	for _ in $(seq 1 600); do
		kill -0 "$SPID" 2>/dev/null || { tail -5 "$TMP/server.log" >&2; SPID=; return 1; }
		[ "$(curl -sk -o /dev/null -w '%{http_code}' "$url")" = 200 ] && return 0
		sleep 0.1
	done
	log "$variant did not get ready"
	return 1
}
stop_server() {
	kill -TERM "$SPID" 2>/dev/null
	wait "$SPID" 2>/dev/null || true
	SPID=
}

VARIANTS=(sinkd-on sinkd-off)
[ -z "$LLAMA_NOTE" ] && VARIANTS+=(llama-plain llama-ahead)
RESULTS=$TMP/results.jsonl
: >"$RESULTS"
for m in $MODELS; do
	mpath=$(model_path "$m")
	for n in $NS; do
		plan=$TMP/plan-$m-$n.json
		for rep in $(seq 1 "$REPEATS"); do
			order=("${VARIANTS[@]}")
			if [ $((rep % 2)) = 0 ]; then
				order=()
				for ((i = ${#VARIANTS[@]} - 1; i >= 0; i--)); do order+=("${VARIANTS[$i]}"); done
			fi
			for v in "${order[@]}"; do
				log "$m N=$n repeat $rep: $v"
				if ! start_server "$v" "$mpath" "$n"; then
					echo "{\"model\":\"$m\",\"n\":$n,\"repeat\":$rep,\"variant\":\"$v\",\"errors\":-1}" >>"$RESULTS"
					continue
				fi
				if [ ! -f "$plan" ]; then
					python3 "$DRIVER" plan --base "$BASE" --key "$SKEY" --seed "$SEED" --n "$n" \
						--utterances "$UTTERANCES" --sys-tokens "$SYS_TOKENS" --out "$plan"
				fi
				case $v in
				sinkd-*) args=(--target sinkd --mode session) ;;
				llama-plain) args=(--target llama --mode plain) ;;
				llama-ahead) args=(--target llama --mode ahead) ;;
				esac
				[ "$WARM" = 1 ] && args+=(--warm)
				r=$(python3 "$DRIVER" run "${args[@]}" --base "$BASE" --key "$SKEY" --plan "$plan") ||
					r='{"errors":-1}'
				stop_server
				echo "{\"model\":\"$m\",\"n\":$n,\"repeat\":$rep,\"variant\":\"$v\",\"run\":$r}" >>"$RESULTS"
			done
		done
	done
done

mkdir -p "$(dirname "$OUT")"
python3 - "$RESULTS" "$OUT" "$LLAMA_NOTE" "$QUICK" "$THREADS" "$WARM" <<'PY'
import json, statistics, sys
path, out, note, quick, threads, warm = sys.argv[1:7]
rows = [json.loads(l) for l in open(path) if l.strip()]
med = lambda xs: round(statistics.median(xs), 3) if xs else None
def runs(model, n, variant):
    return [r for r in rows if r["model"] == model and r["n"] == n and r["variant"] == variant]
def field(rs, k):
    return [r["run"][k] for r in rs if "run" in r and r["run"].get(k) is not None]
keys = [(r["model"], r["n"]) for r in rows]
keys = sorted(set(keys), key=keys.index)
variants = []
for r in rows:
    if r["variant"] not in variants:
        variants.append(r["variant"])
mib = lambda x: "-" if x is None else "%.2f" % (x / 2**20)
fmt = lambda x: "-" if x is None else ("%.0f" % x if x >= 100 else "%.1f" % x)
lines = ["| model | N | server | new_ttft p50/p99 ms | first after speech p50 ms | speech1 p50 ms | utt_end p50/p99 ms | itl p99 ms | KV/session resident/reserved MiB | prefix cache MiB / sharing | errors |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
table = []
for (m, n) in keys:
    for v in variants:
        rs = runs(m, n, v)
        if not rs:
            continue
        g = lambda k: med(field(rs, k))
        row = {"model": m, "n": n, "variant": v,
               **{k: g(k) for k in ("new_ttft_ms_p50", "new_ttft_ms_p99", "first_after_speech_ms_p50",
                                    "speech1_ms_p50", "utt_end_ms_p50", "utt_end_ms_p99", "itl_ms_p99",
                                    "bytes_resident_mean", "bytes_reserved_mean", "prefix_cache_bytes",
                                    "prefix_cache_shared_sessions", "wall_s")},
               "errors": sum(r["run"].get("errors", 0) if "run" in r else 1 for r in rs)}
        table.append(row)
        lines.append("| %s | %d | %s | %s / %s | %s | %s | %s / %s | %s | %s / %s | %s / %s | %d |" % (
            m, n, v, fmt(row["new_ttft_ms_p50"]), fmt(row["new_ttft_ms_p99"]),
            fmt(row["first_after_speech_ms_p50"]), fmt(row["speech1_ms_p50"]),
            fmt(row["utt_end_ms_p50"]), fmt(row["utt_end_ms_p99"]), fmt(row["itl_ms_p99"]),
            mib(row["bytes_resident_mean"]), mib(row["bytes_reserved_mean"]),
            mib(row["prefix_cache_bytes"]), fmt(row["prefix_cache_shared_sessions"]), row["errors"]))
def ratio(m, n, a, b, k, inverse=False):
    """median over repeats of a's k / b's k (b's / a's when inverse)."""
    xs = []
    for rep in sorted({r["repeat"] for r in rows}):
        ra = [r for r in runs(m, n, a) if r["repeat"] == rep and "run" in r]
        rb = [r for r in runs(m, n, b) if r["repeat"] == rep and "run" in r]
        if ra and rb and ra[0]["run"].get(k) and rb[0]["run"].get(k):
            x, y = ra[0]["run"][k], rb[0]["run"][k]
            xs.append(y / x if inverse else x / y)
    return med(xs)
ratios = []
for (m, n) in keys:
    for k in ("new_ttft_ms_p50", "first_after_speech_ms_p50"):
        for b in ("llama-plain", "llama-ahead"):
            ratios.append((m, n, "sinkd-on %s / %s (want <= 0.5)" % (k, b), ratio(m, n, "sinkd-on", b, k)))
        ratios.append((m, n, "sinkd-off / sinkd-on %s (want >= 10)" % k,
                       ratio(m, n, "sinkd-on", "sinkd-off", k, inverse=True)))
    ratios.append((m, n, "sinkd-on utt_end p50 / llama-ahead (want <= 0.2)",
                   ratio(m, n, "sinkd-on", "llama-ahead", "utt_end_ms_p50")))
rlines = ["| model | N | ratio | value |", "| --- | --- | --- | --- |"]
rlines += ["| %s | %d | %s | %s |" % (m, n, what, "-" if v is None else "%.3f" % v) for m, n, what, v in ratios]
js = json.dumps({"bench": "voice-replay", "quick": quick == "1", "warm": warm == "1", "threads": int(threads),
                 "llama_server": not note, "rows": table,
                 "ratios": [{"model": m, "n": n, "what": w, "value": v} for m, n, w, v in ratios],
                 "runs": rows})
start = "a server that has seen the system prompt once (WARM=1)" if warm == "1" else "a cold start (WARM=0)"
text = "# voice-replay\n\nNew conversations on %s; %s engine threads.\n\n" % (start, threads) + \
       ("%s\n\n" % note if note else "") + "\n".join(lines) + "\n\n" + \
       "\n".join(rlines) + "\n\n```\n" + js + "\n```\n"
open(out + ".md", "w").write(text)
open(out + ".json", "w").write(js + "\n")
print("\n".join(lines))
print()
print("\n".join(rlines))
if note:
    print("\n" + note)
print(js)
PY
log "written $OUT.md and $OUT.json"
