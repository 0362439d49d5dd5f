#!/usr/bin/env bash
# Sessions beyond one process, with real daemons on one model: a session
# snapshotted on instance A and restored on instance B continues with exactly
# the tokens (greedy) A produces, for a float, an int8 and an int4 cache, and
# revision still works after it; hostile snapshots are refused with clear
# errors; a session is its creating key's; with a shared session store, an idle session is offloaded and
# comes back, a SIGTERM drain hands every session to the next instance, a
# kill -9 after an offload loses nothing, and a dead instance's lease is
# taken over.
set -u
. "$(dirname "$0")/server-lib.sh"

store="$tmp/store"
long="Once upon a time there was a little girl named Lily. She liked to play in the park with her friends. One day she saw a big dog."
long="$long $long $long"

# cfg NAME [k=v ...]: a config with a small window (evictions and quantized
# groups within a few hundred tokens).
cfg() {
	local name=$1
	shift
	write_config "$tmp/$name.yaml" "$(free_port)"
	cat >>"$tmp/$name.yaml" <<YAML
inference:
  cache: {window_size: 64, sink_keep_count: 4}
YAML
	args=(--set server.drain_grace_s=0)
	for kv in "$@"; do args+=(--set "$kv"); done
}

# same A B: a generated text (not an error) and equal (one command, so that
# check tests all of it).
same() { [ -n "$1" ] && [ "${1#ERROR}" = "$1" ] && [ "$1" = "$2" ]; }
# reply BASE ID BODY: the generated text of an append (JSON answer).
reply() {
	curl -sk "${auth[@]}" -d "$3" "$1/v1/sessions/$2/append" |
		"$py" -c 'import json,sys; j=json.load(sys.stdin); print(j["choices"][0]["text"] if "choices" in j else "ERROR " + json.dumps(j))'
}
gen='{"text":" The dog","generate":{"max_tokens":40,"temperature":0,"stream":false}}'
gen2='{"revise_last_tokens":3,"text":" and then","generate":{"max_tokens":20,"temperature":0,"stream":false}}'

for kind in float int8 int4; do
	case $kind in
	float) q=(inference.quantization.enabled=false) ;;
	int8) q=(inference.quantization.enabled=true inference.quantization.bits=8 inference.quantization.full_precision_recent=8) ;;
	int4) q=(inference.quantization.enabled=true inference.quantization.bits=4 inference.quantization.full_precision_recent=8 inference.quantization.protect_sink_positions=false) ;;
	esac
	cfg "a-$kind" "${q[@]}"
	start_daemon "a-$kind" "$tmp/a-$kind.yaml" "${args[@]}"
	check "$kind: instance A ready" [ $? -eq 0 ]
	a=$base
	a_pid=$pid
	cfg "b-$kind" "${q[@]}"
	start_daemon "b-$kind" "$tmp/b-$kind.yaml" "${args[@]}"
	check "$kind: instance B ready" [ $? -eq 0 ]
	b=$base
	b_pid=$pid
	base=$a
	http PUT /v1/sessions/5e55 "${auth[@]}" >/dev/null
	http POST /v1/sessions/5e55/append "${auth[@]}" -d "{\"text\":\"$long\"}" >/dev/null
	check "$kind: snapshot 200" [ "$(http GET /v1/sessions/5e55/snapshot "${auth[@]}")" = 200 ]
	cp "$tmp/body" "$tmp/$kind.snap"
	check "$kind: snapshot is application/octet-stream" [ "$(header Content-Type)" = application/octet-stream ]
	check "$kind: X-Sinkd-Snapshot-Sha256 is the body's" [ "$(header X-Sinkd-Snapshot-Sha256)" = "$(sha256sum <"$tmp/$kind.snap" | cut -d' ' -f1)" ]
	check "$kind: X-Sinkd-Snapshot-Bytes is the body's" [ "$(header X-Sinkd-Snapshot-Bytes)" = "$(stat -c %s "$tmp/$kind.snap")" ]
	http GET /v1/sessions/5e55 "${auth[@]}" >/dev/null
	cp "$tmp/body" "$tmp/$kind-a-info.json"
	jcheck "$kind: the window evicted (a real test of the tiers)" "$tmp/$kind-a-info.json" 'j["tokens_seen"] > j["tokens_resident"] and j["tiers"]["sink"] == 4'
	base=$b
	check "$kind: restore on B 200" [ "$(http POST /v1/sessions/restore "${auth[@]}" --data-binary "@$tmp/$kind.snap")" = 200 ]
	jcheck "$kind: restored with its id and stream" "$tmp/body" "j['id'] == '5e55' and j['tokens_seen'] == json.load(open('$tmp/$kind-a-info.json'))['tokens_seen'] and j['restored'] is True"
	check "$kind: restore again → 409" [ "$(http POST /v1/sessions/restore "${auth[@]}" --data-binary "@$tmp/$kind.snap")" = 409 ]
	jcheck "$kind: 409 session_exists" "$tmp/body" 'j["error"]["code"] == "session_exists"'
	check "$kind: restore under a new id 200" [ "$(http POST '/v1/sessions/restore?id=5e56' "${auth[@]}" --data-binary "@$tmp/$kind.snap")" = 200 ]
	ra=$(reply "$a" 5e55 "$gen")
	rb=$(reply "$b" 5e55 "$gen")
	rc=$(reply "$b" 5e56 "$gen")
	check "$kind: A generates text" same "$ra" "$ra"
	check "$kind: B continues with exactly A's tokens" [ "$ra" = "$rb" ]
	check "$kind: and so does the copy under a new id" [ "$ra" = "$rc" ]
	ra=$(reply "$a" 5e55 "$gen2")
	rb=$(reply "$b" 5e55 "$gen2")
	check "$kind: revise_last_tokens after a restore: the same on both" same "$ra" "$rb"
	http GET /v1/sessions/5e55 "${auth[@]}" >/dev/null
	cp "$tmp/body" "$tmp/$kind-b-info.json"
	base=$a
	http GET /v1/sessions/5e55 "${auth[@]}" >/dev/null
	jcheck "$kind: both streams at the same token" "$tmp/body" "j['tokens_seen'] == json.load(open('$tmp/$kind-b-info.json'))['tokens_seen']"
	# the same revision limit on both: the whole window is more than the hot tier
	sa=$(http POST /v1/sessions/5e55/append "${auth[@]}" -d '{"revise_last_tokens":40,"text":"x"}')
	base=$b
	sb=$(http POST /v1/sessions/5e55/append "${auth[@]}" -d '{"revise_last_tokens":40,"text":"x"}')
	check "$kind: the same revision limit after a restore ($sa = $sb)" [ "$sa" = "$sb" ]
	stop_daemon "$a_pid"
	stop_daemon "$b_pid"
