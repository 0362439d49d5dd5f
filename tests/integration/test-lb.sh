#!/usr/bin/env bash
# Two sinkd instances (A, B) behind the shipped balancer configs, everything
# on 127.0.0.1 with TLS on both hops (the balancers verify the instances
# against server-lib.sh's self-signed certificate as CA; the clients verify
# the balancer against the same certificate).  Run once behind nginx
# (deploy/nginx/sinkd.conf), then behind HAProxy (deploy/haproxy.cfg), with
# only the @PLACEHOLDER@ tokens, the listen address and the log / socket
# paths substituted.
#
# Each run has two phases:
#  1. Sessions, while both instances are steady: at least 8 persistent
#     sessions (more, up to 16, until each instance holds two) made with
#     PUT /v1/sessions/{id} (client-chosen ids of 32 and 8 hex digits)
#     through the balancer; a second PUT of each (409: it reached the same
#     instance), streamed and plain appends, /v1/completions with session_id
#     + X-Session-Id, GET.  Every request of a session must be answered by
#     one instance (the instances' per-request log lines, by X-Request-Id).
#  2. Load: 200 streaming completions (a unique X-Request-Id each,
#     max_tokens 64..512 and every sixth 1536, ignore_eos) from a python3
#     stdlib client in bursts of 12 every 1.3 s (up to 16 at a time, ~22 s),
#     while A gets five SIGHUPs (its YAML rewritten before each: valid, YAML
#     syntax error, valid, value out of range, valid) and B is drained with
#     SIGTERM (it must exit 0), then started again on the same port.  Two
#     long streams sent straight to B just before its SIGTERM make sure the
#     drain has streams to finish.
# Sessions and the drain: both instances share a session store
# (sessions.store_dir), so B's drain writes its sessions there; once B has
# exited, an append on each of B's sessions through the balancer must be
# answered (by A, which restores them from the store).  The routing checks
# run in phase 1, before B is drained; during phase 2 A's sessions get a
# streamed append after every HUP and a GET at the end: they keep working
# throughout and stay on A.
# Asserted for the load: no failed or truncated stream (HTTP 200,
# usage.completion_tokens == max_tokens, no error event, data: [DONE] last);
# every request id has exactly one answering (non-503) line across the
# instances' logs, and it is a 200 (a 503 line: the balancer retried the
# request elsewhere).  The figures (requests, per instance, retried, in
# flight at SIGTERM) are printed on "lb-figures:" lines.
# LB_KEEP_DIR=DIR keeps the logs and results of a run.
set -u
. "$(dirname "$0")/server-lib.sh"

for tool in nginx haproxy; do
	command -v "$tool" >/dev/null 2>&1 || { echo "SKIP: $tool is missing (deploy/install-deps.sh)"; exit 77; }
done
root=${SINKD_SOURCE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
deploy="$root/deploy"
cacert=(--cacert "$tmp/cert.pem")
lb_pids=()
lb_cleanup() {
	for p in "${lb_pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	# LB_KEEP_DIR=DIR keeps the logs and results of the run there.
	[ -n "${LB_KEEP_DIR:-}" ] && mkdir -p "$LB_KEEP_DIR" && cp -r "$tmp"/. "$LB_KEEP_DIR"/
	cleanup
}
trap lb_cleanup EXIT

# ---- the two instances -----------------------------------------------------------
port_a=$(free_port)
port_b=$(free_port)
while [ "$port_b" = "$port_a" ]; do port_b=$(free_port); done
write_config "$tmp/b.yaml" "$port_b"
has_key() { "$bin" --check-config "$tmp/b.yaml" --set "$1" >/dev/null 2>&1; }
watch_key=0
has_key config.watch=false && watch_key=1
# A's config, variant k: 0,1,3,5 valid (sse_keepalive_s differs), 2 a YAML
# syntax error, 4 a value out of range.
write_a_config() {
	write_config "$tmp/a.yaml.new" "$port_a"
	case $1 in
	1) sed -i 's/sse_keepalive_s: 1/sse_keepalive_s: 2/' "$tmp/a.yaml.new" ;;
	2) sed -i 's/threads: 2/threads: [2/' "$tmp/a.yaml.new" ;;
	3) sed -i 's/sse_keepalive_s: 1/sse_keepalive_s: 3/' "$tmp/a.yaml.new" ;;
	4) sed -i 's/sse_keepalive_s: 1/sse_keepalive_s: 0/' "$tmp/a.yaml.new" ;;
	esac
	printf 'sessions:\n  store_dir: "%s"\n' "$tmp/store" >>"$tmp/a.yaml.new"
	# Edits must reach A through SIGHUP only: no file watch here.
	[ "$watch_key" = 1 ] && printf 'config:\n  watch: false\n' >>"$tmp/a.yaml.new"
	mv "$tmp/a.yaml.new" "$tmp/a.yaml"
}
write_a_config 0
[ "$watch_key" = 1 ] && printf 'config:\n  watch: false\n' >>"$tmp/b.yaml"
printf 'sessions:\n  store_dir: "%s"\n' "$tmp/store" >>"$tmp/b.yaml"

