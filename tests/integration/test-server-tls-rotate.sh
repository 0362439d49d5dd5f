#!/usr/bin/env bash
# Certificate rotation without restart, with the real daemon: a stream is
# opened, the certificate and key files named in the config are overwritten
# with a new pair and SIGHUP reloads them; new handshakes (openssl s_client)
# see the new certificate while the stream opened before goes on; a key that
# does not match is refused with a "reload failed" line naming server.tls and
# the good certificate stays.
set -u
. "$(dirname "$0")/server-lib.sh"

port=$(free_port)
write_config "$tmp/rot.yaml" "$port"
start_daemon rot "$tmp/rot.yaml" --set limits.max_tokens=1000000
check "daemon starts and /ready turns 200" [ $? -eq 0 ]
rot_pid=$pid

# served_fp: the SHA-256 fingerprint a new handshake presents.
served_fp() {
	timeout 10 openssl s_client -connect "127.0.0.1:$port" </dev/null 2>/dev/null |
		openssl x509 -noout -fingerprint -sha256 2>/dev/null
}
file_fp() { openssl x509 -in "$1" -noout -fingerprint -sha256; }
# The daemon logs fingerprints as lower-case hex without colons.
log_fp() { file_fp "$1" | sed 's/.*=//; s/://g' | tr 'A-F' 'a-f'; }
size_of() { stat -c %s "$1"; }

fp1=$(file_fp "$tmp/cert.pem")
check "first certificate served" [ "$(served_fp)" = "$fp1" ]
check "start-up log names the certificate's fingerprint" \
	grep -q "TLS certificate loaded.*$(log_fp "$tmp/cert.pem")" "$log"

# ---- rotation while a stream runs ------------------------------------------------
curl -skN "${auth[@]}" -d '{"prompt":"Once upon a time","max_tokens":100000,"ignore_eos":true,"stream":true}' \
	"$base/v1/completions" >"$tmp/stream.txt" 2>/dev/null &
stream_pid=$!
check "stream delivers tokens before the rotation" wait_for grep -q '^data: {' "$tmp/stream.txt"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
	-addext "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1" \
	-keyout "$tmp/key2.pem" -out "$tmp/cert2.pem" 2>/dev/null || { echo "openssl failed"; exit 1; }
fp2=$(file_fp "$tmp/cert2.pem")
check "the second certificate differs" [ "$fp2" != "$fp1" ]
cp "$tmp/cert2.pem" "$tmp/cert.pem"
cp "$tmp/key2.pem" "$tmp/key.pem"
kill -HUP "$rot_pid"
check "reload logs the new fingerprint" \
	wait_for grep -q "TLS certificate reloaded.*$(log_fp "$tmp/cert2.pem")" "$log"
new_fp_served() { [ "$(served_fp)" = "$fp2" ]; }
check "new handshakes get the new certificate" wait_for new_fp_served
check "no restart-only warning for files rewritten in place" bash -c "! grep -q 'needs restart' '$log'"

n_rot=$(size_of "$tmp/stream.txt")
grown() { [ "$(size_of "$tmp/stream.txt")" -gt "$n_rot" ]; }
check "the stream opened before still delivers tokens" wait_for grown
check "that stream's client is still connected" kill -0 "$stream_pid"
check "requests over the new certificate work" \
	[ "$(http POST /v1/completions "${auth[@]}" -d '{"prompt":"Once","max_tokens":3}')" = 200 ]
kill "$stream_pid" 2>/dev/null
wait "$stream_pid" 2>/dev/null
check "the old stream ends: its request is logged" \
	wait_for grep -q '"msg":"request".*"endpoint":"/v1/completions".*"status":499' "$log"
check "and its generation is released" wait_metric sinkd_scheduler_running == 0
cp "$tmp/stream.txt" "$tmp/stream.keep.txt"
# The kill may cut the last event short: only whole lines count.
pcheck "old stream: well-formed chunks all along" \
	"(lambda xs: len(xs) > 5 and set(xs) == {'text_completion'})([json.loads(l[6:])['object'] for l in open(os.path.join(tmp, 'stream.keep.txt')).read().split('\\n')[:-1] if l.startswith('data: {')])"

# ---- a key that does not match: refused, nothing changes ------------------------------
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$tmp/key.pem" 2>/dev/null
kill -HUP "$rot_pid"
check "mismatched key: reload failed, naming server.tls" \
	wait_for grep -q 'reload failed.*server\.tls.*does not match' "$log"
check "mismatched key: nothing swapped" [ "$(grep -c 'TLS certificate reloaded' "$log")" = 1 ]
check "mismatched key: handshakes still get the second certificate" [ "$(served_fp)" = "$fp2" ]
check "mismatched key: still serving" [ "$(http GET /health)" = 200 ]
check "mismatched key: completions still work" \
	[ "$(http POST /v1/completions "${auth[@]}" -d '{"prompt":"Once","max_tokens":3}')" = 200 ]

# ---- the good key back: the next reload succeeds ------------------------------------------
cp "$tmp/key2.pem" "$tmp/key.pem"
kill -HUP "$rot_pid"
check "fixed key: reloaded" wait_for bash -c "[ \$(grep -c 'TLS certificate reloaded' '$log') = 2 ]"
check "fixed key: same certificate" [ "$(served_fp)" = "$fp2" ]

stop_daemon "$rot_pid"
check "clean stop" [ $? -eq 0 ]
finish
