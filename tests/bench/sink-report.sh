#!/usr/bin/env bash
# Validation report of the tiered sink cache (run by hand, never part of the
# test suite): streaming perplexity on tinystories-dev.txt (19 documents,
# 15,526 tokens) with `sinkd eval`, for two models: stories260K (no sink of
# its own) and the sink fixture stories260K-sink (../shared/models/README.md).
# Caches of 256 tokens in every configuration (and two of 128): dense
# attention over the whole stream, the StreamingLLM ablation (original
# positions), window only, 1/2/4/8 sinks, the recompute baseline, int8/int4
# with and without sink protection, bf16 and f16 storage; the per-layer
# share of attention on the sinks.
# Writes tests/bench/results/sink-report.md (a table per model + one JSON
# line per row) and prints the tables.
#
# Environment: BUILD (build dir with src/sinkd, default build-bench),
# MODELS (stories260K and/or stories260K-sink, default both),
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

BIN=$("$ROOT/tests/bench/release-sinkd.sh" "$BUILD")
TEXT=$SHARED/data/tinystories-dev.txt
MODELS=${MODELS:-stories260K stories260K-sink}
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
f16_sink4_window252|4 sinks + window 252, float16 storage|--set inference.cache.sink_keep_count=4 --set inference.cache.window_size=252 --set inference.attention.dtype=float16
sink0_window128|window only, cache of 128|--set inference.cache.sink_keep_count=0 --set inference.cache.window_size=128
sink4_window124|4 sinks + window 124|--set inference.cache.sink_keep_count=4 --set inference.cache.window_size=124
LIST
)

# Reference perplexities by row name: stories260K's file names its rows so;
# the fixture's rows name their geometry.
reference_of() {
	case $1 in
	stories260K) jq .ppl "$SHARED/reference/stories260K-streaming-ppl.json" ;;
	stories260K-sink)
		jq '.rows | to_entries | map({key: ("sink\(.value.sink_keep_count)_window\(.value.window_size)"
			+ (if .value.rope_positions == "original" then "_original_positions" else "" end)),
			value: .value.perplexity}) | from_entries' "$SHARED/reference/stories260K-sink-ppl.json" ;;
	esac
}

# run_rows MODEL: one JSON line per row into $TMP/MODEL.jsonl
run_rows() {
	local model=$1 ref
	ref=$(reference_of "$model")
	cat >"$TMP/$model.yaml" <<YAML
model:
  path: "$(realpath "$SHARED/models/$model.gguf")"
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
	: >"$TMP/$model.jsonl"
	while IFS='|' read -r name desc args; do
		# the streaming twin of the baseline only differs when scoring a subset
		[ "$name" = sink4_window252_every ] && [ "$EVERY_RECOMPUTE" = 1 ] && continue
		args=${args//EVERY/$EVERY_RECOMPUTE}
		desc=${desc//EVERY/$EVERY_RECOMPUTE}
		echo "sink-report: $model $name" >&2
		# shellcheck disable=SC2086
		"$BIN" eval --config "$TMP/$model.yaml" --text "$TEXT" --chunk "$CHUNK" --json $args \
			>"$TMP/$name.out"
		tail -n 1 "$TMP/$name.out" |
			jq -c --arg model "$model" --arg name "$name" --arg desc "$desc" --argjson ref "$ref" \
				'{model: $model, name: $name, desc: $desc, reference: ($ref[$name] // null)} + .' \
				>>"$TMP/$model.jsonl"
	done <<<"$ROWS"
}

# table MODEL: the markdown table of its rows
table() {
	local rows=$TMP/$1.jsonl base
	base=$(jq -r 'select(.name == "sink4_window252") | .perplexity' "$rows")
	echo "Δ is against 4 sinks + window 252 in float32 (perplexity $base)."
	echo
	echo "| configuration | scored | perplexity | Δ | reference | sink share per layer | KV bound | seconds |"
	echo "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |"
	jq -r --argjson base "$base" '[.desc, (.scored|tostring), (.perplexity*10000|round/10000|tostring),
		(((.perplexity/$base - 1)*1000|round/10|tostring) + "%"),
		(if .reference then (.reference*10000|round/10000|tostring) else "" end),
		(.sink_attention_share | map(.*1000|round/1000|tostring) | join(" ")),
		((.config.bound_bytes/1024|round|tostring) + " KiB"), (.seconds|tostring)]
		| "| " + join(" | ") + " |"' "$rows"
}

for model in $MODELS; do
	case $model in
	stories260K | stories260K-sink) run_rows "$model" ;;
	*) echo "sink-report: unknown model '$model' (stories260K, stories260K-sink)" >&2; exit 2 ;;
	esac
done

{
	echo "# Sink cache validation report"
	echo
	echo "Generated by \`tests/bench/sink-report.sh\` on $(date -u +%Y-%m-%d) ($(nproc) cores)."
	echo "Text tinystories-dev.txt: 19 documents, each BOS + text, concatenated into one"
	echo "stream of 15,526 tokens flowing through ONE session; every token after the"
	echo "first is scored unless noted.  Cache of 256 tokens (sinks + window) unless"
	echo "noted, float32 storage unless noted, chunked prefill of $CHUNK tokens (each"
	echo "token is appended and then attends, so it equals one token at a time)."
	echo "'reference' is the independent implementation's perplexity"
	echo "(../shared/reference/).  Sink share per layer: the softmax mass that"
	echo "queries give the sink tier, mean over heads and tokens, layers 0-4."
	echo "Quantized rows keep 64 recent tokens in full precision and quantize the"
	echo "rest of the window (keys per channel in groups of 32 tokens, values per"
	echo "token); unprotected rows also quantize the 4 sink tokens per token."
	for model in $MODELS; do
		echo
		case $model in
		stories260K)
			echo "## stories260K (no sink of its own)"
			echo
			echo "5 layers, 8 heads / 4 KV heads, head_dim 8."
			echo
			table "$model"
			echo
			echo "- With cache positions the sink share stays well below 1% and window-only"
			echo "  attention does as well as sinks: this model cannot show that sinks matter."
			echo "  The position ablation does: stream positions run past its trained context"
			echo "  (2,048), perplexity blows up and queries pour their mass onto the first"
			echo "  tokens, while cache-rank positions never exceed 255."
			echo "- The recompute baseline (dense attention over the last 256 tokens, positions"
			echo "  0..255, a fresh cache per prediction) and streaming with 4 sinks + window"
			echo "  252 scored at the same tokens agree closely, at 1/256 of the work."
			;;
		stories260K-sink)
			echo "## stories260K-sink (the sink fixture)"
			echo
			echo "Hand-built by weight surgery (../shared/models/README.md): residual 80, 8 heads"
			echo "x 10 dims, layers 1-4 park about half of their attention on the stream's"
			echo "first token, whose value is zero."
			echo
			table "$model"
			echo
			echo "- Evicting the first token (window only) makes perplexity several times"
			echo "  worse; one sink is enough, since the fixture's sink is the first token."
			echo "- Quantizing the sink (unprotected rows) moves its key, and with it the"
			echo "  mass the heads park there; protected rows keep it exact."
			echo "- The recompute baseline starts each prediction's cache 256 tokens back,"
			echo "  without the stream's first token: on this model that is window-only"
			echo "  attention, and it scores as badly."
			;;
		esac
	done
	echo
	echo "Raw rows (one JSON line each):"
	echo
	echo '```'
	for model in $MODELS; do cat "$TMP/$model.jsonl"; done
	echo '```'
} >"$OUT"
sed -n '/^## \|^| configuration/,/^$/p' "$OUT"
echo "sink-report: wrote $OUT" >&2
