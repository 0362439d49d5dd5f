#!/usr/bin/env bash
# sinkd-mkmodel --vocab tokenizer.json on two small hand-made vocabularies,
# checked key by key with sinkd-gguf-dump and by `sinkd tokenize`.  Usage:
# test-mkmodel-vocab-json.sh MKMODEL GGUF_DUMP (SINKD_BIN, SINKD_SHARED from
# the environment).  (test-tokenizer-hf.sh converts the real ones.)
#   - byte-level BPE: "gpt2", the pre-tokenizer named from the split regex,
#     a gap as [PADi] (unused), special added tokens control and the others
#     user-defined, merge pairs written "a b" with a space inside a half as
#     U+0120, eos from tokenizer_config.json, add_bos_token, chat template;
#   - SentencePiece-style BPE (Gemma 3's layout): "llama", byte and control
#     types, scores in merge order (so "ab ab" merges as Hugging Face's
#     ranks do), a user-defined U+2581 run stored with spaces, no space
#     prefix, bos/eos/unk/pad ids;
#   - what cannot be converted is refused with a message naming it.
set -u
base_only=1 . "$(dirname "$0")/server-lib.sh"
mkmodel=${1:?usage: $0 MKMODEL GGUF_DUMP}
dump=${2:?usage: $0 MKMODEL GGUF_DUMP}
shape=(--dim 64 --layers 1 --heads 2 --ffn 128)
line() { # file key -> the dump's value column
	"$dump" "$1" 2>/dev/null | awk -v k="$2" '$1 == k { $1 = ""; sub(/^ +/, ""); print }'
}
convert() { # name description: $tmp/name/tokenizer.json -> $tmp/name.gguf
	"$mkmodel" --vocab "$tmp/$1/tokenizer.json" --out "$tmp/$1.gguf" "${shape[@]}" >/dev/null 2>"$tmp/$1.err"
	check "$2: converted" [ $? -eq 0 ]
}
expect_keys() { # gguf, then lines KEY<tab>VALUE<tab>WHAT on stdin
	local key want what
	while IFS=$'\t' read -r key want what; do
		check "  $what" [ "$(line "$1" "$key")" = "$want" ]
	done
}
ids() { # gguf text -> ids with BOS and special tokens parsed
	printf '%s' "$2" | "$bin" tokenize --model "$1" --bos --parse-special 2>&1
}

mkdir -p "$tmp/bl" "$tmp/spm" "$tmp/bad"
cat >"$tmp/bl/tokenizer.json" <<'JSON'
{"version": "1.0", "added_tokens": [
  {"id": 6, "content": "<|im_start|>", "special": true},
  {"id": 7, "content": "<think>", "special": false}],
 "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
  {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false},
  {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]},
 "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3, "Ġa": 4},
  "merges": [["a", "b"], ["Ġ", "a"], ["x y", "z"]]}}
JSON
echo '{"eos_token": "<|im_start|>", "add_bos_token": false, "chat_template": "{{ messages }}"}' \
	>"$tmp/bl/tokenizer_config.json"
convert bl "byte-level tokenizer.json"
expect_keys "$tmp/bl.gguf" <<'KEYS'
tokenizer.ggml.model	"gpt2"	model gpt2
tokenizer.ggml.pre	"qwen2"	pre-tokenizer named from the split regex: qwen2
tokenizer.ggml.tokens	[string x 8] "a" "b" "ab" "Ġ" "Ġa" "[PAD5]" "<|im_start|>" "<think>"	tokens in id order, the gap as [PAD5]
tokenizer.ggml.token_type	[int32 x 8] 1 1 1 1 1 5 3 4	types: normal, unused gap, control, user-defined
tokenizer.ggml.merges	[string x 3] "a b" "Ġ a" "xĠy z"	merges as "a b", a space in a half as U+0120
tokenizer.ggml.eos_token_id	6	eos from tokenizer_config.json
tokenizer.ggml.add_bos_token	false	no BOS added
tokenizer.chat_template	"{{ messages }}"	chat template
KEYS
check "  \"ab a<think>\" tokenizes with the merges and the added token" [ "$(ids "$tmp/bl.gguf" "ab a<think>")" = "2 4 7" ]

cat >"$tmp/spm/tokenizer.json" <<'JSON'
{"version": "1.0", "added_tokens": [
  {"id": 0, "content": "<pad>", "special": true}, {"id": 1, "content": "<eos>", "special": true},
  {"id": 2, "content": "<bos>", "special": true}, {"id": 3, "content": "<unk>", "special": true},
  {"id": 11, "content": "▁▁", "special": false}],
 "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
 "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": false},
 "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]},
 "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": true,
  "vocab": {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "<0x41>": 4, "▁": 5, "a": 6, "b": 7, "ab": 8, "▁a": 9, "▁ab": 10, "▁▁": 11},
  "merges": [["▁", "▁"], ["a", "b"], ["▁", "a"], ["▁", "ab"], ["▁a", "b"]]}}
JSON
echo '{"bos_token": "<bos>", "eos_token": {"content": "<eos>"}, "pad_token": "<pad>", "unk_token": "<unk>", "add_bos_token": true}' \
	>"$tmp/spm/tokenizer_config.json"
convert spm "SentencePiece-style tokenizer.json"
expect_keys "$tmp/spm.gguf" <<'KEYS'
tokenizer.ggml.model	"llama"	model llama
tokenizer.ggml.pre	"default"	pre-tokenizer default
tokenizer.ggml.token_type	[int32 x 12] 3 3 3 3 6 1 1 1 ...	types: control, byte, normal
tokenizer.ggml.scores	[float32 x 12] -1000 -1000 -1000 -1000 0 -6 -6 -6 ...	added tokens score -1000, byte 0, tokens no merge makes below every merge
tokenizer.ggml.bos_token_id	2	bos <bos>
tokenizer.ggml.eos_token_id	1	eos <eos> (given as {"content": ...})
tokenizer.ggml.unknown_token_id	3	unk <unk>
tokenizer.ggml.padding_token_id	0	pad <pad>
tokenizer.ggml.add_bos_token	true	BOS added
tokenizer.ggml.add_space_prefix	false	no space prefix
KEYS
check "  \"ab ab\" merges in rank order: <bos> ab ▁ab" [ "$(ids "$tmp/spm.gguf" "ab ab")" = "2 8 10" ]
check "  two spaces are the user-defined ▁▁" [ "$(ids "$tmp/spm.gguf" "a  b")" = "2 6 11 7" ]
check "  a character not in the vocabulary falls back to its byte" [ "$(ids "$tmp/spm.gguf" "A")" = "2 4" ]

refused() { # json-text expected-message description
	printf '%s' "$1" >"$tmp/bad/tokenizer.json"
	"$mkmodel" --vocab "$tmp/bad/tokenizer.json" --out "$tmp/bad.gguf" "${shape[@]}" >/dev/null 2>"$tmp/bad.err"
	check "$3: refused" [ $? -ne 0 ]
	check "  the message names it" grep -qF "$2" "$tmp/bad.err"
}
refused '{"model": {"type": "WordPiece", "vocab": {"a": 0}}}' 'model.type "WordPiece" is not supported' \
	"a WordPiece tokenizer.json"
refused '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "Sequence",
 "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\d+"}, "behavior": "Isolated"},
 {"type": "ByteLevel", "use_regex": false}]}}' 'split regex "\d+" is not one llama.cpp names' \
	"a split regex llama.cpp has no name for"
refused '{"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel"}}' \
	'token "a" has id -1' "a negative token id"
refused '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []' 'not valid JSON' "truncated JSON"
finish
