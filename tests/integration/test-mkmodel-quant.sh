#!/usr/bin/env bash
# sinkd-mkmodel's tensor types end to end.  Usage: test-mkmodel-quant.sh
# MKMODEL GGUF_DUMP (SINKD_BIN, SINKD_SHARED from the environment).
#   - every --type writes a model whose matrices have that type, each of
#     ggml's size for it, in a file of exactly the expected size, which
#     `sinkd generate` loads and runs;
#   - a K type on a --dim that is not a multiple of 256 is refused (exit 2)
#     with a message naming the dimension and the type;
#   - --from stories260K.gguf: f32 gives back the same bytes; q8_0 keeps
#     every metadata key, notes the matrices whose 172-wide rows cannot be
#     Q8_0 (written F16), and its 64 greedy tokens equal the original's;
#     q4_k falls back to q5_0 on the 64-wide rows and still runs;
#   - converting a quantized model again works, and --from refuses shape
#     options;
#   - --arch NAME for every row of --list-archs writes a model with the
#     row's keys and tensors that sinkd loads; --head-dim gives heads
#     wider than --dim / --heads (key_length) that sinkd runs; --bias and an
#     unknown architecture are refused where the row says so;
#   - --rope-freqs and --rope-scaling linear:F write llama3's factors tensor
#     and the linear scaling keys; a row without the tensor refuses them;
#     phi3's stacked tensors and --rope-long / --rope-short / --rope-dim.
set -u
base_only=1 . "$(dirname "$0")/server-lib.sh"
mkmodel=${1:?usage: $0 MKMODEL GGUF_DUMP}
dump=${2:?usage: $0 MKMODEL GGUF_DUMP}
model=$(realpath "$shared/models/stories260K.gguf")

# Shapes of the synthetic model below: name cols rows (rows 0: a vector).
dim=256 ffn=512 kv=128 vocab=300
shapes() {
	echo "token_embd.weight $dim $vocab"
	echo "output_norm.weight $dim 0"
	echo "output.weight $dim $vocab"
	for l in 0 1; do
		echo "blk.$l.attn_norm.weight $dim 0"
		echo "blk.$l.attn_q.weight $dim $dim"
		echo "blk.$l.attn_k.weight $dim $kv"
		echo "blk.$l.attn_v.weight $dim $kv"
		echo "blk.$l.attn_output.weight $dim $dim"
		echo "blk.$l.ffn_norm.weight $dim 0"
		echo "blk.$l.ffn_gate.weight $dim $ffn"
		echo "blk.$l.ffn_up.weight $dim $ffn"
		echo "blk.$l.ffn_down.weight $ffn $dim"
	done
}
# ggml's block (elements, bytes) per type name, upper case as the dump shows.
block_of() {
	case $1 in
	F32) echo "1 4" ;; F16 | BF16) echo "1 2" ;; Q8_0) echo "32 34" ;;
	Q4_0) echo "32 18" ;; Q4_1) echo "32 20" ;; Q5_0) echo "32 22" ;;
	Q5_1) echo "32 24" ;; Q4_K) echo "256 144" ;; Q5_K) echo "256 176" ;;
	Q6_K) echo "256 210" ;;
	esac
}
# expected_size TYPE DATA_OFFSET: the data section holds each tensor padded
# to the 32-byte alignment.
expected_size() {
	local blk
	blk=$(block_of "$1")
	shapes | awk -v be="${blk% *}" -v bb="${blk#* }" -v off="$2" '
		{ n = $3 ? $2 / be * bb * $3 : $2 * 4; total += int((n + 31) / 32) * 32 }
		END { print off + total }'
}
# tensor_is DUMP_FILE NAME "TYPE [DIMS] N bytes": one line of sinkd-gguf-dump.
tensor_is() {
	[ "$(awk -v n="$2" '$1 == n { $1 = ""; sub(/ bytes at .*/, " bytes"); print substr($0, 2) }' "$1")" = "$3" ]
}
# tensor_bytes_ok DUMP_FILE TYPE: every matrix has TYPE and ggml's byte size.
tensor_bytes_ok() {
	local blk
	blk=$(block_of "$2")
	shapes | while read -r name cols rows; do
		[ "$rows" = 0 ] && continue
		want="$2 [$cols, $rows] $((cols / ${blk% *} * ${blk#* } * rows)) bytes"
		got=$(awk -v n="$name" '$1 == n { print $2, $3, $4, $5, $6 }' "$1")
		[ "$got" = "$want" ] || { echo "  $name: '$got', want '$want'"; return 1; }
	done
}

