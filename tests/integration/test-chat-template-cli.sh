#!/usr/bin/env bash
# `sinkd chat-template` as a user runs it.  Usage: test-chat-template-cli.sh
# MKMODEL (SINKD_BIN, SINKD_SHARED from the environment).
#   - a template file and a JSON context (a file or stdin) print exactly the
#     rendered bytes, no newline added; strftime_now formats --now;
#   - --model takes a GGUF's tokenizer.chat_template and puts the texts of
#     its BOS/EOS tokens into the context unless the context sets them; a
#     GGUF without a template is refused by name;
#   - the exit status says what failed: 2 usage or a context that is not an
#     object, 1 an unreadable file, 3 a template that does not parse (with
#     LINE:COL), 4 raise_exception (its message), 5 another render error;
#   - --batch answers each line with a JSON result; --repeat prints timings;
#   - --request renders a chat request body as the server does (the polyfill
#     for tools, --pin's pinned part, --next-turn's session turn); usage
#     errors exit 2.  (test-server-chat-template.sh checks it against the
#     server's own prompt for Qwen3.)
# (test-chat-templates-hf.sh compares real templates with Hugging Face's.)
set -u
base_only=1 . "$(dirname "$0")/server-lib.sh"
mkmodel=${1:?usage: $0 MKMODEL}
ct() { "$bin" chat-template "$@"; }

"$bin" chat-template --help >"$tmp/help.txt"
check "--help exits 0" [ $? -eq 0 ]
check "  and documents the exit statuses" grep -q "raise_exception (its message on stderr)" "$tmp/help.txt"

