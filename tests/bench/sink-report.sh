#!/usr/bin/env bash
# Validation report of the tiered sink cache (run by hand, never part of the
# test suite): streaming perplexity of stories260K on tinystories-dev.txt
# (19 documents, 15,526 tokens) with `sinkd eval`, a 256-token cache in every
# configuration: dense attention over the whole stream, the StreamingLLM
# ablation (original positions), window only, 1/2/4/8 sinks, the recompute
# baseline, int8/int4 with and without sink protection, and bf16 storage.
# Writes tests/bench/results/sink-report.md (table + one JSON line per row)
# and prints the table.
#
# Environment: BUILD (build dir with src/sinkd, default build-bench),
# EVERY_RECOMPUTE (score every K-th token for the recompute baseline and
# its streaming twin, default 1: 15,525 predictions of 256 tokens each,
# minutes), CHUNK (tokens per forward, 256; results equal one at a time),
# THREADS (0 = one per core).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${SINKD_SHARED:-$ROOT/../shared}
BUILD=${BUILD:-$ROOT/build-bench}
EVERY_RECOMPUTE=${EVERY_RECOMPUTE:-1}
CHUNK=${CHUNK:-256}
THREADS=${THREADS:-0}
OUT=$ROOT/tests/bench/results/sink-report.md
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

if [ ! -f "$BUILD/build.ninja" ]; then
	PATH=/usr/local/cuda/bin:$PATH meson setup "$BUILD" -Dcuda=disabled -Dbuildtype=release >/dev/null
fi
ninja -C "$BUILD" src/sinkd >/dev/null
BIN=$BUILD/src/sinkd
MODEL=$(realpath "$SHARED/models/stories260K.gguf")
TEXT=$SHARED/data/tinystories-dev.txt
REF=$SHARED/reference/stories260K-streaming-ppl.json
cat >"$TMP/eval.yaml" <<YAML
model:
  path: "$MODEL"
server:
  tls:
    enabled: false
engine:
  threads: $THREADS
inference:
  max_context_length: 16384
  attention:
    dtype: float32
YAML

# name | description | extra eval arguments
ROWS=$(cat <<'LIST'
dense_original|dense: every token attends to the whole stream (strategy full), stream positions|--set inference.cache.strategy=full --set inference.cache.rope_positions=original
sink4_window252_original_positions|4 sinks + window 252, original (stream) positions|--set inference.cache.sink_keep_count=4 --set inference.cache.window_size=252 --set inference.cache.rope_positions=original
sink0_window256|window only: 0 sinks + window 256|--set inference.cache.sink_keep_count=0 --set inference.cache.window_size=256
sink1_window255|1 sink + window 255|--set inference.cache.sink_keep_count=1 --set inference.cache.window_size=255
sink2_window254|2 sinks + window 254|--set inference.cache.sink_keep_count=2 --set inference.cache.window_size=254
sink4_window252|4 sinks + window 252 (StreamingLLM)|--set inference.cache.sink_keep_count=4 --set inference.cache.window_size=252
sink8_window248|8 sinks + window 248|--set inference.cache.sink_keep_count=8 --set inference.cache.window_size=248
sink4_window252_every|4 sinks + window 252, scoring every EVERYth token (to compare with the baseline)|--set inference.cache.sink_keep_count=4 --set inference.cache.window_size=252 --every EVERY
recompute_sink4_window252|recompute baseline: each scored token from scratch over the last 256 tokens (every EVERY)|--set inference.cache.sink_keep_count=4 --set inference.cache.window_size=252 --baseline recompute --every EVERY
int8_protected|int8 (64 recent full precision), sinks protected|--set inference.cache.sink_keep_count=4 --set inference.cache.window_size=252 --set inference.quantization.enabled=true --set inference.quantization.bits=8 --set inference.quantization.full_precision_recent=64 --set inference.quantization.protect_sink_positions=true
int8_unprotected|int8 (64 recent full precision), sinks quantized|--set inference.cache.sink_keep_count=4 --set inference.cache.window_size=252 --set inference.quantization.enabled=true --set inference.quantization.bits=8 --set inference.quantization.full_precision_recent=64 --set inference.quantization.protect_sink_positions=false
int4_protected|int4 (64 recent full precision), sinks protected|--set inference.cache.sink_keep_count=4 --set inference.cache.window_size=252 --set inference.quantization.enabled=true --set inference.quantization.bits=4 --set inference.quantization.full_precision_recent=64 --set inference.quantization.protect_sink_positions=true
int4_unprotected|int4 (64 recent full precision), sinks quantized|--set inference.cache.sink_keep_count=4 --set inference.cache.window_size=252 --set inference.quantization.enabled=true --set inference.quantization.bits=4 --set inference.quantization.full_precision_recent=64 --set inference.quantization.protect_sink_positions=false
bf16_sink4_window252|4 sinks + window 252, bfloat16 storage (the default dtype)|--set inference.cache.sink_keep_count=4 --set inference.cache.window_size=252 --set inference.attention.dtype=bfloat16
LIST
)