for type in f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k; do
	T=$(echo "$type" | tr a-z A-Z)
	out=$tmp/m-$type.gguf
	"$mkmodel" --out "$out" --vocab-size $vocab --dim $dim --layers 2 --heads 4 --kv-heads 2 \
		--ffn $ffn --type "$type" --seed 3 >"$tmp/mk.log" 2>&1
	check "$type: mkmodel exits 0" [ $? -eq 0 ]
	"$dump" "$out" >"$tmp/dump-$type.txt" 2>&1
	check "$type: gguf-dump reads it" [ $? -eq 0 ]
	check "$type: every matrix is $T of ggml's size" tensor_bytes_ok "$tmp/dump-$type.txt" "$T"
	check "$type: norms stay F32" \
		tensor_is "$tmp/dump-$type.txt" blk.1.ffn_norm.weight "F32 [256] 1024 bytes"
	off=$(awk 'NR == 1 { print $(NF - 3) }' "$tmp/dump-$type.txt")
	want=$(expected_size "$T" "$off")
	size=$(stat -c %s "$out")
	check "$type: file is $size bytes, expected $want" [ "$size" = "$want" ]
	"$bin" generate --model "$out" --prompt "Once upon" --max-tokens 8 --temperature 0 \
		>"$tmp/gen-$type.txt" 2>"$tmp/gen-$type.err"
	check "$type: sinkd generate loads and runs it" [ $? -eq 0 ]
done

"$mkmodel" --out "$tmp/bad.gguf" --dim 192 --layers 1 --heads 4 --ffn 256 --type q4_k \
	>/dev/null 2>"$tmp/bad.err"
check "q4_k with --dim 192: exit 2" [ $? -eq 2 ]
check "  the message names --dim, q4_k and 256" \
	grep -q -- '--type q4_k needs --dim to be a multiple of its block size 256, not 192' \
	"$tmp/bad.err"
"$mkmodel" --out "$tmp/bad.gguf" --dim 256 --layers 1 --heads 4 --ffn 100 --type q5_0 \
	>/dev/null 2>"$tmp/bad.err"
check "q5_0 with --ffn 100: exit 2 naming --ffn" grep -q -- 'needs --ffn to be a multiple' \
	"$tmp/bad.err"

# --from: conversions of stories260K.
"$mkmodel" --from "$model" --out "$tmp/s-f32.gguf" --type f32 >/dev/null
check "--from --type f32 gives back the same bytes" cmp -s "$model" "$tmp/s-f32.gguf"
"$mkmodel" --from "$model" --out "$tmp/s-q8_0.gguf" --type q8_0 >"$tmp/from.log" 2>&1
check "--from --type q8_0: exit 0" [ $? -eq 0 ]
check "  one note per ffn_down (rows of 172): written as f16" \
	[ "$(grep -c 'ffn_down.weight: rows of 172 are not a multiple of 32 (the q8_0 block size): written as f16' "$tmp/from.log")" = 5 ]
"$dump" "$model" | grep -v ' bytes at ' >"$tmp/meta-f32.txt"
"$dump" "$tmp/s-q8_0.gguf" >"$tmp/dump-s-q8_0.txt"
grep -v ' bytes at ' "$tmp/dump-s-q8_0.txt" | sed 1d >"$tmp/meta-q8.txt"
check "  every metadata key and value is copied" \
	cmp -s <(sed 1d "$tmp/meta-f32.txt") "$tmp/meta-q8.txt"
check "  attn_q is Q8_0" tensor_is "$tmp/dump-s-q8_0.txt" blk.4.attn_q.weight \
	"Q8_0 [64, 64] 4352 bytes"
