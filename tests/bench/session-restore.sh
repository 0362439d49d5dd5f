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
# Environment: BUILD (build dir, default build-bench-restore, configured and
# built here when missing), REPEATS (3), SIZES ("1024 4096 32768"),
# MODELS ("stories260K synth134M-f16").
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${SINKD_SHARED:-$ROOT/../shared}
BUILD=${BUILD:-$ROOT/build-bench-restore}
REPEATS=${REPEATS:-3}
SIZES=${SIZES:-"1024 4096 32768"}
MODELS=${MODELS:-"stories260K synth134M-f16"}

if [ ! -x "$BUILD/src/sinkd" ] || [ ! -x "$BUILD/src/tools/sinkd-mkmodel" ]; then
	[ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" --buildtype=release -Dcuda=disabled >/dev/null
	ninja -C "$BUILD" src/sinkd src/tools/sinkd-mkmodel >/dev/null
fi
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT

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
: >"$results"
for m in $MODELS; do
	path=$(model_path "$m")
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	cat >"$tmp/sinkd.yaml" <<YAML
server: {listen: "127.0.0.1:$port", tls: {enabled: false}, drain_grace_s: 0}
model: {path: "$path"}
inference: {quantization: {enabled: true, bits: 8, full_precision_recent: 128}}
limits: {max_tokens: 16, max_sessions: 64}
scheduler: {session_ttl_s: 3600}
logging: {level: warn}
YAML
	"$BUILD/src/sinkd" --config "$tmp/sinkd.yaml" >"$tmp/sinkd-$m.log" 2>&1 &
	pid=$!
	for _ in $(seq 1 600); do
		curl -s -o /dev/null "http://127.0.0.1:$port/ready" && break
		sleep 0.1
	done
	python3 - "$port" "$m" "$REPEATS" "$SIZES" >>"$results" <<'PY'
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
	kill -TERM "$pid"
	wait "$pid" || true
	pid=
done

python3 - "$results" "$REPEATS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"session snapshot and restore against re-prefill, {sys.argv[2]} repeats (min / median)")
print("| model | stream tokens | resident | snapshot bytes | snapshot s | restore s | re-prefill s | re-prefill / restore |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for r in rows:
    f = lambda p: f"{p[0]:.4f} / {p[1]:.4f}"
    print(f"| {r['model']} | {r['stream_tokens']} | {r['resident']} | {r['snapshot_bytes']:,} | "
          f"{f(r['snapshot_s'])} | {f(r['restore_s'])} | {f(r['prefill_s'])} | "
          f"{r['speedup'][0]:.1f}x / {r['speedup'][1]:.1f}x |")
print(json.dumps({"bench": "session-restore", "repeats": int(sys.argv[2]), "rows": rows}))
PY