start_daemon A "$tmp/a.yaml"
check "instance A ready" [ $? -eq 0 ]
pid_a=$pid log_a=$log base_a=$base
n_b=1
start_daemon B1 "$tmp/b.yaml"
check "instance B ready" [ $? -eq 0 ]
pid_b=$pid base_b=$base

inst_metric() { # BASE NAME → value, empty if absent
	curl -sk "${auth[@]}" "$1/metrics" | grep -v '^#' | grep -E "^$2( |\{)" | head -1 | awk '{print $NF}'
}

# ---- the balancers ---------------------------------------------------------------
placeholders_left() { grep -n '^[^#]*@[A-Z0-9_]*@' "$1"; } # outside comments

start_nginx() {
	local d="$tmp/nginx"
	mkdir -p "$d"
	lb_port=$(free_port)
	sed -e "s|@BACKEND_1@|127.0.0.1:$port_a|g" -e "s|@BACKEND_2@|127.0.0.1:$port_b|g" \
		-e "s|@SERVER_NAME@|localhost|g" -e "s|@TLS_CERT@|$tmp/cert.pem|g" \
		-e "s|@TLS_KEY@|$tmp/key.pem|g" -e "s|@BACKEND_CA@|$tmp/cert.pem|g" \
		-e "s|@BACKEND_TLS_NAME@|localhost|g" -e "s|/var/log/nginx/|$d/|g" \
		-e "s|^\( *listen\) 443 ssl;|\1 127.0.0.1:$lb_port ssl;|" \
		"$deploy/nginx/sinkd.conf" >"$d/sinkd.conf"
	if placeholders_left "$d/sinkd.conf"; then return 1; fi
	grep -q "listen 127.0.0.1:$lb_port ssl;" "$d/sinkd.conf" || return 1
	{
		[ "$(id -u)" = 0 ] && echo "user root;"
		cat <<EOF
daemon off;
master_process off;
worker_processes 1;
pid $d/nginx.pid;
error_log $d/error.log info;
events { worker_connections 1024; }
http {
    client_body_temp_path $d/body;
    proxy_temp_path $d/proxy;
    fastcgi_temp_path $d/fastcgi;
    uwsgi_temp_path $d/uwsgi;
    scgi_temp_path $d/scgi;
    include $d/sinkd.conf;
}
EOF
	} >"$d/nginx.conf"
	nginx -p "$d" -e "$d/error.log" -c "$d/nginx.conf" >"$d/stdout" 2>&1 &
	lb_pid=$!
	lb_pids+=("$lb_pid")
	lb_log="$d/sinkd-access.log"
	lb_wait_ready
}

