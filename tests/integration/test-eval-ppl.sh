#!/usr/bin/env bash
# `sinkd eval` against the independent reference perplexities of
# stories260K on tinystories-dev.txt (../shared/reference/
# stories260K-streaming-ppl.json), within 0.5%, for three geometries over the
# whole text (window with sinks, window only, original positions: the
# ablation that must blow up), the same for three geometries of the sink
# fixture stories260K-sink (../shared/reference/stories260K-sink-ppl.json),
# whose perplexity triples without its sink, and int4 K/V with and without
# sink protection on it; the recompute baseline equals the stream when
# the cache holds the whole stream; usage errors exit 2.
# --chunk 16 keeps it short (chunked prefill gives the same numbers as one
# token at a time: each token is appended and then attends, in order).
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

# eval_geometry CONFIG NAME SINKS WINDOW POSITIONS: $tmp/NAME.out; exit status
eval_geometry() {
	"$bin" eval --config "$1" --text "$text" --chunk 16 --json \
		--set inference.cache.sink_keep_count="$3" \
		--set inference.cache.window_size="$4" \
		--set inference.cache.rope_positions="$5" >"$tmp/$2.out" 2>"$tmp/$2.err"
}
# within_half_percent GOT WANT
within_half_percent() {
	awk -v g="$1" -v w="$2" 'BEGIN { d = g / w - 1; exit !(d < 0.005 && d > -0.005) }'
}

# name sinks window positions
while read -r name sinks window positions; do
	eval_geometry "$tmp/eval.yaml" "$name" "$sinks" "$window" "$positions"
	check "$name: eval exits 0" [ $? -eq 0 ]
	got=$(tail -n 1 "$tmp/$name.out" | jq -r .perplexity)
	want=$(jq -r ".ppl.$name" "$ref")
	tokens=$(tail -n 1 "$tmp/$name.out" | jq -r .tokens)
	check "$name: $tokens tokens as the reference" [ "$tokens" = "$(jq -r .tokens "$ref")" ]
	check "$name: perplexity $got within 0.5% of $want" within_half_percent "$got" "$want"
	check "$name: human table shows the perplexity" grep -q '^perplexity ' "$tmp/$name.out"
	check "$name: one sink share per layer" \
		[ "$(tail -n 1 "$tmp/$name.out" | jq '.sink_attention_share | length')" = 5 ]
done <<LIST
sink4_window252 4 252 cache
sink0_window128 0 128 cache
sink4_window252_original_positions 4 252 original
LIST

# The sink fixture (../shared/models/README.md): its layers 1-4 park about
# half of their attention on the stream's first token, so dropping, moving
# or mis-positioning the sink shows as a perplexity far from the reference
# (../shared/reference/stories260K-sink-ppl.json, float64, float K/V).
sink_model=$(realpath "$shared/models/stories260K-sink.gguf")
sink_ref=$shared/reference/stories260K-sink-ppl.json
sed "s|^  path: .*|  path: \"$sink_model\"|" "$tmp/eval.yaml" >"$tmp/sink.yaml"
for name in s4_w252 s0_w256 s4_w252_origpos; do
	row() { jq -r ".rows.$name.$1" "$sink_ref"; }
	eval_geometry "$tmp/sink.yaml" "$name" "$(row sink_keep_count)" "$(row window_size)" \
		"$(row rope_positions)"
	check "fixture $name: eval exits 0" [ $? -eq 0 ]
	got=$(tail -n 1 "$tmp/$name.out" | jq -r .perplexity)
	check "fixture $name ($(row what)): perplexity $got within 0.5% of $(row perplexity)" \
		within_half_percent "$got" "$(row perplexity)"
