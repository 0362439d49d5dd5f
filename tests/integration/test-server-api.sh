#!/usr/bin/env bash
# The real daemon over HTTPS on 127.0.0.1 with a certificate made here, driven
# with curl: health/ready/models, completions and chat completions (stream and
# not) field by field, greedy SSE text == `sinkd generate`, logprobs, stop
# strings, tokenize/detokenize, every error status of the API, TLS versions,
# queue full (503 + Retry-After), keep-alive comments, disconnect frees the
# cache, reload (SIGHUP) and clean stop (SIGTERM).
set -u
. "$(dirname "$0")/server-lib.sh"

port=$(free_port)
write_config "$tmp/main.yaml" "$port"
# A budget for one session (window 1020 + 4 sinks, 640 B/token = 655,360 B)
# so that a second long request queues and a third finds the queue full.
sets=(--set inference.cache.window_size=1020 --set inference.cache.global_cache_limit=1MiB
      --set scheduler.max_queue=1 --set limits.max_tokens=1000000 --set limits.max_body_bytes=65536)
start_daemon main "$tmp/main.yaml" "${sets[@]}"
check "daemon starts and /ready turns 200" [ $? -eq 0 ]
main_pid=$pid

# ---- open endpoints, auth ----------------------------------------------------
check "/health 200 without a key" [ "$(http GET /health)" = 200 ]
jcheck "/health body" "$tmp/body" 'j == {"status": "ok"}'
check "/ready 200" [ "$(http GET /ready)" = 200 ]
check "/v1/models without key: 401" [ "$(http GET /v1/models)" = 401 ]
jcheck "401 is an OpenAI error" "$tmp/body" 'j["error"]["type"] == "authentication_error" and "message" in j["error"] and "param" in j["error"] and "code" in j["error"]'
check "/v1/models with a wrong key: 401" [ "$(http GET /v1/models -H 'Authorization: Bearer nope')" = 401 ]
check "/v1/models with the key: 200" [ "$(http GET /v1/models "${auth[@]}")" = 200 ]
jcheck "/v1/models lists stories260K" "$tmp/body" 'j["object"] == "list" and j["data"][0]["id"] == "stories260K" and j["data"][0]["object"] == "model" and j["data"][0]["owned_by"] == "sinkd"'
check "/metrics needs the key" [ "$(http GET /metrics)" = 401 ]

# ---- TLS ---------------------------------------------------------------------
check "TLS 1.2 accepted" curl -sk --tlsv1.2 --tls-max 1.2 -o /dev/null "$base/health"
check "TLS 1.3 accepted" curl -sk --tlsv1.3 -o /dev/null "$base/health"
check "TLS 1.1 refused" bash -c "! curl -sk --tlsv1.1 --tls-max 1.1 -o /dev/null '$base/health' 2>/dev/null"
check "plain HTTP on the TLS port refused" bash -c "! curl -s --max-time 3 -o /dev/null 'http://127.0.0.1:$port/health' -w '%{http_code}' | grep -q 200"

# ---- completions, non-stream ----------------------------------------------------
prompt="Once upon a time"
now=$(date +%s)
st=$(http POST /v1/completions "${auth[@]}" -H 'X-Request-Id: itest-1' \
	-d "{\"model\":\"stories260K\",\"prompt\":\"$prompt\",\"max_tokens\":20,\"temperature\":0}")
check "completion 200" [ "$st" = 200 ]
cp "$tmp/body" "$tmp/completion.json"
check "X-Request-Id echoed" [ "$(header X-Request-Id)" = itest-1 ]
jcheck "completion id/object/model" "$tmp/body" 'j["id"] == "cmpl-itest-1" and j["object"] == "text_completion" and j["model"] == "stories260K"'
jcheck "completion created is now" "$tmp/body" "abs(j['created'] - $now) < 60"
jcheck "completion choice" "$tmp/body" 'len(j["choices"]) == 1 and j["choices"][0]["index"] == 0 and len(j["choices"][0]["text"]) > 20 and j["choices"][0]["finish_reason"] == "length" and j["choices"][0]["logprobs"] is None'
jcheck "completion usage" "$tmp/body" 'j["usage"] == {"prompt_tokens": 5, "completion_tokens": 20, "total_tokens": 25, "prompt_tokens_details": {"cached_tokens": 0}}'
http POST /v1/completions "${auth[@]}" -d '{"prompt":"Once upon a time","max_tokens":5}' >/dev/null
check "generated request id is 32 hex" bash -c "[[ '$(header X-Request-Id)' =~ ^[0-9a-f]{32}$ ]]"

