#!/usr/bin/env bash
# The daemon's command line: --version, --help, --check-config on the example
# file (exit 0, effective config printed) and on broken files (exit 2, every
# error with file:line:col), --set overrides, unknown commands.
set -u
root=${SINKD_SOURCE_ROOT:?}
base_only=1 . "$(dirname "$0")/server-lib.sh"

"$bin" --version >"$tmp/out" 2>&1
check "--version exits 0" [ $? -eq 0 ]
check "--version prints the version" grep -q '^sinkd [0-9]' "$tmp/out"
"$bin" --help >"$tmp/out" 2>&1
check "--help exits 0 and shows --check-config" grep -q -- '--check-config' "$tmp/out"
"$bin" frobnicate >"$tmp/out" 2>&1
check "unknown command exits 2" [ $? -eq 2 ]
check "unknown command is named" grep -q "unknown command 'frobnicate'" "$tmp/out"

# The example config, laid out as in the repository: tls/ beside it and the
# model at ../../shared/models.
mkdir -p "$tmp/repo/config/tls"
cp "$root/config/sinkd.yaml" "$tmp/repo/config/"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=localhost \
	-keyout "$tmp/repo/config/tls/key.pem" -out "$tmp/repo/config/tls/cert.pem" 2>/dev/null
ln -s "$(realpath "$shared")" "$tmp/shared"
"$bin" --check-config "$tmp/repo/config/sinkd.yaml" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "--check-config on the example exits 0" [ $rc -eq 0 ]
check "effective config shows the window" grep -q '^    window_size: 4096' "$tmp/out"
check "effective config fills in defaults" grep -q '^    auto_fraction: 0.5' "$tmp/out"
"$bin" --check-config "$tmp/repo/config/sinkd.yaml" --set inference.cache.window_size=252 \
	--set logging.format=text >"$tmp/out" 2>"$tmp/err"
check "--set overrides a key" grep -q '^    window_size: 252' "$tmp/out"

cat >"$tmp/bad.yaml" <<'YAML'
inference:
  cache:
    sink_keep_cont: 4
    window_size: 0
    global_cache_limit: "8 GiBs"
logging:
  level: loud
YAML
"$bin" --check-config "$tmp/bad.yaml" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "--check-config on a broken file exits 2" [ $rc -eq 2 ]
check "unknown key located, with a suggestion" \
	grep -q "bad.yaml:3:5: inference.cache.sink_keep_cont: unknown key (did you mean 'inference.cache.sink_keep_count'?)" "$tmp/err"
check "out of range located" grep -q "bad.yaml:4:5: inference.cache.window_size: 0 is out of range" "$tmp/err"
check "malformed size located" grep -q "bad.yaml:5:5: inference.cache.global_cache_limit: '8 GiBs' is not a size" "$tmp/err"
check "bad enum located" grep -q "bad.yaml:7:3: logging.level: 'loud' is not allowed (allowed: debug | info | warn | error)" "$tmp/err"
check "error count printed" grep -q "4 errors" "$tmp/err"
check "nothing on stdout for a broken file" [ ! -s "$tmp/out" ]

# A budget smaller than one session's cache needs the model's dimensions.
"$bin" --check-config "$tmp/repo/config/sinkd.yaml" --set inference.cache.global_cache_limit=1MiB \
	--set inference.cache.window_size=32000 >"$tmp/out" 2>"$tmp/err"
check "budget below one session's cache exits 2" [ $? -eq 2 ]
check "budget error explains" grep -q "smaller than one session's cache" "$tmp/err"

# Without TLS files, serving is refused with the place that names them, but
# commands that do not serve take the same config.
mkdir -p "$tmp/nocert/config"
cp "$root/config/sinkd.yaml" "$tmp/nocert/config/"
"$bin" --check-config "$tmp/nocert/config/sinkd.yaml" --set model.path="$shared/models/stories260K.gguf" \
	>"$tmp/out" 2>"$tmp/err"
check "--check-config without the certificate exits 2" [ $? -eq 2 ]
check "missing certificate located" \
	grep -q "sinkd.yaml:[0-9]*:5: server.tls.cert_file: cannot read file '.*tls/cert.pem'" "$tmp/err"
printf 'Once upon a time there was a cat.\n' >"$tmp/doc.txt"
"$bin" eval --config "$tmp/nocert/config/sinkd.yaml" --model "$shared/models/stories260K.gguf" \
	--text "$tmp/doc.txt" --json >"$tmp/out" 2>"$tmp/err"
check "eval takes a config whose certificate is missing" [ $? -eq 0 ]

# Serving refuses to start on a bad config: no half-started daemon.
timeout 10 "$bin" --config "$tmp/bad.yaml" >"$tmp/out" 2>"$tmp/err"
check "--config with a broken file exits 2" [ $? -eq 2 ]

finish
