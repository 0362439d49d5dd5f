#!/usr/bin/env bash
# A Gemma-3-shaped model (sinkd-mkmodel --arch gemma3: 5 of its 6 layers
# sliding over 1,024 tokens) streamed over HTTPS into one session with a
# 4+252 cache on its global layer:
#   - after more than 20,000 tokens GET /v1/sessions/{id} shows the sliding
#     layers holding exactly their 1,024 tokens and the global layer its
#     4+252, and bytes_resident equals bytes_reserved, the per-layer bound
#     (5 x 1,024 + 256 tokens, not 6 full windows);
#   - `sinkd eval` scores the tokens before the global layer evicts anything
#     exactly as strategy full does.
# Usage: test-gemma-stream.sh MKMODEL (SINKD_BIN, SINKD_SHARED from the
# environment).
set -u
. "$(dirname "$0")/server-lib.sh"
mkmodel=${1:?usage: $0 MKMODEL}
text="$shared/data/tinystories-dev.txt"

# byte-level vocabulary: a token per byte or so, 2 KV heads of 64 (K and V
# in bfloat16: 512 bytes a token and layer)
"$mkmodel" --out "$tmp/g3.gguf" --arch gemma3 --dim 128 --layers 6 --heads 2 --kv-heads 2 \
	--head-dim 64 --ffn 256 --sliding-window 1024 --seed 7 >/dev/null
check "a gemma3 model with sliding layers is made" [ $? -eq 0 ]
row=512

port=$(free_port)
write_config "$tmp/g.yaml" "$port"
sed -i "s|^  path: .*|  path: \"$tmp/g3.gguf\"|" "$tmp/g.yaml"
cat >>"$tmp/g.yaml" <<YAML
inference:
  cache:
    sink_keep_count: 4
    window_size: 252
YAML
start_daemon gemma "$tmp/g.yaml"
check "daemon ready on the gemma3 model" [ $? -eq 0 ]

check "session created" [ "$(http POST /v1/sessions "${auth[@]}" -d '{}')" = 200 ]
sid=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["id"])' "$tmp/body")
# the whole story file, twice, in appends of 6,000 bytes
python3 - "$text" "$tmp/chunks" <<'PY'
import json, os, sys
data = open(sys.argv[1]).read() * 2
os.makedirs(sys.argv[2], exist_ok=True)
for i in range(0, len(data), 6000):
    with open(f"{sys.argv[2]}/{i // 6000:04d}.json", "w") as f:
        json.dump({"text": data[i:i + 6000]}, f)
PY
ok=1
for f in "$tmp"/chunks/*.json; do
	[ "$(http POST "/v1/sessions/$sid/append" "${auth[@]}" --data-binary "@$f")" = 200 ] || ok=0
done
check "every append 200" [ $ok = 1 ]
check "GET /v1/sessions/{id} 200" [ "$(http GET "/v1/sessions/$sid" "${auth[@]}")" = 200 ]
cp "$tmp/body" "$tmp/info.json"
jcheck "more than 20,000 tokens streamed" "$tmp/info.json" 'j["tokens_seen"] > 20000'
jcheck "the sliding layers hold exactly their 1,024 tokens" "$tmp/info.json" \
	'j["sliding_layers"] == {"count": 5, "window_size": 1024, "tokens_resident": 1024}'
jcheck "the global layer holds its 4 sinks and 252 window tokens" "$tmp/info.json" \
	'j["tokens_resident"] == 256 and j["tiers"]["sink"] == 4'
jcheck "bytes_resident = bytes_reserved = the per-layer bound (5 x 1,024 + 256 tokens)" \
	"$tmp/info.json" "j['bytes_resident'] == j['bytes_reserved'] == (5 * 1024 + 256) * $row"

# before the global layer evicts (fewer than 256 tokens), 4+252 scores as full
head -c 200 "$text" >"$tmp/short.txt"
score() { # strategy settings... → mean NLL
	"$bin" eval --config "$tmp/g.yaml" --text "$tmp/short.txt" --chunk 16 --json \
		--set inference.attention.dtype=float32 "$@" 2>/dev/null | tail -1 >"$tmp/eval.json"
	python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["tokens"], "%.9f" % j["mean_nll"])' "$tmp/eval.json"
}
a=$(score --set inference.cache.strategy=sliding_window)
b=$(score --set inference.cache.strategy=full)
n_scored=${a%% *}
check "eval: more than 100 tokens scored ($a)" [ "${n_scored:-0}" -gt 100 ]
check "eval: 4+252 with sliding layers scores as strategy full ($a / $b)" [ "$a" = "$b" ]
finish