# ---- completions, stream ------------------------------------------------------------
http POST /v1/completions "${auth[@]}" -N -d "{\"prompt\":\"$prompt\",\"max_tokens\":20,\"temperature\":0,\"stream\":true,\"stream_options\":{\"include_usage\":true}}" >/dev/null
cp "$tmp/body" "$tmp/stream.txt"
check "SSE Content-Type" [ "$(header Content-Type)" = text/event-stream ]
check "SSE Cache-Control" [ "$(header Cache-Control)" = no-cache ]
check "SSE X-Accel-Buffering" [ "$(header X-Accel-Buffering)" = no ]
scheck "SSE ends with [DONE]" "$tmp/stream.txt" 'ev[-1] == "[DONE]" and raw.endswith("data: [DONE]\n\n")'
scheck "SSE chunks are text_completion objects" "$tmp/stream.txt" 'all(e["object"] == "text_completion" and e["id"].startswith("cmpl-") and e["model"] == "stories260K" for e in ev[:-1])'
scheck "SSE one token per chunk, then finish, then usage" "$tmp/stream.txt" 'len(ev) == 20 + 3 and ev[-3]["choices"][0]["finish_reason"] == "length" and ev[-2]["choices"] == [] and ev[-2]["usage"]["completion_tokens"] == 20 and ev[-2]["usage"]["prompt_tokens_details"] == {"cached_tokens": 0} and all(e["usage"] is None for e in ev[:-2])'
cp "$tmp/completion.json" "$tmp/completion.keep.json"
scheck "SSE text == non-stream text" "$tmp/stream.txt" "''.join(e['choices'][0]['text'] for e in ev[:-1] if e['choices']) == json.load(open(os.path.join(tmp, 'completion.keep.json')))['choices'][0]['text']"

# Greedy: the SSE text equals the engine's greedy continuation (sinkd generate).
"$bin" generate --model "$model" --prompt "$prompt" --max-tokens 60 --temperature 0 \
	--set inference.cache.window_size=1020 >"$tmp/generate.txt" 2>/dev/null
http POST /v1/completions "${auth[@]}" -N -d "{\"prompt\":\"$prompt\",\"max_tokens\":60,\"temperature\":0,\"stream\":true}" >/dev/null
cp "$tmp/generate.txt" "$tmp/generate.keep.txt"
scheck "temperature 0 SSE text == sinkd generate greedy output, token by token" "$tmp/body" "''.join(e['choices'][0]['text'] for e in ev[:-1]).rstrip('\\n') == open(os.path.join(tmp, 'generate.keep.txt')).read().rstrip('\\n') and len(ev) > 20"

# ---- logprobs, stop, seed --------------------------------------------------------------
http POST /v1/completions "${auth[@]}" -d "{\"prompt\":\"$prompt\",\"max_tokens\":6,\"temperature\":0,\"logprobs\":2}" >/dev/null
jcheck "completion logprobs arrays" "$tmp/body" 'len(j["choices"][0]["logprobs"]["tokens"]) == 6 and len(j["choices"][0]["logprobs"]["token_logprobs"]) == 6 and all(len(t) == 2 for t in j["choices"][0]["logprobs"]["top_logprobs"]) and j["choices"][0]["logprobs"]["text_offset"][0] == 0 and "".join(j["choices"][0]["logprobs"]["tokens"]) == j["choices"][0]["text"] and all(x <= 0 for x in j["choices"][0]["logprobs"]["token_logprobs"])'
http POST /v1/completions "${auth[@]}" -d "{\"prompt\":\"$prompt\",\"max_tokens\":40,\"temperature\":0,\"stop\":[\"Lily\"]}" >/dev/null
jcheck "stop string ends the text before it" "$tmp/body" 'j["choices"][0]["finish_reason"] == "stop" and "Lily" not in j["choices"][0]["text"] and j["choices"][0]["text"].endswith("named ")'
for i in 1 2; do
	http POST /v1/completions "${auth[@]}" -d "{\"prompt\":\"$prompt\",\"max_tokens\":12,\"temperature\":1.0,\"seed\":42}" >/dev/null
	cp "$tmp/body" "$tmp/seed$i.json"
