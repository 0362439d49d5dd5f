#!/usr/bin/env bash
# Soak (run by hand, never part of the test suite): `tests/bench/soak.sh MINUTES`.
#
# Starts the real daemon (TLS on 127.0.0.1, one API key, stories260K) and for
# MINUTES keeps 8 clients generating in a loop (streamed and not, one-shot
# and persistent sessions, some leaving mid-stream), 200 idle TLS
# connections (re-opened when the server closes them), and a reload every
# RELOAD_S seconds (valid and invalid files alternating).  Every SAMPLE_S
# seconds it samples the daemon's RSS, open fds, threads and KV bytes
# reserved; at the end it fits a line to each (after the first sample, the
# warm-up) and prints whether it is flat, the error counts by HTTP status,
# a table and one JSON line.  Results go to tests/bench/results/ by hand.
#
# Environment: BUILD (build dir with src/sinkd, default build-bench-soak,
# configured and built here when missing), SAMPLE_S (30), RELOAD_S (20),
# CLIENTS (8), IDLE (200), MAX_TOKENS (64).
set -euo pipefail

MINUTES=${1:?usage: tests/bench/soak.sh MINUTES}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${SINKD_SHARED:-$ROOT/../shared}
BUILD=${BUILD:-$ROOT/build-bench-soak}
SAMPLE_S=${SAMPLE_S:-30}
RELOAD_S=${RELOAD_S:-20}
CLIENTS=${CLIENTS:-8}
IDLE=${IDLE:-200}
MAX_TOKENS=${MAX_TOKENS:-64}

if [ ! -x "$BUILD/src/sinkd" ]; then
	meson setup "$BUILD" --buildtype=release -Dcuda=disabled >/dev/null
	ninja -C "$BUILD" src/sinkd >/dev/null
fi
tmp=$(mktemp -d)
trap 'kill -9 "${pid:-0}" 2>/dev/null; rm -rf "$tmp"' EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
	-keyout "$tmp/key.pem" -out "$tmp/cert.pem" 2>/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
key=soak-key
digest=$(printf %s "$key" | sha256sum | cut -d' ' -f1)
cat >"$tmp/good.yaml" <<YAML
server:
  listen: "127.0.0.1:$port"
  api_keys: ["sha256:$digest"]
  sse_keepalive_s: 5
  drain_grace_s: 0
  tls: {enabled: true, cert_file: "$tmp/cert.pem", key_file: "$tmp/key.pem"}
model:
  path: "$SHARED/models/stories260K.gguf"
inference:
  cache: {window_size: 256, global_cache_limit: 256MiB}
logging:
  level: warn
YAML
sed 's/window_size: 256/window_size: 0/' "$tmp/good.yaml" >"$tmp/bad.yaml"
cp "$tmp/good.yaml" "$tmp/sinkd.yaml"
"$BUILD/src/sinkd" --config "$tmp/sinkd.yaml" >"$tmp/sinkd.log" 2>&1 &
pid=$!
for _ in $(seq 1 200); do
	curl -sk -o /dev/null "https://127.0.0.1:$port/ready" && break
	sleep 0.1
done

python3 - "$pid" "$port" "$key" "$tmp" "$MINUTES" "$SAMPLE_S" "$RELOAD_S" "$CLIENTS" "$IDLE" \
	"$MAX_TOKENS" <<'PY'
import http.client, json, os, random, re, shutil, signal, socket, ssl, sys, threading, time
pid, port, key, tmp = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
minutes, sample_s, reload_s = float(sys.argv[5]), float(sys.argv[6]), float(sys.argv[7])
clients, idle, max_tokens = int(sys.argv[8]), int(sys.argv[9]), int(sys.argv[10])
ctx = ssl._create_unverified_context()
end = time.monotonic() + minutes * 60
status = {}
lock = threading.Lock()
def count(k):
    with lock:
        status[k] = status.get(k, 0) + 1
hdr = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}

