#!/usr/bin/env bash
# Reload as one transaction, the file watch, the drain and the systemd
# protocol, with the real daemon over HTTPS:
#  - a valid reload: new sessions get the new geometry, an old persistent
#    session keeps its own, the generation rises, the log names each changed
#    key with its old and new value, sinkd_config_info carries the file's
#    SHA-256; the KV budget applies live;
#  - an invalid file: the old config stays, the failure is counted and
#    logged with file:line:col and key, requests are still served;
#  - a restart-only change: not applied, reported at every reload
#    (sinkd_config_restart_pending 1) until the file goes back;
#  - a reload whose TLS key does not match its certificate: the whole
#    reload is refused (its other keys are not applied either);
#  - config.watch on a Kubernetes ConfigMap layout: a "..data" symlink swap
#    reloads without a signal;
#  - sd_notify: READY=1, RELOADING=1 + MONOTONIC_USEC, READY=1, STATUS=,
#    WATCHDOG=1 while the engine turns and none while it is stalled (test
#    hook SINKD_TEST_STALL_FILE), STOPPING=1, in this order;
#  - drain: /ready 503 at once, new requests 503 + Retry-After +
#    Connection: close during drain_grace_s, then connections refused; a
#    stream in flight completes with [DONE] and the daemon exits 0; past
#    drain_timeout_s a stream ends with a server_shutdown error event and
#    [DONE], exit 0.
# It prints the reload latency (SIGHUP to the new generation in /metrics).
set -u
. "$(dirname "$0")/server-lib.sh"

gen_metric() { metric sinkd_config_generation; }
fail_metric() { metric sinkd_config_reload_failures_total; }

# write_cfg FILE PORT WINDOW [THREADS [KEY_FILE [EXTRA]]]: a full config file.
write_cfg() {
	local file=$1 port=$2 window=$3 threads=${4:-2} key=${5:-$tmp/key.pem} extra=${6:-}
	cat >"$file" <<YAML
server:
  listen: "127.0.0.1:$port"
  threads: $threads
  sse_keepalive_s: 1
  api_keys: ["sha256:$api_digest"]
  tls:
    enabled: true
    cert_file: "$tmp/cert.pem"
    key_file: "$key"
model:
  path: "$model"
inference:
  cache:
    window_size: $window
    global_cache_limit: 64MiB
logging:
  level: info
  format: json
$extra
YAML
}

# A second key that does not match the certificate.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=other \
	-keyout "$tmp/other-key.pem" -out "$tmp/other-cert.pem" 2>/dev/null

# A small python NOTIFY_SOCKET listener: one line per datagram, with a
# monotonic timestamp, into $tmp/notify.txt.
notify_sock="$tmp/notify.sock"
"$py" - "$notify_sock" "$tmp/notify.txt" <<'PY' &
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
s.settimeout(0.5)
deadline = time.monotonic() + 170
with open(sys.argv[2], "a", buffering=1) as out:
    while time.monotonic() < deadline:
        try:
            msg = s.recv(4096).decode()
        except socket.timeout:
            continue
        out.write("%.3f %s\n" % (time.monotonic(), msg.replace("\n", "|")))
PY
notify_pid=$!
daemon_pids+=("$notify_pid")
for _ in $(seq 1 100); do [ -S "$notify_sock" ] && break; sleep 0.05; done

port=$(free_port)
write_cfg "$tmp/r.yaml" "$port" 256
stall="$tmp/stall"
NOTIFY_SOCKET="$notify_sock" WATCHDOG_USEC=1500000 SINKD_TEST_STALL_FILE="$stall" \
	start_daemon reload "$tmp/r.yaml" --set server.drain_grace_s=4 --set server.drain_timeout_s=60 \
	--set limits.max_tokens=1000000
check "daemon ready" [ $? -eq 0 ]
main_pid=$pid

