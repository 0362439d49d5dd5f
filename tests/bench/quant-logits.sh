#!/usr/bin/env bash
# Logits of the synthetic 134M Llama (dim 768, 12 layers, 12 heads, ffn 2048,
# vocab 32000 from ggml-vocab-llama-spm) in each block type against its own
# F32 conversion (sinkd-mkmodel --from: the dequantize-then-F32 reference),
# after a 16-token prompt and 4 decode steps.  Run by hand, never part of the
# suite: it is the model test's block-type logits case (test-model.c,
# CK_RUN_CASE=logits, which the suite runs on a 256-wide model) with the
# 134M shape.  Prints a table (largest |diff| over the largest logit, the
# test's bound) and one JSON line.
#
# Environment: BUILD (build dir, default build-bench).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${SINKD_SHARED:-$ROOT/../shared}
BUILD=${BUILD:-$ROOT/build-bench}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

if [ ! -f "$BUILD/build.ninja" ]; then
	PATH=/usr/local/cuda/bin:$PATH meson setup "$BUILD" -Dcuda=disabled -Dbuildtype=release >/dev/null
fi
ninja -C "$BUILD" tests/unit/model/test-model src/tools/sinkd-mkmodel >/dev/null

vocab=$(realpath "$SHARED/vocab/ggml-vocab-llama-spm.gguf")
echo "quant-logits: $(date -u +%FT%TZ), commit $(git -C "$ROOT" rev-parse --short HEAD), $(nproc) cores" >&2
# The test's temporary models (two per type, up to 540 MB for the F32 one) go to TMPDIR.
TMPDIR=$TMP CK_RUN_CASE=logits CK_DEFAULT_TIMEOUT=3600 CK_VERBOSITY=normal \
	SINKD_SHARED=$SHARED \
	SINKD_TEST_LOGIT_SHAPE="--vocab $vocab --dim 768 --layers 12 --heads 12 --ffn 2048" \
	"$BUILD/tests/unit/model/test-model" "$BUILD/src/tools/sinkd-mkmodel" >"$TMP/out.txt" 2>&1 ||
	{
		cat "$TMP/out.txt"
		exit 1
	}

printf '%-6s %16s %8s\n' type max_rel_diff bound
json=""
while read -r _ type _ _ _ _ _ _ diff _; do
	printf '%-6s %16s %8s\n' "$type" "$diff" 0.04
	json="$json${json:+, }{\"type\": \"$type\", \"max_rel_diff\": $diff}"
done < <(grep '^logits .* vs its f32 conversion' "$TMP/out.txt")
grep -E '^[0-9]+%' "$TMP/out.txt" >&2 || true
echo "{\"bench\": \"quant-logits\", \"model\": \"synth134M\", \"bound\": 0.04, \"rows\": [$json]}"
