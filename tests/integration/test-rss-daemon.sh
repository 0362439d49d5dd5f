#!/usr/bin/env bash
# Resident memory of the real daemon as a user measures it: a quantized
# synthetic model (Q8_0, made here by sinkd-mkmodel, the first argument)
# served with model.backend cpu over HTTPS; after one request (a persistent
# session, a prompt and 16 greedy tokens) the process's peak resident set
# (VmHWM) is at most 1.1 x the file + the KV bytes GET /v1/sessions/{id}
# reports + 32 MB, and no CUDA library is mapped (/proc/PID/maps), even
# when this build has the CUDA backend (it is a module, loaded only for
# cuda).  With logging.level debug, the weight block is named in an
# "allocation" line with its bytes.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/server-lib.sh"

mkmodel=${1:?usage: $0 SINKD_MKMODEL}
model="$tmp/rss-q8_0.gguf"
"$mkmodel" --out "$model" --vocab "$shared/vocab/ggml-vocab-llama-spm.gguf" --dim 512 \
	--layers 8 --heads 8 --ffn 1536 --type q8_0 >"$tmp/mk.log" 2>&1
check "sinkd-mkmodel makes the Q8_0 model" [ $? -eq 0 ]
file_bytes=$(stat -c %s "$model")

port=$(free_port)
write_config "$tmp/rss.yaml" "$port"
start_daemon rss "$tmp/rss.yaml" --set model.backend=cpu --set engine.threads=1 \
	--set logging.level=debug
check "daemon starts on the cpu backend" [ $? -eq 0 ]
auth=(-H "Authorization: Bearer $api_key" -H 'Content-Type: application/json')
check "create a session" [ "$(http POST /v1/sessions "${auth[@]}")" = 200 ]
sid=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$tmp/body")
check "one request: prompt + 16 tokens" [ "$(http POST "/v1/sessions/$sid/append" "${auth[@]}" \
	-d '{"text":"Once upon a time there was a little girl","generate":{"max_tokens":16,"temperature":0}}')" = 200 ]
check "session inspect" [ "$(http GET "/v1/sessions/$sid" "${auth[@]}")" = 200 ]
kv_bytes=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["bytes_resident"])' "$tmp/body")
hwm=$(awk '/^VmHWM:/ {print $2 * 1024}' "/proc/$pid/status")
limit=$(( file_bytes * 11 / 10 + kv_bytes + 32000000 ))
echo "# file $file_bytes B, KV $kv_bytes B, VmHWM $hwm B, limit $limit B"
check "KV bytes reported" [ "${kv_bytes:-0}" -gt 0 ]
check "VmHWM ($hwm) <= 1.1 x file + KV + 32 MB = $limit" [ "${hwm:-0}" -gt 0 -a "${hwm:-0}" -le "$limit" ]
check "no CUDA library mapped" bash -c "! grep -Eq 'libcublas|libcudart|libcuda\.so' /proc/$pid/maps"
check "the weight block is named in a debug allocation line" \
	grep -q '"msg":"allocation".*"for":"weights re-laid' "$log"
stop_daemon "$pid"
check "daemon stops cleanly" [ $? -eq 0 ]
finish
