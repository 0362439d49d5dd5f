#!/usr/bin/env bash
# Secrets and logs: a unique prompt and the completions it produced never
# appear in any log line, at the debug level and on error paths (bad
# requests quoting the text, a client that leaves mid-stream, a refused
# reload), and API keys never appear either (only digests are configured).
set -u
. "$(dirname "$0")/server-lib.sh"

canary="zqxcanary$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
port=$(free_port)
write_config "$tmp/c.yaml" "$port"
sed -i 's/level: info/level: debug/' "$tmp/c.yaml"
start_daemon canary "$tmp/c.yaml" --set server.drain_grace_s=0 --set limits.max_tokens=100000
check "daemon ready (debug logging)" [ $? -eq 0 ]

outs=()
req() { # PATH JSON → saves the body for the completion-text check
	local n=${#outs[@]}
	curl -sk "${auth[@]}" -H 'Content-Type: application/json' -d "$2" "$base$1" >"$tmp/out$n.txt"
	outs+=("$tmp/out$n.txt")
}
req /v1/completions "{\"prompt\":\"Once upon a time $canary\",\"max_tokens\":48,\"temperature\":0}"
req /v1/completions "{\"prompt\":\"$canary Lily\",\"max_tokens\":48,\"stream\":true,\"temperature\":0.8,\"stop\":[\"$canary\"]}"
req /v1/chat/completions "{\"messages\":[{\"role\":\"system\",\"content\":\"$canary system\"},{\"role\":\"user\",\"content\":\"Tell me $canary\"}],\"max_tokens\":32}"
req /tokenize "{\"content\":\"$canary\"}"
ids=$(sed 's/.*"tokens":\(\[[^]]*\]\).*/\1/' "${outs[3]}")
req /detokenize "{\"tokens\":$ids}"
check "detokenize gives the canary back (so the test sees it)" grep -q "$canary" "${outs[4]}"
# Error paths that quote the input in their answer.
req /v1/completions "{\"prompt\":\"$canary\",\"max_tokens\":\"$canary\"}"
req /v1/completions "{\"prompt\":[\"$canary\",\"$canary\"]}"
req /v1/chat/completions "{\"messages\":[{\"role\":\"$canary\",\"content\":\"$canary\"}]}"
req /v1/completions "{\"prompt\":\"$canary\" trailing"
req /v1/sessions "{\"window_size\":\"$canary\"}"
check "session PUT" [ "$(http PUT /v1/sessions/c0ffee "${auth[@]}")" = 200 ]
req /v1/sessions/c0ffee/append "{\"text\":\"$canary once\",\"generate\":{\"max_tokens\":24}}"
req /v1/sessions/c0ffee/append "{\"text\":\"$canary\",\"revise_last_tokens\":100000}"
# A client that leaves mid-stream.
curl -skN --max-time 1 "${auth[@]}" -d "{\"prompt\":\"$canary\",\"max_tokens\":100000,\"ignore_eos\":true,\"stream\":true}" \
	"$base/v1/completions" >/dev/null 2>&1
# A reload refused (its error quotes the config, which is the operator's text).
cp "$tmp/c.yaml" "$tmp/c.good"
sed -i "s/level: debug/level: verbose-please/" "$tmp/c.yaml" # the operator's value is quoted back: not user text
kill -HUP "$pid"
check "the bad reload was refused" wait_for grep -q 'reload failed' "$log"
check "an error quoting the value is logged" grep -q 'logging.level' "$log"
cp "$tmp/c.good" "$tmp/c.yaml"
kill -HUP "$pid"
check "the good reload applied" wait_metric sinkd_config_generation '==' 2
sleep 0.3

check "the log has debug lines" grep -q '"level":"debug"' "$log"
check "the canary prompt never appears in the log" bash -c "! grep -q '$canary' '$log' || { grep -n '$canary' '$log' | head -3; false; }"
check "the API key never appears in the log" bash -c "! grep -q '$api_key' '$log'"
# Completion texts: every generated piece of 12 characters or more.
"$py" - "$log" "${outs[@]}" <<'PY' >"$tmp/leaks.txt"
import json, sys
log = open(sys.argv[1], errors="replace").read()
texts = []
for path in sys.argv[2:]:
    raw = open(path, errors="replace").read()
    for line in raw.splitlines():
        line = line[6:] if line.startswith("data: ") else line
        try:
            o = json.loads(line)
        except Exception:
            continue
        for c in o.get("choices", []):
            t = c.get("text") or (c.get("message") or {}).get("content") or (c.get("delta") or {}).get("content")
            if t:
                texts.append(t)
joined = "".join(texts)
pieces = [t.strip() for t in texts if len(t.strip()) >= 12]
# also windows of the joined stream text
pieces += [joined[i:i + 16] for i in range(0, max(0, len(joined) - 16), 16)]
leaks = [p for p in pieces if p and p in log]
print("completion pieces checked: %d, found in the log: %d" % (len(pieces), len(leaks)))
for p in leaks[:3]:
    print("leak:", repr(p))
PY
cat "$tmp/leaks.txt"
check "no completion text in the log" grep -q 'found in the log: 0$' "$tmp/leaks.txt"
check "completion pieces were checked" bash -c "! grep -q 'checked: 0,' '$tmp/leaks.txt'"
stop_daemon "$pid"
check "clean stop" [ $? -eq 0 ]
check "still no canary after the stop" bash -c "! grep -q '$canary' '$log'"
finish