start_haproxy() {
	local d="$tmp/haproxy"
	mkdir -p "$d"
	lb_port=$(free_port)
	cat "$tmp/cert.pem" "$tmp/key.pem" >"$d/frontend.pem"
	sed -e "s|@BACKEND_1@|127.0.0.1:$port_a|g" -e "s|@BACKEND_2@|127.0.0.1:$port_b|g" \
		-e "s|@TLS_PEM@|$d/frontend.pem|g" -e "s|@BACKEND_CA@|$tmp/cert.pem|g" \
		-e "s|@BACKEND_TLS_NAME@|localhost|g" -e "s|/run/haproxy/|$d/|g" \
		-e "s|^\( *bind\) :443 |\1 127.0.0.1:$lb_port |" \
		"$deploy/haproxy.cfg" >"$d/haproxy.cfg"
	if placeholders_left "$d/haproxy.cfg"; then return 1; fi
	grep -q "bind 127.0.0.1:$lb_port " "$d/haproxy.cfg" || return 1
	haproxy -c -q -f "$d/haproxy.cfg" || return 1
	haproxy -db -f "$d/haproxy.cfg" >"$d/haproxy.log" 2>&1 &
	lb_pid=$!
	lb_pids+=("$lb_pid")
	lb_log="$d/haproxy.log"
	lb_wait_ready || return 1
	# Both servers of both backends UP (active checks) before the load.
	"$py" - "$d/sinkd-admin.sock" <<'PY'
import socket, sys, time
deadline = time.time() + 20
while time.time() < deadline:
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect(sys.argv[1])
        s.sendall(b"show stat\n")
        data = b""
        while True:
            c = s.recv(65536)
            if not c:
                break
            data += c
        rows = [l.split(",") for l in data.decode().splitlines() if l and l[0] != "#"]
        srv = [r for r in rows if len(r) > 17 and r[1] not in ("FRONTEND", "BACKEND")]
        if srv and all(r[17] == "UP" for r in srv):
            sys.exit(0)
    except OSError:
        pass
    time.sleep(0.2)
sys.exit(1)
PY
}

lb_wait_ready() { # the balancer answers /ready through an instance
	for _ in $(seq 1 200); do
		kill -0 "$lb_pid" 2>/dev/null || return 1
		[ "$(curl -s "${cacert[@]}" -o /dev/null -w '%{http_code}' "https://127.0.0.1:$lb_port/ready")" = 200 ] && return 0
		sleep 0.05
	done
	return 1
}

stop_lb() {
	kill -TERM "$lb_pid" 2>/dev/null
	for _ in $(seq 1 100); do kill -0 "$lb_pid" 2>/dev/null || break; sleep 0.05; done
	kill -9 "$lb_pid" 2>/dev/null
	wait "$lb_pid" 2>/dev/null
}

# lb_req METHOD PATH REQUEST_ID [curl args]: through the balancer; status
# echoed, body in $tmp/body.  Session request ids are recorded for the
# routing check.
lb_req() {
	local method=$1 path=$2 rid=$3
	shift 3
	case $rid in ses-*) echo "$rid" >>"$tmp/$bal.session-rids" ;; esac
	curl -s "${cacert[@]}" -X "$method" -o "$tmp/body" -D "$tmp/hdr" -w '%{http_code}' \
		-H "X-Request-Id: $rid" "${auth[@]}" "$@" "https://127.0.0.1:$lb_port$path"
}
sse_done() { tail -c 64 "$tmp/body" | grep -q 'data: \[DONE\]' && ! grep -q '"error"' "$tmp/body"; }

