#!/usr/bin/env bash
# `sinkd eval --trace` and `--heatmap` on the sink fixture (stories260K-sink)
# with 4 sinks and a 32-token int4 window (8 hot): every traced step's tiers
# and stream indices follow the geometry (sinks are the first tokens, the
# window the newest, its older part quantized), its masses sum to 1 per
# layer, the sinks draw about half of layers 1-4's attention; the PNGs are
# PNGs of a plausible size; --trace with chunks still traces each step on its
# own; bad uses exit 2 (or 1 for an unwritable folder) with a message.
set -u
base_only=1 . "$(dirname "$0")/server-lib.sh"
py=$(command -v /usr/bin/python3 || command -v python3)
model=$(realpath "$shared/models/stories260K-sink.gguf")
head -c 2500 "$shared/data/tinystories-dev.txt" >"$tmp/text.txt"
cat >"$tmp/eval.yaml" <<YAML
model:
  path: "$model"
server:
  tls:
    enabled: false
inference:
  cache:
    sink_keep_count: 4
    window_size: 32
  quantization:
    enabled: true
    bits: 4
    full_precision_recent: 8
  attention:
    dtype: float32
YAML

"$bin" eval --config "$tmp/eval.yaml" --text "$tmp/text.txt" --chunk 16 --json \
	--trace "$tmp/trace.jsonl" --trace-every 5 --heatmap "$tmp/hm" --heatmap-every 100 \
	>"$tmp/eval.out" 2>"$tmp/eval.err"
check "eval --trace --heatmap exits 0" [ $? -eq 0 ]
tail -n 1 "$tmp/eval.out" >"$tmp/eval.json"
cat >"$tmp/trace.py" <<'PY'
import json, math, sys
scored = json.load(open(sys.argv[2]))["scored"]
lines = [json.loads(l) for l in open(sys.argv[1])]
assert len(lines) == (scored + 4) // 5, (len(lines), scored)
share = [0.0] * 5
for n, j in enumerate(lines):
    assert j["scored_step"] == 5 * n, j["scored_step"]
    assert j["tracing"] and math.isfinite(j["nll"])
    p = j["position"]
    assert j["stream_position"] == p, (j["stream_position"], p)
    assert j["geometry"]["quant_bits"] == 4 and j["geometry"]["window_size"] == 32
    sinks = min(4, p + 1)
    win = min(32, p + 1 - sinks)
    want = list(range(sinks)) + list(range(p + 1 - win, p + 1))
    hot = min(8, win)
    tiers = [0] * sinks + [2] * (win - hot) + [3] * hot
    for l in j["layers"]:
        assert l["stream_index"] == want, (p, l["stream_index"][:6])
        assert l["tier"] == tiers, (p, l["tier"])
        assert l["rope_position"] == list(range(len(want)))
        assert abs(sum(l["mass_mean"]) - 1) < 1e-4, (p, sum(l["mass_mean"]))
        if p >= 40:
            share[l["layer"]] += sum(l["mass_mean"][:4])
late = sum(1 for j in lines if j["position"] >= 40)
share = [s / late for s in share]
# the fixture's heads of layers 1-4 park about half of their attention on the first token
assert all(0.3 < s < 0.8 for s in share[1:]), share
print("   %d lines; sink share per layer %s" % (len(lines), " ".join("%.3f" % s for s in share)))
PY
check "the trace follows the geometry and the fixture's sinks" "$py" "$tmp/trace.py" "$tmp/trace.jsonl" "$tmp/eval.json"

png_size() { # FILE → "WIDTH HEIGHT" when it is a PNG
	"$py" -c 'import struct,sys; d=open(sys.argv[1],"rb").read(24); assert d[:8]==b"\x89PNG\r\n\x1a\n" and d[12:16]==b"IHDR"; print(*struct.unpack(">II", d[16:24]))' "$1"
}
for f in step-000000 step-000100 step-000500 summary lifecycle; do
	size=$(png_size "$tmp/hm/$f.png" 2>/dev/null)
	check "$f.png is a PNG ($size)" [ -n "$size" ]
done
read -r w h <<<"$(png_size "$tmp/hm/lifecycle.png")"
check "the lifecycle has a row per scored step (height $h >= steps)" \
	[ "${h:-0}" -ge "$(jq .scored "$tmp/eval.json")" ]

# one token at a time gives the same figures
"$bin" eval --config "$tmp/eval.yaml" --text "$tmp/text.txt" --json >"$tmp/plain.out" 2>&1
check "the perplexity is the same with and without --trace" \
	[ "$(tail -n 1 "$tmp/plain.out" | jq .perplexity)" = "$(jq .perplexity "$tmp/eval.json")" ]

"$bin" eval --config "$tmp/eval.yaml" --text "$tmp/text.txt" --trace "$tmp/x.jsonl" \
	--baseline recompute >/dev/null 2>"$tmp/err1"
check "--trace with --baseline recompute exits 2" [ $? -eq 2 ]
check "... and says why" grep -q "recompute has none" "$tmp/err1"
"$bin" eval --config "$tmp/eval.yaml" --text "$tmp/text.txt" --heatmap "$tmp/text.txt" \
	>/dev/null 2>"$tmp/err2"
check "--heatmap onto a file exits 1" [ $? -eq 1 ]
check "... naming it" grep -q "not a folder" "$tmp/err2"
"$bin" eval --config "$tmp/eval.yaml" --text "$tmp/text.txt" --heatmap "$tmp/hm2" \
	--heatmap-layer 5 >/dev/null 2>"$tmp/err3"
check "--heatmap-layer 5 of 5 layers exits 2" [ $? -eq 2 ]
check "... naming the layers" grep -q "layers 0..4" "$tmp/err3"
"$bin" eval --config "$tmp/eval.yaml" --text "$tmp/text.txt" --trace-every 0 >/dev/null 2>"$tmp/err4"
check "--trace-every 0 exits 2" [ $? -eq 2 ]
finish
