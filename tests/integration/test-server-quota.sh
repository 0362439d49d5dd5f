#!/usr/bin/env bash
# Limits that hold, with the real daemon over HTTPS and three API keys:
#  - persistent sessions: per key (429 rate_limit_error per_key_max_sessions
#    + Retry-After) and in total (503 max_sessions + Retry-After); a delete
#    makes room; an empty session gives its reservation back after
#    scheduler.session_empty_ttl_s while one that was appended to stays;
#  - per-key streams: a key holding its limit (clients that stop reading)
#    gets 429 per_key_max_streams + Retry-After, while another key's request
#    is served at once from the KV budget left (without the limit the extra
#    streams of the first key would take it: the other key would wait in the
#    queue, then get 503);
#  - per-key queue: with the budget full a key's second waiting request gets
#    429 per_key_max_queued;
#  - prompt tokens per minute: 429 per_key_prompt_tokens_per_minute with a
#    Retry-After from the refill rate, another key's budget untouched, a
#    prompt above the whole budget refused without Retry-After;
#  - limits changed by SIGHUP apply at once (and the counts of running
#    streams carry over);
#  - without API keys the limits count per client address (127.0.0.1 is
#    refused, 127.0.0.2 served);
#  - sinkd_quota_rejections_total{limit=...} counts each refusal.
set -u
. "$(dirname "$0")/server-lib.sh"

key_a=admin-key key_b=user-key key_c=third-key
dig() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
auth_a=(-H "Authorization: Bearer $key_a")
auth_b=(-H "Authorization: Bearer $key_b")
auth_c=(-H "Authorization: Bearer $key_c")
auth=("${auth_a[@]}") # for metric()

# write_cfg FILE PORT KEYS(yes|no) LIMITS(yaml lines under limits:, indented 2) [SCHED]
write_cfg() {
	local keys=""
	[ "$3" = yes ] && keys="api_keys: [\"sha256:$(dig $key_a)\", \"sha256:$(dig $key_b)\", \"sha256:$(dig $key_c)\"]"
	cat >"$1" <<YAML
server:
  listen: "127.0.0.1:$2"
  threads: 2
  sse_keepalive_s: 1
  $keys
  tls:
    enabled: true
    cert_file: "$tmp/cert.pem"
    key_file: "$tmp/key.pem"
model:
  path: "$model"
inference:
  cache:
    # 504 tokens of 640 bytes: three sessions fit in 1 MiB, four do not
    window_size: 500
    global_cache_limit: 1MiB
scheduler:
  max_queue_wait_s: 4
${5:-}
limits:
  max_tokens: 1000000
$4
logging:
  level: info
  format: json
YAML
}

# Clients that send a streaming completion each and then stop reading:
# hold.py PORT KEY N OUT [SOURCE_IP] writes each response's status to OUT.
cat >"$tmp/hold.py" <<'PY'
import socket, ssl, sys, time
port, key, n, out = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
src = sys.argv[5] if len(sys.argv) > 5 else None
body = '{"prompt":"Once upon a time","max_tokens":1000000,"ignore_eos":true,"stream":true}'
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
auth = "Authorization: Bearer %s\r\n" % key if key != "-" else ""
conns, codes = [], []
for _ in range(n):
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    if src:
        raw.bind((src, 0))
    raw.settimeout(20)
    raw.connect(("127.0.0.1", port))
    s = ctx.wrap_socket(raw)
    s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\n"
               "Content-Length: %d\r\n\r\n%s" % (auth, len(body), body)).encode())
    head = b""
    while b"\r\n" not in head:
        head += s.recv(1)
    codes.append(head.split()[1].decode())
    conns.append(s)
with open(out + ".tmp", "w") as f:
    f.write(" ".join(codes) + "\n")
import os
os.rename(out + ".tmp", out)
time.sleep(600)  # until release_holders (or the exit trap) kills it
PY
holders=()
# hold NAME KEY N [SOURCE_IP]: starts the holders; waits for their statuses in $tmp/NAME.codes.
hold() {
	"$py" "$tmp/hold.py" "$port" "$2" "$3" "$tmp/$1.codes" ${4:-} 2>"$tmp/$1.err" &
	holders+=($!)
	daemon_pids+=($!)
	wait_for test -s "$tmp/$1.codes"
}
release_holders() {
	for p in "${holders[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	holders=()
}
count_codes() { tr ' ' '\n' <"$tmp/$1.codes" | grep -c "^$2\$"; }
retry_after_in() { # LOW HIGH: the last response's Retry-After within [LOW, HIGH]
	local v
	v=$(header Retry-After)
	[ -n "$v" ] && [ "$v" -ge "$1" ] && [ "$v" -le "$2" ]
}
err_is() { # FILE TYPE CODE
	jcheck "$1: type $2, code $3" "$tmp/body" "j['error']['type'] == '$2' and j['error']['code'] == '$3' and len(j['error']['message']) > 20"
	cp "$tmp/body" "$tmp/body.$3.$RANDOM"
}
sid_of() { sed 's/.*"id":"\([0-9a-f]*\)".*/\1/' "$tmp/body"; }
prompt='{"prompt":"Once upon a time, there was a little girl named Lily. She loved to play","max_tokens":4}'