# ---- phase 1: persistent sessions ----------------------------------------------------
session_phase() {
	sids=() sids_a=() sids_b=()
	local k sid st n_on_b=0 bad_put=0 bad_409=0 bad_app=0 bad_sse=0 bad_cmpl=0 bad_get=0
	# At least 8 sessions, and more (up to 16) until each instance holds two.
	for k in $(seq 1 16); do
		if [ "$k" -gt 8 ] && [ "${#sids_a[@]}" -ge 2 ] && [ "$n_on_b" -ge 2 ]; then break; fi
		if [ $((k % 2)) = 1 ]; then sid=$(openssl rand -hex 16); else sid=$(openssl rand -hex 4); fi
		sids+=("$sid")
		st=$(lb_req PUT "/v1/sessions/$sid" "ses-$bal-$sid-put")
		case $st in 200 | 201) ;; *) bad_put=$((bad_put + 1)); echo "   PUT $sid → $st $(head -c 200 "$tmp/body")" ;; esac
		# Which instance holds it: the PUT's log line.
		for _ in $(seq 1 100); do
			grep -q "\"request_id\":\"ses-$bal-$sid-put\"" "$log_a" "$tmp"/B*.log 2>/dev/null && break
			sleep 0.05
		done
		if grep -q "\"request_id\":\"ses-$bal-$sid-put\"" "$log_a"; then sids_a+=("$sid"); else n_on_b=$((n_on_b + 1)) sids_b+=("$sid"); fi
		st=$(lb_req PUT "/v1/sessions/$sid" "ses-$bal-$sid-put2")
		[ "$st" = 409 ] || { bad_409=$((bad_409 + 1)); echo "   second PUT $sid → $st"; }
		st=$(lb_req POST "/v1/sessions/$sid/append" "ses-$bal-$sid-a1" -N \
			-d '{"text":"Once upon a time","generate":{"max_tokens":16,"stream":true}}')
		[ "$st" = 200 ] || bad_app=$((bad_app + 1))
		sse_done || bad_sse=$((bad_sse + 1))
		st=$(lb_req POST "/v1/sessions/$sid/append" "ses-$bal-$sid-a2" -d '{"text":" there was a dog"}')
		[ "$st" = 200 ] || bad_app=$((bad_app + 1))
		st=$(lb_req POST "/v1/sessions/$sid/append" "ses-$bal-$sid-a3" -N \
			-d '{"text":" and","generate":{"max_tokens":24,"stream":true,"ignore_eos":true}}')
		[ "$st" = 200 ] || bad_app=$((bad_app + 1))
		sse_done || bad_sse=$((bad_sse + 1))
		st=$(lb_req POST /v1/completions "ses-$bal-$sid-c1" -H "X-Session-Id: $sid" \
			-d "{\"session_id\":\"$sid\",\"prompt\":\" so\",\"max_tokens\":4}")
		[ "$st" = 200 ] || { bad_cmpl=$((bad_cmpl + 1)); echo "   completion on $sid → $st $(head -c 200 "$tmp/body")"; }
		st=$(lb_req GET "/v1/sessions/$sid" "ses-$bal-$sid-get")
		{ [ "$st" = 200 ] && grep -q '"tokens_seen":[1-9]' "$tmp/body"; } || bad_get=$((bad_get + 1))
	done
	echo "${#sids[@]}" >"$tmp/$bal.n-sessions"
	check "$bal sessions: PUT /v1/sessions/{id} → 200 (${#sids[@]})" [ "$bad_put" -eq 0 ]
	check "$bal sessions: a second PUT of the same id → 409 (same instance)" [ "$bad_409" -eq 0 ]
	check "$bal sessions: appends → 200 ($((3 * ${#sids[@]})))" [ "$bad_app" -eq 0 ]
	check "$bal sessions: streamed appends end with [DONE]" [ "$bad_sse" -eq 0 ]
	check "$bal sessions: completions with session_id + X-Session-Id → 200" [ "$bad_cmpl" -eq 0 ]
	check "$bal sessions: GET shows the tokens" [ "$bad_get" -eq 0 ]
	echo "lb-figures: $bal sessions: ${#sids_a[@]} on A, $n_on_b on B"
}

# ---- phase 2: load, reloads of A, drain and restart of B -----------------------------
reload_a() { # k: rewrite A's config (variant k) and SIGHUP it
	write_a_config "$1"
	if [ $(($1 % 2)) = 1 ]; then want_gen=$((want_gen + 1)); else want_fail=$((want_fail + 1)); fi
	kill -HUP "$pid_a"
	if [ -n "$gen0" ] && [ -n "$fail0" ]; then
		local g f
		for _ in $(seq 1 200); do
			g=$(inst_metric "$base_a" sinkd_config_generation)
			f=$(inst_metric "$base_a" sinkd_config_reload_failures_total)
			[ "${g:-x}" = $((gen0 + want_gen)) ] && [ "${f:-x}" = $((fail0 + want_fail)) ] && return 0
			sleep 0.05
		done
		echo "   after HUP $1: sinkd_config_generation=${g:-missing} (want $((gen0 + want_gen))), reload failures=${f:-missing} (want $((fail0 + want_fail)))"
		reload_bad=$((reload_bad + 1))
	else
		sleep 0.5
	fi
}

