#!/usr/bin/env bash
# Tenants stay apart, with real daemons sharing one session store, for the
# folder store and for Redis (a real redis-server on loopback): with two API
# keys A and B, B walks every session endpoint on A's sessions — resident,
# offloaded to the store, leased by another instance — and on ids that never
# existed, and its answers about A's sessions are byte-identical to those
# about ids that never existed (ids and timestamps aside); A's sessions are
# intact afterwards.  Then the quota scenario: B is refused at
# limits.per_key.max_sessions whether its sessions are resident or stored,
# and A's stored session survives B's churn.  Then a drain onto a full
# store (a small tmpfs, folder store only): it exits non-zero with one error
# line per lost session, and no instance resumes the stale snapshot.
set -u
. "$(dirname "$0")/server-lib.sh"

key_b=test-key-b
digest_b=$(printf %s "$key_b" | sha256sum | cut -d' ' -f1)
auth_b=(-H "Authorization: Bearer $key_b")
text="Once upon a time there was a little girl named Lily. She liked to play in the park."

# cfg NAME STORE_ARGS...: two keys, a small window.
cfg() {
	local name=$1
	shift
	write_config "$tmp/$name.yaml" "$(free_port)"
	cat >>"$tmp/$name.yaml" <<YAML
inference:
  cache: {window_size: 64, sink_keep_count: 4}
YAML
	args=(--set server.drain_grace_s=0 --set "server.api_keys=sha256:$api_digest,sha256:$digest_b")
	for kv in "$@"; do args+=(--set "$kv"); done
}

# walk.py: B's answers about A's ids against answers about fresh ids.
cat >"$tmp/walk.py" <<'PY'
import json, re, sys
from https_json import call_raw as call

def norm(body, ids):
    text = body.decode("utf-8", "replace")
    for i in ids:
        text = text.replace(i, "ID")
    text = re.sub(r'"(created|created_at|age_s|idle_s)":\s*[0-9.e+-]+', r'"\1":0', text)
    text = re.sub(r'(chatcmpl|cmpl|resp)[-_][0-9A-Za-z_]+', r'\1-X', text)
    return text

def walk(base, key, sid, snap):
    """Every session endpoint on sid; B's own side effects undone."""
    out = []
    out.append(("GET", call(base, key, "GET", f"/v1/sessions/{sid}")))
    out.append(("GET cache", call(base, key, "GET", f"/v1/sessions/{sid}/cache")))
    out.append(("GET snapshot", call(base, key, "GET", f"/v1/sessions/{sid}/snapshot")))
    out.append(("append", call(base, key, "POST", f"/v1/sessions/{sid}/append", {"text": " x"})))
    out.append(("append+generate", call(base, key, "POST", f"/v1/sessions/{sid}/append",
               {"text": " x", "generate": {"max_tokens": 2, "temperature": 0, "stream": False}})))
    out.append(("completion", call(base, key, "POST", "/v1/completions",
               {"session_id": sid, "prompt": "x", "max_tokens": 1, "temperature": 0})))
    out.append(("responses", call(base, key, "POST", "/v1/responses",
               {"previous_response_id": f"resp_{sid}_00000000000000000000000000000000",
                "input": "x", "max_output_tokens": 1})))
    out.append(("DELETE", call(base, key, "DELETE", f"/v1/sessions/{sid}")))
    # B's own session of that id: the same answer as for a fresh id, then gone
    out.append(("PUT", call(base, key, "PUT", f"/v1/sessions/{sid}", {})))
    call(base, key, "DELETE", f"/v1/sessions/{sid}")
    if snap:
        out.append(("restore?id", call(base, key, "POST", f"/v1/sessions/restore?id={sid}", raw=snap)))
        call(base, key, "DELETE", f"/v1/sessions/{sid}")
    return out