port=$(free_port)
limits="  max_sessions: 3
  per_key:
    max_sessions: 2
    max_streams: 2
    max_queued: 1"
write_cfg "$tmp/q.yaml" "$port" yes "$limits"
start_daemon quota "$tmp/q.yaml"
check "daemon ready" [ $? -eq 0 ]

# ---- sessions ---------------------------------------------------------------------------------
check "key B: session 1 → 200" [ "$(http POST /v1/sessions "${auth_b[@]}")" = 200 ]
b1=$(sid_of)
check "key B: session 2 → 200" [ "$(http POST /v1/sessions "${auth_b[@]}")" = 200 ]
b2=$(sid_of)
check "key B: session 3 → 429 (limits.per_key.max_sessions 2)" [ "$(http POST /v1/sessions "${auth_b[@]}")" = 429 ]
err_is "per-key sessions" rate_limit_error per_key_max_sessions
check "  with Retry-After" retry_after_in 1 3600
check "key A: session → 200 (another key)" [ "$(http POST /v1/sessions "${auth_a[@]}")" = 200 ]
a1=$(sid_of)
check "key A: a 4th session in all → 503 (limits.max_sessions 3)" [ "$(http POST /v1/sessions "${auth_a[@]}")" = 503 ]
err_is "total sessions" server_error max_sessions
check "  with Retry-After" retry_after_in 1 3600
check "a delete makes room" [ "$(http DELETE "/v1/sessions/$b1" "${auth_b[@]}")" = 200 ]
check "key A: session → 200 again" [ "$(http POST /v1/sessions "${auth_a[@]}")" = 200 ]
a2=$(sid_of)
check "metric: per-key session refusal counted" wait_metric 'sinkd_quota_rejections_total{limit="per_key_max_sessions"}' == 1
check "metric: total session refusal counted" wait_metric 'sinkd_quota_rejections_total{limit="max_sessions"}' == 1
check "key A cannot delete key B's session (404)" [ "$(http DELETE "/v1/sessions/$b2" "${auth_a[@]}")" = 404 ]
http DELETE "/v1/sessions/$b2" "${auth_b[@]}" >/dev/null
for id in "$a1" "$a2"; do http DELETE "/v1/sessions/$id" "${auth_a[@]}" >/dev/null; done
check "sessions deleted: nothing reserved" wait_metric sinkd_kv_bytes_reserved == 0

# ---- streams ----------------------------------------------------------------------------------
hold b "$key_b" 3
check "key B: 2 streams accepted, the 3rd → 429 (limits.per_key.max_streams 2)" \
	[ "$(count_codes b 200) $(count_codes b 429)" = "2 1" ]
check "key B: another request → 429" [ "$(http POST /v1/completions "${auth_b[@]}" -d "$prompt")" = 429 ]
err_is "per-key streams" rate_limit_error per_key_max_streams
check "  with Retry-After" retry_after_in 1 60
t0=$(date +%s.%N)
check "key A is served at once beside them (200)" \
	[ "$(http POST /v1/completions "${auth_a[@]}" --max-time 10 -d "$prompt")" = 200 ]
check "  within 3 s" awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { exit !(b - a < 3) }'

# ---- queue ------------------------------------------------------------------------------------
hold a "$key_a" 1 # the budget holds 3 streams: now all taken
check "key A holds the third stream" [ "$(count_codes a 200)" = 1 ]
check "the budget is full" wait_metric sinkd_scheduler_running == 3
curl -sk "${auth_c[@]}" -o "$tmp/c1.body" -w '%{http_code}' -d "$prompt" "$base/v1/completions" >"$tmp/c1.code" &
c1=$!
check "key C: its first request waits in the queue" wait_metric sinkd_scheduler_queue_depth == 1
check "key C: a second one → 429 (limits.per_key.max_queued 1)" [ "$(http POST /v1/completions "${auth_c[@]}" -d "$prompt")" = 429 ]
err_is "per-key queue" rate_limit_error per_key_max_queued
check "  with Retry-After" retry_after_in 1 60
wait "$c1"
check "key C: the waiting one gets 503 after scheduler.max_queue_wait_s" [ "$(cat "$tmp/c1.code")" = 503 ]
jcheck "  answered as a full queue is: server_error overloaded" "$tmp/c1.body" 'j["error"]["type"] == "server_error" and j["error"]["code"] == "overloaded" and "timed out" in j["error"]["message"]'
release_holders
check "holders gone: nothing running" wait_metric sinkd_scheduler_running == 0

