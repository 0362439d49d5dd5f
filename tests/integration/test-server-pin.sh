#!/usr/bin/env bash
# Pinned prefixes over HTTPS with the real daemon: a chat session's system
# prompt (inference.cache.pin_system_prompt) stays in the sink tier after the
# window moved past it, and the session then scores exactly as a daemon with
# that many configured sinks; completions' "pin_prefix_tokens"; the pinned
# count in GET /v1/sessions/{id} and through a snapshot; the limits
# (inference.cache.max_pinned_tokens) as clear 400s; a reload turns it off.
set -u
. "$(dirname "$0")/server-lib.sh"

port_a=$(free_port)
port_b=$(free_port)
write_config "$tmp/a.yaml" "$port_a"
cat >>"$tmp/a.yaml" <<YAML
inference:
  cache:
    sink_keep_count: 4
    pin_system_prompt: true
    max_pinned_tokens: 24
YAML
geometry=(--set inference.cache.window_size=32 --set inference.attention.dtype=float32
	--set limits.max_tokens=64)
start_daemon pin "$tmp/a.yaml" "${geometry[@]}"
check "daemon A (pin_system_prompt) ready" [ $? -eq 0 ]
pid_a=$pid
base_a=$base

system='Tom is a cat.'
story='Once upon a time there was a little girl named Lily. She liked to play in the park with her dog. One day she saw a big red ball under a tree and ran to get it.'
chat_body() { # SESSION → a chat turn with the system prompt
	printf '{"session_id":"%s","messages":[{"role":"system","content":"%s"},{"role":"user","content":"Hi."}],"max_tokens":1,"temperature":0}' "$1" "$system"
}
# run_ops SESSION NAME: the same turns on a session of the daemon at $base:
# a chat turn with the system prompt, a story longer than the window, then
# 16 greedy tokens with their logprobs in $tmp/NAME.json.
run_ops() {
	local sid=$1 name=$2
	check "$name: create 200" [ "$(http PUT "/v1/sessions/$sid" "${auth[@]}")" = 200 ]
	cp "$tmp/body" "$tmp/$name-created.json"
	check "$name: chat turn 200" [ "$(http POST /v1/chat/completions "${auth[@]}" -d "$(chat_body "$sid")")" = 200 ]
	http GET "/v1/sessions/$sid" "${auth[@]}" >/dev/null
	cp "$tmp/body" "$tmp/$name-first.json"
	check "$name: story 200" [ "$(http POST "/v1/sessions/$sid/append" "${auth[@]}" -d "{\"text\":\" $story\"}")" = 200 ]
	check "$name: generate 200" [ "$(http POST "/v1/sessions/$sid/append" "${auth[@]}" -d '{"text":" The","generate":{"max_tokens":16,"temperature":0,"stream":false,"logprobs":0,"ignore_eos":true}}')" = 200 ]
	cp "$tmp/body" "$tmp/$name.json"
	http GET "/v1/sessions/$sid" "${auth[@]}" >/dev/null
	cp "$tmp/body" "$tmp/$name-after.json"
}

# The pinned count: BOS + the system text + the plain fallback's "\n".
http POST /tokenize "${auth[@]}" -d "{\"content\":\"$system\\n\",\"add_special\":true}" >/dev/null
n_pin=$(jq '.tokens | length' "$tmp/body")
check "the system part is $n_pin tokens (between 5 and 24)" test "$n_pin" -gt 4 -a "$n_pin" -le 24

run_ops a1 pinned
jcheck "before the first request nothing is pinned" "$tmp/pinned-created.json" 'j["pinned_tokens"] == 0 and j["sink_keep_count"] == 4'
jcheck "the first chat turn pinned the system part ($n_pin tokens)" "$tmp/pinned-first.json" "j['pinned_tokens'] == $n_pin and j['sink_keep_count'] == $n_pin and j['tiers']['sink'] == $n_pin"
# (the prefix cache is on: the pinned rows it computed are shared, held by
# the cache, and its reservation is the pinned bound less them: 1280 bytes a
# token, stories260K's K and V in float32, 5 layers x 2 x 32 x 4)
jcheck "the session shares its pinned rows" "$tmp/pinned-first.json" "j['shared_prefix_tokens'] == $n_pin"
pcheck "the session's reservation grew with the pin (less the shared rows)" "json.load(open(tmp + '/pinned-first.json'))['bytes_reserved'] + $n_pin * 1280 > json.load(open(tmp + '/pinned-created.json'))['bytes_reserved']"
jcheck "after the window moved past it the system part is still held" "$tmp/pinned-after.json" "j['tokens_seen'] > $n_pin + 32 + 40 and j['tiers']['sink'] == $n_pin and j['tokens_resident'] == $n_pin + 32"

# B: no pinning, sink_keep_count = the pinned count.  The same turns must
# score the same to the last digit.
write_config "$tmp/b.yaml" "$port_b"
start_daemon sinks "$tmp/b.yaml" "${geometry[@]}" --set inference.cache.sink_keep_count="$n_pin"
check "daemon B ($n_pin sinks) ready" [ $? -eq 0 ]
run_ops b1 sinks
jcheck "B: nothing pinned, $n_pin sinks" "$tmp/sinks-after.json" "j['pinned_tokens'] == 0 and j['tiers']['sink'] == $n_pin"
# lpdiff A B: a python expression, the largest logprob difference of two answers
lpdiff() {
	printf "max(abs(x - y) for x, y in zip(*[json.load(open(tmp + '/' + f))['choices'][0]['logprobs']['token_logprobs'] for f in ('%s', '%s')]))" "$1" "$2"
}
lpcount() { printf "len(json.load(open(tmp + '/%s'))['choices'][0]['logprobs']['token_logprobs'])" "$1"; }
pcheck "pinned session == $n_pin configured sinks (16 tokens, logprobs within 1e-5)" "$(lpcount pinned.json) == 16 and $(lpdiff pinned.json sinks.json) < 1e-5"

# One-shot completions: pin_prefix_tokens N over a prompt longer than the
# window scores as N sinks.
prompt="$system $story"
base=$base_a
check "completion with pin_prefix_tokens $n_pin: 200" [ "$(http POST /v1/completions "${auth[@]}" -d "{\"prompt\":\"$prompt\",\"pin_prefix_tokens\":$n_pin,\"max_tokens\":8,\"temperature\":0,\"logprobs\":0,\"ignore_eos\":true}")" = 200 ]
cp "$tmp/body" "$tmp/oneshot-pinned.json"
base=https://127.0.0.1:$port_b
http POST /v1/completions "${auth[@]}" -d "{\"prompt\":\"$prompt\",\"max_tokens\":8,\"temperature\":0,\"logprobs\":0,\"ignore_eos\":true}" >/dev/null
cp "$tmp/body" "$tmp/oneshot-sinks.json"
pcheck "completion pinned == $n_pin configured sinks" "$(lpcount oneshot-pinned.json) == 8 and $(lpdiff oneshot-pinned.json oneshot-sinks.json) < 1e-5"
base=$base_a
http POST /v1/completions "${auth[@]}" -d "{\"prompt\":\"$prompt\",\"max_tokens\":8,\"temperature\":0,\"logprobs\":0,\"ignore_eos\":true}" >/dev/null
cp "$tmp/body" "$tmp/oneshot-plain.json"
pcheck "… and not what 4 sinks give" "$(lpdiff oneshot-pinned.json oneshot-plain.json) > 1e-4"

# Limits and bad input.
check "pin_prefix_tokens over max_pinned_tokens → 400" [ "$(http POST /v1/completions "${auth[@]}" -d "{\"prompt\":\"$prompt\",\"pin_prefix_tokens\":25,\"max_tokens\":1}")" = 400 ]
jcheck "… naming pin_prefix_tokens and the key" "$tmp/body" 'j["error"]["param"] == "pin_prefix_tokens" and "max_pinned_tokens" in j["error"]["message"]'
check "pin_prefix_tokens over the prompt → 400" [ "$(http POST /v1/completions "${auth[@]}" -d '{"prompt":"Tom","pin_prefix_tokens":20,"max_tokens":1}')" = 400 ]
jcheck "… saying only prompt tokens can be pinned" "$tmp/body" 'j["error"]["param"] == "pin_prefix_tokens" and "prompt" in j["error"]["message"]'
check "pin_prefix_tokens of the wrong type → 400" [ "$(http POST /v1/completions "${auth[@]}" -d '{"prompt":"Tom","pin_prefix_tokens":"all"}')" = 400 ]
check "pin_prefix_tokens on a chat → 400" [ "$(http POST /v1/chat/completions "${auth[@]}" -d '{"messages":[{"role":"user","content":"Hi"}],"pin_prefix_tokens":2}')" = 400 ]
jcheck "… pointing to pin_system_prompt" "$tmp/body" '"pin_system_prompt" in j["error"]["message"]'
long_system=$(printf 'Tom is a cat. %.0s' 1 2 3 4 5 6)
check "a system prompt over max_pinned_tokens → 400" [ "$(http POST /v1/chat/completions "${auth[@]}" -d "{\"messages\":[{\"role\":\"system\",\"content\":\"$long_system\"},{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":1}")" = 400 ]
jcheck "… naming messages and max_pinned_tokens, not truncated silently" "$tmp/body" 'j["error"]["param"] == "messages" and "max_pinned_tokens" in j["error"]["message"] and "system prompt" in j["error"]["message"]'
check "pin on a session that holds tokens → 400" [ "$(http POST /v1/sessions/a1/append "${auth[@]}" -d '{"text":" more","pin_prefix_tokens":2}')" = 400 ]
jcheck "… saying a prefix is pinned by the first request" "$tmp/body" 'j["error"]["param"] == "pin_prefix_tokens" and "first request" in j["error"]["message"]'
check "a fresh session: 200" [ "$(http PUT /v1/sessions/a2 "${auth[@]}")" = 200 ]
check "its first append pins 3 tokens: 200" [ "$(http POST /v1/sessions/a2/append "${auth[@]}" -d '{"text":"Tom is a cat.","pin_prefix_tokens":3}')" = 200 ]
http GET /v1/sessions/a2 "${auth[@]}" >/dev/null
jcheck "… 3 pinned tokens, 4 sinks kept" "$tmp/body" 'j["pinned_tokens"] == 3 and j["sink_keep_count"] == 4'
check "a later turn's chat on the pinned session: 200, nothing more pinned" [ "$(http POST /v1/chat/completions "${auth[@]}" -d "$(chat_body a1)")" = 200 ]
http GET /v1/sessions/a1 "${auth[@]}" >/dev/null
jcheck "… still $n_pin pinned" "$tmp/body" "j['pinned_tokens'] == $n_pin"

# A snapshot carries the pinned count.
check "snapshot of the pinned session 200" [ "$(curl -sk -o "$tmp/a1.snap" -w '%{http_code}' "${auth[@]}" "$base/v1/sessions/a1/snapshot")" = 200 ]
check "restore it under a new id 200" [ "$(http POST '/v1/sessions/restore?id=a3' "${auth[@]}" --data-binary "@$tmp/a1.snap")" = 200 ]
jcheck "… pinned_tokens $n_pin" "$tmp/body" "j['pinned_tokens'] == $n_pin and j['sink_keep_count'] == $n_pin"

# A reload turns pinning off for new streams.
sed -i 's/pin_system_prompt: true/pin_system_prompt: false/' "$tmp/a.yaml"
kill -HUP "$pid_a"
check "reload applied" wait_metric sinkd_config_generation '==' 2
run_ops a4 unpinned
jcheck "after the reload a chat pins nothing" "$tmp/unpinned-first.json" 'j["pinned_tokens"] == 0 and j["tiers"]["sink"] == 4'
pcheck "… and scores otherwise than the pinned session" "$(lpdiff pinned.json unpinned.json) > 1e-4"
check "the reload names the key in the log" grep -q 'pin_system_prompt' "$tmp/pin.log"

check "daemon A still running" kill -0 "$pid_a"
finish