cat >"$tmp/t.jinja" <<'EOF'
{{- bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</{{ m.role }}>
{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}
EOF
cat >"$tmp/ctx.json" <<'EOF'
{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi, 世界 "}],
 "add_generation_prompt": true, "bos_token": "<s>"}
EOF
ct --template "$tmp/t.jinja" --context "$tmp/ctx.json" >"$tmp/out.txt" 2>"$tmp/err.txt"
check "a template file and a context render (exit 0)" [ $? -eq 0 ]
printf '<s><system>Be brief.</system>\n<user>Hi, 世界</user>\n<assistant>' >"$tmp/want.txt"
check "  to exactly the expected bytes, no newline added" cmp -s "$tmp/out.txt" "$tmp/want.txt"
ct --template "$tmp/t.jinja" --context - <"$tmp/ctx.json" >"$tmp/out2.txt" 2>&1
check "  the context can come from stdin" cmp -s "$tmp/out2.txt" "$tmp/want.txt"

printf '{{ strftime_now("%%Y-%%m-%%d %%H:%%M") }}' >"$tmp/date.jinja"
check "strftime_now formats --now (UTC)" \
	[ "$(ct --template "$tmp/date.jinja" --context - --now 1764934200 <<<'{}' 2>&1)" = "2025-12-05 11:30" ]

# --model: a GGUF whose tokenizer carries a chat template and BOS/EOS.
mkdir -p "$tmp/v"
cat >"$tmp/v/tokenizer.json" <<'JSON'
{"version": "1.0", "added_tokens": [
  {"id": 5, "content": "<|bos|>", "special": true}, {"id": 6, "content": "<|eos|>", "special": true}],
 "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": true},
 "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3, "Ġa": 4}, "merges": [["a", "b"], ["Ġ", "a"]]}}
JSON
echo '{"bos_token": "<|bos|>", "eos_token": "<|eos|>", "chat_template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"}' \
	>"$tmp/v/tokenizer_config.json"
"$mkmodel" --vocab "$tmp/v/tokenizer.json" --out "$tmp/m.gguf" --dim 64 --layers 1 --heads 2 --ffn 128 \
	>"$tmp/mk.log" 2>&1
check "sinkd-mkmodel makes a model with a chat template" [ $? -eq 0 ]
check "--model renders its template with its BOS/EOS texts" \
	[ "$(ct --model "$tmp/m.gguf" --context - <<<'{"messages":[{"role":"user","content":"x"}]}' 2>&1)" = "<|bos|>x<|eos|>" ]
check "  a context's bos_token wins over the model's" \
	[ "$(ct --model "$tmp/m.gguf" --context - <<<'{"bos_token":"","messages":[{"role":"user","content":"x"}]}' 2>&1)" = "x<|eos|>" ]
check "  --template with --model: the file's template, the model's tokens" \
	[ "$(ct --model "$tmp/m.gguf" --template "$tmp/t.jinja" --context - <<<'{"messages":[]}' 2>&1)" = "<|bos|>" ]
ct --model "$model" --context "$tmp/ctx.json" >/dev/null 2>"$tmp/err.txt"
check "a GGUF without a template: exit 1" [ $? -eq 1 ]
check "  naming tokenizer.chat_template" grep -q "has no tokenizer.chat_template" "$tmp/err.txt"

status() { # expected-status description template-text [context]
	local want=$1 what=$2 ctx=${4:-'{}'}
	printf '%s' "$3" >"$tmp/s.jinja"
	printf '%s' "$ctx" >"$tmp/s.json"
	ct --template "$tmp/s.jinja" --context "$tmp/s.json" >"$tmp/s.out" 2>"$tmp/s.err"
	check "$what: exit $want" [ $? -eq "$want" ]
}
status 3 "a template that does not parse" $'line one\n{% if x %}never closed'
check "  the message names FILE:LINE:COL and the construct" grep -qE "s\.jinja:2:[0-9]+: \{% if %\}" "$tmp/s.err"
status 4 "raise_exception" "{{ raise_exception('Roles must alternate') }}"
check "  its message on stderr" grep -q "Roles must alternate" "$tmp/s.err"
check "  and nothing on stdout" [ ! -s "$tmp/s.out" ]
status 5 "a method strings do not have" "{{ 'a'.no_such_method() }}"
status 2 "a context that is not a JSON object" "x" "[1, 2]"
ct --template "$tmp/missing.jinja" --context "$tmp/ctx.json" 2>"$tmp/err.txt"
check "a template file that cannot be read: exit 1" [ $? -eq 1 ]
ct --context "$tmp/ctx.json" 2>/dev/null
check "no --template or --model: exit 2" [ $? -eq 2 ]
ct --template "$tmp/t.jinja" --context "$tmp/ctx.json" --batch "$tmp/ctx.json" 2>/dev/null
check "--context and --batch together: exit 2" [ $? -eq 2 ]
ct --template "$tmp/t.jinja" --context "$tmp/ctx.json" --repeat 0 2>/dev/null
check "--repeat 0: exit 2" [ $? -eq 2 ]

printf '%s\n' "{% if messages is not defined %}{{ raise_exception('no messages') }}{% endif %}{{ messages | length }}" \
	>"$tmp/b.jinja"
printf '%s\n' '{"messages": [1, 2, 3]}' '{}' 'not json' >"$tmp/b.jsonl"
ct --template "$tmp/b.jinja" --batch "$tmp/b.jsonl" >"$tmp/b.out" 2>&1
check "--batch: exit 0" [ $? -eq 0 ]
check "  one JSON line per context: text, raised, not an object" [ "$(cat "$tmp/b.out")" = \
'{"ok":true,"text":"3"}
{"ok":false,"kind":"raised","error":"no messages"}
{"ok":false,"kind":"context","error":"the line is not a JSON object"}' ]

ct --template "$tmp/t.jinja" --context "$tmp/ctx.json" --repeat 25 >"$tmp/r.out" 2>"$tmp/r.err"
check "--repeat 25: exit 0, the text printed once" cmp -s "$tmp/r.out" "$tmp/want.txt"
check "  min and median microseconds on stderr" grep -qE '25 renders, .* min [0-9.]+ us, median [0-9.]+ us' "$tmp/r.err"
# --request: a chat request body through the server's rendering
printf '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi, 世界 "}]}' \
	>"$tmp/req.json"
ct --model "$tmp/m.gguf" --template "$tmp/t.jinja" --request "$tmp/req.json" --pin >"$tmp/q.out" 2>"$tmp/q.err"
check "--request renders the request's messages with the model's BOS (its tokenizer adds none)" \
	[ "$(cat "$tmp/q.out")" = "$(sed 's/^<s>/<|bos|>/' "$tmp/want.txt")" ]
check "  --pin: the pinned part is BOS and the system turn, in bytes on stderr" \
	grep -qx "chat-template: pinned part $(printf '<|bos|><system>Be brief.</system>\n' | wc -c) bytes" "$tmp/q.err"
check "--next-turn 1: only what the user message adds" \
	[ "$(ct --model "$tmp/m.gguf" --template "$tmp/t.jinja" --request "$tmp/req.json" --next-turn 1 2>&1)" = \
	"$(printf '<user>Hi, 世界</user>\n<assistant>')" ]
printf '{"messages": [{"role": "user", "content": "a"}], "tools": [{"type": "function", "function": {"name": "f_probe", "parameters": {"type": "object"}}}]}' \
	>"$tmp/req-tools.json"
ct --model "$tmp/m.gguf" --template "$tmp/t.jinja" --request "$tmp/req-tools.json" >"$tmp/qt.out" 2>&1
check "  tools a template does not render go into a system turn, as the server writes them" \
	grep -qF '<|bos|><system># Tools' "$tmp/qt.out"
check "  unless tool_choice is none" [ "$(sed 's/"tools"/"tool_choice": "none", "tools"/' "$tmp/req-tools.json" |
	ct --model "$tmp/m.gguf" --template "$tmp/t.jinja" --request - 2>&1)" = "$(printf '<|bos|><user>a</user>\n<assistant>')" ]
ct --model "$tmp/m.gguf" --template "$tmp/t.jinja" --request "$tmp/req.json" --repeat 25 >"$tmp/qr.out" 2>"$tmp/qr.err"
check "  --repeat 25 times it" grep -qE '25 renders, .* min [0-9.]+ us, median [0-9.]+ us' "$tmp/qr.err"
ct --template "$tmp/t.jinja" --request "$tmp/req.json" >/dev/null 2>&1
check "--request without --model (the vocabulary): exit 2" [ $? -eq 2 ]
ct --template "$tmp/t.jinja" --context "$tmp/ctx.json" --pin >/dev/null 2>&1
check "--pin without --request: exit 2" [ $? -eq 2 ]
ct --model "$tmp/m.gguf" --request "$tmp/req.json" --next-turn 3 >/dev/null 2>"$tmp/e.txt"
check "--next-turn past the messages: exit 2" [ $? -eq 2 ]
check "  saying how many there are" grep -q "the request has 2 messages" "$tmp/e.txt"
ct --model "$tmp/m.gguf" --request - <<<'{"messages": "x"}' >/dev/null 2>"$tmp/e.txt"
check "a request the server refuses: exit 2 with the server's message" [ $? -eq 2 ]
check "  naming messages" grep -q "'messages' must be" "$tmp/e.txt"
ct --model "$model" --request "$tmp/req.json" >/dev/null 2>"$tmp/e.txt"
check "--request with a GGUF without a template: exit 1" [ $? -eq 1 ]
finish
