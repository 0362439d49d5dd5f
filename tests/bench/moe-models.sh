#!/usr/bin/env bash
# Makes the synthetic mixture-of-experts models the benchmarks share
# (engine-bench.sh's MoE rows, vs-llamacpp.sh MOE=1), sourced, not run:
#
#   moe_models MKMODEL VOCAB OUTDIR "ARCHS" "TYPES"   -> one path a line
#
# Two shapes of about 150M weights (6 layers, dim 512, 8 heads of 64, 2 KV
# heads, the vocabulary of VOCAB, an output head of its own), each a tenth
# or so active per token, as the real files are:
#   gpt-oss:  32 experts, 4 per token, expert width 512 (the width of the
#             model, like gpt-oss-20b's 2880); every other layer sliding
#             over 128 tokens, learned sinks, biases
#   qwen3moe: 64 experts, 8 per token, expert width 256 (half the width,
#             near Qwen3-30B-A3B's 768 for 2048)
# in each of TYPES (sinkd-mkmodel --type: f32, q8_0, mxfp4 ...).  The file
# name says the row and the type: synth-gptoss-150M-q8_0.gguf.

moe_shape() { # arch -> the mkmodel arguments of its shape
	case $1 in
	gpt-oss) echo "--experts 32 --experts-used 4 --expert-ffn 512" ;;
	qwen3moe) echo "--experts 64 --experts-used 8 --expert-ffn 256" ;;
	*) return 1 ;;
	esac
}

moe_models() {
	local mk=$1 vocab=$2 out=$3 archs=$4 types=$5 arch type file shape
	for arch in $archs; do
		shape=$(moe_shape "$arch") || { echo "moe-models: no MoE shape for $arch" >&2; return 1; }
		for type in $types; do
			file="$out/synth-${arch//-/}-150M-$type.gguf"
			# shellcheck disable=SC2086
			"$mk" --out "$file" --arch "$arch" --vocab "$vocab" --dim 512 --layers 6 \
				--heads 8 --kv-heads 2 --head-dim 64 --ffn 1024 $shape --type "$type" \
				--seed 45 >"$out/mkmodel.log" 2>&1 ||
				{ cat "$out/mkmodel.log" >&2; echo "moe-models: $file not made" >&2; return 1; }
			echo "$file"
		done
	done
}
