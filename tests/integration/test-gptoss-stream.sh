#!/usr/bin/env bash
# A gpt-oss-shaped model (sinkd-mkmodel --arch gpt-oss: 4 layers, the even
# ones sliding over 128 tokens, learned sink logits in every head, 8
# experts of which each token takes 2) streams more than 20,000 tokens
# through `sinkd generate` with 4 kept sinks and a 252-token window on its
# full layers:
#   - the session's resident KV equals its bound, the per-layer one
#     (2 sliding layers x 128 tokens + 2 full layers x (4 + 252)), not four
#     windows of 256 nor the 20,000 tokens;
#   - the continuation is made (the MoE layers and learned sinks run all
#     the way through).
# Usage: test-gptoss-stream.sh MKMODEL (SINKD_BIN, SINKD_SHARED from the
# environment).
set -u
base_only=1
. "$(dirname "$0")/server-lib.sh"
mkmodel=${1:?usage: $0 MKMODEL}
text="$shared/data/tinystories-dev.txt"

# byte-level vocabulary; 2 KV heads of 32 (K and V in bfloat16: 256 bytes a
# token and layer)
"$mkmodel" --out "$tmp/oss.gguf" --arch gpt-oss --dim 64 --layers 4 --heads 4 --kv-heads 2 \
	--head-dim 32 --ffn 64 --experts 8 --experts-used 2 --expert-ffn 64 \
	--sliding-window 128 --seed 7 >"$tmp/mkmodel.log" 2>&1
check "a gpt-oss model with sliding layers and experts is made" [ $? -eq 0 ] ||
	cat "$tmp/mkmodel.log"
row=256

# the story file in one prompt: more than 20,000 tokens of the byte-level
# vocabulary
prompt=$(cat "$text")
"$bin" generate --model "$tmp/oss.gguf" --prompt "$prompt" --max-tokens 64 --temperature 0 \
	--threads 2 --stats-json \
	--set inference.cache.strategy=sliding_window \
	--set inference.cache.sink_keep_count=4 --set inference.cache.window_size=252 \
	>"$tmp/out.txt" 2>"$tmp/err.txt"
rc=$?
check "sinkd generate streams the prompt and continues it (rc $rc)" [ $rc -eq 0 ] ||
	tail -5 "$tmp/err.txt"
tail -1 "$tmp/err.txt" >"$tmp/stats.json"
stat() { # python expression over the stats line j → exit status
	python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); sys.exit(0 if eval(sys.argv[2]) else 1)' \
		"$tmp/stats.json" "$1" 2>/dev/null
}
check "more than 20,000 tokens streamed ($(head -c 200 "$tmp/stats.json"))" \
	stat 'j["prompt_tokens"] + j["generated_tokens"] > 20000'
check "64 tokens generated" stat 'j["generated_tokens"] == 64'
check "resident KV = the bound = 2 x 128 + 2 x (4 + 252) tokens of $row bytes" \
	stat "j['kv_bytes_resident'] == j['kv_bytes_bound'] == (2 * 128 + 2 * 256) * $row"
finish
