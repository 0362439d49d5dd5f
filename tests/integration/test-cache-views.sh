#!/usr/bin/env bash
# The cache views over HTTPS with the real daemon: GET /v1/sessions lists
# the caller's sessions only, GET /v1/streams shows a running stream with its
# tiers, GET /v1/sessions/{id}/cache and /v1/streams/{request_id}/cache
# return the trace whose tiers and stream indices follow the geometry
# (sinks first, the window the newest tokens, its older part quantized) and
# whose masses sum to 1 per layer once collection is on; ?layers= limits it,
# bad ids and layer lists are clear errors.
set -u
. "$(dirname "$0")/server-lib.sh"

port=$(free_port)
write_config "$tmp/a.yaml" "$port"
cat >>"$tmp/a.yaml" <<YAML
inference:
  cache:
    sink_keep_count: 4
    window_size: 48
  quantization:
    enabled: true
    bits: 8
    full_precision_recent: 16
YAML
# a second key, for what another client may not see
key2=test-key-2
sed -i "s/api_keys: \[\"sha256:$api_digest\"\]/api_keys: [\"sha256:$api_digest\", \"sha256:$(printf %s "$key2" | sha256sum | cut -d' ' -f1)\"]/" "$tmp/a.yaml"
start_daemon views "$tmp/a.yaml" --set limits.max_tokens=200000
check "daemon ready" [ $? -eq 0 ]
other=(-H "Authorization: Bearer $key2")

story='Once upon a time there was a little girl named Lily. She liked to play in the park with her dog. One day she saw a big red ball under a tree and ran to get it. It was the best day ever.'

check "create a session 200" [ "$(http PUT /v1/sessions/c0ffee "${auth[@]}")" = 200 ]
check "cache of a session with no request yet 200" [ "$(http GET /v1/sessions/c0ffee/cache "${auth[@]}")" = 200 ]
jcheck "an empty session's trace has no slots and no masses" "$tmp/body" \
	'j["object"] == "session.cache" and j["id"] == "c0ffee" and not j["tracing"] and all(l["n_slots"] == 0 and l["mass_max"] is None for l in j["layers"])'
