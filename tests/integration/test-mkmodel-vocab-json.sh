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
"$mkmodel" --vocab "$tmp/bl/tokenizer.json" --out "$tmp/bl.gguf" "${shape[@]}" >/dev/null 2>"$tmp/bl.err"
check "byte-level tokenizer.json: converted" [ $? -eq 0 ]
check "  model gpt2, pre-tokenizer qwen2" [ "$(line "$tmp/bl.gguf" tokenizer.ggml.model)$(line "$tmp/bl.gguf" tokenizer.ggml.pre)" = '"gpt2""qwen2"' ]
check "  tokens in id order, the gap as [PAD5]" [ "$(line "$tmp/bl.gguf" tokenizer.ggml.tokens)" = '[string x 8] "a" "b" "ab" "Ġ" "Ġa" "[PAD5]" "<|im_start|>" "<think>"' ]
check "  types: normal, unused gap, control, user-defined" [ "$(line "$tmp/bl.gguf" tokenizer.ggml.token_type)" = '[int32 x 8] 1 1 1 1 1 5 3 4' ]
check "  merges as \"a b\", a space in a half as U+0120" [ "$(line "$tmp/bl.gguf" tokenizer.ggml.merges)" = '[string x 3] "a b" "Ġ a" "xĠy z"' ]
check "  eos from tokenizer_config.json, no BOS added" [ "$(line "$tmp/bl.gguf" tokenizer.ggml.eos_token_id)/$(line "$tmp/bl.gguf" tokenizer.ggml.add_bos_token)" = "6/false" ]
check "  chat template" [ "$(line "$tmp/bl.gguf" tokenizer.chat_template)" = '"{{ messages }}"' ]
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
"$mkmodel" --vocab "$tmp/spm/tokenizer.json" --out "$tmp/spm.gguf" "${shape[@]}" >/dev/null 2>"$tmp/spm.err"
check "SentencePiece-style tokenizer.json: converted" [ $? -eq 0 ]
check "  model llama, pre-tokenizer default" [ "$(line "$tmp/spm.gguf" tokenizer.ggml.model)$(line "$tmp/spm.gguf" tokenizer.ggml.pre)" = '"llama""default"' ]
check "  types: control, byte, normal" [ "$(line "$tmp/spm.gguf" tokenizer.ggml.token_type)" = '[int32 x 12] 3 3 3 3 6 1 1 1 ...' ]
check "  added tokens score -1000, byte 0, tokens no merge makes below every merge" \
	[ "$(line "$tmp/spm.gguf" tokenizer.ggml.scores)" = '[float32 x 12] -1000 -1000 -1000 -1000 0 -6 -6 -6 ...' ]
check "  bos 2, eos 1, unk 3, pad 0" [ "$(for k in bos eos unknown padding; do line "$tmp/spm.gguf" tokenizer.ggml.${k}_token_id; done | tr '\n' ' ')" = "2 1 3 0 " ]
check "  BOS added, no space prefix" [ "$(line "$tmp/spm.gguf" tokenizer.ggml.add_bos_token)/$(line "$tmp/spm.gguf" tokenizer.ggml.add_space_prefix)" = "true/false" ]
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
