#!/usr/bin/env bash
# Stored responses do not hoard the KV budget: with a budget that holds 10
# sessions' windows, 200 Responses calls with `store` left true (as the
# OpenAI clients send them) leave nothing reserved, 10 sessions then open
# at once, and an early response is still continued with
# previous_response_id (brought back from the in-memory park, then parked
# again).  Without a session store; with one, they go to the store instead
# (test-tenancy.sh and test-session-handover.sh cover the store).
set -u
. "$(dirname "$0")/server-lib.sh"

write_config "$tmp/probe.yaml" "$(free_port)"
start_daemon probe "$tmp/probe.yaml" --set server.drain_grace_s=0
check "probe instance ready" [ $? -eq 0 ]
bound=$(sed -n 's/.*"session_bound_bytes":\([0-9]*\).*/\1/p' "$tmp/probe.log" | head -1)
check "the session bound is logged ($bound)" [ -n "$bound" ]
stop_daemon "$pid"

# a budget of exactly 10 sessions' bounds
write_config "$tmp/park.yaml" "$(free_port)"
cat >>"$tmp/park.yaml" <<YAML
inference:
  cache: {global_cache_limit: $((bound * 10))}
YAML
start_daemon park "$tmp/park.yaml" --set server.drain_grace_s=0
check "instance with a budget of 10 sessions ready" [ $? -eq 0 ]

"$py" - "$base" "$api_key" >"$tmp/calls.json" <<'PY'
import json, sys
from https_json import call
base, key = sys.argv[1], sys.argv[2]
def post(path, body):
    return call(base, key, "POST", path, body)
statuses, ids = {}, []
for i in range(200):
    st, j = post("/v1/responses", {"input": f"Once upon a time {i}", "max_output_tokens": 3})
    statuses[str(st)] = statuses.get(str(st), 0) + 1
    if st == 200:
        ids.append(j["id"])
print(json.dumps({"statuses": statuses, "first": ids[0] if ids else None, "n": len(ids)}))
PY
jcheck "200 stored responses, all 200" "$tmp/calls.json" 'j["statuses"] == {"200": 200}'
check "nothing stays reserved once they are idle" wait_metric sinkd_kv_bytes_reserved '==' 0
check "they are parked in memory" wait_metric sinkd_responses_parked '>=' 1
ok=0
for i in 0 1 2 3 4 5 6 7 8 9; do
	[ "$(http PUT "/v1/sessions/5e5$i" "${auth[@]}")" = 200 ] && ok=$((ok + 1))
done
check "then 10 sessions open on the budget of 10 ($ok of 10)" [ "$ok" = 10 ]
for i in 0 1 2 3 4 5 6 7 8 9; do http DELETE "/v1/sessions/5e5$i" "${auth[@]}" >/dev/null; done
first=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["first"])' "$tmp/calls.json")
st=$(http POST /v1/responses "${auth[@]}" -d "{\"previous_response_id\":\"$first\",\"input\":\" and then\",\"max_output_tokens\":3}")
check "the first response is continued from the park ($st)" [ "$st" = 200 ]
jcheck "... as a response that can itself be continued" "$tmp/body" 'j["id"].startswith("resp_") and j["status"] in ("completed", "incomplete")'
check "and it leaves again: nothing reserved" wait_metric sinkd_kv_bytes_reserved '==' 0
check "restores from the park are counted" wait_metric 'sinkd_session_restores_total{source="store"}' '>=' 1
stop_daemon "$pid"
check "drains, exit 0" [ $? -eq 0 ]
finish
