# Helpers shared by the integration tests (sourced, not run): a
# self-signed certificate made with the openssl CLI, a free port, starting
# the real daemon on 127.0.0.1 with a temp YAML config, JSON checks.
# Needs: SINKD_BIN, SINKD_SHARED, curl, openssl, python3.
# Sourced with base_only=1 (tests of the command line, no server), it stops
# after the common part: $bin, $shared, $model, $tmp (removed at exit),
# check and finish; then it needs no tools.

bin=${SINKD_BIN:?}
shared=${SINKD_SHARED:?}
model="$shared/models/stories260K.gguf"
tmp=$(mktemp -d)
daemon_pids=()
cleanup() {
	for p in "${daemon_pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
n_checks=0
n_deferred=0
check() { # description, command...
	local what=$1
	shift
	n_checks=$((n_checks + 1))
	if "$@"; then echo "ok - $what"; else echo "not ok - $what"; fails=$((fails + 1)); fi
}
finish() {
	if [ "$n_deferred" -gt 0 ]; then
		run_deferred
		local f=$?
		fails=$((fails + f))
		n_checks=$((n_checks + n_deferred))
	fi
	echo "$((n_checks - fails)) passed, $fails failed"
	# A failure shows the end of each daemon's log (a sanitizer report, a
	# crash), which the temporary folder takes with it.
	if [ "$fails" -ne 0 ]; then
		for f in "$tmp"/*.log; do
			[ -f "$f" ] || continue
			echo "--- last lines of $(basename "$f"):"
			tail -n 40 "$f" | cut -c1-400
		done
	fi
	[ "$fails" -eq 0 ]
	exit $?
}
[ "${base_only:-0}" = 1 ] && return 0

for tool in curl openssl python3; do
	command -v "$tool" >/dev/null 2>&1 || { echo "SKIP: $tool is missing"; exit 77; }
done
# The system python starts far faster than a version-manager shim.
py=$(command -v /usr/bin/python3 || command -v python3)
# https_json.py (HTTPS calls to the daemon) for the tests' Python parts
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)${PYTHONPATH:+:$PYTHONPATH}"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
	-addext "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1" \
	-keyout "$tmp/key.pem" -out "$tmp/cert.pem" 2>/dev/null || { echo "openssl failed"; exit 1; }

free_port() {
	"$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# write_config FILE PORT [LISTEN_HOST] — TLS on, one API key (test-key-1), json logs.
api_key=test-key-1
api_digest=$(printf %s "$api_key" | sha256sum | cut -d' ' -f1)
write_config() {
	local file=$1 port=$2 host=${3:-127.0.0.1}
	cat >"$file" <<YAML
server:
  listen: "$host:$port"
  threads: 2
  sse_keepalive_s: 1
  api_keys: ["sha256:$api_digest"]
  tls:
    enabled: true
    cert_file: "$tmp/cert.pem"
    key_file: "$tmp/key.pem"
model:
  path: "$model"
logging:
  level: info
  format: json
YAML
}

# start_daemon NAME CONFIG [--set k=v ...]: starts, waits for /ready (or exit),
# sets $pid and $log.  Returns 1 if the daemon exited.
start_daemon() {
	local name=$1 cfg=$2
	shift 2
	log="$tmp/$name.log"
	"$bin" --config "$cfg" "$@" >"$log" 2>&1 &
	pid=$!
	daemon_pids+=("$pid")
	local port
	port=$(sed -n 's/.*listen: "\(.*\)".*/\1/p' "$cfg" | sed 's/.*://')
	base="https://127.0.0.1:$port"
	case $(sed -n 's/.*listen: "\(.*\)".*/\1/p' "$cfg") in \[*) base="https://[::1]:$port" ;; esac
	for _ in $(seq 1 300); do
		kill -0 "$pid" 2>/dev/null || { sed 's/^/   log: /' "$log" | tail -5; return 1; }
		[ "$(curl -sk -o /dev/null -w '%{http_code}' "$base/ready")" = 200 ] && return 0
		sleep 0.05
	done
	return 1
}

stop_daemon() { # pid → exit status
	kill -TERM "$1" 2>/dev/null
	wait "$1"
}

# http METHOD PATH [curl args...]: body in $tmp/body, headers in $tmp/hdr, status echoed.
http() {
	local method=$1 path=$2
	shift 2
	curl -sk -X "$method" -o "$tmp/body" -D "$tmp/hdr" -w '%{http_code}' "$@" "$base$path"
}
auth=(-H "Authorization: Bearer $api_key")

# Deferred JSON checks: python starts slowly on a loaded machine, so each
# check saves its file and expression, and finish() evaluates them all in
# one python run.  jcheck: j is the parsed JSON.  scheck: ev is the list of
# SSE data events ("[DONE]" kept as a string), raw the whole text.
# pcheck: a python expression with json, os and tmp in scope.
mkdir -p "$tmp/checks"
defer() { # kind description file expr
	n_deferred=$((n_deferred + 1))
	local d
	d=$(printf '%s/checks/%04d' "$tmp" "$n_deferred")
	mkdir -p "$d"
	printf %s "$1" >"$d/kind"
	printf %s "$2" >"$d/desc"
	[ -n "$3" ] && cp "$3" "$d/file"
	printf %s "$4" >"$d/expr"
}
jcheck() { defer json "$1" "$2" "$3"; }
scheck() { defer sse "$1" "$2" "$3"; }
pcheck() { defer py "$1" "" "$2"; }
run_deferred() {
	"$py" - "$tmp" <<'PY'
import json, os, sys
tmp = sys.argv[1]
root = os.path.join(tmp, "checks")
failed = 0
for name in sorted(os.listdir(root)):
    d = os.path.join(root, name)
    rd = lambda f: open(os.path.join(d, f)).read()
    kind, desc, expr = rd("kind"), rd("desc"), rd("expr")
    env = {"json": json, "os": os, "tmp": tmp}
    try:
        if kind == "json":
            env["j"] = json.loads(rd("file"))
        elif kind == "sse":
            raw = rd("file")
            ev = []
            for line in raw.split("\n"):
                if line.startswith("data: "):
                    ev.append(line[6:] if line[6:] == "[DONE]" else json.loads(line[6:]))
            env.update(ev=ev, raw=raw)
        ok = bool(eval(expr, env))
    except Exception as e:
        ok = False
        print("   error:", repr(e))
    print(("ok - " if ok else "not ok - ") + desc)
    if not ok:
        failed += 1
        if os.path.exists(os.path.join(d, "file")):
            print("   got:", rd("file")[:500].replace("\n", "\\n"))
sys.exit(failed)
PY
}
header() { # NAME → value from $tmp/hdr
	grep -i "^$1:" "$tmp/hdr" | head -1 | cut -d' ' -f2- | tr -d '\r'
}
metric() { # NAME (with labels) → value from a fresh /metrics
	curl -sk "${auth[@]}" "$base/metrics" | grep -F "$1 " | grep -v '^#' | head -1 | awk '{print $NF}'
}
# wait_for CMD...: polls CMD for up to 10 s (a loaded machine is slow).
wait_for() {
	for _ in $(seq 1 200); do
		"$@" && return 0
		sleep 0.05
	done
	return 1
}
# wait_metric NAME OP VALUE: up to 10 s for the metric to compare true (awk).
wait_metric() {
	local v
	for _ in $(seq 1 200); do
		v=$(metric "$1")
		[ -n "$v" ] && awk -v a="$v" -v b="$3" "BEGIN { exit !(a $2 b) }" && return 0
		sleep 0.05
	done
	echo "   $1 = ${v:-missing}"
	return 1
}
