#!/usr/bin/env bash
# The listener's start-up paths with the real daemon: IPv6, plain HTTP (with
# its loud warning), and clear errors that leave nothing running for a
# missing, invalid or mismatched certificate and for a port in use.
set -u
. "$(dirname "$0")/server-lib.sh"

# expect_start_error NAME CONFIG PATTERN [--set ...]: exits non-zero within
# 10 s, logs PATTERN, and never answered on the port.
expect_start_error() {
	local name=$1 cfg=$2 pattern=$3
	shift 3
	local log="$tmp/$name.log"
	timeout 10 "$bin" --config "$cfg" "$@" >"$log" 2>&1
	local rc=$?
	check "$name: exits with an error (rc=$rc)" [ "$rc" -ne 0 -a "$rc" -ne 124 ]
	check "$name: says why" grep -q -- "$pattern" "$log"
	[ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] && sed 's/^/   log: /' "$log" | tail -3
}

# ---- IPv6 ------------------------------------------------------------------
if [ -e /proc/net/if_inet6 ] && grep -q '^0\{31\}1 ' /proc/net/if_inet6; then
	port=$(free_port)
	write_config "$tmp/v6.yaml" "$port" "[::1]"
	start_daemon v6 "$tmp/v6.yaml"
	check "IPv6: daemon ready on [::1]" [ $? -eq 0 ]
	check "IPv6: /health over https://[::1]" [ "$(curl -sk -o /dev/null -w '%{http_code}' "https://[::1]:$port/health")" = 200 ]
	check "IPv6: not on 127.0.0.1" bash -c "! curl -sk --max-time 2 -o /dev/null 'https://127.0.0.1:$port/health'"
	stop_daemon "$pid"
	check "IPv6: clean stop" [ $? -eq 0 ]
else
	echo "# IPv6 loopback not available: IPv6 checks skipped"
fi

# ---- plain HTTP ----------------------------------------------------------------
port=$(free_port)
write_config "$tmp/plain.yaml" "$port"
sed -i 's/enabled: true/enabled: false/' "$tmp/plain.yaml"
"$bin" --config "$tmp/plain.yaml" >"$tmp/plain.log" 2>&1 &
pid=$!
daemon_pids+=("$pid")
for _ in $(seq 1 200); do
	[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/ready")" = 200 ] && break
	sleep 0.05
done
check "TLS disabled: /health over plain HTTP" [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ]
check "TLS disabled: completion over plain HTTP" [ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $api_key" -d '{"prompt":"Once","max_tokens":3}' "http://127.0.0.1:$port/v1/completions")" = 200 ]
check "TLS disabled: loud warning in the log" grep -q '"level":"warn".*TLS IS DISABLED' "$tmp/plain.log"
check "TLS disabled: log says scheme http" grep -q '"scheme":"http"' "$tmp/plain.log"
stop_daemon "$pid"
check "TLS disabled: clean stop" [ $? -eq 0 ]

# ---- prompt longer than the strategy allows ---------------------------------------
port=$(free_port)
write_config "$tmp/full.yaml" "$port"
start_daemon full "$tmp/full.yaml" --set inference.cache.strategy=full \
	--set inference.max_context_length=64 --set inference.cache.window_size=32
check "strategy full: daemon ready" [ $? -eq 0 ]
long_prompt=$(printf 'Once upon a time there was a little girl. %.0s' $(seq 1 12))
st=$(http POST /v1/completions "${auth[@]}" -d "{\"prompt\":\"$long_prompt\",\"max_tokens\":4}")
check "prompt over max_context_length (strategy full) → 400" [ "$st" = 400 ]
jcheck "the 400 names the prompt and the context" "$tmp/body" "j['error']['param'] == 'prompt' and j['error']['code'] == 'context_length_exceeded' and 'context' in j['error']['message']"
st=$(http POST /v1/completions "${auth[@]}" -d '{"prompt":"Once upon a time","max_tokens":10}')
check "a prompt that fits → 200" [ "$st" = 200 ]
stop_daemon "$pid"

# ---- start-up errors ------------------------------------------------------------
port=$(free_port)
write_config "$tmp/bad.yaml" "$port"
expect_start_error "missing certificate" "$tmp/bad.yaml" "server.tls.cert_file.*$tmp/nope.pem.*No such file" \
	--set server.tls.cert_file="$tmp/nope.pem"
echo "not a certificate" >"$tmp/garbage.pem"
expect_start_error "invalid certificate" "$tmp/bad.yaml" "is not a PEM certificate" \
	--set server.tls.cert_file="$tmp/garbage.pem"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=other \
	-keyout "$tmp/key2.pem" -out "$tmp/cert2.pem" 2>/dev/null
expect_start_error "key does not match" "$tmp/bad.yaml" "does not match the certificate" \
	--set server.tls.key_file="$tmp/key2.pem"
chmod 000 "$tmp/key2.pem"
if [ "$(id -u)" -ne 0 ]; then
	expect_start_error "unreadable key" "$tmp/bad.yaml" "Permission denied" \
		--set server.tls.key_file="$tmp/key2.pem"
fi
check "no daemon answered during the bad starts" bash -c "! curl -sk --max-time 1 -o /dev/null 'https://127.0.0.1:$port/health'"

# Port in use: a running daemon holds it.
write_config "$tmp/first.yaml" "$port"
start_daemon first "$tmp/first.yaml"
check "first daemon ready" [ $? -eq 0 ]
first=$pid
expect_start_error "port in use" "$tmp/first.yaml" "address already in use\|Address already in use"
check "port in use: the first daemon still serves" [ "$(curl -sk -o /dev/null -w '%{http_code}' "https://127.0.0.1:$port/health")" = 200 ]
stop_daemon "$first"
check "first daemon: clean stop" [ $? -eq 0 ]
expect_start_error "bad listen address" "$tmp/first.yaml" "server.listen" --set server.listen=300.1.1.1:80

finish
