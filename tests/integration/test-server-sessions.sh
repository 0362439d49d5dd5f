#!/usr/bin/env bash
# Persistent sessions over HTTPS with the real daemon: create (with and
# without cache settings), append, inspect, generate (SSE and JSON), revise
# the last tokens, continue from /v1/completions, conflicts (409), unknown ids
# (404), delete releasing the reservation.
set -u
. "$(dirname "$0")/server-lib.sh"

port=$(free_port)
write_config "$tmp/s.yaml" "$port"
start_daemon sessions "$tmp/s.yaml" --set limits.max_tokens=1000000 --set inference.cache.window_size=1020
check "daemon ready" [ $? -eq 0 ]
hex32='import re; re.fullmatch("[0-9a-f]{32}", j["id"])'

check "create 200" [ "$(http POST /v1/sessions "${auth[@]}")" = 200 ]
jcheck "create: session object with the configured cache" "$tmp/body" 'len(j["id"]) == 32 and j["object"] == "session" and j["window_size"] == 1020 and j["sink_keep_count"] == 4 and j["bytes_reserved"] > 0'
sid=$(sed 's/.*"id":"\([0-9a-f]*\)".*/\1/' "$tmp/body")
check "reservation held while the session lives" wait_metric sinkd_kv_bytes_reserved '>' 0
check "create with cache settings 200" [ "$(http POST /v1/sessions "${auth[@]}" -d '{"window_size":64,"sink_keep_count":2}')" = 200 ]
jcheck "create: settings applied" "$tmp/body" 'j["window_size"] == 64 and j["sink_keep_count"] == 2'
small=$(sed 's/.*"id":"\([0-9a-f]*\)".*/\1/' "$tmp/body")
check "create: window above the configured one → 400" [ "$(http POST /v1/sessions "${auth[@]}" -d '{"window_size":5000}')" = 400 ]
jcheck "create: 400 names window_size" "$tmp/body" 'j["error"]["param"] == "window_size"'
check "create: sinks above the configured ones → 400" [ "$(http POST /v1/sessions "${auth[@]}" -d '{"sink_keep_count":5}')" = 400 ]
jcheck "create: 400 names sink_keep_count" "$tmp/body" 'j["error"]["param"] == "sink_keep_count" and j["error"]["type"] == "invalid_request_error"'
check "create: sinks that fill the window → 400" [ "$(http POST /v1/sessions "${auth[@]}" -d '{"window_size":3,"sink_keep_count":3}')" = 400 ]
jcheck "create: that 400 names sink_keep_count too" "$tmp/body" 'j["error"]["param"] == "sink_keep_count" and j["error"]["code"] == "invalid_value"'
check "create: wrong type → 400" [ "$(http POST /v1/sessions "${auth[@]}" -d '{"sink_keep_count":"four"}')" = 400 ]

check "append text 200" [ "$(http POST "/v1/sessions/$sid/append" "${auth[@]}" -d '{"text":"Once upon a time"}')" = 200 ]
jcheck "append: BOS + 4 tokens appended" "$tmp/body" "j == {'id': '$sid', 'object': 'session.append', 'tokens_appended': 5}"
check "inspect 200" [ "$(http GET "/v1/sessions/$sid" "${auth[@]}")" = 200 ]
jcheck "inspect: tokens and tiers" "$tmp/body" 'j["tokens_seen"] == 5 and j["tiers"]["sink"] + j["tiers"]["compressed"] + j["tiers"]["hot"] == j["tokens_resident"] and j["bytes_resident"] > 0 and j["bytes_reserved"] >= j["bytes_resident"] and j["busy"] is False and j["age_s"] >= j["idle_s"] >= 0'

http POST /v1/completions "${auth[@]}" -d '{"prompt":"Once upon a time there","max_tokens":8,"temperature":0}' >/dev/null
cp "$tmp/body" "$tmp/oneshot.json"
http POST "/v1/sessions/$sid/append" "${auth[@]}" -N -d '{"text":" there","generate":{"max_tokens":8,"temperature":0,"stream":true}}' >/dev/null
check "append + generate streams SSE" [ "$(header Content-Type)" = text/event-stream ]
scheck "append + generate: text_completion chunks, [DONE]" "$tmp/body" 'ev[-1] == "[DONE]" and ev[-2]["choices"][0]["finish_reason"] == "length" and all(e["object"] == "text_completion" for e in ev[:-1])'
scheck "session reply == one-shot completion of the same text (greedy)" "$tmp/body" "''.join(e['choices'][0]['text'] for e in ev[:-1]) == json.load(open(tmp + '/oneshot.keep'))['choices'][0]['text']"
cp "$tmp/oneshot.json" "$tmp/oneshot.keep"
http GET "/v1/sessions/$sid" "${auth[@]}" >/dev/null
jcheck "generated tokens stay in the session" "$tmp/body" 'j["tokens_seen"] >= 5 + 1 + 8'
cp "$tmp/body" "$tmp/before_revise.json"