def main():
    base_a, base_i2, key_b, fresh_prefix = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    cases = json.loads(sys.argv[5])  # [[label, base, id], ...]
    snap = open(sys.argv[6], "rb").read()
    failed = 0
    for n, (label, where, sid) in enumerate(cases):
        base = base_a if where == "i1" else base_i2
        fresh = f"{fresh_prefix}{n:02x}"
        got = walk(base, key_b, sid, snap)
        ref = walk(base, key_b, fresh, snap)
        for (what, (st, body)), (_, (rst, rbody)) in zip(got, ref):
            a, b = norm(body, [sid]), norm(rbody, [fresh])
            ok = st == rst and a == b
            print(("ok - " if ok else "not ok - ") + f"{label}: B's {what} is as for an id that never existed ({st})")
            if not ok:
                failed += 1
                print(f"   A's id: {st} {a[:300]}")
                print(f"   fresh:  {rst} {b[:300]}")
    print(f"{sum(1 for c in cases) * 10 - failed} walked, {failed} differ", file=sys.stderr)
    sys.exit(failed)
main()
PY

# append_as BASE KEY ID: A appends text (status)
append_as() {
	curl -sk -o "$tmp/body" -w '%{http_code}' -H "Authorization: Bearer $2" \
		-d "{\"text\":\"$text\"}" "$1/v1/sessions/$3/append"
}

redis_pid=""
start_redis() {
	command -v redis-server >/dev/null 2>&1 || return 1
	redis_port=$(free_port)
	mkdir -p "$tmp/redis"
	redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
		--dir "$tmp/redis" >"$tmp/redis.log" 2>&1 &
	redis_pid=$!
	daemon_pids+=("$redis_pid")
	for _ in $(seq 1 100); do
		redis-cli -p "$redis_port" ping 2>/dev/null | grep -q PONG && return 0
		sleep 0.05
	done
	return 1
}

