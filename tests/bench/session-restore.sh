#!/usr/bin/env bash
# Session snapshot and restore against re-prefill (run by hand, never part
# of the test suite): `tests/bench/session-restore.sh`.
#
# For stories260K and the synthetic 134M Llama in F16 (made here with
# sinkd-mkmodel, as engine-bench.sh makes it), each on the real daemon over
# loopback HTTP with the default cache (window 4096, 4 sinks, bf16, int8
# window with 128 hot tokens): a persistent session is fed N stream tokens
# (1k, 4k, 32k) and then, REPEATS times in alternating pairs,
#   prefill   a fresh session fed the same N tokens (what a client without a
#             snapshot must replay), plus one more token
#   restore   GET /v1/sessions/{id}/snapshot, then POST /v1/sessions/restore
#             of those bytes and one more token on the restored session (the
#             cache is imported on that first request)
# and prints snapshot bytes, snapshot and restore seconds, prefill seconds
# and prefill / restore (min and median over the repeats), a table and one
# JSON line.  Results go to tests/bench/results/ by hand.
#
# Store rows (a second table, "store_rows" in the JSON line): for each session
# store backend in STORES (a folder, sessions.store_dir, and Redis,
# sessions.store, on a redis-server started here on a free loopback port and
# stopped at the end; skipped with a note when redis-server is missing), each
# model and each size in STORE_SIZES, REPEATS times: a fresh session fed N
# tokens, then left idle until the daemon offloads it
# (scheduler.session_offload_s: 1; /metrics polled until
# sinkd_session_offloads_total grows), then one one-token completion on it,
# the request that brings it back from the store.  Per row: the record's bytes
# (sinkd_session_snapshot_bytes_total delta over the offload), the offload
# seconds (sinkd_session_offload_seconds _sum delta over _count delta: export
# and write), the wall time of that restoring request, and the daemon's
# sinkd_session_restore_seconds delta (read, checks, import), min and median;
# the JSON rows add each offload's bytes, the folder's <id>.snap sizes and a
# second one-token request on the restored (resident) session, for scale.
#
# Environment: BUILD (build dir, default build-bench-restore, configured and
# built here when missing), REPEATS (3), SIZES ("1024 4096 32768", API rows),
# MODELS ("stories260K synth134M-f16"), PARTS ("api store": which tables),
# STORES ("folder redis"), STORE_SIZES ("1024 4096"), REDIS_SERVER
# (redis-server), LOG_LEVEL (the daemons' logging.level, warn), KEEP_LOGS (a
# folder the store runs' daemon logs are copied to).  Quick store-only run:
# `PARTS=store tests/bench/session-restore.sh`.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${SINKD_SHARED:-$ROOT/../shared}
BUILD=${BUILD:-$ROOT/build-bench-restore}
REPEATS=${REPEATS:-3}
SIZES=${SIZES:-"1024 4096 32768"}
MODELS=${MODELS:-"stories260K synth134M-f16"}
PARTS=${PARTS:-"api store"}
STORES=${STORES:-"folder redis"}
STORE_SIZES=${STORE_SIZES:-"1024 4096"}
REDIS_SERVER=${REDIS_SERVER:-redis-server}

