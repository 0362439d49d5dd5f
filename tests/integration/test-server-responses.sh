#!/usr/bin/env bash
# The Responses API (POST /v1/responses) against the real daemon over HTTPS
# with stories260K: the response object field by field (stream:false), the
# typed SSE stream (event order, "event:" lines, sequence numbers, deltas
# that add up to the whole text, no [DONE]), usage, max_output_tokens →
# incomplete, previous_response_id continuing a stored conversation in its
# session (only the new tokens are prefilled), foreign and unknown ids →
# 404, bad fields → 400 naming them; then tool calls (tool_choice required
# or named) in chat completions and in the Responses API, stream and not,
# whose arguments parse as JSON of the tool's parameters.
set -u
. "$(dirname "$0")/server-lib.sh"

port=$(free_port)
write_config "$tmp/r.yaml" "$port"
# A second key: its caller must not see the first one's responses.
other_key=test-key-2
other_digest=$(printf %s "$other_key" | sha256sum | cut -d' ' -f1)
sed -i "s/api_keys: \[\"sha256:$api_digest\"\]/api_keys: [\"sha256:$api_digest\", \"sha256:$other_digest\"]/" "$tmp/r.yaml"
start_daemon responses "$tmp/r.yaml" --set limits.max_tokens=100000 \
	--set inference.cache.window_size=1020 --set limits.max_body_bytes=65536