check "generation 1 at start" [ "$(gen_metric)" = 1 ]
sha=$(sha256sum "$tmp/r.yaml" | cut -d' ' -f1)
metrics_to() { curl -sk "${auth[@]}" -o "$1" "$base/metrics"; }
metrics_to "$tmp/m.txt"
check "sinkd_config_info carries the file's SHA-256" grep -q "^sinkd_config_info{sha256=\"$sha\"} 1" "$tmp/m.txt"
check "restart_pending 0 at start" [ "$(metric sinkd_config_restart_pending)" = 0 ]
check "gateway gauge: KV use ratio" grep -q '^sinkd:kv_cache_usage_perc 0' "$tmp/m.txt"
check "gateway gauge: queue" grep -q '^sinkd:num_requests_waiting 0' "$tmp/m.txt"
check "gateway gauge: running" grep -q '^sinkd:num_requests_running 0' "$tmp/m.txt"

# ---- valid reload: geometry of new sessions, old session keeps its own -----------------------
check "PUT a session with a chosen id" [ "$(http PUT /v1/sessions/01d5e55 "${auth[@]}")" = 200 ]
jcheck "old session: window 256, the id asked for" "$tmp/body" 'j["id"] == "01d5e55" and j["window_size"] == 256'
check "PUT the same id again: 409" [ "$(http PUT /v1/sessions/01d5e55 "${auth[@]}")" = 409 ]
check "PUT a bad id: 400 naming the rule" [ "$(http PUT /v1/sessions/not-hex "${auth[@]}")" = 400 ]
jcheck "400 says what a session id is" "$tmp/body" 'j["error"]["param"] == "session_id" and "1 to 32 hex digits" in j["error"]["message"]'
http POST /v1/sessions/01d5e55/append "${auth[@]}" -d '{"text":"Once upon a time"}' >/dev/null
t_before=$(metric sinkd_config_last_reload_success_timestamp_seconds)
write_cfg "$tmp/r.yaml" "$port" 128
sleep 1.1 # the timestamp has whole-second-or-better resolution: make a change visible
kill -HUP "$main_pid"
check "reload: generation 2" wait_metric sinkd_config_generation '==' 2
check "reload: new session gets window 128" [ "$(http POST /v1/sessions "${auth[@]}")" = 200 ]
jcheck "reload: new session's window is 128" "$tmp/body" 'j["window_size"] == 128'
check "reload: old session keeps window 256" [ "$(http GET /v1/sessions/01d5e55 "${auth[@]}")" = 200 ]
jcheck "reload: old session's window is still 256 and its tokens are there" "$tmp/body" 'j["window_size"] == 256 and j["tokens_seen"] == 5'
check "reload: the old session still generates" [ "$(http POST /v1/sessions/01d5e55/append "${auth[@]}" -d '{"text":" there","generate":{"max_tokens":4,"stream":false}}')" = 200 ]
check "reload log names the changed key, old and new value" \
	grep -q '"msg":"config key changed","key":"inference.cache.window_size","old":"256","new":"128"' "$log"
sha=$(sha256sum "$tmp/r.yaml" | cut -d' ' -f1)
metrics_to "$tmp/m.txt"
check "sinkd_config_info follows the file in force" grep -q "^sinkd_config_info{sha256=\"$sha\"} 1" "$tmp/m.txt"
t_after=$(metric sinkd_config_last_reload_success_timestamp_seconds)
check "last success timestamp moved" awk -v a="$t_before" -v b="$t_after" 'BEGIN { exit !(b > a) }'

# The KV budget applies live.
write_cfg "$tmp/r.yaml" "$port" 128 2 "$tmp/key.pem" ""
sed -i 's/global_cache_limit: 64MiB/global_cache_limit: 32MiB/' "$tmp/r.yaml"
kill -HUP "$main_pid"
check "budget reload: generation 3" wait_metric sinkd_config_generation '==' 3
check "budget reload: sinkd_kv_bytes_budget is 32 MiB" [ "$(metric sinkd_kv_bytes_budget)" = 33554432 ]