if [ ! -x "$BUILD/src/sinkd" ] || [ ! -x "$BUILD/src/tools/sinkd-mkmodel" ]; then
	[ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" --buildtype=release -Dcuda=disabled >/dev/null
	ninja -C "$BUILD" src/sinkd src/tools/sinkd-mkmodel >/dev/null
fi
tmp=$(mktemp -d)
pid=
rpid=
cleanup() {
	[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
	[ -n "$rpid" ] && kill "$rpid" 2>/dev/null && wait "$rpid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

has_part() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# start_daemon MODEL PATH LOG [YAML lines]: the daemon on a free port ($port)
start_daemon() {
	local m=$1 path=$2 log=$3
	shift 3
	port=$(free_port)
	{
		cat <<YAML
server: {listen: "127.0.0.1:$port", tls: {enabled: false}, drain_grace_s: 0}
model: {path: "$path"}
inference: {quantization: {enabled: true, bits: 8, full_precision_recent: 128}}
limits: {max_tokens: 16, max_sessions: 64}
YAML
		if [ $# -gt 0 ]; then printf '%s\n' "$@"; else echo "scheduler: {session_ttl_s: 3600}"; fi
		echo "logging: {level: ${LOG_LEVEL:-warn}}"
	} >"$tmp/sinkd.yaml"
	"$BUILD/src/sinkd" --config "$tmp/sinkd.yaml" >"$log" 2>&1 &
	pid=$!
	for _ in $(seq 1 600); do
		curl -sf -o /dev/null "http://127.0.0.1:$port/ready" && break
		sleep 0.1
	done
}
stop_daemon() {
	kill -TERM "$pid"
	wait "$pid" || true
	pid=
}
# daemon_failed LOG: what the daemon wrote, for the report
daemon_failed() {
	echo "--- the run stopped; the daemon's log ($1), last 60 lines:" >&2
	tail -n 60 "$1" >&2
	exit 1
}

model_path() {
	case $1 in
	stories260K) echo "$SHARED/models/stories260K.gguf" ;;
	synth134M-f16)
		local out="$tmp/synth134M-f16.gguf"
		[ -f "$out" ] || "$BUILD/src/tools/sinkd-mkmodel" --out "$out" \
			--vocab "$SHARED/vocab/ggml-vocab-llama-spm.gguf" \
			--dim 768 --layers 12 --heads 12 --ffn 2048 --type f16 >/dev/null
		echo "$out"
		;;
	*) echo "unknown model $1" >&2; exit 2 ;;
	esac
}

results="$tmp/results.jsonl"
store_results="$tmp/store.jsonl"
notes="$tmp/notes.txt"
: >"$results"
: >"$store_results"
: >"$notes"
for m in $MODELS; do
	has_part api || break
	path=$(model_path "$m")
	start_daemon "$m" "$path" "$tmp/sinkd-$m.log"
	python3 - "$port" "$m" "$REPEATS" "$SIZES" >>"$results" <<'PY' || daemon_failed "$tmp/sinkd-$m.log"
import http.client, json, random, statistics, sys, time
port, model, repeats, sizes = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4].split()

def call(method, path, body=None, raw=False):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    data = body if raw or body is None else json.dumps(body).encode()
    c.request(method, path, body=data)
    r = c.getresponse()
    out = r.read()
    c.close()
    if r.status != 200:
        raise SystemExit(f"{method} {path}: {r.status} {out[:300]!r}")
    return out, r

call("GET", "/v1/models")
rng = random.Random(7)
def feed(sid, ids):
    """Puts ids into a session in prompt chunks; each chunk's completion of
    one token (the least a completion asks) joins the stream too."""
    for i in range(0, len(ids), 2048):
        call("POST", "/v1/completions",
             {"session_id": sid, "prompt": ids[i:i + 2048], "max_tokens": 1, "temperature": 0})

def new_session():
    return json.loads(call("POST", "/v1/sessions", {})[0])["id"]

for n in map(int, sizes):
    ids = [rng.randrange(3, 500) for _ in range(n)]
    src = new_session()
    feed(src, ids)
    info = json.loads(call("GET", f"/v1/sessions/{src}")[0])
    snap_s, restore_s, prefill_s, size = [], [], [], 0
    for rep in range(repeats):
        # prefill: a fresh session fed the same tokens, then one more token
        t = time.perf_counter()
        s2 = new_session()
        feed(s2, ids)
        call("POST", "/v1/completions", {"session_id": s2, "prompt": [5], "max_tokens": 1})
        prefill_s.append(time.perf_counter() - t)
        call("DELETE", f"/v1/sessions/{s2}")
        # snapshot, then restore and one more token
        t = time.perf_counter()
        snap, _ = call("GET", f"/v1/sessions/{src}/snapshot")
        snap_s.append(time.perf_counter() - t)
        size = len(snap)
        t = time.perf_counter()
        rid = json.loads(call("POST", f"/v1/sessions/restore?id=abc{rep:03d}{n}", snap, raw=True)[0])["id"]
        call("POST", "/v1/completions", {"session_id": rid, "prompt": [5], "max_tokens": 1})
        restore_s.append(time.perf_counter() - t)
        call("DELETE", f"/v1/sessions/{rid}")
    row = {"model": model, "stream_tokens": info["tokens_seen"], "resident": info["tokens_resident"],
           "snapshot_bytes": size,
           "snapshot_s": [min(snap_s), statistics.median(snap_s)],
           "restore_s": [min(restore_s), statistics.median(restore_s)],
           "prefill_s": [min(prefill_s), statistics.median(prefill_s)],
           "speedup": [min(p / r for p, r in zip(prefill_s, restore_s)),
                       statistics.median(p / r for p, r in zip(prefill_s, restore_s))]}
    print(json.dumps(row), flush=True)
    call("DELETE", f"/v1/sessions/{src}")