check "  ffn_down is F16" tensor_is "$tmp/dump-s-q8_0.txt" blk.4.ffn_down.weight \
	"F16 [172, 64] 22016 bytes"
check "  norms are F32" tensor_is "$tmp/dump-s-q8_0.txt" blk.4.ffn_norm.weight \
	"F32 [64] 256 bytes"
greedy() { # MODEL OUT: 64 greedy tokens
	"$bin" generate --model "$1" --prompt "Once upon a time" --max-tokens 64 --temperature 0 \
		>"$2" 2>/dev/null
}
greedy "$model" "$tmp/greedy-f32.txt"
greedy "$tmp/s-q8_0.gguf" "$tmp/greedy-q8_0.txt"
check "  it generates" [ $? -eq 0 -a -s "$tmp/greedy-q8_0.txt" ]
# Measured: Q8_0 weights (F16 ffn_down) change no greedy choice in 64 tokens.
check "  64 greedy tokens equal the F32 model's" cmp -s "$tmp/greedy-f32.txt" "$tmp/greedy-q8_0.txt"
"$mkmodel" --from "$model" --out "$tmp/s-q4_k.gguf" --type q4_k >"$tmp/from.log" 2>&1
check "--from --type q4_k: exit 0, 64-wide rows noted as q5_0" \
	grep -q 'blk.0.attn_q.weight: rows of 64 are not a multiple of 256 (the q4_k block size): written as q5_0' \
	"$tmp/from.log"
greedy "$tmp/s-q4_k.gguf" "$tmp/greedy-q4_k.txt"
check "  it generates" [ $? -eq 0 -a -s "$tmp/greedy-q4_k.txt" ]

"$mkmodel" --from "$tmp/m-q4_k.gguf" --out "$tmp/re.gguf" --type q8_0 >/dev/null 2>&1
check "--from a Q4_K model to q8_0: exit 0" [ $? -eq 0 ]
check "  it loads and runs" "$bin" generate --model "$tmp/re.gguf" --prompt "Once" \
	--max-tokens 4 --temperature 0 >/dev/null 2>&1
"$mkmodel" --from "$model" --out "$tmp/bad.gguf" --dim 64 >/dev/null 2>"$tmp/bad.err"
check "--from with --dim: exit 2" [ $? -eq 2 ]
check "  the message says --from takes the shapes from the model" \
	grep -q 'takes the architecture, shapes and vocabulary from the model' "$tmp/bad.err"

# --arch: every row of the architecture table, its keys and tensors.
"$mkmodel" --list-archs >"$tmp/archs.txt"
check "--list-archs names llama and qwen2" grep -qx qwen2 "$tmp/archs.txt"
while read -r arch; do
	"$mkmodel" --out "$tmp/a-$arch.gguf" --arch "$arch" --dim 64 --layers 2 --heads 4 \
		--kv-heads 2 --ffn 128 --seed 5 >/dev/null 2>"$tmp/a.err"
	check "--arch $arch: exit 0" [ $? -eq 0 ]
	"$dump" "$tmp/a-$arch.gguf" >"$tmp/dump-a-$arch.txt"
	check "  general.architecture is $arch" \
		grep -q "general.architecture  *\"$arch\"" "$tmp/dump-a-$arch.txt"
	check "  its keys carry the prefix $arch." grep -q "^  $arch.block_count " "$tmp/dump-a-$arch.txt"
	check "  sinkd generate loads and runs it" "$bin" generate --model "$tmp/a-$arch.gguf" \
		--prompt "Once" --max-tokens 4 --temperature 0
done <"$tmp/archs.txt"
check "qwen2 has its Q/K/V biases" tensor_is "$tmp/dump-a-qwen2.txt" blk.1.attn_k.bias \
	"F32 [32] 128 bytes"
check "phi3 has its stacked Q/K/V" tensor_is "$tmp/dump-a-phi3.txt" blk.1.attn_qkv.weight \
	"F32 [64, 128] 32768 bytes"