done
# int4 K/V: with the sinks kept in full precision the fixture scores as in
# float; with them quantized the heads lose what they park there.
for protect in true false; do
	"$bin" eval --config "$tmp/sink.yaml" --text "$text" --chunk 16 --json \
		--set inference.cache.sink_keep_count=4 --set inference.cache.window_size=252 \
		--set inference.quantization.enabled=true --set inference.quantization.bits=4 \
		--set inference.quantization.full_precision_recent=64 \
		--set inference.quantization.protect_sink_positions=$protect >"$tmp/int4-$protect.out" 2>&1
	check "fixture int4, protect_sink_positions $protect: eval exits 0" [ $? -eq 0 ]
done
p_on=$(tail -n 1 "$tmp/int4-true.out" | jq -r .perplexity)
p_off=$(tail -n 1 "$tmp/int4-false.out" | jq -r .perplexity)
p_float=$(tail -n 1 "$tmp/s4_w252.out" | jq -r .perplexity)
check "fixture int4 with the sinks protected ($p_on) within 0.5% of float K/V ($p_float)" \
	within_half_percent "$p_on" "$p_float"
check "fixture int4 with the sinks quantized ($p_off) over 5% worse than protected" \
	awk -v a="$p_off" -v b="$p_on" 'BEGIN { exit !(a > b * 1.05) }'
share=$(tail -n 1 "$tmp/s4_w252.out" | jq -c '.sink_attention_share | map(. * 1000 | round / 1000)')
check "fixture with 4 sinks: layers 1-4 give the sinks over a third of their attention $share" \
	jq -e '.sink_attention_share | .[1:] | all(. > 0.33)' <(tail -n 1 "$tmp/s4_w252.out")

# A pinned prefix is a sink tier of its length: 4 pinned tokens and no
# configured sinks score as the reference's 4 sinks, and stay full precision
# under int4 with protect_sink_positions off.
"$bin" eval --config "$tmp/sink.yaml" --text "$text" --chunk 16 --json \
	--set inference.cache.sink_keep_count=0 --set inference.cache.window_size=252 \
	--pin-prefix-tokens 4 >"$tmp/pin4.out" 2>&1
check "fixture, 4 pinned tokens: eval exits 0" [ $? -eq 0 ]
p_pin=$(tail -n 1 "$tmp/pin4.out" | jq -r .perplexity)
check "fixture, 4 pinned tokens, no sinks ($p_pin) within 0.5% of the reference's 4 sinks" \
	within_half_percent "$p_pin" "$(jq -r .rows.s4_w252.perplexity "$sink_ref")"
check "fixture, 4 pinned tokens: the report says so" grep -q 'first 4 tokens pinned' "$tmp/pin4.out"
"$bin" eval --config "$tmp/sink.yaml" --text "$text" --chunk 16 --json \
	--set inference.cache.sink_keep_count=0 --set inference.cache.window_size=252 \
	--set inference.quantization.enabled=true --set inference.quantization.bits=4 \
	--set inference.quantization.full_precision_recent=64 \
	--set inference.quantization.protect_sink_positions=false \
	--pin-prefix-tokens 4 >"$tmp/pin4-int4.out" 2>&1
p_pin4=$(tail -n 1 "$tmp/pin4-int4.out" | jq -r .perplexity)
check "fixture int4 unprotected, 4 pinned tokens ($p_pin4) as int4 protected ($p_on)" \
	within_half_percent "$p_pin4" "$p_on"
"$bin" eval --config "$tmp/sink.yaml" --text "$text" --set inference.cache.max_pinned_tokens=2 \
	--pin-prefix-tokens 4 >"$tmp/out" 2>&1
check "--pin-prefix-tokens over max_pinned_tokens exits 2" [ $? -eq 2 ]
check "… and names the key" grep -q 'max_pinned_tokens is 2' "$tmp/out"

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