done

# ---- hostile snapshots (the int8 one as a base) ----
q8=(inference.quantization.enabled=true inference.quantization.bits=8 inference.quantization.full_precision_recent=8)
key2=test-key-2
digest2=$(printf %s "$key2" | sha256sum | cut -d' ' -f1)
cfg hostile "${q8[@]}" "server.api_keys=sha256:$api_digest,sha256:$digest2"
start_daemon hostile "$tmp/hostile.yaml" "${args[@]}"
check "hostile: instance ready" [ $? -eq 0 ]
# a session belongs to the key that created it
other=(-H "Authorization: Bearer $key2")
http PUT /v1/sessions/0a11 "${auth[@]}" >/dev/null
http POST /v1/sessions/0a11/append "${auth[@]}" -d '{"text":"Once upon a time"}' >/dev/null
check "owner: another key's GET → 404" [ "$(http GET /v1/sessions/0a11 "${other[@]}")" = 404 ]
check "owner: another key's append → 404" [ "$(http POST /v1/sessions/0a11/append "${other[@]}" -d '{"text":"x"}')" = 404 ]
check "owner: another key's completion on it → 404" [ "$(http POST /v1/completions "${other[@]}" -d '{"session_id":"0a11","prompt":"x","max_tokens":1}')" = 404 ]
check "owner: another key's snapshot → 404" [ "$(http GET /v1/sessions/0a11/snapshot "${other[@]}")" = 404 ]
check "owner: another key's DELETE → 404" [ "$(http DELETE /v1/sessions/0a11 "${other[@]}")" = 404 ]
check "owner: the owner still sees it" [ "$(http GET /v1/sessions/0a11 "${auth[@]}")" = 200 ]
jcheck "owner: untouched by the other key" "$tmp/body" 'j["tokens_seen"] == 5'
check "owner: the owner deletes it" [ "$(http DELETE /v1/sessions/0a11 "${auth[@]}")" = 200 ]
snap="$tmp/int8.snap"
mangle() { # OUT PYTHON-EXPR-ON-b (bytearray); reseal=1 recomputes the checksum
	"$py" - "$snap" "$1" "$2" "${3:-0}" <<'PY'
import hashlib, sys
b = bytearray(open(sys.argv[1], "rb").read())
exec(sys.argv[3])
if sys.argv[4] == "1":
    b[-32:] = hashlib.sha256(bytes(b[:-32])).digest()
open(sys.argv[2], "wb").write(bytes(b))
PY
}
restore_case() { # desc file code message-part
	local st
	st=$(http POST '/v1/sessions/restore?id=bad1' "${auth[@]}" --data-binary "@$2")
	check "hostile: $1 → $3" [ "$st" = 400 ]
	jcheck "hostile: $1: the message says '$4'" "$tmp/body" "j['error']['code'] == '$3' and '$4' in j['error']['message']"
	cp "$tmp/body" "$tmp/hostile-$n_checks.json"
}
mangle "$tmp/cut.snap" 'b = b[:len(b) // 2]'
restore_case truncated "$tmp/cut.snap" invalid_snapshot "truncated"
mangle "$tmp/flip.snap" 'b[len(b) // 3] ^= 0x40'
restore_case "bit flipped" "$tmp/flip.snap" invalid_snapshot checksum
mangle "$tmp/model.snap" 'b[16] ^= 1' 1
restore_case "another model" "$tmp/model.snap" snapshot_model_mismatch "another model"
mangle "$tmp/geom.snap" 'b[84:88] = (9).to_bytes(4, "little")' 1
restore_case "other layer count" "$tmp/geom.snap" snapshot_model_mismatch shape
mangle "$tmp/count.snap" 'b[276:280] = (1000).to_bytes(4, "little")' 1
restore_case "hostile group count" "$tmp/count.snap" invalid_snapshot n_groups
mangle "$tmp/window.snap" 'b[120:124] = (1 << 24).to_bytes(4, "little")' 1
check "hostile: a window beyond the configured bound → 400" [ "$(http POST '/v1/sessions/restore?id=bad1' "${auth[@]}" --data-binary "@$tmp/window.snap")" = 400 ]
jcheck "hostile: the bound is named" "$tmp/body" 'j["error"]["code"] in ("snapshot_too_large", "invalid_snapshot")'
# crafted to pass every check before part 4's: counters that wrap after one
# append, RoPE that is not the model's, a K value that is NaN (each would
# restore, then fail every step); refused whole, naming the field
mangle "$tmp/nseen.snap" 'b[248:256] = (2**64 - 2).to_bytes(8, "little"); b[232:240] = (2**64 - 1).to_bytes(8, "little")' 1
restore_case "n_seen 2^64-2" "$tmp/nseen.snap" invalid_snapshot "snapshot field n_seen"
mangle "$tmp/ropedim.snap" 'b[96:100] = (0).to_bytes(4, "little")' 1
restore_case "rope_dim 0" "$tmp/ropedim.snap" invalid_snapshot "snapshot field rope_dim: 0, this model"
mangle "$tmp/nan.snap" '
import struct
assert b[112] == 1, "the int8 base keeps its sinks in full precision"
kv = 304 + 4 * int.from_bytes(b[244:248], "little")  # layer 0, first sink, k
b[kv:kv + (4 if b[114] == 0 else 2)] = [struct.pack("<f", float("nan")), b"\x00\x7e", b"\xc0\x7f"][b[114]]' 1
restore_case "a NaN K value" "$tmp/nan.snap" invalid_snapshot "snapshot field sink k"
mangle "$tmp/theta.snap" '
import struct
b[100:108] = struct.pack("<d", struct.unpack("<d", b[100:108])[0] * 2)' 1
restore_case "another rope_theta" "$tmp/theta.snap" invalid_snapshot "snapshot field rope_theta"
mangle "$tmp/neox.snap" 'b[108] ^= 1' 1
restore_case "another RoPE style" "$tmp/neox.snap" invalid_snapshot "snapshot field rope_neox"
printf 'GGUF not a snapshot at all' >"$tmp/junk.snap"
restore_case "not a snapshot" "$tmp/junk.snap" invalid_snapshot header
check "hostile: a bad id → 400" [ "$(http POST '/v1/sessions/restore?id=../x' "${auth[@]}" --data-binary "@$snap")" = 400 ]
st=$(http POST /v1/sessions/restore --data-binary "@$snap")
check "hostile: without a key → 401 ($st)" [ "$st" = 401 ]
check "hostile: snapshot without a key → 401" [ "$(http GET /v1/sessions/5e55/snapshot)" = 401 ]
check "hostile: snapshot of an unknown session → 404" [ "$(http GET /v1/sessions/beef/snapshot "${auth[@]}")" = 404 ]
check "hostile: nothing restored, nothing reserved" wait_metric sinkd_kv_bytes_reserved '==' 0
check "hostile: still serving" [ "$(http GET /health)" = 200 ]
stop_daemon "$pid" >/dev/null 2>&1