check "  and its gate and up rows in ffn_up" tensor_is "$tmp/dump-a-phi3.txt" \
	blk.1.ffn_up.weight "F32 [64, 256] 65536 bytes"
check "gpt-oss's experts are 3-D tensors [cols, rows, 8 experts]" \
	tensor_is "$tmp/dump-a-gpt-oss.txt" blk.1.ffn_down_exps.weight "F32 [128, 64, 8] 262144 bytes"
check "  their biases [rows, experts]" tensor_is "$tmp/dump-a-gpt-oss.txt" \
	blk.1.ffn_down_exps.bias "F32 [64, 8] 2048 bytes"
"$mkmodel" --out "$tmp/mx.gguf" --arch gpt-oss --dim 64 --layers 1 --heads 4 --ffn 128 \
	--experts 4 --experts-used 2 --expert-ffn 64 --type mxfp4 >/dev/null
"$dump" "$tmp/mx.gguf" >"$tmp/dump-mx.txt"
check "gpt-oss --type mxfp4: the experts MXFP4 (17 bytes per 32 values)" \
	tensor_is "$tmp/dump-mx.txt" blk.0.ffn_up_exps.weight "MXFP4 [64, 64, 4] 8704 bytes"
check "  other matrices Q8_0" tensor_is "$tmp/dump-mx.txt" blk.0.attn_q.weight \
	"Q8_0 [64, 64] 4352 bytes"
check "  the router F32, as llama-quantize leaves it" tensor_is "$tmp/dump-mx.txt" \
	blk.0.ffn_gate_inp.weight "F32 [64, 4] 1024 bytes"
"$mkmodel" --out "$tmp/bad.gguf" --dim 64 --layers 1 --heads 4 --ffn 128 --type mxfp4 \
	>/dev/null 2>"$tmp/bad.err"
check "llama --type mxfp4: exit 2 naming the MoE rows" \
	grep -q 'quantizes the experts of a mixture-of-experts architecture (gpt-oss, qwen3moe)' \
	"$tmp/bad.err"
check "llama has none without --bias" bash -c "! grep -q attn_q.bias '$tmp/dump-a-llama.txt'"
"$mkmodel" --out "$tmp/lb.gguf" --dim 64 --layers 1 --heads 4 --ffn 128 --bias >/dev/null
check "llama --bias: its optional biases, and sinkd runs it" "$bin" generate --model \
	"$tmp/lb.gguf" --prompt "Once" --max-tokens 4 --temperature 0
"$mkmodel" --out "$tmp/bad.gguf" --arch mamba --dim 64 --layers 1 --heads 4 --ffn 128 \
	>/dev/null 2>"$tmp/bad.err"
check "--arch mamba: exit 2" [ $? -eq 2 ]
check "  the message lists the supported ones" \
	grep -q "architecture 'mamba' is not supported (supported: llama, qwen2" "$tmp/bad.err"
"$mkmodel" --out "$tmp/hd.gguf" --dim 64 --layers 1 --heads 4 --ffn 128 --head-dim 32 \
	>/dev/null 2>"$tmp/bad.err"
check "llama --head-dim 32 against 64/4 (Mistral Nemo's shape): exit 0" [ $? -eq 0 ]
"$dump" "$tmp/hd.gguf" >"$tmp/dump-hd.txt"
check "  it writes llama.attention.key_length 32" \
	grep -q "^  llama.attention.key_length .* 32" "$tmp/dump-hd.txt"
check "  attn_q is 4 heads of 32 wide" tensor_is "$tmp/dump-hd.txt" blk.0.attn_q.weight \
	"F32 [64, 128] 32768 bytes"
check "  sinkd generate loads and runs it" "$bin" generate --model "$tmp/hd.gguf" \
	--prompt "Once" --max-tokens 4 --temperature 0
"$mkmodel" --out "$tmp/bad.gguf" --arch qwen2 --dim 64 --layers 1 --heads 4 --ffn 128 --bias \
	>/dev/null 2>"$tmp/bad.err"