a_sessions_append() { # tag: one streamed append on each of A's sessions
	local sid st
	for sid in "${sids_a[@]}"; do
		st=$(lb_req POST "/v1/sessions/$sid/append" "ses-$bal-$sid-$1" -N \
			-d '{"text":" then","generate":{"max_tokens":8,"stream":true}}')
		{ [ "$st" = 200 ] && sse_done; } || { mid_bad=$((mid_bad + 1)); echo "   append $1 on A's session $sid → $st"; }
	done
}

write_client() {
	cat >"$tmp/lbclient.py" <<'PY'
# Streaming completions through the balancer, in bursts: request i starts
# at t0 + (i // burst) * gap, at most `conc` at a time; one JSON line each.
import http.client, json, random, ssl, sys, threading, time
host, port, cafile, n, conc, burst, gap, out, prefix, key = sys.argv[1:11]
port, n, conc, burst, gap = int(port), int(n), int(conc), int(burst), float(gap)
ctx = ssl.create_default_context(cafile=cafile)
lock = threading.Lock()
slots = threading.Semaphore(conc)
f = open(out, "a")
prompts = ["Once upon a time", "The little dog", "One day, a girl named Lily", "Tom had a red ball"]

def one(i):
    rid = "%s-%04d" % (prefix, i)
    rnd = random.Random(i)
    mt = 1536 if i % 6 == 0 else rnd.randint(64, 512)
    body = json.dumps({"prompt": rnd.choice(prompts), "max_tokens": mt, "ignore_eos": True,
                       "stream": True, "stream_options": {"include_usage": True}, "seed": i})
    rec = {"id": rid, "max_tokens": mt, "t0": time.time()}
    why = ""
    try:
        c = http.client.HTTPSConnection(host, port, context=ctx, timeout=60)
        c.request("POST", "/v1/completions", body=body, headers={
            "Authorization": "Bearer " + key, "Content-Type": "application/json",
            "X-Request-Id": rid})
        r = c.getresponse()
        rec["status"] = r.status
        raw = r.read().decode("utf-8", "replace")
        c.close()
        ev = [l[6:] for l in raw.split("\n") if l.startswith("data: ")]
        if r.status != 200:
            why = "HTTP %d: %s" % (r.status, raw[:200])
        elif r.getheader("X-Request-Id") != rid:
            why = "X-Request-Id %r" % r.getheader("X-Request-Id")
        elif not ev or ev[-1] != "[DONE]":
            why = "truncated: no data: [DONE] at the end (%d events)" % len(ev)
        else:
            objs = [json.loads(e) for e in ev[:-1]]
            errs = [o for o in objs if "error" in o]
            usage = [o["usage"] for o in objs if o.get("usage")]
            if errs:
                why = "error event: %s" % json.dumps(errs[0])[:200]
            elif not usage or usage[-1].get("completion_tokens") != mt:
                why = "usage %s, wanted %d tokens" % (usage[-1:], mt)
    except Exception as e:
        why = "exception: %r" % (e,)
    rec.update(t1=time.time(), ok=not why, why=why)
    with lock:
        f.write(json.dumps(rec) + "\n")
        f.flush()
    slots.release()

t0 = time.time()
threads = []
for i in range(n):
    d = t0 + (i // burst) * gap - time.time()
    if d > 0:
        time.sleep(d)
    slots.acquire()
    t = threading.Thread(target=one, args=(i,))
    t.start()
    threads.append(t)
for t in threads:
    t.join()
PY
}

n_requests=200
load_phase() {
	local res="$tmp/$bal.results" st rc
	: >"$res"
	want_gen=0 want_fail=0 reload_bad=0 mid_bad=0
	gen0=$(inst_metric "$base_a" sinkd_config_generation)
	fail0=$(inst_metric "$base_a" sinkd_config_reload_failures_total)
	check "$bal: A exports sinkd_config_generation and sinkd_config_reload_failures_total" \
		test -n "$gen0" -a -n "$fail0"
	timeout 150 "$py" "$tmp/lbclient.py" 127.0.0.1 "$lb_port" "$tmp/cert.pem" "$n_requests" 16 12 1.3 \
		"$res" "$bal" "$api_key" &
	local client=$!
	for _ in $(seq 1 600); do [ "$(wc -l <"$res")" -ge 20 ] && break; sleep 0.05; done

	reload_a 1
	a_sessions_append mid1

	# Two long streams straight to B, running when the drain starts.
	local k long_pids=()
	for k in 1 2; do
		curl -sN "${cacert[@]}" "${auth[@]}" -H "X-Request-Id: direct-$bal-long$k" \
			-d '{"prompt":"Once upon a time","max_tokens":3000,"ignore_eos":true,"stream":true}' \
			"$base_b/v1/completions" >"$tmp/$bal.long$k" 2>/dev/null &
		long_pids+=($!)
	done
	for _ in $(seq 1 200); do
		grep -q '^data: ' "$tmp/$bal.long1" "$tmp/$bal.long2" 2>/dev/null &&
			[ "$(grep -l '^data: ' "$tmp/$bal.long1" "$tmp/$bal.long2" | wc -l)" = 2 ] && break
		sleep 0.02
	done

	t_term=$(date +%s.%N)
	kill -TERM "$pid_b"
	local ready=""
	for _ in $(seq 1 40); do
		ready=$(curl -sk -o /dev/null -w '%{http_code}' "$base_b/ready")
		[ "$ready" = 503 ] && break
		sleep 0.025
	done
	check "$bal: B's /ready → 503 at once after SIGTERM" [ "$ready" = 503 ]
	st=$(curl -s "${cacert[@]}" "${auth[@]}" -o "$tmp/body" -D "$tmp/hdr" -w '%{http_code}' \
		-H "X-Request-Id: direct-$bal-grace" -d '{"prompt":"x","max_tokens":4}' "$base_b/v1/completions")
	check "$bal: a new request on draining B → 503" [ "$st" = 503 ]
	check "$bal: … with Retry-After and Connection: close" \
		bash -c "grep -qi '^Retry-After:' '$tmp/hdr' && grep -qi '^Connection: *close' '$tmp/hdr'"

	reload_a 2
	a_sessions_append mid2
	reload_a 3
	a_sessions_append mid3

	for _ in $(seq 1 1200); do kill -0 "$pid_b" 2>/dev/null || break; sleep 0.05; done
	wait "$pid_b"
	rc=$?
	local t_exit
	t_exit=$(date +%s.%N)
	check "$bal: drained B exits 0" [ "$rc" -eq 0 ]
	wait "${long_pids[@]}" 2>/dev/null
	for k in 1 2; do
		cp "$tmp/$bal.long$k" "$tmp/body"
		check "$bal: long stream $k running at SIGTERM finished with [DONE]" sse_done
	done

	# B's sessions, written to the shared store by its drain, go on at A.
	local hand_bad=0 sid
	for sid in "${sids_b[@]}"; do
		st=$(lb_req POST "/v1/sessions/$sid/append" "hand-$bal-$sid" \
			-d '{"text":" the end","generate":{"max_tokens":4,"stream":false}}')
		[ "$st" = 200 ] || { hand_bad=$((hand_bad + 1)); echo "   after B's drain: append on $sid → $st $(head -c 200 "$tmp/body")"; }
	done
	check "$bal: B's ${#sids_b[@]} sessions keep going after B's drain (shared store)" \
		[ "$hand_bad" -eq 0 -a "${#sids_b[@]}" -ge 1 ]
	grep -q "\"request_id\":\"hand-$bal-" "$log_a"
	check "$bal: … answered by A, restored from the store" [ $? -eq 0 ]

	n_b=$((n_b + 1))
	start_daemon "B$n_b" "$tmp/b.yaml"
	check "$bal: B started again on the same port" [ $? -eq 0 ]
	pid_b=$pid base_b=$base

	reload_a 4
	a_sessions_append mid4
	reload_a 5
	a_sessions_append mid5

	wait "$client"
	check "$bal: load client ran to the end" [ $? -eq 0 ]
	check "$bal: five SIGHUPs of A: 3 reloads applied, 2 rejected (metrics)" [ "$reload_bad" -eq 0 ]
	check "$bal: A kept running and ready" bash -c "kill -0 $pid_a && [ \"\$(curl -sk -o /dev/null -w '%{http_code}' '$base_a/ready')\" = 200 ]"
	check "$bal: A's sessions answered streamed appends throughout" [ "$mid_bad" -eq 0 ]
	local sid bad_after=0
	for sid in "${sids_a[@]}"; do
		[ "$(lb_req GET "/v1/sessions/$sid" "ses-$bal-$sid-after")" = 200 ] || bad_after=$((bad_after + 1))
	done
	check "$bal: A's sessions still there after the reloads and B's drain" [ "$bad_after" -eq 0 ]
	for sid in "${sids[@]}"; do lb_req DELETE "/v1/sessions/$sid" "del-$bal-$sid" >/dev/null; done
	drain_s=$(awk -v a="$t_term" -v b="$t_exit" 'BEGIN { printf "%.1f", b - a }')
}

analyze() { # checks and figures from the client's results and the logs
	"$py" - "$bal" "$tmp" "$t_term" "$lb_log" "$drain_s" "$log_a" "$@" <<'PY'
import datetime, json, os, re, sys
bal, tmp, t_term, lb_log, drain_s, log_a = sys.argv[1:7]
t_term = float(t_term)
b_logs = sys.argv[7:]  # B's logs of this run: before the drain, after the restart
checks = []
def check(desc, ok):
    checks.append((desc, bool(ok)))

def log_lines(path):
    out = []
    for line in open(path, errors="replace"):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            j = json.loads(line)
        except ValueError:
            continue
        if j.get("msg") == "request" and "request_id" in j:
            out.append(j)
    return out

def epoch(s):
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()

inst = {"A": log_lines(log_a)}
for i, p in enumerate(b_logs):
    inst["B" if i == 0 else "B(restarted)"] = log_lines(p)
by_rid = {}
for name, lines in inst.items():
    for j in lines:
        by_rid.setdefault(j["request_id"], []).append((name, j))

# -- load --
res = [json.loads(l) for l in open(os.path.join(tmp, bal + ".results"))]
bad = [r for r in res if not r["ok"]]
check("%s load: %d of %d streams complete (HTTP 200, all tokens, [DONE])" % (bal, len(res) - len(bad), len(res)),
      len(res) == 200 and not bad)
for r in bad[:10]:
    print("   %s: %s" % (r["id"], r["why"]))
answered = {}
multi, unanswered, retried = [], [], []
for r in res:
    lines = by_rid.get(r["id"], [])
    final = [(n, j) for n, j in lines if j["status"] != 503]
    if any(j["status"] == 503 for _, j in lines):
        retried.append(r["id"])
    if len(final) == 1 and final[0][1]["status"] == 200:
        answered[r["id"]] = final[0][0]
    elif not final:
        unanswered.append(r["id"])
    else:
        multi.append((r["id"], [(n, j["status"]) for n, j in final]))
check("%s load: every request id answered by exactly one instance (one 200 line)" % bal,
      not multi and not unanswered and len(answered) == len(res))
for m in multi[:5]:
    print("   answered more than once or not with 200: %s %s" % m)
for u in unanswered[:5]:
    print("   in no instance's log: %s" % u)
per = {}
for v in answered.values():
    per[v] = per.get(v, 0) + 1
inflight = 0
for j in [j for j in inst.get("B", []) if j["status"] == 200]:
    end = epoch(j["time"])
    if end - j["duration_ms"] / 1000 < t_term < end:
        inflight += 1
check("%s load: the restarted B got requests again" % bal, per.get("B(restarted)", 0) > 0)

# the balancer's own log: attempts per request
lb_retried = 0
down_up = ""
for line in open(lb_log, errors="replace"):
    line = line.strip()
    if line.startswith("{"):
        try:
            j = json.loads(line)
        except ValueError:
            continue
        if not j.get("request_id", "").startswith(bal + "-"):
            continue
        if "upstream" in j and "," in j["upstream"]:
            lb_retried += 1
        if "retries" in j and j["retries"] not in ("0", "+0"):
            lb_retried += 1
if bal == "haproxy":
    text = open(lb_log, errors="replace").read()
    down = len(re.findall(r"Server sinkd_\w+/sinkd2 is DOWN", text))
    up = len(re.findall(r"Server sinkd_\w+/sinkd2 is UP", text))
    check("haproxy: the /ready checks took B out (DOWN) and back in (UP)", down >= 1 and up >= 1)
    down_up = ", B marked DOWN %d / UP %d times (both backends)" % (down, up)
conc = max(sum(1 for s in res if s["t0"] <= r["t0"] < s["t1"]) for r in res) if res else 0
print("lb-figures: %s: requests %d, ok %d, failed %d; answered by A %d, B %d, B after restart %d; "
      "503 from draining B then retried %d, retries in the balancer log %d; B streams in flight at "
      "SIGTERM %d (+2 direct); drain %s s; max concurrent %d%s"
      % (bal, len(res), len(res) - len(bad), len(bad), per.get("A", 0), per.get("B", 0),
         per.get("B(restarted)", 0), len(retried), lb_retried, inflight, drain_s, conc, down_up))

# -- sessions: all requests of a session on one instance --
rids = [l.strip() for l in open(os.path.join(tmp, bal + ".session-rids")) if l.strip()]
sess = {}
for rid in rids:
    sid = rid.split("-")[2]
    sess.setdefault(sid, []).append(rid)
split, missing = [], []
for sid, rs in sess.items():
    where = set()
    for rid in rs:
        lines = by_rid.get(rid, [])
        if len(lines) != 1:
            missing.append((rid, [(n, j["status"]) for n, j in lines]))
        for n, _ in lines:
            where.add(n.split("(")[0])
    if len(where) > 1:
        split.append((sid, sorted(where)))
check("%s sessions: every request of a session answered once, all by the same instance (%d sessions, %d requests)"
      % (bal, len(sess), len(rids)), not split and not missing
      and len(sess) == int(open(os.path.join(tmp, bal + ".n-sessions")).read()))
for s in split[:5]:
    print("   session on several instances: %s %s" % s)
for m in missing[:5]:
    print("   not exactly one log line: %s %s" % m)

with open(os.path.join(tmp, bal + ".checks"), "w") as f:
    for desc, ok in checks:
        f.write("%d\t%s\n" % (ok, desc))
PY
	check "$bal: log analysis ran" [ -s "$tmp/$bal.checks" ]
	local ok desc
	[ -f "$tmp/$bal.checks" ] || return
	while IFS=$'\t' read -r ok desc; do
		check "$desc" [ "$ok" = 1 ]
	done <"$tmp/$bal.checks"
}

write_client
for bal in nginx haproxy; do
	: >"$tmp/$bal.session-rids"
	b_first=$n_b
	if [ "$bal" = nginx ]; then start_nginx; else start_haproxy; fi
	rc=$?
	check "$bal started from the shipped config" [ "$rc" -eq 0 ]
	if [ "$rc" -ne 0 ]; then
		tail -n 5 "$tmp/$bal"/*.log "$tmp/$bal"/stdout 2>/dev/null
		continue
	fi
	session_phase
	load_phase
	logs_b=()
	for k in $(seq "$b_first" "$n_b"); do logs_b+=("$tmp/B$k.log"); done
	analyze "${logs_b[@]}"
	stop_lb
done

# Both drains at once (each keeps its listener for drain_grace_s).
kill -TERM "$pid_a" "$pid_b" 2>/dev/null
wait "$pid_a"
check "A stops cleanly" [ $? -eq 0 ]
wait "$pid_b"
check "B stops cleanly" [ $? -eq 0 ]
finish
