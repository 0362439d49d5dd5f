#!/usr/bin/env bash
# Constrained output is compact JSON (issue 39) against the real daemon with
# stories260K: a json_schema reply for a three-field object finishes
# ("stop") within max_tokens 40 and parses, with no whitespace outside its
# strings; so does json_object; a forced tool call finishes ("tool_calls")
# with arguments that parse.  response_format.x_sinkd_whitespace "pretty"
# gives the model its blanks back (the old behaviour, for comparison of
# the tokens used), "compact" is the default, any other value is a 400
# naming the field.  The openai npm client parses the same replies
# (chat.completions.parse, which refuses a reply cut by max_tokens) when
# node and tests/integration/js/node_modules are there.  The tokens used are
# printed (README, "Structured output and tools").
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/server-lib.sh"

port=$(free_port)
write_config "$tmp/c.yaml" "$port"
start_daemon compact "$tmp/c.yaml"
check "daemon ready" [ $? -eq 0 ]

# Outside strings, a compact text has no blank: the text without its
# strings (the last one may be cut short) has none.
compact_py='(lambda t: not any(c in " \n\t\r" for c in __import__("re").sub(r"\"(\\.|[^\"\\])*(\"|\\?$)", "", t)))'

# ---- json_schema: three fields within 40 tokens -------------------------------------------
person='{"type":"object","properties":{"name":{"type":"string","maxLength":5},"age":{"type":"integer","minimum":0,"maximum":120},"city":{"type":"string","maxLength":5}},"required":["name","age","city"],"additionalProperties":false}'
person_ok='set(v) == {"name", "age", "city"} and isinstance(v["name"], str) and len(v["name"]) <= 5 and type(v["age"]) is int and 0 <= v["age"] <= 120 and isinstance(v["city"], str) and len(v["city"]) <= 5'
ask='"messages":[{"role":"user","content":"Who are you?"}]'
for seed in 1 2 3 4 5; do
	st=$(http POST /v1/chat/completions "${auth[@]}" -d "{$ask,\"max_tokens\":40,\"seed\":$seed,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"person\",\"strict\":true,\"schema\":$person}}}")
	check "json_schema (seed $seed): 200" [ "$st" = 200 ]
	cp "$tmp/body" "$tmp/schema-$seed.json"
	jcheck "json_schema (seed $seed): stop within 40 tokens, JSON of the schema, compact" "$tmp/schema-$seed.json" \
		"(ch := j['choices'][0])['finish_reason'] == 'stop' and j['usage']['completion_tokens'] <= 40 and (v := json.loads(t := ch['message']['content'])) is not None and $person_ok and $compact_py(t)"
	st=$(http POST /v1/chat/completions "${auth[@]}" -d "{$ask,\"max_tokens\":300,\"seed\":$seed,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"person\",\"schema\":$person},\"x_sinkd_whitespace\":\"pretty\"}}")
	check "json_schema pretty (seed $seed): 200" [ "$st" = 200 ]
	cp "$tmp/body" "$tmp/pretty-$seed.json"
	jcheck "json_schema pretty (seed $seed): stop, JSON of the schema" "$tmp/pretty-$seed.json" \
		"(ch := j['choices'][0])['finish_reason'] == 'stop' and (v := json.loads(ch['message']['content'])) is not None and $person_ok"
done
pcheck "pretty: stories260K puts blanks between tokens when it may (some seed)" \
	"any(not $compact_py(json.load(open(f'{tmp}/pretty-{s}.json'))['choices'][0]['message']['content']) for s in range(1, 6))"
st=$(http POST /v1/chat/completions "${auth[@]}" -d "{$ask,\"max_tokens\":40,\"seed\":1,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"person\",\"schema\":$person},\"x_sinkd_whitespace\":\"compact\"}}")
check "x_sinkd_whitespace compact: 200" [ "$st" = 200 ]
cp "$tmp/body" "$tmp/compact-1.json"
pcheck "x_sinkd_whitespace compact: the same reply as the default" \
	"json.load(open(tmp + '/compact-1.json'))['choices'][0]['message']['content'] == json.load(open(tmp + '/schema-1.json'))['choices'][0]['message']['content']"

# ---- json_object ---------------------------------------------------------------------------
for seed in 1 2 3; do
	http POST /v1/chat/completions "${auth[@]}" -d "{$ask,\"max_tokens\":40,\"seed\":$seed,\"response_format\":{\"type\":\"json_object\"}}" >/dev/null
	jcheck "json_object (seed $seed): compact; a whole object when it stops" "$tmp/body" \
		"(ch := j['choices'][0])['finish_reason'] in ('stop', 'length') and $compact_py(t := ch['message']['content']) and (ch['finish_reason'] == 'length' or isinstance(json.loads(t), dict))"
done
st=$(http POST /v1/chat/completions "${auth[@]}" -d "{$ask,\"max_tokens\":40,\"seed\":1,\"response_format\":{\"type\":\"json_object\",\"x_sinkd_whitespace\":\"pretty\"}}")
check "json_object pretty: 200" [ "$st" = 200 ]
jcheck "json_object pretty: starts an object" "$tmp/body" "j['choices'][0]['message']['content'].startswith('{')"