# ---- the store, for the folder and for Redis (a real redis-server) ----
# stored NAME ID: whether the store holds ID's record (under the key's tag:
# <16 hex>-<id>); lease_names NAME ID PID: whether its lease names PID.
stored() {
	if [ "$1" = folder ]; then
		[ -n "$(find "$store" -name "????????????????-$2.snap" -size +0)" ]
	else
		[ -n "$(redis-cli -p "$rport" -n 0 --scan --pattern "sinkd:rec:????????????????-$2")" ]
	fi
}
not_stored() { ! stored "$@"; }
lease_names() {
	if [ "$1" = folder ]; then
		grep -q ":$3\$" "$store"/????????????????-"$2".lease
	else
		local k
		k=$(redis-cli -p "$rport" -n 0 --scan --pattern "sinkd:lease:????????????????-$2")
		[ -n "$k" ] && redis-cli -p "$rport" -n 0 GET "$k" | grep -q ":$3\$"
	fi
}

cfg ref "${q8[@]}"
start_daemon ref "$tmp/ref.yaml" "${args[@]}"
check "store: reference instance ready" [ $? -eq 0 ]
ref=$base
rport=""
if command -v redis-server >/dev/null 2>&1; then
	rport=$(free_port)
	mkdir -p "$tmp/redis"
	redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --dir "$tmp/redis" \
		>"$tmp/redis.log" 2>&1 &
	daemon_pids+=("$!")
	wait_for bash -c "redis-cli -p $rport ping 2>/dev/null | grep -q PONG"
	check "redis: redis-server up" [ $? -eq 0 ]