# ---- invalid file ----------------------------------------------------------------------------
write_cfg "$tmp/r.yaml" "$port" 0
kill -HUP "$main_pid"
check "invalid file: failure counted" wait_metric sinkd_config_reload_failures_total '==' 1
check "invalid file: generation unchanged" [ "$(gen_metric)" = 3 ]
check "invalid file: error logged with file:line:col and key" \
	grep -q "r.yaml:[0-9]*:[0-9]*: inference.cache.window_size: 0 is out of range" "$log"
check "invalid file: still serving" [ "$(http POST /v1/completions "${auth[@]}" -d '{"prompt":"Once","max_tokens":3}')" = 200 ]
check "invalid file: new sessions keep window 128" [ "$(http POST /v1/sessions "${auth[@]}")" = 200 ]
jcheck "invalid file: window still 128" "$tmp/body" 'j["window_size"] == 128'

# ---- TLS key that does not match: the whole reload is refused ----------------------------------
write_cfg "$tmp/r.yaml" "$port" 64 2 "$tmp/other-key.pem"
sed -i 's/global_cache_limit: 64MiB/global_cache_limit: 32MiB/' "$tmp/r.yaml"
kill -HUP "$main_pid"
check "mismatched key: failure counted" wait_metric sinkd_config_reload_failures_total '==' 2
check "mismatched key: logged naming server.tls" \
	grep -q '"reload failed; the running configuration is unchanged".*server.tls' "$log"
check "mismatched key: the window change in the same file was not applied" [ "$(http POST /v1/sessions "${auth[@]}")" = 200 ]
jcheck "mismatched key: new sessions still get window 128" "$tmp/body" 'j["window_size"] == 128'
check "mismatched key: generation unchanged" [ "$(gen_metric)" = 3 ]

# ---- restart-only change: reported at every reload, not applied --------------------------------
write_cfg "$tmp/r.yaml" "$port" 128 3
sed -i 's/global_cache_limit: 64MiB/global_cache_limit: 32MiB/' "$tmp/r.yaml"
kill -HUP "$main_pid"
check "restart-only: the reload applies (generation 4)" wait_metric sinkd_config_generation '==' 4
check "restart-only: restart_pending 1" [ "$(metric sinkd_config_restart_pending)" = 1 ]
check "restart-only: logged with running and file values" \
	grep -q '"msg":"needs restart: key not applied","key":"server.threads","running":"2","file":"3"' "$log"
write_cfg "$tmp/r.yaml" "$port" 96 3
sed -i 's/global_cache_limit: 64MiB/global_cache_limit: 32MiB/' "$tmp/r.yaml"
kill -HUP "$main_pid"
check "restart-only: next reload applies the rest (generation 5)" wait_metric sinkd_config_generation '==' 5
n_logged=$(grep -c '"msg":"needs restart: key not applied","key":"server.threads"' "$log")
check "restart-only: reported again at the next reload" [ "$n_logged" -ge 2 ]
check "restart-only: still pending" [ "$(metric sinkd_config_restart_pending)" = 1 ]
http POST /v1/sessions "${auth[@]}" >/dev/null
jcheck "restart-only: the reloadable key of that file applied (window 96)" "$tmp/body" 'j["window_size"] == 96'
write_cfg "$tmp/r.yaml" "$port" 96 2
sed -i 's/global_cache_limit: 64MiB/global_cache_limit: 32MiB/' "$tmp/r.yaml"
kill -HUP "$main_pid"
check "restart-only: file back to the running value clears it" wait_metric sinkd_config_restart_pending '==' 0

# ---- reload latency: SIGHUP to the new generation in /metrics ------------------------------------
"$py" - "$main_pid" "127.0.0.1" "$port" "$api_key" "$tmp/r.yaml" <<'PY' >"$tmp/latency.txt"
import http.client, os, re, signal, ssl, statistics, sys, time
pid, host, port, key, cfg = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
ctx = ssl._create_unverified_context()
conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=10)
def gen():
    conn.request("GET", "/metrics", headers={"Authorization": "Bearer " + key})
    body = conn.getresponse().read().decode()
    return int(re.search(r"^sinkd_config_generation (\d+)", body, re.M).group(1))