done
pcheck "same seed, same text" "json.load(open(tmp + '/seed1.json'))['choices'][0]['text'] == json.load(open(tmp + '/seed2.json'))['choices'][0]['text']"

# ---- chat ----------------------------------------------------------------------------------
chat='{"messages":[{"role":"system","content":"Tell a story."},{"role":"user","content":"Lily went"}],"max_tokens":8,"temperature":0'
check "chat 200" [ "$(http POST /v1/chat/completions "${auth[@]}" -d "$chat}")" = 200 ]
cp "$tmp/body" "$tmp/chat.json"
jcheck "chat object" "$tmp/body" 'j["object"] == "chat.completion" and j["id"].startswith("chatcmpl-") and j["choices"][0]["message"]["role"] == "assistant" and len(j["choices"][0]["message"]["content"]) > 0 and j["choices"][0]["finish_reason"] == "length" and j["usage"]["completion_tokens"] == 8'
http POST /v1/chat/completions "${auth[@]}" -N -d "$chat,\"stream\":true}" >/dev/null
scheck "chat stream chunks" "$tmp/body" 'ev[-1] == "[DONE]" and all(e["object"] == "chat.completion.chunk" for e in ev[:-1]) and ev[0]["choices"][0]["delta"]["role"] == "assistant" and ev[-2]["choices"][0]["finish_reason"] == "length" and ev[-2]["choices"][0]["delta"] == {}'
cp "$tmp/chat.json" "$tmp/chat.keep.json"
scheck "chat stream text == chat text" "$tmp/body" "''.join(e['choices'][0]['delta'].get('content','') for e in ev[:-1]) == json.load(open(tmp + '/chat.keep.json'))['choices'][0]['message']['content']"
http POST /v1/chat/completions "${auth[@]}" -d "$chat,\"logprobs\":true,\"top_logprobs\":3}" >/dev/null
jcheck "chat logprobs" "$tmp/body" 'len(j["choices"][0]["logprobs"]["content"]) == 8 and all(len(c["top_logprobs"]) == 3 and c["bytes"] == list(c["token"].encode()) for c in j["choices"][0]["logprobs"]["content"])'

