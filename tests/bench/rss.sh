#!/usr/bin/env bash
# Resident memory as a user measures it (run by hand, never part of the test
# suite): the daemon itself serving one request over HTTPS, and `sinkd
# generate`, each on the CPU backend, against the issue's bound: VmHWM at
# most 1.1 x the file + the session's KV bytes + 32 MB.
#
#   tests/bench/rss.sh [MODEL.gguf ...]
#   tests/bench/rss.sh --jsonl MODEL.gguf ...   one JSON object per
#       measurement on stdout, no table (engine-bench.sh, vs-llamacpp.sh)
#
# Without models, the synthetic 134M Llama of engine-bench.sh is made in F16,
# Q8_0 and Q4_K with sinkd-mkmodel.  Per model:
#   daemon    sinkd --config (TLS, one API key, model.backend cpu); a
#             persistent session gets the prompt and GEN greedy tokens
#             (POST /v1/sessions/{id}/append); KV bytes from GET
#             /v1/sessions/{id} (bytes_resident); then VmHWM and
#             /proc/PID/smaps summed by kind (tests/bench/rss-smaps.py).
#   generate  sinkd generate of the same prompt and GEN tokens, watched
#             while it runs (largest resident set seen, VmHWM); KV bytes
#             from its --stats-json line.
# Kinds: model (the file's pages), cuda_libs (libcu*/libnv*: none on a
# build with the CUDA module), files (other libraries), anon (heap,
# anonymous maps, copy-on-write pages).  Prints a table and one JSON line.
#
# Environment: BUILD (build dir, default build-rss: release, CUDA where
# nvcc is), SINKD (the binary measured, default BUILD's src/sinkd: another
# build's for a before/after), TYPES ("f16 q8_0 q4_k"), GEN (64), THREADS (1).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${SINKD_SHARED:-$ROOT/../shared}
BUILD=${BUILD:-$ROOT/build-rss}
TYPES=${TYPES:-"f16 q8_0 q4_k"}
GEN=${GEN:-64}
THREADS=${THREADS:-1}
PROMPT="Once upon a time there was a little girl who lived in a village near the forest."
SMAPS="$ROOT/tests/bench/rss-smaps.py"
JSONL=0
[ "${1:-}" = "--jsonl" ] && { JSONL=1; shift; }
TMP=$(mktemp -d)
DAEMON_PID=""
trap '[ -n "$DAEMON_PID" ] && kill -9 "$DAEMON_PID" 2>/dev/null; rm -rf "$TMP"' EXIT
log() { echo "rss: $*" >&2; }

if [ ! -f "$BUILD/build.ninja" ]; then
	PATH=/usr/local/cuda/bin:$PATH meson setup "$BUILD" -Dbuildtype=release >/dev/null
fi
ninja -C "$BUILD" src/sinkd src/tools/sinkd-mkmodel >/dev/null
SINKD=${SINKD:-$BUILD/src/sinkd}