text = open(cfg).read()
times = []
for i in range(6):
    g0 = gen()
    with open(cfg, "w") as f:  # a different window each time: a real change
        f.write(re.sub(r"window_size: \d+", "window_size: %d" % (100 + i), text))
    t0 = time.monotonic()
    os.kill(pid, signal.SIGHUP)
    while gen() == g0:
        if time.monotonic() - t0 > 10:
            break
    times.append((time.monotonic() - t0) * 1e3)
print("reload latency (SIGHUP to new generation in /metrics), ms: min %.1f median %.1f max %.1f (n=%d)"
      % (min(times), statistics.median(times), max(times), len(times)))
PY
cat "$tmp/latency.txt"
check "reload latency measured" grep -q "reload latency" "$tmp/latency.txt"
write_cfg "$tmp/r.yaml" "$port" 96 2
sed -i 's/global_cache_limit: 64MiB/global_cache_limit: 32MiB/' "$tmp/r.yaml"
kill -HUP "$main_pid"
sleep 0.5

# ---- sd_notify and the watchdog ---------------------------------------------------------------
pings() { grep -c 'WATCHDOG=1' "$tmp/notify.txt"; }
p0=$(pings)
sleep 2
check "watchdog pings while the engine turns" [ "$(pings)" -gt "$p0" ]
touch "$stall"
sleep 1.5 # the engine notices within one idle turn; a ping may be on its way
p1=$(pings)
sleep 3
check "no watchdog ping while the engine is stalled" [ "$(pings)" = "$p1" ]
rm -f "$stall"
sleep 2
check "pings again once the engine turns" [ "$(pings)" -gt "$p1" ]

# ---- drain: a stream in flight completes, new requests 503, exit 0 -------------------------------
# The stall hook holds the engine mid-stream, so the stream is still running
# when the drain begins whatever the machine's speed.
long='{"prompt":"Once upon a time","max_tokens":3000,"ignore_eos":true,"stream":true}'
has_events() { grep -q '^data: {' "$1"; }
curl -skN "${auth[@]}" -d "$long" "$base/v1/completions" >"$tmp/inflight.txt" 2>/dev/null &
stream_pid=$!
check "stream running before SIGTERM" wait_for has_events "$tmp/inflight.txt"
touch "$stall"
kill -TERM "$main_pid"
# The grace (4 s) outlasts a slow /ready check under a sanitizer on a
# loaded machine, so the next request still finds the listener open.
ready_503() { [ "$(http GET /ready)" = 503 ]; }
check "drain: /ready 503 at once" wait_for ready_503
check "drain: new request 503" [ "$(http POST /v1/completions "${auth[@]}" -d '{"prompt":"x","max_tokens":2}')" = 503 ]
check "drain: 503 has Retry-After" [ -n "$(header Retry-After)" ]
check "drain: 503 has Connection: close" [ "$(header Connection)" = close ]
refused() { ! curl -sk --max-time 2 -o /dev/null "$base/health"; }
check "drain: after the grace, new connections are refused" wait_for refused
rm -f "$stall"
wait "$stream_pid"
scheck "drain: the stream in flight completes with [DONE]" "$tmp/inflight.txt" 'ev[-1] == "[DONE]" and ev[-2]["choices"][0]["finish_reason"] == "length"'
wait "$main_pid"
check "drain: exit 0" [ $? -eq 0 ]
check "drain: the log says how many sessions were dropped" grep -q 'persistent session(s) dropped' "$log"

# Order of the notifications.
"$py" - "$tmp/notify.txt" <<'PY' >"$tmp/order.txt"
import sys
lines = [l.split(" ", 1)[1] for l in open(sys.argv[1]).read().splitlines()]
def first(pred, after=-1):
    for i, l in enumerate(lines):
        if i > after and pred(l):
            return i
    return None