check "daemon ready" [ $? -eq 0 ]
other=(-H "Authorization: Bearer $other_key")
jget() { # FILE EXPR → the value of a python expression over j
	"$py" -c 'import json, sys; j = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

# ---- stream:false -----------------------------------------------------------------
prompt="Once upon a time"
now=$(date +%s)
st=$(http POST /v1/responses "${auth[@]}" -H 'X-Request-Id: resp-itest-1' \
	-d "{\"model\":\"stories260K\",\"input\":\"$prompt\",\"max_output_tokens\":12,\"temperature\":0,\"store\":false}")
check "response 200" [ "$st" = 200 ]
check "response is JSON" [ "$(header Content-Type)" = application/json ]
cp "$tmp/body" "$tmp/r1.json"
jcheck "response object head" "$tmp/r1.json" "j['object'] == 'response' and j['model'] == 'stories260K' and abs(j['created_at'] - $now) < 60 and j['error'] is None"
jcheck "store:false id names no session" "$tmp/r1.json" '__import__("re").fullmatch("resp_[0-9a-f]{24}", j["id"])'
jcheck "max_output_tokens → incomplete" "$tmp/r1.json" 'j["status"] == "incomplete" and j["incomplete_details"] == {"reason": "max_output_tokens"}'
jcheck "one message item with output_text" "$tmp/r1.json" 'len(j["output"]) == 1 and j["output"][0]["type"] == "message" and j["output"][0]["role"] == "assistant" and j["output"][0]["id"].startswith("msg_") and j["output"][0]["status"] == "incomplete" and len(j["output"][0]["content"]) == 1 and j["output"][0]["content"][0]["type"] == "output_text" and j["output"][0]["content"][0]["annotations"] == [] and len(j["output"][0]["content"][0]["text"]) > 10'
jcheck "usage counts prompt and output tokens" "$tmp/r1.json" 'j["usage"]["input_tokens"] == 5 and j["usage"]["output_tokens"] == 12 and j["usage"]["total_tokens"] == 17 and j["usage"]["input_tokens_details"]["cached_tokens"] == 0 and j["usage"]["output_tokens_details"]["reasoning_tokens"] == 0'
jcheck "request settings echoed" "$tmp/r1.json" 'j["max_output_tokens"] == 12 and j["temperature"] == 0 and j["store"] is False and j["previous_response_id"] is None and j["text"] == {"format": {"type": "text"}} and j["tools"] == [] and j["tool_choice"] == "auto" and j["parallel_tool_calls"] is True and j["metadata"] == {} and j["instructions"] is None'
http POST /v1/chat/completions "${auth[@]}" \
	-d "{\"messages\":[{\"role\":\"user\",\"content\":\"$prompt\"}],\"max_tokens\":12,\"temperature\":0}" >/dev/null
cp "$tmp/body" "$tmp/chat1.json"
pcheck "same text as chat completions of the same message (greedy)" "json.load(open(tmp + '/r1.json'))['output'][0]['content'][0]['text'] == json.load(open(tmp + '/chat1.json'))['choices'][0]['message']['content']"
# instructions are a system message first: the prompt grows by their tokens
http POST /v1/responses "${auth[@]}" -d "{\"input\":\"$prompt\",\"instructions\":\"Tell a story.\",\"max_output_tokens\":2,\"store\":false}" >/dev/null
jcheck "instructions: echoed and prefilled" "$tmp/body" 'j["instructions"] == "Tell a story." and j["usage"]["input_tokens"] > 5'
# an array of items, as the openai package and the AI SDK send them
http POST /v1/responses "${auth[@]}" -d '{"input":[{"role":"system","content":"Tell a story."},{"type":"message","role":"user","content":[{"type":"input_text","text":"Lily went"}]},{"role":"assistant","content":[{"type":"output_text","text":" to the park."}]},{"role":"user","content":"Then"}],"max_output_tokens":3,"store":false}' >/dev/null
jcheck "input items accepted" "$tmp/body" 'j["status"] == "incomplete" and j["usage"]["output_tokens"] == 3'

# ---- stream ---------------------------------------------------------------------------
http POST /v1/responses "${auth[@]}" -N \
	-d "{\"input\":\"$prompt\",\"max_output_tokens\":12,\"temperature\":0,\"store\":false,\"stream\":true}" >/dev/null
cp "$tmp/body" "$tmp/s1.txt"
check "stream Content-Type" [ "$(header Content-Type)" = text/event-stream ]
scheck "stream: event order" "$tmp/s1.txt" '(t := [e["type"] for e in ev])[:4] == ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"] and t[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done", "response.incomplete"] and set(t[4:-4]) == {"response.output_text.delta"}' 
scheck "stream: an event: line names each data line's type" "$tmp/s1.txt" '[l[7:] for l in raw.split("\n") if l.startswith("event: ")] == [e["type"] for e in ev] and all(b.startswith("event: ") for b in raw.strip("\n").split("\n\n"))'
scheck "stream: sequence numbers 0, 1, 2, ..." "$tmp/s1.txt" 'all(e["sequence_number"] == i for i, e in enumerate(ev))'
scheck "stream: no [DONE]" "$tmp/s1.txt" '"[DONE]" not in raw and all(isinstance(e, dict) for e in ev)'
scheck "stream: created carries the response in progress" "$tmp/s1.txt" '(r := ev[0]["response"])["status"] == "in_progress" and r["output"] == [] and r["usage"] is None and r["id"].startswith("resp_") and all(e["response"]["id"] == r["id"] for e in ev if "response" in e)'
scheck "stream: deltas name their item" "$tmp/s1.txt" '(iid := ev[2]["item"]["id"]) and all(e["item_id"] == iid and e["output_index"] == 0 and e["content_index"] == 0 for e in ev if e["type"] == "response.output_text.delta") and ev[2]["item"]["status"] == "in_progress" and ev[2]["item"]["content"] == []'
cp "$tmp/r1.json" "$tmp/r1.keep.json"
scheck "stream: deltas add up to the done text and to stream:false's" "$tmp/s1.txt" '(txt := "".join(e["delta"] for e in ev if e["type"] == "response.output_text.delta")) ==  ev[-4]["text"] and txt == ev[-4]["text"] == ev[-3]["part"]["text"] == ev[-1]["response"]["output"][0]["content"][0]["text"] == json.load(open(tmp + "/r1.keep.json"))["output"][0]["content"][0]["text"]'
scheck "stream: the last event has usage and incomplete_details" "$tmp/s1.txt" '(r := ev[-1]["response"])["status"] == "incomplete" and r["usage"]["input_tokens"] == 5 and r["usage"]["output_tokens"] == 12 and r["incomplete_details"]["reason"] == "max_output_tokens"'

# A generation that ends by itself is completed: under text.format
# json_schema the text ends once the value is complete (greedy stories260K
# alone never stops within thousands of tokens).
schema='{"type":"object","properties":{"done":{"type":"boolean"}},"required":["done"],"additionalProperties":false}'
http POST /v1/responses "${auth[@]}" -N -d "{\"input\":\"$prompt\",\"max_output_tokens\":200,\"temperature\":0,\"store\":false,\"stream\":true,\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"answer\",\"strict\":true,\"schema\":$schema}}}" >/dev/null
scheck "stream: a finished generation ends with response.completed" "$tmp/body" 'ev[-1]["type"] == "response.completed" and ev[-1]["response"]["status"] == "completed" and ev[-1]["response"]["incomplete_details"] is None and ev[-2]["item"]["status"] == "completed" and ev[-1]["response"]["usage"]["output_tokens"] < 200'
scheck "text.format json_schema: the text is a value of the schema, the format echoed" "$tmp/body" 'isinstance(v := json.loads(ev[-1]["response"]["output"][0]["content"][0]["text"]), dict) and set(v) == {"done"} and isinstance(v["done"], bool) and ev[-1]["response"]["text"]["format"]["type"] == "json_schema" and ev[-1]["response"]["text"]["format"]["name"] == "answer"'
# ---- previous_response_id: a stored conversation in one session ------------------------
st=$(http POST /v1/responses "${auth[@]}" -d "{\"input\":\"$prompt\",\"max_output_tokens\":8,\"temperature\":0}")
check "stored response 200" [ "$st" = 200 ]
cp "$tmp/body" "$tmp/t1.json"
jcheck "stored: id names a session, store echoed" "$tmp/t1.json" '__import__("re").fullmatch("resp_[0-9a-f]{32}_[0-9a-f]{24}", j["id"]) and j["store"] is True'
id1=$(jget "$tmp/t1.json" 'j["id"]')
sid=$(printf %s "$id1" | sed 's/^resp_\([0-9a-f]*\)_.*/\1/')
check "the session exists and is the caller's" [ "$(http GET "/v1/sessions/$sid" "${auth[@]}")" = 200 ]
cp "$tmp/body" "$tmp/sess1.json"
pcheck "the session holds the first turn" "(t := json.load(open(tmp + '/t1.json'))['usage']) and (s := json.load(open(tmp + '/sess1.json'))) and s['tokens_seen'] == t['total_tokens']"
check "another key does not see the session" [ "$(http GET "/v1/sessions/$sid" "${other[@]}")" = 404 ]
http POST /tokenize "${auth[@]}" -d '{"content":" The end.","add_special":false}' >/dev/null
n_new=$(jget "$tmp/body" 'len(j["tokens"])')
st=$(http POST /v1/responses "${auth[@]}" -d "{\"previous_response_id\":\"$id1\",\"input\":\" The end.\",\"max_output_tokens\":4,\"temperature\":0}")
check "continued response 200" [ "$st" = 200 ]
cp "$tmp/body" "$tmp/t2.json"
jcheck "continued: usage.input_tokens counts only the new input ($n_new tokens, no BOS)" "$tmp/t2.json" "j['usage']['input_tokens'] == $n_new and j['usage']['output_tokens'] == 4"
jcheck "continued: in the same session, previous_response_id echoed" "$tmp/t2.json" "j['id'].startswith('resp_${sid}_') and j['id'] != '$id1' and j['previous_response_id'] == '$id1'"
http GET "/v1/sessions/$sid" "${auth[@]}" >/dev/null
cp "$tmp/body" "$tmp/sess2.json"
pcheck "the session holds both turns" "(a := json.load(open(tmp + '/t1.json'))['usage']) and (b := json.load(open(tmp + '/t2.json'))['usage']) and (s1 := json.load(open(tmp + '/sess1.json'))) and (s2 := json.load(open(tmp + '/sess2.json'))) and s2['tokens_seen'] - s1['tokens_seen'] == b['total_tokens'] and s2['tokens_seen'] == a['total_tokens'] + b['total_tokens']"
# a streamed continuation of the continuation
id2=$(jget "$tmp/t2.json" 'j["id"]')
http POST /v1/responses "${auth[@]}" -N -d "{\"previous_response_id\":\"$id2\",\"input\":\" Then\",\"max_output_tokens\":3,\"stream\":true}" >/dev/null
scheck "streamed continuation" "$tmp/body" "ev[-1]['type'] == 'response.incomplete' and ev[-1]['response']['previous_response_id'] == '$id2' and ev[-1]['response']['id'].startswith('resp_${sid}_') and ev[-1]['response']['usage']['output_tokens'] == 3"

err_case() { # description status code param method path curl-args...
	local what=$1 want=$2 code=$3 param=$4 method=$5 path=$6
	shift 6
	local got
	got=$(http "$method" "$path" "$@")
	check "$what → $want" [ "$got" = "$want" ]
	jcheck "$what: code $code, param $param" "$tmp/body" \
		"set(j['error']) == {'message','type','param','code'} and j['error']['code'] == '$code' and j['error']['param'] == ($( [ "$param" = - ] && echo None || echo "'$param'")) and len(j['error']['message']) > 5"
}
err_case "another key's previous_response_id" 404 previous_response_not_found previous_response_id \
	POST /v1/responses "${other[@]}" -d "{\"previous_response_id\":\"$id1\",\"input\":\"x\"}"
err_case "unknown previous_response_id" 404 previous_response_not_found previous_response_id \
	POST /v1/responses "${auth[@]}" -d '{"previous_response_id":"resp_0123456789abcdef0123456789abcdef_0123456789abcdef01234567","input":"x"}'
err_case "a store:false response as previous_response_id" 404 previous_response_not_found previous_response_id \
	POST /v1/responses "${auth[@]}" -d "{\"previous_response_id\":\"$(jget "$tmp/r1.keep.json" 'j["id"]')\",\"input\":\"x\"}"
err_case "not a response id" 404 previous_response_not_found previous_response_id \
	POST /v1/responses "${auth[@]}" -d '{"previous_response_id":"resp_nope","input":"x"}'
check "after a DELETE of its session a response cannot be continued" [ "$(http DELETE "/v1/sessions/$sid" "${auth[@]}")" = 200 ]
check "… 404" [ "$(http POST /v1/responses "${auth[@]}" -d "{\"previous_response_id\":\"$id2\",\"input\":\"x\"}")" = 404 ]

# ---- bad requests ---------------------------------------------------------------------
err_case "malformed JSON" 400 invalid_json - POST /v1/responses "${auth[@]}" -d '{"input": "x",'
err_case "input missing" 400 missing_required_parameter input POST /v1/responses "${auth[@]}" -d '{"max_output_tokens":3}'
err_case "an image part" 400 unsupported_value 'input[1].content[0].type' POST /v1/responses "${auth[@]}" \
	-d '{"input":[{"role":"user","content":"x"},{"role":"user","content":[{"type":"input_image","image_url":"https://x/y.png"}]}]}'
err_case "an item_reference" 400 unsupported_value 'input[0].type' POST /v1/responses "${auth[@]}" -d '{"input":[{"type":"item_reference","id":"msg_1"}]}'
err_case "a role that does not exist" 400 invalid_value 'input[0].role' POST /v1/responses "${auth[@]}" -d '{"input":[{"role":"robot","content":"x"}]}'
err_case "background" 400 unsupported_parameter background POST /v1/responses "${auth[@]}" -d '{"input":"x","background":true}'
err_case "include" 400 unsupported_parameter include POST /v1/responses "${auth[@]}" -d '{"input":"x","include":["reasoning.encrypted_content"]}'
err_case "reasoning.effort without a chat template" 400 unsupported_parameter reasoning.effort POST /v1/responses "${auth[@]}" -d '{"input":"x","reasoning":{"effort":"low"}}'
err_case "reasoning.summary" 400 unsupported_parameter reasoning POST /v1/responses "${auth[@]}" -d '{"input":"x","reasoning":{"summary":"auto"}}'
err_case "a built-in tool" 400 unsupported_value 'tools[0].type' POST /v1/responses "${auth[@]}" -d '{"input":"x","tools":[{"type":"web_search"}]}'
err_case "max_output_tokens 0" 400 invalid_value max_output_tokens POST /v1/responses "${auth[@]}" -d '{"input":"x","max_output_tokens":0}'
err_case "temperature a string" 400 invalid_type temperature POST /v1/responses "${auth[@]}" -d '{"input":"x","temperature":"hot"}'
err_case "text.format unknown" 400 invalid_value text.format.type POST /v1/responses "${auth[@]}" -d '{"input":"x","text":{"format":{"type":"xml"}}}'
err_case "unknown model" 404 model_not_found model POST /v1/responses "${auth[@]}" -d '{"input":"x","model":"gpt-4o"}'
err_case "GET /v1/responses" 405 method_not_allowed - GET /v1/responses "${auth[@]}"
err_case "no key" 401 invalid_api_key - POST /v1/responses -d '{"input":"x"}'
check "unknown fields are ignored" [ "$(http POST /v1/responses "${auth[@]}" -d '{"input":"x","max_output_tokens":2,"store":false,"frobnicate":{"a":[1]},"user":"u","metadata":{"k":"v"},"truncation":"disabled","service_tier":"auto"}')" = 200 ]
check "a failed request leaves no session behind" wait_metric sinkd_kv_bytes_reserved == 0

# ---- tool calls (need request.c's tools, api.c's constraint, the scheduler's grammar) ----
weather='{"type":"function","function":{"name":"get_weather","description":"The weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":12}},"required":["city"],"additionalProperties":false}}}'
ask='"messages":[{"role":"user","content":"What is the weather in Paris?"}],"max_tokens":300,"temperature":0'
args_ok='isinstance(a := json.loads(c["function"]["arguments"]), dict) and set(a) == {"city"} and isinstance(a["city"], str) and len(a["city"]) <= 12'
st=$(http POST /v1/chat/completions "${auth[@]}" -d "{$ask,\"tools\":[$weather],\"tool_choice\":\"required\"}")
check "chat with tool_choice required: 200" [ "$st" = 200 ]
jcheck "chat: message.tool_calls, content null, finish_reason tool_calls" "$tmp/body" '(ch := j["choices"][0])["finish_reason"] == "tool_calls" and ch["message"]["content"] is None and len(ch["message"]["tool_calls"]) == 1 and ch["message"]["tool_calls"][0]["type"] == "function" and ch["message"]["tool_calls"][0]["id"].startswith("call_") and ch["message"]["tool_calls"][0]["function"]["name"] == "get_weather"'
jcheck "chat: the arguments are JSON of the tool's parameters" "$tmp/body" "(c := j['choices'][0]['message']['tool_calls'][0]) and $args_ok"
http POST /v1/chat/completions "${auth[@]}" -N -d "{$ask,\"tools\":[$weather],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},\"stream\":true}" >/dev/null
cp "$tmp/body" "$tmp/tools-stream.txt"
scheck "chat stream: a call's first delta has id, type, name and empty arguments" "$tmp/tools-stream.txt" '(d := [e["choices"][0]["delta"] for e in ev[:-1] if e["choices"]]) and (first := [x for x in d if "tool_calls" in x][0]["tool_calls"][0]) and d[0]["role"] == "assistant" and first["index"] == 0 and first["id"].startswith("call_") and first["type"] == "function" and first["function"]["name"] == "get_weather" and first["function"]["arguments"] == ""'
scheck "chat stream: argument pieces add up to JSON of the parameters" "$tmp/tools-stream.txt" '(c := {"function": {"arguments": "".join(t["function"].get("arguments", "") for e in ev[:-1] if e["choices"] for t in e["choices"][0]["delta"].get("tool_calls", []))}}) and '"$args_ok"
scheck "chat stream: finish_reason tool_calls, then [DONE]" "$tmp/tools-stream.txt" 'ev[-1] == "[DONE]" and ev[-2]["choices"][0]["finish_reason"] == "tool_calls"'
rtool='{"type":"function","name":"get_weather","description":"The weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":12}},"required":["city"],"additionalProperties":false}}'
st=$(http POST /v1/responses "${auth[@]}" -d "{\"input\":\"What is the weather in Paris?\",\"tools\":[$rtool],\"tool_choice\":\"required\",\"max_output_tokens\":300,\"temperature\":0,\"store\":false}")
check "responses with tool_choice required: 200" [ "$st" = 200 ]
jcheck "responses: a function_call item with JSON arguments" "$tmp/body" '(fc := [o for o in j["output"] if o["type"] == "function_call"]) and (c := {"function": {"arguments": fc[0]["arguments"]}}) and len(fc) == 1 and fc[0]["name"] == "get_weather" and fc[0]["call_id"].startswith("call_") and fc[0]["id"].startswith("fc_") and fc[0]["status"] == "completed" and j["status"] == "completed" and j["tools"][0]["name"] == "get_weather" and j["tool_choice"] == "required" and '"$args_ok"
http POST /v1/responses "${auth[@]}" -N -d "{\"input\":\"What is the weather in Paris?\",\"tools\":[$rtool],\"tool_choice\":{\"type\":\"function\",\"name\":\"get_weather\"},\"max_output_tokens\":300,\"temperature\":0,\"store\":false,\"stream\":true}" >/dev/null
scheck "responses stream: function_call_arguments deltas add up to .done" "$tmp/body" '(ds := "".join(e["delta"] for e in ev if e["type"] == "response.function_call_arguments.delta")) is not None and (done := [e for e in ev if e["type"] == "response.function_call_arguments.done"]) and (c := {"function": {"arguments": ds}}) and len(done) == 1 and done[0]["arguments"] == ds and done[0]["name"] == "get_weather" and ev[-1]["type"] == "response.completed" and '"$args_ok"

# ---- response_format, logit_bias and refused fields on chat and completions ----------
schema='{"type":"object","properties":{"n":{"type":"integer","minimum":0,"maximum":999},"tag":{"enum":["a","b"]},"when":{"type":"string","format":"date"}},"required":["n","tag","when"],"additionalProperties":false}'
for seed in 1 2 3; do
	http POST /v1/completions "${auth[@]}" -d "{\"prompt\":\"$prompt\",\"max_tokens\":200,\"seed\":$seed,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"s\",\"schema\":$schema}}}" >/dev/null
	jcheck "completions json_schema (seed $seed): stop and a value of the schema" "$tmp/body" '(ch := j["choices"][0])["finish_reason"] == "stop" and (v := json.loads(ch["text"])) and set(v) == {"n", "tag", "when"} and type(v["n"]) is int and 0 <= v["n"] <= 999 and v["tag"] in ("a", "b") and __import__("re").fullmatch(r"\d{4}-\d{2}-\d{2}", v["when"])'
done
http POST /v1/completions "${auth[@]}" -N -d "{\"prompt\":\"$prompt\",\"max_tokens\":200,\"seed\":4,\"stream\":true,\"response_format\":{\"type\":\"json_object\"}}" >/dev/null
scheck "completions json_object streamed: the pieces join to a JSON object (or length)" "$tmp/body" '(t := "".join(e["choices"][0]["text"] for e in ev[:-1] if e["choices"])) is not None and (ev[-2]["choices"][0]["finish_reason"] == "length" or isinstance(json.loads(t), dict))'
err_case "a schema keyword we do not support" 400 invalid_value response_format.json_schema.schema POST /v1/chat/completions "${auth[@]}" \
	-d '{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"type":"object","properties":{"n":{"type":"integer","multipleOf":2}}}}}}'
check "… the message names the keyword and its path" grep -q 'multipleOf.*\$\.properties\.n\.multipleOf' "$tmp/body"
err_case "json_schema without a name" 400 missing_required_parameter response_format.json_schema.name POST /v1/chat/completions "${auth[@]}" \
	-d '{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"schema":{}}}}'
err_case "logit_bias id outside the vocabulary" 400 invalid_value logit_bias POST /v1/completions "${auth[@]}" -d '{"prompt":"x","logit_bias":{"512":5}}'
err_case "logit_bias above 100" 400 invalid_value logit_bias POST /v1/completions "${auth[@]}" -d '{"prompt":"x","logit_bias":{"5":101}}'
http POST /tokenize "${auth[@]}" -d '{"content":" the","add_special":false}' >/dev/null
the=$(jget "$tmp/body" 'j["tokens"][-1]')
http POST /v1/completions "${auth[@]}" -d "{\"prompt\":\"$prompt\",\"max_tokens\":6,\"temperature\":0,\"ignore_eos\":true,\"logit_bias\":{\"$the\":100}}" >/dev/null
jcheck "logit_bias +100 on one token: greedy writes only it" "$tmp/body" 'j["choices"][0]["text"] == " the" * 6 or j["choices"][0]["text"] == "the" + " the" * 5'
err_case "echo" 400 unsupported_parameter echo POST /v1/completions "${auth[@]}" -d '{"prompt":"x","echo":true}'
err_case "suffix" 400 unsupported_parameter suffix POST /v1/completions "${auth[@]}" -d '{"prompt":"x","suffix":"y"}'
err_case "n 2" 400 unsupported_parameter n POST /v1/chat/completions "${auth[@]}" -d '{"messages":[{"role":"user","content":"x"}],"n":2}'
err_case "functions (deprecated)" 400 unsupported_parameter functions POST /v1/chat/completions "${auth[@]}" -d '{"messages":[{"role":"user","content":"x"}],"functions":[{"name":"f"}]}'
err_case "tools on completions" 400 invalid_value tools POST /v1/completions "${auth[@]}" -d '{"prompt":"x","tools":[]}'

finish