def client(i):
    rnd = random.Random(i)
    conn = None
    sid = None
    while time.monotonic() < end:
        try:
            if conn is None:
                conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=60)
            kind = rnd.random()
            stream = rnd.random() < 0.7
            body = {"prompt": "Once upon a time", "max_tokens": rnd.randint(8, max_tokens),
                    "stream": stream, "temperature": 0.8, "seed": rnd.randint(0, 1 << 30)}
            path = "/v1/completions"
            if kind < 0.2:
                if sid is None:
                    conn.request("POST", "/v1/sessions", body="{}", headers=hdr)
                    r = conn.getresponse(); d = r.read(); count(r.status)
                    sid = json.loads(d)["id"] if r.status == 200 else None
                    continue
                path = "/v1/sessions/%s/append" % sid
                body = {"text": " and then", "generate": body}
            conn.request("POST", path, body=json.dumps(body), headers=hdr)
            r = conn.getresponse()
            if stream and r.status == 200 and rnd.random() < 0.1:
                r.read(200)  # leave mid-stream
                conn.close(); conn = None
                count("left")
                continue
            r.read()
            count(r.status)
            if path.startswith("/v1/sessions") and r.status == 404:
                sid = None
        except Exception as e:
            count(type(e).__name__)
            try:
                conn.close()
            except Exception:
                pass
            conn = None
            time.sleep(0.2)

def idler():
    socks = []
    while time.monotonic() < end:
        socks = [s for s in socks if s.fileno() != -1]
        while len(socks) < idle:
            try:
                s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=5))
                s.setblocking(False)
                socks.append(s)
            except Exception:
                count("idle_connect_error")
                break
        for s in socks:
            try:
                if s.recv(1) == b"":
                    s.close()
            except (BlockingIOError, ssl.SSLWantReadError):
                pass
            except Exception:
                s.close()
        time.sleep(1)
    for s in socks:
        s.close()

def reloader():
    n = 0
    while time.monotonic() < end:
        time.sleep(reload_s)
        n += 1
        shutil.copy(os.path.join(tmp, "bad.yaml" if n % 2 else "good.yaml"),
                    os.path.join(tmp, "sinkd.yaml"))
        os.kill(pid, signal.SIGHUP)
        count("reload")

def kv_reserved():
    c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    c.request("GET", "/metrics", headers=hdr)
    m = re.search(r"^sinkd_kv_bytes_reserved (\S+)", c.getresponse().read().decode(), re.M)
    c.close()
    return float(m.group(1)) if m else float("nan")

def sample(t0):
    st = open("/proc/%d/status" % pid).read()
    rss = int(re.search(r"VmRSS:\s+(\d+)", st).group(1)) / 1024.0
    threads = int(re.search(r"Threads:\s+(\d+)", st).group(1))
    fds = len(os.listdir("/proc/%d/fd" % pid))
    return ((time.monotonic() - t0) / 60.0, rss, fds, threads, kv_reserved() / 1048576.0)

workers = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
workers += [threading.Thread(target=idler, daemon=True), threading.Thread(target=reloader, daemon=True)]
for w in workers:
    w.start()
t0 = time.monotonic()
samples = [sample(t0)]
while time.monotonic() < end:
    time.sleep(min(sample_s, max(0.1, end - time.monotonic())))
    samples.append(sample(t0))
    s = samples[-1]
    print("t=%5.1f min  rss %7.1f MiB  fds %5d  threads %3d  kv %7.2f MiB" % s, flush=True)
for w in workers:
    w.join(timeout=70)

def slope(xs, ys):
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0

names = ["rss_mib", "fds", "threads", "kv_reserved_mib"]
# flat: the fitted change over the run is within this much (after warm-up)
tolerance = {"rss_mib": 16.0, "fds": 20.0, "threads": 1.0, "kv_reserved_mib": 8.0}
rest = samples[1:] if len(samples) > 2 else samples
report = {}
print("\n| metric | first | last | slope per minute | change fitted over the run | flat |")
print("| --- | --- | --- | --- | --- | --- |")
for k, name in enumerate(names, start=1):
    xs = [s[0] for s in rest]
    ys = [s[k] for s in rest]
    b = slope(xs, ys) if len(rest) > 1 else 0.0
    change = b * (xs[-1] - xs[0]) if len(xs) > 1 else 0.0
    flat = abs(change) <= tolerance[name]
    report[name] = {"first": ys[0], "last": ys[-1], "slope_per_min": b, "flat": flat}
    print("| %s | %.2f | %.2f | %+.3f | %+.2f | %s |" % (name, ys[0], ys[-1], b, change,
                                                         "yes" if flat else "NO"))
print("\nresults by status:", ", ".join("%s: %d" % (k, v) for k, v in sorted(status.items(), key=str)))
five = sum(v for k, v in status.items() if isinstance(k, int) and k >= 500 and k != 503)
print(json.dumps({"bench": "soak", "minutes": minutes, "samples": len(samples), "metrics": report,
                  "status": {str(k): v for k, v in status.items()}, "5xx_not_503": five}))
PY