# ---- reload: token budget, a higher stream limit, empty sessions ------------------------------
hold b "$key_b" 2 # running across the reload
limits2="  max_sessions: 3
  per_key:
    max_sessions: 2
    max_streams: 3
    max_queued: 1
    prompt_tokens_per_minute: 30"
write_cfg "$tmp/q.yaml" "$port" yes "$limits2" "  session_empty_ttl_s: 1"
gen=$(metric sinkd_config_generation)
kill -HUP "$pid"
check "SIGHUP applies the new limits" wait_metric sinkd_config_generation '>' "$gen"
check "key A: a 21-token prompt → 200" [ "$(http POST /v1/completions "${auth_a[@]}" -d "$prompt")" = 200 ]
check "key A: the next → 429 (limits.per_key.prompt_tokens_per_minute 30)" \
	[ "$(http POST /v1/completions "${auth_a[@]}" -d "$prompt")" = 429 ]
err_is "token budget" rate_limit_error per_key_prompt_tokens_per_minute
check "  Retry-After from the refill (12 tokens short at 0.5/s: 24 s)" retry_after_in 22 25
check "key C: its own budget → 200" [ "$(http POST /v1/completions "${auth_c[@]}" -d "$prompt")" = 200 ]
long=$(printf 'Once upon a time %.0s' $(seq 1 12))
check "key C: a prompt above the whole budget → 429" \
	[ "$(http POST /v1/completions "${auth_c[@]}" -d "{\"prompt\":\"$long\",\"max_tokens\":1}")" = 429 ]
err_is "prompt over the budget" rate_limit_error per_key_prompt_tokens_per_minute
check "  without Retry-After (it can never pass)" [ -z "$(header Retry-After)" ]
# B's two streams still count: the new limit 3 leaves room for exactly one.
hold b2 "$key_b" 2
check "key B: max_streams 3 (reloaded) with 2 running: one more, then 429" \
	[ "$(count_codes b2 200) $(count_codes b2 429)" = "1 1" ]
release_holders
check "an empty session → 200" [ "$(http POST /v1/sessions "${auth_a[@]}")" = 200 ]
empty=$(sid_of)
check "a session appended to → 200" [ "$(http POST /v1/sessions "${auth_a[@]}")" = 200 ]
used=$(sid_of)
check "  append 200" [ "$(http POST "/v1/sessions/$used/append" "${auth_a[@]}" -d '{"text":"Once"}')" = 200 ]
gone() { [ "$(http GET "/v1/sessions/$empty" "${auth_a[@]}")" = 404 ]; }
check "the empty one expires after session_empty_ttl_s (1 s)" wait_for gone
check "  counted" wait_metric sinkd_sessions_expired_empty_total == 1
check "the used one stays" [ "$(http GET "/v1/sessions/$used" "${auth_a[@]}")" = 200 ]
for l in per_key_max_streams per_key_max_queued per_key_prompt_tokens_per_minute; do
	check "metric: $l refusals counted" wait_metric "sinkd_quota_rejections_total{limit=\"$l\"}" '>=' 1
done
check "daemon still alive" kill -0 "$pid"
stop_daemon "$pid" >/dev/null

# ---- per client address without keys ----------------------------------------------------------
port=$(free_port)
write_cfg "$tmp/addr.yaml" "$port" no "  per_key:
    max_streams: 1"
start_daemon addr "$tmp/addr.yaml"
check "daemon without keys ready" [ $? -eq 0 ]
auth=()
hold local - 1
check "127.0.0.1 holds its one stream" [ "$(count_codes local 200)" = 1 ]
check "127.0.0.1: another → 429" [ "$(http POST /v1/completions -d "$prompt")" = 429 ]
err_is "per-address streams" rate_limit_error per_key_max_streams
check "127.0.0.2: served (another address) → 200" \
	[ "$(http POST /v1/completions --interface 127.0.0.2 --max-time 10 -d "$prompt")" = 200 ]
release_holders
stop_daemon "$pid" >/dev/null
finish
