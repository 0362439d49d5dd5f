#!/usr/bin/env bash
# `sinkd eval` against the independent reference perplexities of
# stories260K on tinystories-dev.txt (../shared/reference/
# stories260K-streaming-ppl.json), within 0.5%, for three geometries over the
# whole text (window with sinks, window only, original positions: the
# ablation that must blow up); the recompute baseline equals the stream when
# the cache holds the whole stream; usage errors exit 2.
# The full text at every token takes ~4 s per geometry here with --chunk 16
# (chunked prefill gives the same numbers as one token at a time: each token
# is appended and then attends, in order).
set -u
base_only=1 . "$(dirname "$0")/server-lib.sh"
model=$(realpath "$shared/models/stories260K.gguf")
text=$shared/data/tinystories-dev.txt
ref=$shared/reference/stories260K-streaming-ppl.json
cat >"$tmp/eval.yaml" <<YAML
model:
  path: "$model"
server:
  tls:
    enabled: false
inference:
  attention:
    dtype: float32
YAML

# name sinks window positions
while read -r name sinks window positions; do
	"$bin" eval --config "$tmp/eval.yaml" --text "$text" --chunk 16 --json \
		--set inference.cache.sink_keep_count="$sinks" \
		--set inference.cache.window_size="$window" \
		--set inference.cache.rope_positions="$positions" >"$tmp/$name.out" 2>"$tmp/$name.err"
	check "$name: eval exits 0" [ $? -eq 0 ]
	got=$(tail -n 1 "$tmp/$name.out" | jq -r .perplexity)
	want=$(jq -r ".ppl.$name" "$ref")
	tokens=$(tail -n 1 "$tmp/$name.out" | jq -r .tokens)
	check "$name: $tokens tokens as the reference" [ "$tokens" = "$(jq -r .tokens "$ref")" ]
	check "$name: perplexity $got within 0.5% of $want" \
		awk -v g="$got" -v w="$want" 'BEGIN { d = g / w - 1; exit !(d < 0.005 && d > -0.005) }'
	check "$name: human table shows the perplexity" grep -q '^perplexity ' "$tmp/$name.out"
	check "$name: one sink share per layer" \
		[ "$(tail -n 1 "$tmp/$name.out" | jq '.sink_attention_share | length')" = 5 ]
done <<LIST
sink4_window252 4 252 cache
sink0_window128 0 128 cache
sink4_window252_original_positions 4 252 original
LIST

# With a cache larger than the stream nothing is evicted: streaming and
# recomputing each prediction from scratch must agree.
head -n 2 "$text" >"$tmp/two.txt"
for mode in stream recompute; do
	extra=()
	[ $mode = recompute ] && extra=(--baseline recompute)
	"$bin" eval --config "$tmp/eval.yaml" --text "$tmp/two.txt" --every 97 --chunk 16 --json \
		--set inference.cache.window_size=4000 "${extra[@]}" >"$tmp/$mode.out" 2>&1
	check "$mode on two documents exits 0" [ $? -eq 0 ]
done
s=$(tail -n 1 "$tmp/stream.out" | jq -r .mean_nll)
r=$(tail -n 1 "$tmp/recompute.out" | jq -r .mean_nll)
check "stream NLL $s == recompute NLL $r when nothing is evicted" \
	awk -v a="$s" -v b="$r" 'BEGIN { d = a - b; exit !(d < 1e-4 && d > -1e-4) }'
check "--every scores every 97th token" \
	[ "$(tail -n 1 "$tmp/stream.out" | jq .scored)" = "$(tail -n 1 "$tmp/recompute.out" | jq .scored)" ]

"$bin" eval --config "$tmp/eval.yaml" --text "$text" --baseline bogus >"$tmp/out" 2>&1
check "--baseline bogus exits 2" [ $? -eq 2 ]
"$bin" eval --config "$tmp/eval.yaml" --text "$text" --set inference.cache.sink_keep_count=300 \
	--set inference.cache.window_size=256 >"$tmp/out" 2>&1
check "sinks >= window exits 2" [ $? -eq 2 ]
check "sinks >= window is explained" grep -q 'sink_keep_count' "$tmp/out"
"$bin" eval --config "$tmp/eval.yaml" --text "$tmp/missing.txt" >"$tmp/out" 2>&1
check "a missing text file fails" [ $? -ne 0 ]

finish