for backend in folder redis; do
	if [ "$backend" = folder ]; then
		store=("sessions.store_dir=$tmp/store")
	else
		if ! start_redis; then
			echo "ok - redis: SKIP (no redis-server): the Redis walk did not run"
			continue
		fi
		store=("sessions.store=redis://127.0.0.1:$redis_port/0")
	fi
	b=$backend
	# instance 1 offloads idle sessions after a second; instance 2 keeps them
	cfg "$b-i1" "${store[@]}" scheduler.session_offload_s=1 sessions.lease_timeout_s=30
	start_daemon "$b-i1" "$tmp/$b-i1.yaml" "${args[@]}"
	check "$b: instance 1 ready" [ $? -eq 0 ]
	i1=$base
	i1_pid=$pid
	cfg "$b-i2" "${store[@]}" sessions.lease_timeout_s=30
	start_daemon "$b-i2" "$tmp/$b-i2.yaml" "${args[@]}"
	check "$b: instance 2 ready" [ $? -eq 0 ]
	i2=$base
	i2_pid=$pid

	# A's sessions: one offloaded, one resident (on instance 2), one leased
	# by instance 2 (offloaded by 1, then used on 2)
	base=$i1
	http PUT /v1/sessions/a0ff "${auth[@]}" >/dev/null
	check "$b: A appends to a0ff" [ "$(append_as "$i1" "$api_key" a0ff)" = 200 ]
	http PUT /v1/sessions/a1ed "${auth[@]}" >/dev/null
	check "$b: A appends to a1ed" [ "$(append_as "$i1" "$api_key" a1ed)" = 200 ]
	check "$b: both offloaded" wait_metric sinkd_session_offloads_total '>=' 2
	http GET /v1/sessions/a0ff/snapshot "${auth[@]}" >/dev/null # A's snapshot, for B's restore?id
	cp "$tmp/body" "$tmp/$b-a.snap"
	check "$b: a0ff offloaded again after the snapshot" wait_metric sinkd_session_offloads_total '>=' 3
	base=$i2
	http PUT /v1/sessions/a2e5 "${auth[@]}" >/dev/null
	check "$b: A appends to a2e5 (resident on 2)" [ "$(append_as "$i2" "$api_key" a2e5)" = 200 ]
	check "$b: A brings a1ed to instance 2 (leased there)" [ "$(append_as "$i2" "$api_key" a1ed)" = 200 ]

	cases='[["offloaded","i1","a0ff"],["resident","i2","a2e5"],["leased elsewhere","i1","a1ed"],["resident, asked on 2","i2","a1ed"]]'
	"$py" "$tmp/walk.py" "$i1" "$i2" "$key_b" "b0" "$cases" "$tmp/$b-a.snap" >"$tmp/$b-walk.txt" 2>&1
	cat "$tmp/$b-walk.txt"
	n_bad=$(grep -c '^not ok' "$tmp/$b-walk.txt")
	check "$b: every answer B got about A's sessions is the nonexistent id's" [ "$n_bad" -eq 0 ]

	# A's sessions are intact
	base=$i1
	check "$b: A still sees a0ff (in the store)" [ "$(http GET /v1/sessions/a0ff "${auth[@]}")" = 200 ]
	check "$b: A appends to a0ff" [ "$(append_as "$i1" "$api_key" a0ff)" = 200 ]
	check "$b: A appends to a2e5 on 2" [ "$(append_as "$i2" "$api_key" a2e5)" = 200 ]
	check "$b: A appends to a1ed on 2" [ "$(append_as "$i2" "$api_key" a1ed)" = 200 ]
	# the same client-chosen id under two keys is two sessions
	base=$i2
	check "$b: B's own a2e5 is created beside A's" [ "$(http PUT /v1/sessions/a2e5 "${auth_b[@]}")" = 200 ]
	check "$b: A's a2e5 is still A's" [ "$(http GET /v1/sessions/a2e5 "${auth[@]}")" = 200 ]
	jcheck "$b: A's a2e5 holds A's tokens" "$tmp/body" 'j["tokens_seen"] > 40'
	http DELETE /v1/sessions/a2e5 "${auth_b[@]}" >/dev/null

	# a second process with instance 2's name refuses to start, naming it
	cfg "$b-dup" "${store[@]}" "sessions.instance_id=dup-name"
	start_daemon "$b-dup1" "$tmp/$b-dup.yaml" "${args[@]}"
	check "$b: an instance named dup-name starts" [ $? -eq 0 ]
	dup_pid=$pid
	cfg "$b-dup2" "${store[@]}" "sessions.instance_id=dup-name"
	start_daemon "$b-dup2" "$tmp/$b-dup2.yaml" "${args[@]}"
	check "$b: a second live dup-name refuses to start" [ $? -ne 0 ]
	check "$b: ... naming the holder" grep -qE "already live|in use by another process" "$tmp/$b-dup2.log"
	stop_daemon "$dup_pid"
	stop_daemon "$i1_pid"
	check "$b: instance 1 drains, exit 0" [ $? -eq 0 ]
	stop_daemon "$i2_pid"
	check "$b: instance 2 drains, exit 0" [ $? -eq 0 ]

	# ---- quota: B's sessions count wherever they are ----
	cfg "$b-q" "${store[@]}" scheduler.session_offload_s=1 limits.per_key.max_sessions=2
	start_daemon "$b-q" "$tmp/$b-q.yaml" "${args[@]}"
	check "$b: quota instance ready" [ $? -eq 0 ]
	q_pid=$pid
	check "$b: A's stored session is there" [ "$(http GET /v1/sessions/a0ff "${auth[@]}")" = 200 ]
	ok=0
	for i in 1 2; do
		st=$(http PUT "/v1/sessions/bb0$i" "${auth_b[@]}")
		[ "$st" = 200 ] && [ "$(append_as "$base" "$key_b" "bb0$i")" = 200 ] && ok=$((ok + 1))
	done
	check "$b: B creates two sessions" [ "$ok" = 2 ]
	check "$b: B's sessions offloaded" wait_metric sinkd_session_offloads_total '>=' 2
	refused=0
	for i in 3 4 5 6 7 8; do
		st=$(http PUT "/v1/sessions/bb0$i" "${auth_b[@]}")
		[ "$st" = 429 ] && refused=$((refused + 1))
	done
	check "$b: B is refused at its limit with its sessions in the store (6 of 6: $refused)" [ "$refused" = 6 ]
	jcheck "$b: the refusal names limits.per_key.max_sessions" "$tmp/body" '"max_sessions" in j["error"]["message"]'
	check "$b: A's stored session survives B's churn" [ "$(http GET /v1/sessions/a0ff "${auth[@]}")" = 200 ]
	http DELETE /v1/sessions/a2e5 "${auth[@]}" >/dev/null
	http DELETE /v1/sessions/a1ed "${auth[@]}" >/dev/null
	check "$b: A, below its own limit again, creates" [ "$(http PUT /v1/sessions/a9 "${auth[@]}")" = 200 ]
	stop_daemon "$q_pid"
	check "$b: quota instance drains, exit 0" [ $? -eq 0 ]

	# ---- the store's bound is shared fairly: B's churn evicts B's own ----
	size=$(($(stat -c %s "$tmp/$b-a.snap") + 16)) # a record: the snapshot and its header
	if [ "$backend" = folder ]; then
		share_store=("sessions.store_dir=$tmp/share-store")
	else
		share_store=("sessions.store=redis://127.0.0.1:$redis_port/1")
	fi
	cfg "$b-share" "${share_store[@]}" scheduler.session_offload_s=1 \
		"sessions.store_max_bytes=$((size * 6))" "sessions.per_key_store_bytes=$((size * 5 / 2))"
	start_daemon "$b-share" "$tmp/$b-share.yaml" "${args[@]}"
	check "$b: share instance ready" [ $? -eq 0 ]
	share_pid=$pid
	http PUT /v1/sessions/aaa1 "${auth[@]}" >/dev/null
	append_as "$base" "$api_key" aaa1 >/dev/null
	check "$b: A's session offloaded" wait_metric sinkd_session_offloads_total '>=' 1
	for i in $(seq 10 21); do
		http PUT "/v1/sessions/b$i" "${auth_b[@]}" >/dev/null
		append_as "$base" "$key_b" "b$i" >/dev/null
	done
	check "$b: B's 12 sessions offloaded" wait_metric sinkd_session_offloads_total '>=' 13
	kept=0
	for i in $(seq 10 21); do
		[ "$(http GET "/v1/sessions/b$i" "${auth_b[@]}")" = 200 ] && kept=$((kept + 1))
	done
	check "$b: B keeps at most its share (2 of 12 kept: $kept)" [ "$kept" -le 2 -a "$kept" -ge 1 ]
	check "$b: A's stored session survives B's churn" [ "$(http GET /v1/sessions/aaa1 "${auth[@]}")" = 200 ]
	check "$b: A continues it" [ "$(append_as "$base" "$api_key" aaa1)" = 200 ]
	n_ev=$(grep -c '"msg":"session evicted from the store"' "$tmp/$b-share.log")
	check "$b: each eviction is logged ($n_ev)" [ "$n_ev" -ge 10 ]
	ev=$(curl -sk "${auth[@]}" "$base/metrics" | grep '^sinkd_session_store_evictions_total{' | awk '{s += $NF} END {print s + 0}')
	check "$b: and counted per key in /metrics ($ev)" [ "$ev" -ge 10 ]
	stop_daemon "$share_pid"
	check "$b: share instance drains, exit 0" [ $? -eq 0 ]
