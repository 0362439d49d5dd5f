#!/usr/bin/env bash
# The streaming-perplexity monitor with the real daemon on the sink fixture
# (stories260K-sink, whose heads park about half of their attention on the
# first token): the 19 documents of tinystories-dev.txt appended to a
# persistent session, then a short generation.  With 4 sinks + a 256-token
# window the running perplexity stays near the first window's (no alert at
# perplexity_alert_ratio 3: documents appended one after another without
# a separator drift up to about 2x at the first checks); with the sinks removed (a 260-token window
# only) it rises about fourfold once the window passes the first token: the
# alert fires (a warning log line with "perplexity", the session's
# perplexity.alerts, sinkd_perplexity_alerts_total).  Also: the NLL
# histograms, input_perplexity off (generated tokens only) and sample
# (every K-th input token), the stream's closing log line.
set -u
. "$(dirname "$0")/server-lib.sh"
model=$(realpath "$shared/models/stories260K-sink.gguf")
text=$shared/data/tinystories-dev.txt

# start_monitored NAME SINKS WINDOW MODE: a daemon of the fixture
start_monitored() {
	local port
	port=$(free_port)
	write_config "$tmp/$1.yaml" "$port"
	cat >>"$tmp/$1.yaml" <<YAML
inference:
  cache:
    sink_keep_count: $2
    window_size: $3
  quantization:
    enabled: false
  attention:
    dtype: float32
monitoring:
  input_perplexity: $4
  input_perplexity_every: 16
  perplexity_alert_ratio: 3.0
YAML
	start_daemon "$1" "$tmp/$1.yaml" --set logging.level=info
}

# feed NAME [DOCS]: the first DOCS documents (default all) appended to
# session 5eed, then 8 greedy tokens
feed() {
	local name=$1 docs=${2:-1000} ok=0 n=0
	check "$name: create the session" [ "$(http PUT /v1/sessions/5eed "${auth[@]}")" = 200 ]
	while IFS= read -r line; do
		[ -n "$line" ] || continue
		[ "$n" -lt "$docs" ] || break
		n=$((n + 1))
		jq -n --arg t " $line" '{text: $t}' >"$tmp/body.json"
		[ "$(http POST /v1/sessions/5eed/append "${auth[@]}" -d @"$tmp/body.json")" = 200 ] && ok=$((ok + 1))
	done <"$text"
	check "$name: all $n documents appended" [ "$ok" = "$n" ]
	check "$name: generate 200" [ "$(http POST /v1/sessions/5eed/append "${auth[@]}" \
		-d '{"text":" The","generate":{"max_tokens":8,"temperature":0,"stream":false,"ignore_eos":true}}')" = 200 ]
	check "$name: GET the session" [ "$(http GET /v1/sessions/5eed "${auth[@]}")" = 200 ]
	cp "$tmp/body" "$tmp/$name-session.json"
	curl -sk "${auth[@]}" "$base/metrics" >"$tmp/$name-metrics.txt"
}

start_monitored kept 4 256 all
check "kept: daemon ready" [ $? -eq 0 ]
feed kept
stop_daemon "$pid"
jcheck "kept: every input token scored, generated ones too, running near the first window" \
	"$tmp/kept-session.json" \
	'(p := j["perplexity"])["input_tokens"] > 15000 and p["generated_tokens"] == 8 and 3 < p["first_window"] < 12 and p["ratio"] < 3 and p["alerts"] == 0'
check "kept: sinkd_perplexity_alerts_total 0" grep -qx 'sinkd_perplexity_alerts_total 0' "$tmp/kept-metrics.txt"
check "kept: the input NLL histogram counted them" \
	awk '$1 == "sinkd_input_token_nll_count" && $2 > 15000 { f = 1 } END { exit !f }' "$tmp/kept-metrics.txt"
check "kept: the generated NLL histogram counted 8" grep -qx 'sinkd_generated_token_nll_count 8' "$tmp/kept-metrics.txt"
check "kept: no perplexity alert in the log" bash -c "! grep -q 'perplexity rose' '$log'"
check "kept: a stream's end logs its perplexity" grep -q '"msg":"stream perplexity".*"input_perplexity"' "$log"

start_monitored removed 0 260 all
check "removed: daemon ready" [ $? -eq 0 ]
feed removed
stop_daemon "$pid"
jcheck "removed: the running perplexity rose past the alert ratio" "$tmp/removed-session.json" \
	'(p := j["perplexity"])["ratio"] > 3 and p["alerts"] >= 1 and p["running"] > 3 * p["first_window"]'
check "removed: sinkd_perplexity_alerts_total counted it" \
	awk '$1 == "sinkd_perplexity_alerts_total" && $2 >= 1 { f = 1 } END { exit !f }' "$tmp/removed-metrics.txt"
check "removed: a warning log line says perplexity and names the session" \
	grep -q '"level":"warn".*"msg":"perplexity rose above the session.s first window".*"session":"[0-9a-f]*-\?5eed"' "$log"

start_monitored sampled 4 256 sample
check "sampled: daemon ready" [ $? -eq 0 ]
feed sampled 6
stop_daemon "$pid"
jcheck "sampled: every 16th input token scored" "$tmp/sampled-session.json" \
	'abs(j["perplexity"]["input_tokens"] * 16 - (j["tokens_seen"] - 9)) <= 16'

start_monitored off 4 256 off
check "off: daemon ready" [ $? -eq 0 ]
feed off 3
stop_daemon "$pid"
jcheck "off: no input token scored, the generated ones still" "$tmp/off-session.json" \
	'(p := j["perplexity"])["input_tokens"] == 0 and p["input"] is None and p["generated_tokens"] == 8 and p["generated"] > 0'
check "off: the input histogram is empty" grep -qx 'sinkd_input_token_nll_count 0' "$tmp/off-metrics.txt"
finish