ready = first(lambda l: l.startswith("READY=1"))
reloading = first(lambda l: "RELOADING=1" in l and "MONOTONIC_USEC=" in l, ready if ready is not None else -1)
ready2 = first(lambda l: l.startswith("READY=1"), reloading if reloading is not None else 10**9)
stopping = first(lambda l: l.startswith("STOPPING=1"), ready2 if ready2 is not None else 10**9)
status = first(lambda l: "STATUS=serving: " in l and "streams" in l and "KV" in l)
print("ok" if None not in (ready, reloading, ready2, stopping, status) else "bad %s" % [ready, reloading, ready2, stopping, status])
PY
check "sd_notify: READY, RELOADING+MONOTONIC_USEC, READY, STOPPING in order, STATUS lines" grep -q '^ok' "$tmp/order.txt"

# ---- drain timeout: the stream gets a server_shutdown event ---------------------------------------
port2=$(free_port)
write_cfg "$tmp/t.yaml" "$port2" 128
SINKD_TEST_STALL_FILE="$stall" start_daemon timeout "$tmp/t.yaml" --set server.drain_grace_s=0 \
	--set server.drain_timeout_s=1 --set limits.max_tokens=1000000
check "second daemon ready" [ $? -eq 0 ]
t_pid=$pid
long='{"prompt":"Once upon a time","max_tokens":1000000,"ignore_eos":true,"stream":true}'
curl -skN "${auth[@]}" -d "$long" "$base/v1/completions" >"$tmp/cut.txt" 2>/dev/null &
stream_pid=$!
check "stream running" wait_for has_events "$tmp/cut.txt"
touch "$stall"
t0=$(date +%s.%N)
kill -TERM "$t_pid"
wait "$stream_pid"
wait "$t_pid"
check "drain timeout: exit 0" [ $? -eq 0 ]
t1=$(date +%s.%N)
rm -f "$stall"
scheck "drain timeout: the stream ends with a server_shutdown error event, then [DONE]" "$tmp/cut.txt" 'ev[-1] == "[DONE]" and ev[-2]["error"]["type"] == "server_shutdown"'
check "drain timeout: the daemon stopped within the timeout plus a few seconds" \
	awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 8) }'

# ---- config.watch on a ConfigMap layout --------------------------------------------------------------
cm="$tmp/configmap"
mkdir -p "$cm/..2026_12_01_a" "$cm/..2026_12_01_b"
port3=$(free_port)
write_cfg "$cm/..2026_12_01_a/sinkd.yaml" "$port3" 128 2 "$tmp/key.pem" "config:
  watch: true"
ln -s ..2026_12_01_a "$cm/..data"
ln -s ..data/sinkd.yaml "$cm/sinkd.yaml"
start_daemon watch "$cm/sinkd.yaml" --set server.drain_grace_s=0
check "watching daemon ready" [ $? -eq 0 ]
w_pid=$pid
check "watch: generation 1" [ "$(gen_metric)" = 1 ]
write_cfg "$cm/..2026_12_01_b/sinkd.yaml" "$port3" 64 2 "$tmp/key.pem" "config:
  watch: true"
ln -s ..2026_12_01_b "$cm/..data_tmp"
mv -T "$cm/..data_tmp" "$cm/..data"
rm -rf "$cm/..2026_12_01_a"
check "watch: the ..data swap reloads (generation 2) without a signal" wait_metric sinkd_config_generation '==' 2
check "watch: new sessions get window 64" [ "$(http POST /v1/sessions "${auth[@]}")" = 200 ]
jcheck "watch: window 64" "$tmp/body" 'j["window_size"] == 64'
touch "$cm/..2026_12_01_b/sinkd.yaml"
sleep 1
check "watch: a touch reloads nothing" [ "$(gen_metric)" = 2 ]
kill -TERM "$w_pid"
wait "$w_pid"
check "watching daemon: exit 0" [ $? -eq 0 ]

finish
