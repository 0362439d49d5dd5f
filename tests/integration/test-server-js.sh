#!/usr/bin/env bash
# The clients people use against the real daemon over HTTPS
# (tests/integration/js): the official `openai` npm package (a streaming chat
# completion and a non-streaming completion, checked field by field), then
# structured output and tools through `openai`, the Vercel AI SDK and
# LangChain.  Skips (77) only when node or npm is missing.
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
finish