MODELS=("$@")
if [ ${#MODELS[@]} -eq 0 ]; then
	for type in $TYPES; do
		out="$TMP/synth134M-$type.gguf"
		log "making $out"
		"$BUILD/src/tools/sinkd-mkmodel" --out "$out" \
			--vocab "$SHARED/vocab/ggml-vocab-llama-spm.gguf" \
			--dim 768 --layers 12 --heads 12 --ffn 2048 --type "$type" >/dev/null
		MODELS+=("$out")
	done
fi

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
	-keyout "$TMP/key.pem" -out "$TMP/cert.pem" 2>/dev/null
KEY=rss-bench-key
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
BASE="https://127.0.0.1:$PORT"
api() { # METHOD PATH [JSON] -> body on stdout
	curl -sfk -X "$1" -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
		${3:+-d "$3"} "$BASE$2"
}

# model -> one JSON object: the daemon after one request
measure_daemon() {
	local model=$1 cfg="$TMP/sinkd.yaml"
	cat >"$cfg" <<YAML
server:
  listen: "127.0.0.1:$PORT"
  api_keys: ["sha256:$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)"]
  tls:
    enabled: true
    cert_file: "$TMP/cert.pem"
    key_file: "$TMP/key.pem"
model:
  path: "$model"
  backend: cpu
engine:
  threads: $THREADS
YAML
	"$SINKD" --config "$cfg" >"$TMP/daemon.log" 2>&1 &
	DAEMON_PID=$!
	for _ in $(seq 600); do
		curl -sfk -o /dev/null "$BASE/ready" && break
		kill -0 "$DAEMON_PID" 2>/dev/null || { tail -5 "$TMP/daemon.log" >&2; exit 1; }
		sleep 0.1
	done
	local sid
	sid=$(api POST /v1/sessions | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
	api POST "/v1/sessions/$sid/append" \
		"{\"text\":\"$PROMPT\",\"generate\":{\"max_tokens\":$GEN,\"temperature\":0}}" >/dev/null
	api GET "/v1/sessions/$sid" >"$TMP/session.json"
	python3 "$SMAPS" snapshot "$DAEMON_PID" --model "$model" >"$TMP/snap.json"
	kill -TERM "$DAEMON_PID"
	wait "$DAEMON_PID" || true
	DAEMON_PID=""
	python3 - "$TMP/snap.json" "$TMP/session.json" "$model" daemon <<'EOF'
import json, os, sys
snap, sess = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
print(json.dumps({"model": os.path.basename(sys.argv[3]), "what": sys.argv[4],
                  "file_bytes": os.path.getsize(sys.argv[3]),
                  "kv_bytes": sess["bytes_resident"], "kv_bytes_reserved": sess["bytes_reserved"],
                  **snap}))
EOF
}

# model -> one JSON object: sinkd generate, watched while it runs
measure_generate() {
	local model=$1
	python3 "$SMAPS" watch --model "$model" -- "$SINKD" generate --model "$model" \
		--prompt "$PROMPT" --max-tokens "$GEN" --temperature 0 --threads "$THREADS" \
		--set model.backend=cpu --stats-json >"$TMP/snap.json" 2>"$TMP/generate.err" ||
		{ tail -5 "$TMP/generate.err" >&2; exit 1; }
	python3 - "$TMP/snap.json" "$TMP/generate.err" "$model" generate <<'EOF'
import json, os, sys
snap = json.load(open(sys.argv[1]))
stats = [json.loads(l) for l in open(sys.argv[2], errors="replace") if l.startswith('{"prompt_tokens"')][-1]
print(json.dumps({"model": os.path.basename(sys.argv[3]), "what": sys.argv[4],
                  "file_bytes": os.path.getsize(sys.argv[3]),
                  "kv_bytes": stats.get("kv_bytes_resident", 0),
                  "kv_bytes_reserved": stats.get("kv_bytes_bound", 0),
                  **snap}))
EOF
}

RESULTS="$TMP/rss.jsonl"
: >"$RESULTS"
for model in "${MODELS[@]}"; do
	log "$(basename "$model"): daemon"
	measure_daemon "$model" >>"$RESULTS"
	log "$(basename "$model"): generate"
	measure_generate "$model" >>"$RESULTS"
done
if [ "$JSONL" = 1 ]; then
	cat "$RESULTS"
	exit 0
fi

python3 - "$RESULTS" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$SINKD" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
mb = 1 / 2**20
print(f"run at {sys.argv[2]}; {sys.argv[3]}, model.backend cpu; "
      f"1-min load average at the end: {open('/proc/loadavg').read().split()[0]}")
print(f"{'model':<24}{'what':>9}{'file MB':>9}{'KV MB':>7}{'VmHWM MB':>10}{'x file':>8}"
      f"{'limit MB':>10}{'model':>8}{'anon':>8}{'libs':>7}{'CUDA':>6}  ok")
out = []
for r in rows:
    s = r["smaps"]
    limit = 1.1 * r["file_bytes"] + r["kv_bytes"] + 32e6
    ok = r["vm_hwm"] <= limit and not r["cuda_mapped"]
    print(f"{r['model']:<24}{r['what']:>9}{r['file_bytes'] * mb:>9.1f}{r['kv_bytes'] * mb:>7.1f}"
          f"{r['vm_hwm'] * mb:>10.1f}{r['vm_hwm'] / r['file_bytes']:>8.2f}{limit * mb:>10.1f}"
          f"{s['model'] * mb:>8.1f}{s['anon'] * mb:>8.1f}{s['files'] * mb:>7.1f}"
          f"{s['cuda_libs'] * mb:>6.1f}  {'yes' if ok else 'NO'}")
    out.append({k: r[k] for k in ("model", "what", "file_bytes", "kv_bytes", "kv_bytes_reserved",
                                  "vm_hwm", "smaps", "cuda_mapped")} | {"limit": int(limit), "ok": ok})
print("target: VmHWM <= 1.1 x file + KV bytes resident + 32 MB, no CUDA library mapped "
      "(model/anon/libs/CUDA: resident MB by kind from smaps)")
print(json.dumps({"time": sys.argv[2], "rows": out}, separators=(",", ":")))
EOF
