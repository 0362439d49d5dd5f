#!/usr/bin/env bash
# The TLS configuration as a scanner sees it (sslscan, Debian): with an RSA
# and with an ECDSA certificate, only TLS 1.2 and 1.3 are enabled, and every
# accepted cipher suite is an AEAD with a forward-secret key exchange (TLS
# 1.3 suites, or ECDHE with AES-GCM / ChaCha20-Poly1305 in TLS 1.2); no
# renegotiation, no compression.
set -u
. "$(dirname "$0")/server-lib.sh"
command -v sslscan >/dev/null 2>&1 || { echo "SKIP: sslscan is missing"; exit 77; }

openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
	-keyout "$tmp/rsa-key.pem" -out "$tmp/rsa-cert.pem" 2>/dev/null

scan() { # NAME CERT KEY
	local name=$1 port
	port=$(free_port)
	write_config "$tmp/$name.yaml" "$port"
	sed -i "s|cert_file: .*|cert_file: \"$2\"|; s|key_file: .*|key_file: \"$3\"|" "$tmp/$name.yaml"
	start_daemon "$name" "$tmp/$name.yaml" --set server.drain_grace_s=0
	check "$name: daemon ready" [ $? -eq 0 ]
	sslscan --no-colour "127.0.0.1:$port" >"$tmp/$name.scan" 2>&1
	check "$name: the scan ran" grep -q "Supported Server Cipher" "$tmp/$name.scan"
	for v in SSLv2 SSLv3 TLSv1.0 TLSv1.1; do
		check "$name: $v disabled" grep -Eq "^$v +disabled" "$tmp/$name.scan"
	done
	check "$name: TLSv1.2 enabled" grep -Eq '^TLSv1.2 +enabled' "$tmp/$name.scan"
	check "$name: TLSv1.3 enabled" grep -Eq '^TLSv1.3 +enabled' "$tmp/$name.scan"
	grep -E '^(Preferred|Accepted) ' "$tmp/$name.scan" | awk '{print $2, $5}' >"$tmp/$name.suites"
	check "$name: some suites accepted" [ -s "$tmp/$name.suites" ]
	bad=$(grep -Ev '^TLSv1.3 TLS_(AES_(128|256)_GCM|CHACHA20_POLY1305)_SHA(256|384)$|^TLSv1.2 ECDHE-(RSA|ECDSA)-(AES(128|256)-GCM-SHA(256|384)|CHACHA20-POLY1305)$' "$tmp/$name.suites")
	check "$name: every suite is AEAD with forward secrecy${bad:+ (not: $bad)}" [ -z "$bad" ]
	check "$name: no renegotiation" grep -q "renegotiation not supported" "$tmp/$name.scan"
	stop_daemon "$pid"
	sed 's/^/   /' "$tmp/$name.suites"
}
scan rsa "$tmp/rsa-cert.pem" "$tmp/rsa-key.pem"
scan ecdsa "$tmp/cert.pem" "$tmp/key.pem"
finish