done

# ---- Redis restarted under a running instance: clear errors, nothing lost ----
if [ -n "$redis_pid" ]; then
	cfg rr "sessions.store=redis://127.0.0.1:$redis_port/2" scheduler.session_offload_s=1
	start_daemon rr "$tmp/rr.yaml" "${args[@]}"
	check "redis restart: instance ready" [ $? -eq 0 ]
	rr_pid=$pid
	http PUT /v1/sessions/ee01 "${auth[@]}" >/dev/null
	check "redis restart: a session gets its tokens" [ "$(append_as "$base" "$api_key" ee01)" = 200 ]
	kill "$redis_pid" # before its offload, a second from now
	wait "$redis_pid" 2>/dev/null
	st=$(http PUT /v1/sessions/ee02 "${auth[@]}")
	check "redis restart: a create that needs the store meanwhile: a clear 500 ($st)" [ "$st" = 500 ]
	jcheck "redis restart: ... session_store_error, the detail in the log only" "$tmp/body" 'j["error"]["code"] == "session_store_error" and "127.0.0.1" not in j["error"]["message"]'
	check "redis restart: its offload fails and is counted" wait_metric sinkd_session_offload_failures_total '>=' 1
	check "redis restart: ... logged as an error naming it" \
		grep -q '"level":"error".*"msg":"session offload failed (kept resident)".*ee01' "$tmp/rr.log"
	check "redis restart: the session stays resident and usable" [ "$(append_as "$base" "$api_key" ee01)" = 200 ]
	st=$(http GET /v1/sessions/ee99/snapshot "${auth[@]}")
	check "redis restart: a session only the store could have: a clear 500 ($st)" [ "$st" = 500 ]
	jcheck "redis restart: ... session_store_error, no host path" "$tmp/body" \
		'j["error"]["code"] == "session_store_error" and "/" not in j["error"]["message"]'
	redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
		--dir "$tmp/redis" >>"$tmp/redis.log" 2>&1 &
	redis_pid=$!
	daemon_pids+=("$redis_pid")
	wait_for bash -c "redis-cli -p $redis_port ping 2>/dev/null | grep -q PONG"
	check "redis restart: Redis is back" [ $? -eq 0 ]
	kill -TERM "$rr_pid"
	wait "$rr_pid"
	check "redis restart: the drain writes the session, exit 0" [ $? -eq 0 ]
	cfg rr2 "sessions.store=redis://127.0.0.1:$redis_port/2"
	start_daemon rr2 "$tmp/rr2.yaml" "${args[@]}"
	check "redis restart: the next instance ready" [ $? -eq 0 ]
	check "redis restart: it continues the session" [ "$(append_as "$base" "$api_key" ee01)" = 200 ]
	jcheck "redis restart: ... with every token kept" "$tmp/body" 'j["tokens_appended"] > 10'
	stop_daemon "$pid"