# ---- forced tool calls -----------------------------------------------------------------------
# The generic (Hermes) envelope costs stories260K 49 tokens at the least
# (<tool_call>\n{"name":"w","arguments":{"c":""}}\n</tool_call>), so a call
# cannot fit 40; 80 is what get_weather with an 8-character city needs.
weather='{"type":"function","function":{"name":"get_weather","description":"The weather in a city","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":8}},"required":["city"],"additionalProperties":false},"strict":true}}'
args_ok='isinstance(a := json.loads(t := c["function"]["arguments"]), dict) and set(a) == {"city"} and isinstance(a["city"], str) and len(a["city"]) <= 8'
wask='"messages":[{"role":"user","content":"What is the weather in Paris?"}]'
for seed in 1 2 3; do
	for choice in '"required"' '{"type":"function","function":{"name":"get_weather"}}'; do
		st=$(http POST /v1/chat/completions "${auth[@]}" -d "{$wask,\"max_tokens\":80,\"seed\":$seed,\"tools\":[$weather],\"tool_choice\":$choice}")
		check "forced tool call (seed $seed, $choice): 200" [ "$st" = 200 ]
		cp "$tmp/body" "$tmp/tool-$seed-${#choice}.json"
		jcheck "forced tool call (seed $seed, $choice): tool_calls within 80 tokens, JSON arguments, compact" "$tmp/body" \
			"(ch := j['choices'][0])['finish_reason'] == 'tool_calls' and j['usage']['completion_tokens'] <= 80 and (c := ch['message']['tool_calls'][0]) and c['function']['name'] == 'get_weather' and $args_ok and $compact_py(t)"
	done
done
rtool='{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":8}},"required":["city"],"additionalProperties":false}}'
st=$(http POST /v1/responses "${auth[@]}" -d "{\"input\":\"What is the weather in Paris?\",\"tools\":[$rtool],\"tool_choice\":\"required\",\"max_output_tokens\":80,\"store\":false}")
check "responses forced tool call: 200" [ "$st" = 200 ]
jcheck "responses forced tool call: completed, compact JSON arguments" "$tmp/body" \
	"j['status'] == 'completed' and (fc := [o for o in j['output'] if o['type'] == 'function_call']) and (c := {'function': {'arguments': fc[0]['arguments']}}) and $args_ok and $compact_py(t)"

# ---- the Responses API's text.format ----------------------------------------------------------
st=$(http POST /v1/responses "${auth[@]}" -d "{\"input\":\"Who are you?\",\"max_output_tokens\":40,\"store\":false,\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"person\",\"schema\":$person}}}")
check "responses json_schema: 200" [ "$st" = 200 ]
jcheck "responses json_schema: completed within 40 tokens, compact" "$tmp/body" \
	"j['status'] == 'completed' and j['usage']['output_tokens'] <= 40 and (v := json.loads(t := j['output'][0]['content'][0]['text'])) is not None and $person_ok and $compact_py(t)"
st=$(http POST /v1/responses "${auth[@]}" -d "{\"input\":\"Who are you?\",\"max_output_tokens\":300,\"store\":false,\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"person\",\"schema\":$person,\"x_sinkd_whitespace\":\"pretty\"}}}")
check "responses json_schema pretty: 200" [ "$st" = 200 ]
jcheck "responses json_schema pretty: JSON of the schema" "$tmp/body" \
	"j['status'] == 'completed' and (v := json.loads(j['output'][0]['content'][0]['text'])) is not None and $person_ok"

# ---- bad values ----------------------------------------------------------------------------
bad_case() { # description code param body
	check "$1 → 400" [ "$(http POST "$5" "${auth[@]}" -d "$4")" = 400 ]
	jcheck "$1: code $2, param $3, named in the message" "$tmp/body" \
		"j['error']['code'] == '$2' and j['error']['param'] == '$3' and 'x_sinkd_whitespace' in j['error']['message']"
}
bad_case "x_sinkd_whitespace \"loose\"" invalid_value response_format.x_sinkd_whitespace \
	"{$ask,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"schema\":$person},\"x_sinkd_whitespace\":\"loose\"}}" /v1/chat/completions
bad_case "x_sinkd_whitespace 1" invalid_type response_format.x_sinkd_whitespace \
	"{$ask,\"response_format\":{\"type\":\"json_object\",\"x_sinkd_whitespace\":1}}" /v1/chat/completions
bad_case "text.format x_sinkd_whitespace \"PRETTY\"" invalid_value text.format.x_sinkd_whitespace \
	"{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_object\",\"x_sinkd_whitespace\":\"PRETTY\"}}}" /v1/responses
bad_case "x_sinkd_whitespace inside a schema" invalid_value response_format.json_schema.schema \
	"{$ask,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"x_sinkd_whitespace\":\"pretty\"}}}}}}" /v1/chat/completions
jcheck "x_sinkd_whitespace inside a schema: the message names its path" "$tmp/body" \
	"'\$.properties.a.x_sinkd_whitespace' in j['error']['message']"

# ---- the openai npm client parses what we send -----------------------------------------------
js="$here/js"
if command -v node >/dev/null 2>&1 && [ -d "$js/node_modules/openai" ]; then
	SINKD_BASE_URL="$base/v1" SINKD_API_KEY="$api_key" NODE_EXTRA_CA_CERTS="$tmp/cert.pem" \
		SINKD_PERSON_SCHEMA="$person" SINKD_WEATHER_TOOL="$weather" node "$js/compact-json.test.mjs"
	check "openai npm client: chat.completions.parse of json_schema replies and forced calls" [ $? -eq 0 ]
else
	echo "# the openai npm client is not installed (tests/integration/js): its check is left out"
fi

# ---- tokens used, for the README ---------------------------------------------------------------
"$py" - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
use = lambda f: json.load(open(f"{tmp}/{f}"))["usage"]["completion_tokens"]
print("# tokens, json_schema 3 fields, seeds 1-5: compact",
      [use(f"schema-{s}.json") for s in range(1, 6)], "pretty",
      [use(f"pretty-{s}.json") for s in range(1, 6)])
print("# tokens, forced get_weather call (required), seeds 1-3:",
      [use(f"tool-{s}-10.json") for s in range(1, 4)])
PY
stop_daemon "$pid"
check "daemon stops cleanly" [ $? -eq 0 ]
finish