# ---- tokenize / detokenize ------------------------------------------------------------------
check "tokenize 200" [ "$(http POST /tokenize "${auth[@]}" -d '{"content":"Once upon a time"}')" = 200 ]
jcheck "tokenize adds BOS" "$tmp/body" 'j["tokens"][0] == 1 and len(j["tokens"]) == 5'
toks=$(tr -d '\n' <"$tmp/body" | sed 's/.*"tokens":\(\[[^]]*\]\).*/\1/')
http POST /tokenize "${auth[@]}" -d '{"content":"Once upon a time","add_special":false}' >/dev/null
jcheck "tokenize add_special false" "$tmp/body" 'len(j["tokens"]) == 4 and 1 not in j["tokens"]'
check "detokenize 200" [ "$(http POST /detokenize "${auth[@]}" -d "{\"tokens\":$toks}")" = 200 ]
jcheck "detokenize round trip" "$tmp/body" 'j["content"] == "Once upon a time"'

# ---- errors: method path body extra-args → status, code, param -----------------------------------
big=$(head -c 70000 /dev/zero | tr '\0' a)
printf '{"prompt":"%s"}' "$big" >"$tmp/big.json"
err_case() { # description expected-status expected-code expected-param method path curl-args...
	local what=$1 want=$2 code=$3 param=$4 method=$5 path=$6
	shift 6
	local got
	got=$(http "$method" "$path" "$@")
	check "error: $what → $want" [ "$got" = "$want" ]
	jcheck "error: $what has code $code and param $param" "$tmp/body" \
		"set(j['error']) == {'message','type','param','code'} and j['error']['code'] == '$code' and j['error']['param'] == ($( [ "$param" = - ] && echo None || echo "'$param'")) and len(j['error']['message']) > 5"
}
err_case "malformed JSON" 400 invalid_json - POST /v1/completions "${auth[@]}" -d '{"prompt": "x",'
err_case "max_tokens a string" 400 invalid_type max_tokens POST /v1/completions "${auth[@]}" -d '{"prompt":"x","max_tokens":"ten"}'
err_case "temperature wrong type" 400 invalid_type temperature POST /v1/completions "${auth[@]}" -d '{"prompt":"x","temperature":"hot"}'
err_case "prompt missing" 400 missing_field prompt POST /v1/completions "${auth[@]}" -d '{"max_tokens":3}'
err_case "messages not an array" 400 invalid_type messages POST /v1/chat/completions "${auth[@]}" -d '{"messages":"hi"}'
err_case "stop wrong type" 400 invalid_type stop POST /v1/completions "${auth[@]}" -d '{"prompt":"x","stop":5}'
err_case "max_tokens 0" 400 invalid_value max_tokens POST /v1/completions "${auth[@]}" -d '{"prompt":"x","max_tokens":0}'
err_case "max_tokens above limits.max_tokens" 400 invalid_value max_tokens POST /v1/completions "${auth[@]}" -d '{"prompt":"x","max_tokens":1000001}'
err_case "token id outside the vocabulary" 400 invalid_value prompt POST /v1/completions "${auth[@]}" -d '{"prompt":[1,99999]}'
err_case "unknown model" 404 model_not_found model POST /v1/completions "${auth[@]}" -d '{"prompt":"x","model":"gpt-4"}'
err_case "unknown model (chat)" 404 model_not_found model POST /v1/chat/completions "${auth[@]}" -d '{"messages":[{"role":"user","content":"x"}],"model":"nope"}'
err_case "unknown endpoint" 404 not_found - GET /v2/anything "${auth[@]}"
err_case "GET on completions" 405 method_not_allowed - GET /v1/completions "${auth[@]}"
check "405 says Allow: POST" [ "$(header Allow)" = POST ]
err_case "POST on health" 405 method_not_allowed - POST /health -d '{}'
err_case "body over limits.max_body_bytes" 413 body_too_large - POST /v1/completions "${auth[@]}" --data-binary @"$tmp/big.json"
err_case "body over the limit, client waits for 100 Continue" 413 body_too_large - POST /v1/completions "${auth[@]}" -H 'Expect: 100-continue' --data-binary @"$tmp/big.json"
err_case "chunked body over the limit" 413 body_too_large - POST /v1/completions "${auth[@]}" -H 'Transfer-Encoding: chunked' --data-binary @"$tmp/big.json"
err_case "missing key" 401 invalid_api_key - POST /v1/completions -d '{"prompt":"x"}'
err_case "invalid key" 401 invalid_api_key - POST /v1/completions -H 'Authorization: Bearer wrong' -d '{"prompt":"x"}'
check "unknown request fields are ignored" [ "$(http POST /v1/completions "${auth[@]}" -d '{"prompt":"x","max_tokens":2,"frobnicate":[1,{"a":2}],"user":"u"}')" = 200 ]

# ---- queue full, keep-alive, disconnect ------------------------------------------------------
long='{"prompt":"Once upon a time","max_tokens":1000000,"ignore_eos":true,"stream":true}'
curl -skN "${auth[@]}" -d "$long" "$base/v1/completions" >"$tmp/long.txt" 2>/dev/null &
long_pid=$!
check "long stream is running" wait_metric sinkd_scheduler_running == 1
check "its cache is reserved" wait_metric sinkd_kv_bytes_reserved '>' 0
curl -skN "${auth[@]}" -d '{"prompt":"Once upon a time","max_tokens":30,"ignore_eos":true,"stream":true}' \
	"$base/v1/completions" >"$tmp/queued.txt" 2>/dev/null &
queued_pid=$!
check "second stream waits in the queue" wait_metric sinkd_scheduler_queue_depth == 1
st=$(http POST /v1/completions "${auth[@]}" -d '{"prompt":"x","max_tokens":3}')
check "queue full → 503" [ "$st" = 503 ]
check "503 has Retry-After" bash -c "[ -n '$(header Retry-After)' ] && [ '$(header Retry-After)' -ge 1 ]"
jcheck "503 is an OpenAI error" "$tmp/body" 'j["error"]["type"] == "server_error" and j["error"]["code"] == "overloaded" and len(j["error"]["message"]) > 0'
check "queued stream received ': keep-alive' comments" wait_for grep -q '^: keep-alive$' "$tmp/queued.txt"
check "open streams gauge counts both" [ "$(metric sinkd_open_streams)" = 2 ]
cancelled_before=$(metric 'sinkd_scheduler_requests_finished_total{outcome="cancelled"}')
kill "$long_pid"
wait "$long_pid" 2>/dev/null
check "disconnect cancels the generation" wait_metric 'sinkd_scheduler_requests_finished_total{outcome="cancelled"}' '>' "$cancelled_before"
wait "$queued_pid"
scheck "queued stream then ran to the end" "$tmp/queued.txt" 'ev[-1] == "[DONE]" and ev[-2]["choices"][0]["finish_reason"] == "length"'
check "cache freed after disconnect: kv reserved 0" wait_metric sinkd_kv_bytes_reserved == 0
check "cache freed: nothing running" [ "$(metric sinkd_scheduler_running)" = 0 ]
check "no open streams left" [ "$(metric sinkd_open_streams)" = 0 ]
check "the cancelled stream stopped early" bash -c "[ \$(grep -c '^data: {' '$tmp/long.txt') -lt 900000 ]"

# A client that hangs up while its (non-stream) request waits in the queue
# is noticed although its connection is suspended: the request leaves the queue.
curl -skN "${auth[@]}" -d "$long" "$base/v1/completions" >/dev/null 2>&1 &
long_pid=$!
check "another long stream is running" wait_metric sinkd_scheduler_running == 1
curl -sk "${auth[@]}" -d '{"prompt":"Once upon a time","max_tokens":5}' "$base/v1/completions" >/dev/null 2>&1 &
waiting_pid=$!
check "a non-stream request waits in the queue" wait_metric sinkd_scheduler_queue_depth == 1
cancelled_before=$(metric 'sinkd_scheduler_requests_finished_total{outcome="cancelled"}')
kill "$waiting_pid"
wait "$waiting_pid" 2>/dev/null
check "its hang-up cancels it while queued" wait_metric 'sinkd_scheduler_requests_finished_total{outcome="cancelled"}' '>' "$cancelled_before"
check "the queue is empty again" wait_metric sinkd_scheduler_queue_depth == 0
kill "$long_pid"
wait "$long_pid" 2>/dev/null
check "all cache released again" wait_metric sinkd_kv_bytes_reserved == 0

# Flow control: a client that stops reading holds its own generation (no
# tokens pile up for it); when it hangs up, the generation is cancelled.
cat >"$tmp/stall.py" <<'PY'
import socket, ssl, sys, time
port, key = int(sys.argv[1]), sys.argv[2]
body = '{"prompt":"Once upon a time","max_tokens":1000000,"ignore_eos":true,"stream":true}'
raw = socket.socket()
raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
raw.connect(("127.0.0.1", port))
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
s = ctx.wrap_socket(raw)
s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
           "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (key, len(body), body)).encode())
s.recv(100)
time.sleep(60)
PY
held_before=$(metric sinkd_scheduler_flow_control_holds_total)
"$py" "$tmp/stall.py" "$port" "$api_key" &
stall_pid=$!
check "a stalled stream is running" wait_metric sinkd_scheduler_running == 1
# (once the socket buffers are full, which on loopback can take tens of
# thousands of tokens: up to 30 s under a sanitizer beside other tests;
# without flow control it would run on towards its million tokens)
held() { wait_metric sinkd_scheduler_flow_control_holds_total '>' "${held_before:-0}"; }
held_within_30s() { held || held || held; }
check "its decode steps are held" held_within_30s
generation_stopped() {
	local a
	a=$(metric sinkd_tokens_generated_total)
	sleep 0.3
	[ "$(metric sinkd_tokens_generated_total)" = "$a" ]
}
check "then no more tokens are generated for it" wait_for generation_stopped
check "and it is still running" [ "$(metric sinkd_scheduler_running)" = 1 ]
cancelled_before=$(metric 'sinkd_scheduler_requests_finished_total{outcome="cancelled"}')
kill "$stall_pid"
wait "$stall_pid" 2>/dev/null
check "its hang-up cancels the held generation" wait_metric 'sinkd_scheduler_requests_finished_total{outcome="cancelled"}' '>' "$cancelled_before"
check "its cache is released" wait_metric sinkd_kv_bytes_reserved == 0

# ---- metrics ----------------------------------------------------------------------------------
curl -sk "${auth[@]}" "$base/metrics" >"$tmp/metrics.txt"
for m in 'sinkd_http_requests_total{endpoint="/v1/completions",status="200"}' \
	'sinkd_http_requests_total{endpoint="/v1/completions",status="400"}' \
	'sinkd_http_requests_total{endpoint="/v1/completions",status="503"}' \
	sinkd_tokens_in_total sinkd_tokens_out_total sinkd_time_to_first_token_seconds_count \
	sinkd_inter_token_latency_seconds_count sinkd_kv_bytes_budget; do
	check "metric $m > 0" awk -v m="$m" 'index($0, m " ") == 1 && $NF > 0 { found = 1 } END { exit !found }' "$tmp/metrics.txt"
done
check "metrics have HELP/TYPE" grep -q '^# TYPE sinkd_time_to_first_token_seconds histogram' "$tmp/metrics.txt"

# ---- logs -----------------------------------------------------------------------------------
# the request's own line (the scheduler's "stream perplexity" line names it too)
grep '"request_id":"itest-1"' "$log" | grep '"module":"http"' >"$tmp/itest1.log"
check "one request log line for request itest-1" [ "$(wc -l <"$tmp/itest1.log")" = 1 ]
check "the stream's perplexity line names it" grep -q '"msg":"stream perplexity".*"request_id":"itest-1".*"generated_tokens_scored":20' "$log"
jcheck "request log line has endpoint, status, tokens, ttft, duration" "$tmp/itest1.log" "j['msg'] == 'request' and j['endpoint'] == '/v1/completions' and j['status'] == 200 and j['tokens_in'] == 5 and j['tokens_out'] == 20 and j['ttft_ms'] >= 0 and j['duration_ms'] > 0"
check "no prompt or completion text in the log" bash -c "! grep -q -e 'Once upon' -e 'Lily' -e 'Tell a story' '$log'"

# ---- reload -----------------------------------------------------------------------------------
new_key=test-key-2
new_digest=$(printf %s "$new_key" | sha256sum | cut -d' ' -f1)
sed -i "s/sha256:$api_digest/sha256:$new_digest/" "$tmp/main.yaml"
kill -HUP "$main_pid"
new_key_ok() { [ "$(http GET /v1/models -H "Authorization: Bearer $new_key")" = 200 ]; }
check "reload: new key accepted" wait_for new_key_ok
check "reload: old key refused" [ "$(http GET /v1/models "${auth[@]}")" = 401 ]
echo "server: [" >>"$tmp/main.yaml"
kill -HUP "$main_pid"
check "broken reload is logged" wait_for grep -q 'reload failed' "$log"
check "broken reload keeps the running config" [ "$(http GET /v1/models -H "Authorization: Bearer $new_key")" = 200 ]
sed -i '$d' "$tmp/main.yaml"
sed -i "s/listen: \"127.0.0.1:$port\"/listen: \"127.0.0.1:$((port + 1))\"/" "$tmp/main.yaml"
kill -HUP "$main_pid"
check "restart-only change logged as needs restart" wait_for grep -q '"needs restart.*server.listen' "$log"
check "still serving on the old port" [ "$(http GET /health)" = 200 ]

# ---- stop -------------------------------------------------------------------------------------
# SIGTERM while a stream runs: /ready says draining, new generations get 503,
# the running stream goes on; when it ends (here: its client leaves) the
# daemon exits 0.
auth=(-H "Authorization: Bearer $new_key")
curl -skN "${auth[@]}" -d "$long" "$base/v1/completions" >"$tmp/drain.txt" 2>/dev/null &
long_pid=$!
check "stream running before SIGTERM" wait_metric sinkd_scheduler_running == 1
kill -TERM "$main_pid"
ready_503() { [ "$(http GET /ready)" = 503 ]; }
check "draining: /ready 503" wait_for ready_503
jcheck "draining: /ready says draining" "$tmp/body" 'j == {"status": "draining"}'
check "draining: new completion 503" [ "$(http POST /v1/completions "${auth[@]}" -d '{"prompt":"x","max_tokens":2}')" = 503 ]
check "draining: 503 has Retry-After" [ -n "$(header Retry-After)" ]
n_before=$(grep -c '^data: {' "$tmp/drain.txt")
more_events() { [ "$(grep -c '^data: {' "$tmp/drain.txt")" -gt "$n_before" ]; }
check "draining: the running stream goes on" wait_for more_events
kill "$long_pid"
wait "$long_pid" 2>/dev/null
wait "$main_pid"
check "SIGTERM: exit status 0" [ $? -eq 0 ]
check "SIGTERM: stopped cleanly" grep -q '"msg":"stopped"' "$log"
check "port released" bash -c "! curl -sk --max-time 2 -o /dev/null '$base/health'"

finish
