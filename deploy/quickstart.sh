#!/usr/bin/env bash
# Quick start on a fresh machine: install what the daemon needs (only that:
# the test tools are tests/run.sh's), build the daemon alone, create a
# development TLS certificate, verify the bundled model and start sinkd with
# config/sinkd.yaml in the background.  Prints a curl line to paste.
#   deploy/quickstart.sh              start in the background (logs: build/sinkd.log)
#   deploy/quickstart.sh --foreground run in the foreground (Ctrl-C stops)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
foreground=0
[ "${1:-}" = "--foreground" ] && foreground=1

deploy/install-deps.sh
export PATH="/usr/local/cuda/bin:$PATH"

# The daemon alone (no test binaries).  The CUDA backend only where it can
# run (nvcc and a GPU), and then for that GPU's architecture only.
if [ ! -f build/build.ninja ]; then
	cuda=(-Dcuda=disabled)
	if command -v nvcc >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
		cuda=(-Dcuda=enabled)
		sm=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
		[[ "$sm" =~ ^[0-9]+$ ]] && cuda+=("-Dgpu_sm=$sm")
	fi
	setup_log=$(mktemp)
	meson setup build --buildtype=release "${cuda[@]}" >"$setup_log" 2>&1 ||
		{ cat "$setup_log" >&2; rm -f "$setup_log"; exit 1; }
	mv "$setup_log" build/setup.log
fi
echo "sinkd: building build/src/sinkd"
# and the CUDA backend's module where the build has it (sinkd loads it from there)
targets=(src/sinkd)
ninja -C build -t targets all 2>/dev/null | grep -q '^src/libsinkd-cuda.so:' && targets+=(src/libsinkd-cuda.so)
ninja -C build "${targets[@]}" >build/build.log 2>&1 || { tail -40 build/build.log >&2; exit 1; }

# The bundled model, checked against its published digest.
models="$root/../shared/models"
(cd "$models" && sha256sum --quiet -c SHA256SUMS) || {
	echo "sinkd: $models/stories260K.gguf does not match SHA256SUMS" >&2
	exit 1
}

# A development certificate for 127.0.0.1/localhost, made once.
tls="$root/config/tls"
if [ ! -f "$tls/cert.pem" ] || [ ! -f "$tls/key.pem" ]; then
	mkdir -p "$tls"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 365 \
		-subj "/CN=localhost" -addext "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1" \
		-keyout "$tls/key.pem" -out "$tls/cert.pem" 2>/dev/null
	chmod 600 "$tls/key.pem"
	echo "sinkd: created a development certificate in config/tls/ (self-signed)"
fi

config="$root/config/sinkd.yaml"
build/src/sinkd --check-config "$config" >/dev/null
listen=$(build/src/sinkd --check-config "$config" | sed -n 's/^  listen: "\(.*\)".*/\1/p')
port=${listen##*:}
url="https://127.0.0.1:$port"

if [ "$foreground" -eq 1 ]; then
	echo "sinkd: serving on $url (Ctrl-C stops)"
	exec build/src/sinkd --config "$config"
fi

if [ -f build/sinkd.pid ] && kill -0 "$(cat build/sinkd.pid)" 2>/dev/null; then
	echo "sinkd: stopping the previous instance (pid $(cat build/sinkd.pid))"
	kill "$(cat build/sinkd.pid)"
	sleep 1
fi
nohup build/src/sinkd --config "$config" >build/sinkd.log 2>&1 &
echo $! >build/sinkd.pid
for _ in $(seq 1 100); do
	if curl -fsS --cacert "$tls/cert.pem" "$url/health" >/dev/null 2>&1; then
		break
	fi
	if ! kill -0 "$(cat build/sinkd.pid)" 2>/dev/null; then
		echo "sinkd: failed to start; build/sinkd.log says:" >&2
		tail -20 build/sinkd.log >&2
		exit 1
	fi
	sleep 0.1
done
curl -fsS --cacert "$tls/cert.pem" "$url/health" >/dev/null
echo "sinkd is running (pid $(cat build/sinkd.pid), logs in build/sinkd.log, stop: kill \$(cat build/sinkd.pid))"
echo "Try:"
echo "  curl --cacert config/tls/cert.pem $url/v1/completions -H 'Content-Type: application/json' -d '{\"prompt\": \"Once upon a time\", \"max_tokens\": 64, \"stream\": true}'"