cp "$tmp/body" "$tmp/empty.json"
check "append a story 200" [ "$(http POST /v1/sessions/c0ffee/append "${auth[@]}" -d "{\"text\":\"$story $story\"}")" = 200 ]
check "cache after the story 200" [ "$(http GET /v1/sessions/c0ffee/cache "${auth[@]}")" = 200 ]
cp "$tmp/body" "$tmp/trace.json"
cat >"$tmp/geometry.py" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
g = j['geometry']
assert g == {'sink_keep_count': 4, 'window_size': 48, 'quant_bits': 8, 'full_precision_recent': 16, 'anchor_max': 0}, g
assert j['tier_names'] == ['sink', 'anchor', 'compressed', 'hot', 'shared'], j['tier_names']
n = j['stream_position'] + 1
assert n > 100, n
assert j['tracing']
assert len(j['layers']) == 5
for l in j['layers']:
    idx, tier, pos = l['stream_index'], l['tier'], l['rope_position']
    assert l['n_slots'] == 52 == len(idx), l['n_slots']
    assert idx[:4] == [0, 1, 2, 3] and tier[:4] == [0] * 4
    assert idx[4:] == list(range(n - 48, n)), idx[4:8]
    assert pos == list(range(52))
    # older window tokens quantized, the newest full precision (a group not yet full stays hot-side)
    assert all(t == 2 for t in tier[4:4 + 32]) and all(t == 3 for t in tier[-16:]), tier
    assert abs(sum(l['mass_mean']) - 1) < 1e-4, sum(l['mass_mean'])
    assert all(0 <= m <= 1 for m in l['mass_max'])
print("   geometry ok")
PY
check "the trace follows the geometry (4 sinks, 48-token window, the newest 16 full precision)" "$py" "$tmp/geometry.py" "$tmp/trace.json"
check "?layers=1,3-4 200" [ "$(http GET '/v1/sessions/c0ffee/cache?layers=1,3-4' "${auth[@]}")" = 200 ]
jcheck "?layers=1,3-4 gives those layers" "$tmp/body" '[l["layer"] for l in j["layers"]] == [1, 3, 4]'
check "?layers=9 400" [ "$(http GET '/v1/sessions/c0ffee/cache?layers=9' "${auth[@]}")" = 400 ]
jcheck "?layers=9 names the layers that exist" "$tmp/body" '"0..4" in j["error"]["message"] and j["error"]["param"] == "layers"'
check "?layers=x-1 400" [ "$(http GET '/v1/sessions/c0ffee/cache?layers=x-1' "${auth[@]}")" = 400 ]
check "another key's session cache 404" [ "$(http GET /v1/sessions/c0ffee/cache "${other[@]}")" = 404 ]
check "unknown session cache 404" [ "$(http GET /v1/sessions/abc123/cache "${auth[@]}")" = 404 ]
check "POST to a cache 405" [ "$(http POST /v1/sessions/c0ffee/cache "${auth[@]}" -d '{}')" = 405 ]

# The list: mine, not the other key's.
check "another key makes a session" [ "$(http PUT /v1/sessions/beef "${other[@]}")" = 200 ]
check "GET /v1/sessions 200" [ "$(http GET /v1/sessions "${auth[@]}")" = 200 ]
jcheck "the list holds my session with its tiers, not the other key's" "$tmp/body" \
	'j["object"] == "list" and [s["id"] for s in j["data"]] == ["c0ffee"] and j["data"][0]["tiers"]["sink"] == 4'
check "the other key's list 200" [ "$(http GET /v1/sessions "${other[@]}")" = 200 ]
jcheck "the other key sees its own only" "$tmp/body" '[s["id"] for s in j["data"]] == ["beef"]'
check "DELETE /v1/sessions 405" [ "$(http DELETE /v1/sessions "${auth[@]}")" = 405 ]
check "405 allows GET and POST" [ "$(header Allow)" = "GET, POST" ]

# A running stream: listed, and its trace by its request id (or the response id).
curl -sk -N --max-time 60 "$base/v1/completions" "${auth[@]}" -H 'X-Request-Id: views-run-1' \
	-H 'Content-Type: application/json' \
	-d "{\"prompt\":\"$story\",\"max_tokens\":150000,\"stream\":true,\"ignore_eos\":true}" >"$tmp/stream.sse" &
stream_pid=$!
wait_for sh -c "curl -sk '$base/v1/streams' -H 'Authorization: Bearer $api_key' | grep -q views-run-1"
check "the stream is listed" [ $? -eq 0 ]
check "GET /v1/streams 200" [ "$(http GET /v1/streams "${auth[@]}")" = 200 ]
jcheck "the stream shows its state and tiers" "$tmp/body" \
	'any(s["id"] == "views-run-1" and s["session_id"] is None and s["state"] in ("prefill", "decode") and s["tiers"]["sink"] == 4 and s["prompt_tokens"] > 40 for s in j["data"])'
check "the other key does not see it" [ "$(http GET /v1/streams "${other[@]}")" = 200 ]
jcheck "the other key's stream list is empty" "$tmp/body" 'j["data"] == []'
check "stream cache by request id 200" [ "$(http GET /v1/streams/views-run-1/cache "${auth[@]}")" = 200 ]
jcheck "the first GET turns collection on from the next step" "$tmp/body" 'j["id"] == "views-run-1" and j["layers"][0]["n_slots"] > 4'
sleep 0.5
check "stream cache by response id 200" [ "$(http GET /v1/streams/cmpl-views-run-1/cache "${auth[@]}")" = 200 ]
jcheck "later its masses are there and sum to 1" "$tmp/body" \
	'j["tracing"] and j["step"] > 0 and all(abs(sum(l["mass_mean"]) - 1) < 1e-4 for l in j["layers"])'
check "another key's stream cache 404" [ "$(http GET /v1/streams/views-run-1/cache "${other[@]}")" = 404 ]
kill "$stream_pid" 2>/dev/null
wait "$stream_pid" 2>/dev/null
check "unknown stream cache 404" [ "$(http GET /v1/streams/nope/cache "${auth[@]}")" = 404 ]
jcheck "404 says stream_not_found" "$tmp/body" 'j["error"]["code"] == "stream_not_found"'
check "a bad stream id is no route (404)" [ "$(http GET '/v1/streams/a%20b/cache' "${auth[@]}")" = 404 ]
check "no key: 401" [ "$(http GET /v1/sessions)" = 401 ]

stop_daemon "$pid"
check "daemon exits 0" [ $? -eq 0 ]
finish