fi

# ---- drain onto a full store (folder on a small tmpfs) ----
mkdir -p "$tmp/small"
if mount -t tmpfs -o size=128k tmpfs "$tmp/small" 2>/dev/null; then
	trap 'umount "$tmp/small" 2>/dev/null; cleanup' EXIT
	cfg full "sessions.store_dir=$tmp/small/store" sessions.lease_timeout_s=2 \
		sessions.instance_id=full-1
	start_daemon full "$tmp/full.yaml" "${args[@]}"
	check "enospc: instance ready" [ $? -eq 0 ]
	full_pid=$pid
	for i in 1 2 3 4 5; do
		http PUT "/v1/sessions/f0$i" "${auth[@]}" >/dev/null
		append_as "$base" "$api_key" "f0$i" >/dev/null
	done
	# fill the rest of the tmpfs so nothing more fits
	dd if=/dev/zero of="$tmp/small/filler" bs=4k count=64 2>/dev/null
	kill -TERM "$full_pid"
	wait "$full_pid"
	st=$?
	check "enospc: the drain exits non-zero ($st)" [ "$st" -ne 0 ]
	n_err=$(grep -c '"level":"error".*"msg":"session offload failed' "$tmp/full.log")
	check "enospc: one error line per lost session ($n_err)" [ "$n_err" -ge 1 ]
	check "enospc: the exit names the lost sessions' count" grep -q "could not be written to the session store" "$tmp/full.log"
	umount "$tmp/small"
	trap cleanup EXIT
else
	echo "ok - enospc: SKIP (cannot mount a tmpfs here)"
fi

# ---- a stale snapshot is never resumed: written, used elsewhere, lost ----
cfg st1 "sessions.store_dir=$tmp/stale" scheduler.session_offload_s=1 sessions.lease_timeout_s=2
start_daemon st1 "$tmp/st1.yaml" "${args[@]}"
check "stale: instance 1 ready" [ $? -eq 0 ]
st1_pid=$pid
http PUT /v1/sessions/57a1 "${auth[@]}" >/dev/null
append_as "$base" "$api_key" 57a1 >/dev/null
check "stale: offloaded" wait_metric sinkd_session_offloads_total '>=' 1
cfg st2 "sessions.store_dir=$tmp/stale" sessions.lease_timeout_s=2
start_daemon st2 "$tmp/st2.yaml" "${args[@]}"
check "stale: instance 2 ready" [ $? -eq 0 ]
st2_pid=$pid
check "stale: instance 2 brings it back and changes it" [ "$(append_as "$base" "$api_key" 57a1)" = 200 ]
kill -9 "$st2_pid" # its newer state is never written
wait "$st2_pid" 2>/dev/null
sleep 2.5
base=$(sed -n 's/.*listen: "\(.*\)".*/https:\/\/\1/p' "$tmp/st1.yaml")
st=$(append_as "$base" "$api_key" 57a1)
check "stale: the older snapshot is refused, not resumed ($st)" [ "$st" = 409 ]
jcheck "stale: the error says the snapshot is stale" "$tmp/body" '"generation" in j["error"]["message"] and j["error"]["code"] == "session_stale"'
check "stale: DELETE still removes it" [ "$(http DELETE /v1/sessions/57a1 "${auth[@]}")" = 200 ]
stop_daemon "$st1_pid"
finish