else
	echo "ok - redis: SKIP (no redis-server): the store tests run on the folder only"
fi

# store_suite NAME N: offload and return, drain hand-over, kill -9, lease
# take-over, on the folder (NAME folder) or Redis; N makes the ids its own.
store_suite() {
	local sb=$1 n=$2 sc
	local s_off=0ff$n s_drain=d7a$n s_k9=c1a$n s_lease=1ea$n
	if [ "$sb" = folder ]; then sc="sessions.store_dir=$store"; else sc="sessions.store=redis://127.0.0.1:$rport/0"; fi
	for id in $s_off $s_drain $s_k9 $s_lease; do
		base=$ref
		http PUT "/v1/sessions/$id" "${auth[@]}" >/dev/null
		http POST "/v1/sessions/$id/append" "${auth[@]}" -d "{\"text\":\"$long\"}" >/dev/null
	done
	# ---- offload and return on one instance ----
	cfg "off$n" "${q8[@]}" "$sc" scheduler.session_offload_s=1
	start_daemon "off$n" "$tmp/off$n.yaml" "${args[@]}"
	check "$sb store: instance with a store ready" [ $? -eq 0 ]
	off_pid=$pid
	http PUT "/v1/sessions/$s_off" "${auth[@]}" >/dev/null
	http POST "/v1/sessions/$s_off/append" "${auth[@]}" -d "{\"text\":\"$long\"}" >/dev/null
	check "$sb store: idle session offloaded" wait_metric sinkd_session_offloads_total '>=' 1
	check "$sb store: its reservation is back in the budget" wait_metric sinkd_kv_bytes_reserved '==' 0
	check "$sb store: the record is there under the key's tag" stored "$sb" "$s_off"
	[ "$sb" = folder ] && check "folder store: the file is mode 0600" \
		[ "$(stat -c %a "$store"/????????????????-$s_off.snap 2>/dev/null)" = 600 ]
	check "$sb store: inspect says where it is" [ "$(http GET "/v1/sessions/$s_off" "${auth[@]}")" = 200 ]
	jcheck "$sb store: location store" "$tmp/body" 'j["location"] == "store" and j["offloaded"] is True'
	r1=$(reply "$ref" "$s_off" "$gen")
	r2=$(reply "$base" "$s_off" "$gen")
	check "$sb store: after offload and return, exactly the reference tokens" same "$r1" "$r2"
	check "$sb store: restored from the store" wait_metric 'sinkd_session_restores_total{source="store"}' '>=' 1
	check "$sb store: DELETE removes it" [ "$(http DELETE "/v1/sessions/$s_off" "${auth[@]}")" = 200 ]
	check "$sb store: gone from the store after DELETE" wait_for not_stored "$sb" "$s_off"

	# ---- drain hands every session to the next instance over the shared store ----
	stop_daemon "$off_pid"
	cfg "drainer$n" "${q8[@]}" "$sc"
	start_daemon "drainer$n" "$tmp/drainer$n.yaml" "${args[@]}"
	check "$sb drain: instance without offloading ready" [ $? -eq 0 ]
	off_pid=$pid
	http PUT "/v1/sessions/$s_drain" "${auth[@]}" >/dev/null
	http POST "/v1/sessions/$s_drain/append" "${auth[@]}" -d "{\"text\":\"$long\"}" >/dev/null
	check "$sb drain: resident, not in the store yet" not_stored "$sb" "$s_drain"
	cfg "next$n" "${q8[@]}" "$sc" sessions.lease_timeout_s=5
	start_daemon "next$n" "$tmp/next$n.yaml" "${args[@]}"
	check "$sb drain: second instance ready" [ $? -eq 0 ]
	next=$base
	next_pid=$pid
	kill -TERM "$off_pid"
	wait "$off_pid"
	check "$sb drain: instance A exited 0" [ $? -eq 0 ]
	check "$sb drain: the session is in the store" stored "$sb" "$s_drain"
	check "$sb drain: the log says it was written" grep -q 'written to the session store' "$tmp/drainer$n.log"
	r1=$(reply "$ref" "$s_drain" "$gen")
	r2=$(reply "$next" "$s_drain" "$gen")
	check "$sb drain: instance B continues with exactly the reference tokens" same "$r1" "$r2"

	# ---- kill -9 after an offload loses nothing; a dead instance's lease ----
	cfg "k9$n" "${q8[@]}" "$sc" scheduler.session_offload_s=1
	start_daemon "k9$n" "$tmp/k9$n.yaml" "${args[@]}"
	check "$sb kill -9: instance ready" [ $? -eq 0 ]
	k9_pid=$pid
	for id in $s_k9 $s_lease; do
		http PUT "/v1/sessions/$id" "${auth[@]}" >/dev/null
		http POST "/v1/sessions/$id/append" "${auth[@]}" -d "{\"text\":\"$long\"}" >/dev/null
	done
	check "$sb kill -9: both offloaded" wait_metric sinkd_session_offloads_total '>=' 2
	# another instance brings one back (reading its snapshot) and so holds its lease
	# (with Redis the holder's lease_timeout_s decides when its lease lapses)
	cfg "holder$n" "${q8[@]}" "$sc" sessions.lease_timeout_s=5
	start_daemon "holder$n" "$tmp/holder$n.yaml" "${args[@]}"
	check "$sb lease: holder instance ready" [ $? -eq 0 ]
	holder_pid=$pid
	st=$(http GET "/v1/sessions/$s_lease/snapshot" "${auth[@]}")
	check "$sb lease: the holder restores it from the store ($st)" [ "$st" = 200 ]
	kill -9 "$k9_pid" "$holder_pid"
	wait "$k9_pid" "$holder_pid" 2>/dev/null
	base=$next
	killed_at=$(date +%s.%N)
	check "$sb lease: the dead holder's lease holds at first → 409" [ "$(http POST "/v1/sessions/$s_lease/append" "${auth[@]}" -d '{"text":"x"}')" = 409 ]
	jcheck "$sb lease: 409 session_elsewhere names the holder" "$tmp/body" 'j["error"]["code"] == "session_elsewhere" and "held by instance" in j["error"]["message"]'
	r1=$(reply "$ref" "$s_k9" "$gen")
	r2=$(reply "$next" "$s_k9" "$gen")
	check "$sb kill -9: the offloaded session continues elsewhere, exactly" same "$r1" "$r2"
	sleep "$(awk -v t="$killed_at" -v now="$(date +%s.%N)" 'BEGIN { w = t + 5.5 - now; print (w > 0 ? w : 0) }')"
	r1=$(reply "$ref" "$s_lease" "$gen")
	r2=$(reply "$next" "$s_lease" "$gen")
	check "$sb lease: after lease_timeout_s it is taken over and continues exactly" same "$r1" "$r2"
	check "$sb lease: the lease names the new holder" lease_names "$sb" "$s_lease" "$next_pid"
	kill -TERM "$next_pid"
	wait "$next_pid"
	check "$sb: second drain exits 0" [ $? -eq 0 ]
}
[ "${SKIP_FOLDER:-0}" = 1 ] || store_suite folder 1
[ -n "$rport" ] && store_suite redis 2
finish