check "revise + generate without \"stream\": 200" [ "$(http POST "/v1/sessions/$sid/append" "${auth[@]}" -d '{"revise_last_tokens":2,"generate":{"max_tokens":2,"temperature":0}}')" = 200 ]
check "generate without \"stream\" answers whole JSON, as /v1/completions does" [ "$(header Content-Type)" = application/json ]
jcheck "revise: a completion object" "$tmp/body" 'j["object"] == "text_completion" and j["usage"]["completion_tokens"] == 2'
http GET "/v1/sessions/$sid" "${auth[@]}" >/dev/null
jcheck "revise: the stream lost 2 and gained 2" "$tmp/body" 'j["tokens_seen"] == json.load(open(tmp + "/before_revise.json"))["tokens_seen"]'
check "revise beyond the window → 409" [ "$(http POST "/v1/sessions/$sid/append" "${auth[@]}" -d '{"revise_last_tokens":100000,"text":"x"}')" = 409 ]
jcheck "409 names revise_last_tokens and how many can be revised" "$tmp/body" 'j["error"]["param"] == "revise_last_tokens" and "this session can revise its last" in j["error"]["message"] and "still in the window" not in j["error"]["message"]'
check "append: generate wrong type → 400" [ "$(http POST "/v1/sessions/$sid/append" "${auth[@]}" -d '{"text":"x","generate":{"max_tokens":"many"}}')" = 400 ]
jcheck "400 names generate.max_tokens" "$tmp/body" 'j["error"]["param"] == "generate.max_tokens"'

check "completions continue a session (session_id)" [ "$(http POST /v1/completions "${auth[@]}" -d "{\"session_id\":\"$sid\",\"prompt\":\" and\",\"max_tokens\":3}")" = 200 ]
http GET "/v1/sessions/$sid" "${auth[@]}" >/dev/null
jcheck "session_id: tokens added to the session" "$tmp/body" 'j["tokens_seen"] > json.load(open(tmp + "/before_revise.json"))["tokens_seen"]'

# Two requests on one session never interleave: the second gets 409.
curl -skN "${auth[@]}" -d '{"text":" x","generate":{"max_tokens":1000000,"ignore_eos":true,"stream":true}}' \
	"$base/v1/sessions/$small/append" >/dev/null 2>&1 &
busy_pid=$!
for _ in $(seq 1 200); do
	http GET "/v1/sessions/$small" "${auth[@]}" >/dev/null
	grep -q '"busy":true' "$tmp/body" && break
	sleep 0.05
done
jcheck "session busy while generating" "$tmp/body" 'j["busy"] is True'
check "second append on a busy session → 409" [ "$(http POST "/v1/sessions/$small/append" "${auth[@]}" -d '{"text":"y"}')" = 409 ]
kill "$busy_pid"
wait "$busy_pid" 2>/dev/null
for _ in $(seq 1 200); do
	http GET "/v1/sessions/$small" "${auth[@]}" >/dev/null
	grep -q '"busy":false' "$tmp/body" && break
	sleep 0.05
done
check "disconnect frees the session for the next append" [ "$(http POST "/v1/sessions/$small/append" "${auth[@]}" -d '{"text":"y"}')" = 200 ]

unknown=0123456789abcdef0123456789abcdef
check "unknown session: GET 404" [ "$(http GET "/v1/sessions/$unknown" "${auth[@]}")" = 404 ]
jcheck "unknown session: OpenAI error naming session_id" "$tmp/body" 'j["error"]["code"] == "session_not_found" and j["error"]["param"] == "session_id"'
check "unknown session: append 404" [ "$(http POST "/v1/sessions/$unknown/append" "${auth[@]}" -d '{"text":"x"}')" = 404 ]
check "unknown session: completions 404" [ "$(http POST /v1/completions "${auth[@]}" -d "{\"session_id\":\"$unknown\",\"prompt\":\"x\"}")" = 404 ]
check "unknown session: DELETE 404" [ "$(http DELETE "/v1/sessions/$unknown" "${auth[@]}")" = 404 ]
check "sessions need the key" [ "$(http POST /v1/sessions)" = 401 ]
check "PUT on an existing session → 409" [ "$(http PUT "/v1/sessions/$sid" "${auth[@]}")" = 409 ]
jcheck "409 names session_id" "$tmp/body" 'j["error"]["param"] == "session_id" and j["error"]["code"] == "session_exists"'
check "PATCH on a session → 405" [ "$(http PATCH "/v1/sessions/$sid" "${auth[@]}")" = 405 ]
check "405 lists GET, PUT, DELETE" [ "$(header Allow)" = "GET, PUT, DELETE" ]

check "delete 200" [ "$(http DELETE "/v1/sessions/$sid" "${auth[@]}")" = 200 ]
jcheck "delete: session.deleted" "$tmp/body" "j == {'id': '$sid', 'object': 'session.deleted', 'deleted': True}"
check "deleted session is gone" [ "$(http GET "/v1/sessions/$sid" "${auth[@]}")" = 404 ]
http DELETE "/v1/sessions/$small" "${auth[@]}" >/dev/null
check "all reservations released after delete" wait_metric sinkd_kv_bytes_reserved == 0

stop_daemon "$pid"
check "clean stop" [ $? -eq 0 ]
finish