check "qwen2 --bias: exit 2 (it always has them)" grep -q 'qwen2 always has Q/K/V biases' \
	"$tmp/bad.err"

# --rope-freqs and --rope-scaling: llama3's factors tensor and the linear keys.
"$mkmodel" --out "$tmp/rf.gguf" --dim 64 --layers 1 --heads 4 --ffn 128 --rope-freqs 1,2,4,8 \
	--rope-scaling linear:2 >/dev/null
"$dump" "$tmp/rf.gguf" >"$tmp/dump-rf.txt"
check "--rope-freqs: rope_freqs.weight, head width / 2 values" \
	tensor_is "$tmp/dump-rf.txt" rope_freqs.weight "F32 [8] 32 bytes"
check "--rope-scaling linear:2: rope.scaling.type and .factor" \
	grep -q 'llama.rope.scaling.type  *"linear"' "$tmp/dump-rf.txt"
check "  sinkd generate loads and runs it" "$bin" generate --model "$tmp/rf.gguf" \
	--prompt "Once" --max-tokens 4 --temperature 0
"$mkmodel" --out "$tmp/bad.gguf" --arch qwen2 --dim 64 --layers 1 --heads 4 --ffn 128 \
	--rope-freqs 1 >/dev/null 2>"$tmp/bad.err"
check "qwen2 --rope-freqs: exit 2 naming the row" \
	grep -q 'architecture qwen2 has no RoPE factors tensor' "$tmp/bad.err"
"$mkmodel" --out "$tmp/lr.gguf" --arch phi3 --dim 64 --layers 1 --heads 4 --ffn 128 \
	--rope-dim 12 --rope-long 1,2,4 --rope-short 1,1.5 --rope-orig-ctx 64 \
	--rope-attn-factor 1.2 >/dev/null
"$dump" "$tmp/lr.gguf" >"$tmp/dump-lr.txt"
check "phi3 --rope-long / --rope-short: both factor tensors, rope width / 2 values" \
	tensor_is "$tmp/dump-lr.txt" rope_factors_short.weight "F32 [6] 24 bytes"
check "  --rope-dim, --rope-orig-ctx: their keys" \
	grep -q 'phi3.rope.scaling.original_context_length  *64' "$tmp/dump-lr.txt"
check "  sinkd generate loads and runs it" "$bin" generate --model "$tmp/lr.gguf" \
	--prompt "Once" --max-tokens 4 --temperature 0
"$mkmodel" --out "$tmp/bad.gguf" --dim 64 --layers 1 --heads 4 --ffn 128 \
	--rope-long 1 >/dev/null 2>"$tmp/bad.err"
check "llama --rope-long: exit 2 naming the row" \
	grep -q 'architecture llama has no RoPE factors tensor (rope_factors_long.weight)' \
	"$tmp/bad.err"

# What sinkd does not compute for a row is refused by name when loaded:
# YaRN where sliding-window layers turn unscaled (gemma3).  Rows whose
# sliding layers turn with the global scaling (gemma2, gpt-oss) load it.
"$mkmodel" --out "$tmp/r.gguf" --arch gemma3 --dim 64 --layers 2 --heads 4 --ffn 128 \
	--rope-scaling yarn:4:256 >/dev/null
"$bin" generate --model "$tmp/r.gguf" --prompt "Once" --max-tokens 2 >/dev/null 2>"$tmp/r.err"
check "gemma3 with --rope-scaling yarn:4:256: sinkd refuses it by name" grep -qF \
	"YaRN (gemma3.rope.scaling.type yarn) in a model with unscaled sliding-window layers (architecture 'gemma3') is not implemented" \
	"$tmp/r.err"
for scaling in linear:4 yarn:4:256; do
	"$mkmodel" --out "$tmp/r.gguf" --arch gemma2 --dim 64 --layers 2 --heads 4 --ffn 128 \
		--rope-scaling "$scaling" >/dev/null
	check "gemma2 with --rope-scaling $scaling (sliding layers scaled too): sinkd runs it" \
		"$bin" generate --model "$tmp/r.gguf" --prompt "Once" --max-tokens 2 --temperature 0
done
finish