PY
	stop_daemon
done

# ---- store rows -------------------------------------------------------------
if has_part store; then
	for st in $STORES; do
		case $st in
		folder) ;;
		redis)
			if ! command -v "$REDIS_SERVER" >/dev/null; then
				echo "redis rows skipped: $REDIS_SERVER not found" >>"$notes"
				continue
			fi
			if [ -z "$rpid" ]; then
				rport=$(free_port)
				mkdir -p "$tmp/redis"
				"$REDIS_SERVER" --port "$rport" --bind 127.0.0.1 --save "" --appendonly no \
					--dir "$tmp/redis" >"$tmp/redis.log" 2>&1 &
				rpid=$!
				up=
				for _ in $(seq 1 100); do
					python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1",int(sys.argv[1])),1).close()' \
						"$rport" 2>/dev/null && up=1 && break
					sleep 0.1
				done
				if [ -z "$up" ]; then
					echo "redis-server did not listen on 127.0.0.1:$rport:" >&2
					cat "$tmp/redis.log" >&2
					exit 1
				fi
			fi
			;;
		*) echo "unknown store $st (folder, redis)" >&2; exit 2 ;;
		esac
		for m in $MODELS; do
			path=$(model_path "$m")
			sdir=
			if [ "$st" = folder ]; then
				sdir="$tmp/store-$m"
				mkdir -p "$sdir"
				where="sessions: {store_dir: \"$sdir\"}"
			else
				where="sessions: {store: \"redis://127.0.0.1:$rport/0\"}"
			fi
			log="$tmp/sinkd-$st-$m.log"
			start_daemon "$m" "$path" "$log" "$where" \
				"scheduler: {session_ttl_s: 3600, session_offload_s: 1}"
			python3 - "$port" "$m" "$st" "$REPEATS" "$STORE_SIZES" "$sdir" >>"$store_results" <<'PY' || daemon_failed "$log"
import http.client, json, os, random, statistics, sys, time
port, model, store, repeats, sizes, sdir = (int(sys.argv[1]), sys.argv[2], sys.argv[3],
                                            int(sys.argv[4]), sys.argv[5].split(), sys.argv[6])