# The retrieval probe (tests/bench/anchor-texts.py): stories that name a
# child in their first sentence and ask for the name 300 tokens later.
# stories260K copies the name while it is in the window and has to guess
# once a 64-token cache has moved past it; anchors (inference.cache.anchors)
# keep the heavily attended name tokens, so it copies again.
python3 "$(dirname "$0")/../bench/anchor-texts.py" "$tmp" 60 18
mkdir -p "$tmp/near"
python3 "$(dirname "$0")/../bench/anchor-texts.py" "$tmp/near" 60 0
probe() { # NAME TEXT ARGS...
	local name=$1 text=$2
	shift 2
	"$bin" eval --config "$tmp/eval.yaml" --text "$text" --probe --json --chunk 16 \
		--set inference.cache.sink_keep_count=4 "$@" >"$tmp/$name.out" 2>&1
	check "probe $name: eval exits 0" [ $? -eq 0 ]
}
probe near "$tmp/near/probe.txt" --set inference.cache.window_size=60
probe window "$tmp/probe.txt" --set inference.cache.window_size=60
probe anchors "$tmp/probe.txt" --set inference.cache.window_size=56 \
	--set inference.cache.anchors.enabled=true --set inference.cache.anchors.max_tokens=4 \
	--set inference.cache.anchors.promote_threshold=0.03 \
	--set inference.cache.anchors.demote_after_steps=16
answer_p() { tail -n 1 "$tmp/$1.out" | jq -r .answer_probability; }
p_near=$(answer_p near)
p_window=$(answer_p window)
p_anchor=$(answer_p anchors)
check "probe: 60 answers scored" [ "$(tail -n 1 "$tmp/window.out" | jq .answers)" = 60 ]
check "probe: the report gives the answers' probability" grep -q '^answers *60, mean probability' "$tmp/window.out"
check "probe: name in the window p=$p_near, over 0.3" awk -v p="$p_near" 'BEGIN { exit !(p > 0.3) }'
check "probe: name past a 64-token window p=$p_window, under 0.1" awk -v p="$p_window" 'BEGIN { exit !(p < 0.1) }'
check "probe: 4 anchors + window 56 ($p_anchor) over 3x the window of 60 ($p_window)" \
	awk -v a="$p_anchor" -v w="$p_window" 'BEGIN { exit !(a > 3 * w) }'
check "probe: anchors were promoted and demoted" \
	jq -e '.anchors_promoted > 0 and .anchors_demoted > 0 and .config.anchors.max_tokens == 4' \
	<(tail -n 1 "$tmp/anchors.out")
check "probe: the report counts the anchors" grep -q '^anchors .* promoted' "$tmp/anchors.out"
printf 'no tab on this line\n' >"$tmp/notab.txt"
"$bin" eval --config "$tmp/eval.yaml" --text "$tmp/notab.txt" --probe >"$tmp/out" 2>&1
check "--probe on a line without a TAB exits 2" [ $? -eq 2 ]
check "… and names the line" grep -q 'notab.txt: line 1: --probe needs CONTEXT<TAB>ANSWER' "$tmp/out"
"$bin" eval --config "$tmp/eval.yaml" --text "$text" --set inference.cache.strategy=full \
	--set inference.cache.anchors.enabled=true >"$tmp/out" 2>&1
check "anchors with strategy full exits 2" [ $? -eq 2 ]
check "… and names the keys" grep -q 'inference.cache.anchors.enabled' "$tmp/out"

"$bin" eval --config "$tmp/eval.yaml" --text "$text" --baseline bogus >"$tmp/out" 2>&1
check "--baseline bogus exits 2" [ $? -eq 2 ]
"$bin" eval --config "$tmp/eval.yaml" --text "$text" --set inference.cache.sink_keep_count=300 \
	--set inference.cache.window_size=256 >"$tmp/out" 2>&1
check "sinks >= window exits 2" [ $? -eq 2 ]
check "sinks >= window is explained" grep -q 'sink_keep_count' "$tmp/out"
"$bin" eval --config "$tmp/eval.yaml" --text "$tmp/missing.txt" >"$tmp/out" 2>&1
check "a missing text file fails" [ $? -ne 0 ]

finish
