#!/usr/bin/env bash
# Cache heatmaps of the sink fixture stories260K-sink (../shared/models/
# README.md) on tinystories-dev.txt under three geometries of the same
# 68-token cache (run by hand, never part of the test suite):
#   window-only    no sinks, a 68-token window
#   sinks4         4 sinks + a 64-token window
#   sinks4-int4    4 sinks + a 64-token window whose older 48 tokens are int4
# For each, `sinkd eval --heatmap` over the first SLICE bytes of the text (so
# that the lifecycle's bands are visible) writes a step image every EVERY
# scored steps, lifecycle.png and summary.png into
# tests/bench/results/heatmaps/GEOMETRY/, and `sinkd eval` over the whole
# text gives the perplexity beside it.  Prints a table and one JSON line;
# writes tests/bench/results/heatmaps/README.md.
#
# Environment: BUILD (build dir with src/sinkd, default build-bench), SLICE
# (bytes of the text rendered, default 2500: about 600 tokens), EVERY (step
# images every N scored steps, default 100).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${SINKD_SHARED:-$ROOT/../shared}
BUILD=${BUILD:-$ROOT/build-bench}
SLICE=${SLICE:-2500}
EVERY=${EVERY:-100}
BIN=$BUILD/src/sinkd
MODEL=$(realpath "$SHARED/models/stories260K-sink.gguf")
TEXT=$SHARED/data/tinystories-dev.txt
OUT=$ROOT/tests/bench/results/heatmaps
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
[ -x "$BIN" ] || { echo "heatmaps.sh: build $BIN first (BUILD=...)" >&2; exit 1; }
head -c "$SLICE" "$TEXT" >"$TMP/slice.txt"
cat >"$TMP/eval.yaml" <<YAML
model:
  path: "$MODEL"
server:
  tls:
    enabled: false
inference:
  attention:
    dtype: float32
YAML

geometries=(window-only sinks4 sinks4-int4)
sets_of() {
	case $1 in
	window-only) echo "--set inference.cache.sink_keep_count=0 --set inference.cache.window_size=68 --set inference.quantization.enabled=false" ;;
	sinks4) echo "--set inference.cache.sink_keep_count=4 --set inference.cache.window_size=64 --set inference.quantization.enabled=false" ;;
	sinks4-int4) echo "--set inference.cache.sink_keep_count=4 --set inference.cache.window_size=64 --set inference.quantization.enabled=true --set inference.quantization.bits=4 --set inference.quantization.full_precision_recent=16 --set inference.quantization.protect_sink_positions=true" ;;
	esac
}

mkdir -p "$OUT"
json_rows=""
table="| geometry | perplexity (whole text) | perplexity (slice) | sink share L0..L4 (slice) | images |\n| --- | ---: | ---: | --- | --- |\n"
for g in "${geometries[@]}"; do
	rm -rf "${OUT:?}/$g"
	# shellcheck disable=SC2046
	"$BIN" eval --config "$TMP/eval.yaml" --text "$TMP/slice.txt" --json $(sets_of "$g") \
		--heatmap "$OUT/$g" --heatmap-every "$EVERY" >"$TMP/$g-slice.out"
	# shellcheck disable=SC2046
	"$BIN" eval --config "$TMP/eval.yaml" --text "$TEXT" --chunk 256 --json $(sets_of "$g") \
		>"$TMP/$g-full.out"
	full=$(tail -n 1 "$TMP/$g-full.out" | jq .perplexity)
	slice=$(tail -n 1 "$TMP/$g-slice.out" | jq .perplexity)
	share=$(tail -n 1 "$TMP/$g-slice.out" | jq -r '[.sink_attention_share[] | . * 1000 | round / 1000] | map(tostring) | join(" ")')
	n_img=$(find "$OUT/$g" -name '*.png' | wc -l)
	table+=$(printf '| %s | %.3f | %.3f | %s | %d PNGs in %s/ |' "$g" "$full" "$slice" "$share" "$n_img" "$g")"\n"
	json_rows+=$(printf '%s{"geometry":"%s","perplexity":%s,"perplexity_slice":%s,"sink_share":[%s]}' \
		"${json_rows:+,}" "$g" "$full" "$slice" "$(tail -n 1 "$TMP/$g-slice.out" | jq -c '.sink_attention_share | join(",")' -r)")
done

{
	echo "# Cache heatmaps of stories260K-sink"
	echo
	echo "Written by \`tests/bench/heatmaps.sh\` ($(date -u +%Y-%m-%d), $(git -C "$ROOT" rev-parse --short HEAD))."
	echo "The images cover the first $SLICE bytes of tinystories-dev.txt; the perplexity is also over the whole text."
	echo "Per geometry: \`step-NNNNNN.png\` every $EVERY scored steps (x = resident token in stream"
	echo "order, y = layer, hue = tier, brightness = attention, max over heads), \`lifecycle.png\`"
	echo "(x = stream index, y = step: the tiers over time) and \`summary.png\` (the last step,"
	echo "brightness = each slot's moving average of attention)."
	echo
	printf '%b' "$table"
} >"$OUT/README.md"
printf '%b' "$table"
echo "{\"bench\":\"heatmaps\",\"model\":\"stories260K-sink\",\"slice_bytes\":$SLICE,\"rows\":[$json_rows]}"