def call(method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    c.request(method, path, body=None if body is None else json.dumps(body).encode())
    r = c.getresponse()
    out = r.read()
    c.close()
    if r.status != 200:
        raise SystemExit(f"{store} {model}: {method} {path}: {r.status} {out[:300]!r}")
    return out

def metrics():
    m = {}
    for line in call("GET", "/metrics").decode().splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            m[k] = float(v)
    return m

def delta(a, b, k):
    return b.get(k, 0.0) - a.get(k, 0.0)

call("GET", "/v1/models")
rng = random.Random(7)
def feed(sid, ids):
    """As the API rows feed a session: prompt chunks of 2048, one token each."""
    for i in range(0, len(ids), 2048):
        call("POST", "/v1/completions",
             {"session_id": sid, "prompt": ids[i:i + 2048], "max_tokens": 1, "temperature": 0})

OFF, RST = "sinkd_session_offload_seconds", "sinkd_session_restore_seconds"
for n in map(int, sizes):
    ids = [rng.randrange(3, 500) for _ in range(n)]
    off_s, req_s, rst_s, resident_s, rec_bytes, file_bytes = [], [], [], [], [], []
    info = None
    for rep in range(repeats):
        m0 = metrics()
        sid = json.loads(call("POST", "/v1/sessions", {}))["id"]
        feed(sid, ids)
        info = json.loads(call("GET", f"/v1/sessions/{sid}"))
        # idle: the daemon exports it and writes it to the store after 1 s
        t0 = time.perf_counter()
        while True:
            m1 = metrics()
            if delta(m0, m1, "sinkd_session_offloads_total") >= 1:
                break
            if delta(m0, m1, "sinkd_session_offload_failures_total") >= 1:
                raise SystemExit(f"{store} {model} n={n}: session {sid}: the offload failed "
                                 "(sinkd_session_offload_failures_total grew)")
            if time.perf_counter() - t0 > 120:
                raise SystemExit(f"{store} {model} n={n}: session {sid} not offloaded "
                                 "120 s after its last request")
            time.sleep(0.05)
        if delta(m0, m1, "sinkd_session_offloads_total") != 1 or delta(m0, m1, OFF + "_count") != 1:
            raise SystemExit(f"{store} {model} n={n}: expected one offload, metrics say "
                             f"{delta(m0, m1, 'sinkd_session_offloads_total'):g}")
        where = json.loads(call("GET", f"/v1/sessions/{sid}"))
        if not where.get("offloaded"):
            raise SystemExit(f"{store} {model} n={n}: session {sid} counted as offloaded "
                             f"but GET /v1/sessions/{sid} says {where}")
        off_s.append(delta(m0, m1, OFF + "_sum"))
        rec_bytes.append(int(delta(m0, m1, "sinkd_session_snapshot_bytes_total")))
        if sdir:
            f = os.path.join(sdir, sid + ".snap")
            file_bytes.append(os.path.getsize(f) if os.path.exists(f) else None)
        # the request that brings it back
        t = time.perf_counter()
        call("POST", "/v1/completions", {"session_id": sid, "prompt": [5], "max_tokens": 1})
        req_s.append(time.perf_counter() - t)
        m2 = metrics()
        if (delta(m1, m2, 'sinkd_session_restores_total{source="store"}') != 1
                or delta(m1, m2, RST + "_count") != 1):
            raise SystemExit(f"{store} {model} n={n}: session {sid}: the completion did not "
                             "count one restore from the store")
        rst_s.append(delta(m1, m2, RST + "_sum"))
        # the same request on the (now resident) session, for scale
        t = time.perf_counter()
        call("POST", "/v1/completions", {"session_id": sid, "prompt": [5], "max_tokens": 1})
        resident_s.append(time.perf_counter() - t)
        call("DELETE", f"/v1/sessions/{sid}")
    mm = lambda v: [min(v), statistics.median(v)]
    row = {"store": store, "model": model, "stream_tokens": info["tokens_seen"],
           "resident": info["tokens_resident"], "record_bytes": statistics.median(rec_bytes),
           "record_bytes_all": rec_bytes, "offload_s": mm(off_s), "restore_request_s": mm(req_s),
           "restore_s_daemon": mm(rst_s), "resident_request_s": mm(resident_s)}
    if sdir:
        row["file_bytes"] = file_bytes
    print(json.dumps(row), flush=True)
PY
			stop_daemon
			if [ -n "${KEEP_LOGS:-}" ]; then cp "$log" "$KEEP_LOGS/"; fi
		done
	done
fi

python3 - "$results" "$REPEATS" "$store_results" "$notes" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
store_rows = [json.loads(l) for l in open(sys.argv[3])]
notes = [l.strip() for l in open(sys.argv[4]) if l.strip()]
f = lambda p: f"{p[0]:.4f} / {p[1]:.4f}"
if rows:
    print(f"session snapshot and restore against re-prefill, {sys.argv[2]} repeats (min / median)")
    print("| model | stream tokens | resident | snapshot bytes | snapshot s | restore s | re-prefill s | re-prefill / restore |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['model']} | {r['stream_tokens']} | {r['resident']} | {r['snapshot_bytes']:,} | "
              f"{f(r['snapshot_s'])} | {f(r['restore_s'])} | {f(r['prefill_s'])} | "
              f"{r['speedup'][0]:.1f}x / {r['speedup'][1]:.1f}x |")
if store_rows or notes:
    if rows:
        print()
    print(f"session store offload (after 1 s idle) and restore on the next request, "
          f"{sys.argv[2]} repeats (min / median)")
    print("| store | model | stream tokens | record bytes | offload s (min / median) | restore request s | restore s (daemon) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in store_rows:
        print(f"| {r['store']} | {r['model']} | {r['stream_tokens']} | {int(r['record_bytes']):,} | "
              f"{f(r['offload_s'])} | {f(r['restore_request_s'])} | {f(r['restore_s_daemon'])} |")
    for n in notes:
        print(n)
out = {"bench": "session-restore", "repeats": int(sys.argv[2]), "rows": rows,
       "store_rows": store_rows}
if notes:
    out["notes"] = notes
print(json.dumps(out))
PY