: >"$TMP/rows.jsonl"
while IFS='|' read -r name desc args; do
	# the streaming twin of the baseline only differs when scoring a subset
	[ "$name" = sink4_window252_every ] && [ "$EVERY_RECOMPUTE" = 1 ] && continue
	args=${args//EVERY/$EVERY_RECOMPUTE}
	desc=${desc//EVERY/$EVERY_RECOMPUTE}
	echo "sink-report: $name" >&2
	# shellcheck disable=SC2086
	"$BIN" eval --config "$TMP/eval.yaml" --text "$TEXT" --chunk "$CHUNK" --json $args \
		>"$TMP/$name.out"
	tail -n 1 "$TMP/$name.out" |
		jq -c --arg name "$name" --arg desc "$desc" --argjson ref "$(jq .ppl "$REF")" \
			'{name: $name, desc: $desc, reference: ($ref[$name] // null)} + .' >>"$TMP/rows.jsonl"
done <<<"$ROWS"

base=$(jq -r 'select(.name == "sink4_window252") | .perplexity' "$TMP/rows.jsonl")
{
	echo "# Sink cache validation report"
	echo
	echo "Generated by \`tests/bench/sink-report.sh\` on $(date -u +%Y-%m-%d) ($(nproc) cores)."
	echo "Model stories260K (5 layers, 8 heads / 4 KV heads, head_dim 8), text"
	echo "tinystories-dev.txt: 19 documents, each BOS + text, concatenated into one"
	echo "stream of $(jq -r 'select(.name == "sink0_window256") | .tokens' "$TMP/rows.jsonl") tokens flowing through ONE session;"
	echo "every token after the first is scored unless noted.  Cache of 256 tokens"
	echo "(sinks + window), float32 storage unless noted, chunked prefill of $CHUNK tokens"
	echo "(each token is appended and then attends, so it equals one token at a time)."
	echo "Δ is against 4 sinks + window 252 in float32 (perplexity $base).  'reference'"
	echo "is ../shared/reference/stories260K-streaming-ppl.json (independent implementation)."
	echo "Sink share: mean over layers of the softmax mass queries give the sink tier."
	echo
	echo "| configuration | scored | perplexity | Δ | reference | sink share | KV bound | seconds |"
	echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	jq -r --argjson base "$base" '[.desc, (.scored|tostring), (.perplexity*10000|round/10000|tostring),
		(((.perplexity/$base - 1)*1000|round/10|tostring) + "%"),
		(if .reference then (.reference|tostring) else "" end),
		((.sink_attention_share | add / length) * 10000 | round / 10000 | tostring),
		((.config.bound_bytes/1024|round|tostring) + " KiB"), (.seconds|tostring)]
		| "| " + join(" | ") + " |"' "$TMP/rows.jsonl"
	echo
	echo "Notes"
	echo
	echo "- stories260K has no attention sink of its own (README of ../shared): with"
	echo "  cache positions the sink share stays well below 1% and window-only"
	echo "  attention does as well as sinks.  The position ablation is what matters"
	echo "  on this model: stream positions run past its trained context (2,048),"
	echo "  perplexity blows up and queries pour their mass onto the first tokens,"
	echo "  while cache-rank positions never exceed 255."
	echo "- Dense attention over the whole stream with stream positions suffers the"
	echo "  same way past ~2,300 tokens."
	echo "- The recompute baseline (dense attention over the last 256 tokens, positions"
	echo "  0..255, a fresh cache per prediction) and streaming with 4 sinks + window"
	echo "  252 scored at the same tokens should agree closely: streaming with sinks is"
	echo "  meant to match recomputing over the same window, at 1/256 of the work."
	echo "- Quantized rows keep 64 recent tokens in full precision and quantize the"
	echo "  rest of the window (keys per channel in groups of 32 tokens here, values"
	echo "  per token); unprotected rows also quantize the 4 sink tokens per token."
	echo
	echo "Raw rows (one JSON line each):"
	echo
	echo '```'
	cat "$TMP/rows.jsonl"
	echo '```'
} >"$OUT"
sed -n '/^| configuration/,/^$/p' "$OUT"
echo "sink-report: wrote $OUT" >&2
