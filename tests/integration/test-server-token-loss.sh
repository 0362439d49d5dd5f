#!/usr/bin/env bash
# A token the server cannot queue for its client (out of memory, injected
# with the test hook SINKD_TEST_FAIL_TOKEN_QUEUE=N: every Nth token fails)
# ends the reply with an error, streamed or not, instead of vanishing from
# it; the generation stops and its reservation comes back.
set -u
. "$(dirname "$0")/server-lib.sh"

port=$(free_port)
write_config "$tmp/t.yaml" "$port"
SINKD_TEST_FAIL_TOKEN_QUEUE=5 start_daemon lost "$tmp/t.yaml"
check "daemon ready" [ $? -eq 0 ]

http POST /v1/completions "${auth[@]}" -N -d '{"prompt":"Once upon a time","max_tokens":12,"temperature":0,"stream":true,"ignore_eos":true}' >/dev/null
scheck "stream: 4 tokens, then an error event naming the lost token, then [DONE]" "$tmp/body" 'ev[-1] == "[DONE]" and "out of memory" in ev[-2]["error"]["message"] and ev[-2]["error"]["type"] == "server_error" and len([e for e in ev[:-2] if e["choices"][0]["text"]]) == 4 and not any(e["choices"][0].get("finish_reason") for e in ev[:-2])'
check "whole reply with a lost token → 500" [ "$(http POST /v1/completions "${auth[@]}" -d '{"prompt":"Once upon a time","max_tokens":12,"temperature":0,"ignore_eos":true}')" = 500 ]
jcheck "… saying why, never a reply short of a token" "$tmp/body" '"out of memory" in j["error"]["message"] and "choices" not in j'
check "a reply of 4 tokens (under the failing 5th) is whole: 200" [ "$(http POST /v1/completions "${auth[@]}" -d '{"prompt":"Once","max_tokens":3,"temperature":0,"ignore_eos":true}')" = 200 ]
check "reservations back to zero" wait_metric sinkd_kv_bytes_reserved '==' 0
check "daemon still running" kill -0 "$pid"
finish
