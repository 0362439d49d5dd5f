#!/usr/bin/env bash
# A flood of JSON schemas too large to compile (issue 38) must not starve
# the server.  On the real daemon over TLS (stories260K, two HTTP threads):
# one long streaming completion runs from test-key-1 while a second key
# sends, from 8 senders at 3 requests/s each for about 10 s, the three
# schemas that used to cost a quarter to half a second of an HTTP thread
# per request: minItems 1000000, 10,000 properties, and the pattern
# ^[ab]*a[ab]{17}$ whose DFA blows up.  Each answer is a 400 naming the
# path at fault (the first compile of each schema fails within the compile
# budget and is cached; the rest are cache hits) or a 429 once over the
# key's compile rate; meanwhile the stream's worst gap between tokens stays
# under 0.2 s and /health, polled every 100 ms, under 100 ms.  Then a key
# that sends new schemas faster than its compile rate gets 429s that say
# when to retry, while the other key's schemas still compile.
# Under a sanitizer (or SINKD_TEST_TIME_SCALE > 1) the timing targets
# cannot hold: the figures are printed, not checked.  Nor are they when
# the 5 s before the flood already miss them by half (the machine is busy
# with other work): then the flood's figures would say nothing about it.
set -u
. "$(dirname "$0")/server-lib.sh"

key2=test-key-2
digest2=$(printf %s "$key2" | sha256sum | cut -d' ' -f1)
port=$(free_port)
write_config "$tmp/flood.yaml" "$port"
sed -i "s/api_keys: \[\"sha256:$api_digest\"\]/api_keys: [\"sha256:$api_digest\", \"sha256:$digest2\"]/" \
	"$tmp/flood.yaml"
cat >>"$tmp/flood.yaml" <<YAML
limits:
  max_tokens: 1000000
YAML
start_daemon flood "$tmp/flood.yaml" --set engine.threads=1
check "the daemon starts" [ $? -eq 0 ] || finish

timed=1
scale=${SINKD_TEST_TIME_SCALE:-1}
if grep -aqE '__asan_init|__tsan_init' "$bin"; then
	timed=0
	echo "# a sanitizer build: timing printed, not checked"
elif [ "$scale" != 1 ]; then
	timed=0
	echo "# SINKD_TEST_TIME_SCALE=$scale: timing printed, not checked"
fi

cat >"$tmp/flood.py" <<'PY'
import http.client, json, os, socket, ssl, sys, threading, time

PORT = int(os.environ["PORT"])
MODE = sys.argv[1]
OUT = os.environ["OUT"]
CTX = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # no CA store: loading it costs 20 ms
CTX.check_hostname = False
CTX.verify_mode = ssl.CERT_NONE


def conn():
    return http.client.HTTPSConnection("127.0.0.1", PORT, context=CTX, timeout=30)


def bad_schemas():
    props = {"p%d" % i: {"type": "string"} for i in range(10000)}
    return [
        ("minItems", {"type": "array", "items": {"type": "integer"}, "minItems": 1000000}),
        ("properties", {"type": "object", "properties": props}),
        ("pattern", {"type": "string", "pattern": "^[ab]*a[ab]{17}$"}),
    ]


def chat_body(schema):
    return json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                       "response_format": {"type": "json_schema",
                                           "json_schema": {"name": "s", "schema": schema}}})


def stream(seconds):
    """One long completion: the arrival time of every chunk that holds tokens."""
    s = socket.create_connection(("127.0.0.1", PORT))
    s = CTX.wrap_socket(s, server_hostname="localhost")
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 1000000,
                       "ignore_eos": True, "stream": True}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
              b"Authorization: Bearer test-key-1\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    s.settimeout(5)
    times, n_events, head = [], 0, b""
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        try:
            b = s.recv(65536)
        except (socket.timeout, OSError):
            break
        if not b:
            break
        now = time.monotonic()
        if len(head) < 64:
            head += b[:64]
        k = b.count(b"data: {")
        if k:
            times.append(now)
            n_events += k
    s.close()
    json.dump({"head": head.decode("latin-1")[:40], "times": times, "events": n_events},
              open(os.path.join(OUT, "stream.json"), "w"))


def health(seconds):
    """GET /health every 100 ms: (start time, latency) of each."""
    out, c = [], conn()
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        t0 = time.monotonic()
        try:
            c.request("GET", "/health")
            r = c.getresponse()
            r.read()
            ok = r.status == 200
        except (OSError, http.client.HTTPException):
            ok = False
            c.close()
            c = conn()
        t1 = time.monotonic()
        out.append((t0, t1 - t0, ok))
        time.sleep(max(0.0, 0.1 - (time.monotonic() - t0)))
    json.dump(out, open(os.path.join(OUT, "health.json"), "w"))


def flood(senders, per_s, seconds):
    """senders threads, per_s requests a second each, the bad schemas in turn."""
    bodies = [(name, chat_body(s).encode()) for name, s in bad_schemas()]
    hdr = {"Authorization": "Bearer test-key-2", "Content-Type": "application/json"}
    results, lock = [], threading.Lock()

    def sender(i):
        c = conn()
        t0 = time.monotonic()
        n = int(per_s * seconds)
        for k in range(n):
            wait = t0 + k / per_s - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            name, body = bodies[(i + k) % len(bodies)]
            ts = time.monotonic()
            try:
                c.request("POST", "/v1/chat/completions", body, hdr)
                r = c.getresponse()
                text = r.read().decode("utf-8", "replace")
                status, retry = r.status, r.getheader("Retry-After")
                if r.getheader("Connection", "").lower() == "close":
                    c.close()
                    c = conn()
            except (OSError, http.client.HTTPException) as e:
                status, text, retry = 0, repr(e), None
                c.close()
                c = conn()
            with lock:
                results.append({"schema": name, "status": status, "t": ts,
                                "s": time.monotonic() - ts, "body": text[:600],
                                "retry": retry})
        c.close()

    th = [threading.Thread(target=sender, args=(i,)) for i in range(senders)]
    t_start = time.monotonic()
    for t in th:
        t.start()
    for t in th:
        t.join()
    json.dump({"start": t_start, "end": time.monotonic(), "results": results},
              open(os.path.join(OUT, "flood.json"), "w"))


def new_schemas(key, n, blowup):
    """n schemas never seen before from key, one after another (blowup: too
    large to compile): their statuses and bodies."""
    c, out = conn(), []
    hdr = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
    for i in range(n):
        if blowup:
            body = chat_body({"type": "array", "minItems": 900000 + i})
        else:
            body = chat_body({"type": "string", "maxLength": 100 + i})
        c.request("POST", "/v1/chat/completions", body, hdr)
        r = c.getresponse()
        out.append({"status": r.status, "body": r.read().decode()[:600],
                    "retry": r.getheader("Retry-After")})
    json.dump(out, open(os.path.join(OUT, "new-%s.json" % key), "w"))


if MODE == "stream":
    stream(float(sys.argv[2]))
elif MODE == "health":
    health(float(sys.argv[2]))
elif MODE == "flood":
    flood(int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]))
elif MODE == "new":
    new_schemas(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "blowup")
PY
run_py() { PORT=$port OUT=$tmp "$py" "$tmp/flood.py" "$@"; }

# ---- the flood beside a stream and /health -------------------------------------------
run_py stream 18 &
stream_pid=$!
run_py health 17 &
health_pid=$!
sleep 6 # 5 s of the stream and /health without the flood: the baseline
run_py flood 8 3 10
wait "$stream_pid" "$health_pid"

"$py" - "$tmp" "$timed" <<'PY' >"$tmp/figures.txt"
import json, os, sys
tmp, timed = sys.argv[1], sys.argv[2] == "1"
st = json.load(open(os.path.join(tmp, "stream.json")))
he = json.load(open(os.path.join(tmp, "health.json")))
fl = json.load(open(os.path.join(tmp, "flood.json")))
lo, hi = fl["start"], fl["end"] + 0.5


def window(a, b):
    """The stream's chunk times, gaps and the /health polls between a and b."""
    t = [x for x in st["times"] if a - 0.5 <= x <= b]
    h = [(s, l, ok) for s, l, ok in he if a <= s <= b]
    return t, [y - x for x, y in zip(t, t[1:])], h


t, gaps, hl = window(lo, hi)
worst_gap = max(gaps) if gaps else float("inf")
covered = bool(t) and t[0] <= lo and t[-1] >= fl["end"]
worst_health = max(l for _, l, _ in hl) if hl else float("inf")
_, bgaps, bh = window(lo - 4.5, lo - 0.2)
base_gap = max(bgaps) if bgaps else float("inf")
base_health = max(l for _, l, _ in bh) if bh else float("inf")
print("baseline before the flood: worst token gap %.1f ms, worst /health %.1f ms"
      % (base_gap * 1e3, base_health * 1e3))
# Without the flood the daemon should be far inside the targets; when it is
# not, the machine is too busy (other builds, tests) for the timing to say
# anything about the flood.
busy = base_gap >= 0.1 or base_health >= 0.05
if busy and timed:
    print("# the machine is too busy to time the flood (see the baseline): "
          "timing printed, not checked")
res = fl["results"]
by = {}
for r in res:
    by.setdefault(r["schema"], {}).setdefault(str(r["status"]), 0)
    by[r["schema"]][str(r["status"])] += 1
worst_req = max(r["s"] for r in res) if res else 0
top = sorted(zip(gaps, t), reverse=True)[:3]
print("the longest gaps: " + ", ".join("%.1f ms at +%.2f s" % (g * 1e3, at - lo) for g, at in top))
for name in sorted(by):
    s = sorted(r["s"] for r in res if r["schema"] == name)
    print("answers for %s: median %.1f ms, worst %.1f ms" % (name, s[len(s) // 2] * 1e3, s[-1] * 1e3))
print("figures: worst token gap %.1f ms over %.1f s of flood (%d token chunks, %d events); "
      "worst /health %.1f ms over %d polls (all ok: %s); %d flood requests, slowest answer %.1f ms; "
      "statuses %s" % (worst_gap * 1e3, fl["end"] - fl["start"], len(t), st["events"],
                       worst_health * 1e3, len(hl), all(ok for _, _, ok in hl), len(res),
                       worst_req * 1e3, json.dumps(by, sort_keys=True)))
json.dump({"worst_gap_ms": round(worst_gap * 1e3, 1), "worst_health_ms": round(worst_health * 1e3, 1),
           "covered": covered, "health_ok": all(ok for _, _, ok in hl) and len(hl) >= 50,
           "timed": timed and not busy,
           "stream_200": st["head"].startswith("HTTP/1.1 200"), "n": len(res), "by": by,
           "slowest_ms": round(worst_req * 1e3, 1)},
          open(os.path.join(tmp, "figures.json"), "w"))
PY
cat "$tmp/figures.txt"

jcheck "the stream ran (200) through the whole flood" "$tmp/figures.json" \
	'j["stream_200"] and j["covered"]'
jcheck "/health answered 200 at every poll through the flood" "$tmp/figures.json" 'j["health_ok"]'
jcheck "all 240 flood requests were answered" "$tmp/figures.json" 'j["n"] == 240'
jcheck "every bad schema got 400 or 429, and each some 400s" "$tmp/figures.json" \
	'all(set(v) <= {"400", "429"} and v.get("400", 0) > 0 for v in j["by"].values()) and len(j["by"]) == 3'
for what in minItems properties pattern; do
	pcheck "the 400 for the $what schema says it is too large to compile and names \$.$what" \
		"any(r['schema'] == '$what' and r['status'] == 400 and 'too large or complex to compile' in r['body'] and 'at \$.$what' in r['body'] and 'response_format.json_schema.schema' in r['body'] for r in json.load(open(os.path.join(tmp, 'flood.json')))['results'])"
done
jcheck "the stream's worst gap between tokens is under 200 ms (when timed)" "$tmp/figures.json" \
	'not j["timed"] or j["worst_gap_ms"] < 200'
jcheck "/health's worst latency is under 100 ms (when timed)" "$tmp/figures.json" \
	'not j["timed"] or j["worst_health_ms"] < 100'

# ---- the compile rate --------------------------------------------------------------------
# test-key-2 sends 6 schemas too large to compile that it never sent
# before: each takes a whole compile budget, so past the burst (a budget,
# and what refills while it compiles) they get 429 saying when to retry;
# test-key-1's new schemas still compile.
run_py new test-key-2 6 blowup
run_py new test-key-1 3 small
jcheck "a key sending new schemas past its compile rate gets 429s after a burst" \
	"$tmp/new-test-key-2.json" \
	'j[0]["status"] == 400 and j[-1]["status"] == 429 and all(r["status"] in (400, 429) for r in j)'
jcheck "the 429 says the key is over its schema compile rate and when to retry" \
	"$tmp/new-test-key-2.json" \
	'"too many new JSON schemas" in j[-1]["body"] and "retry in" in j[-1]["body"] and "schema_compile_rate" in j[-1]["body"]'
jcheck "... with a Retry-After header" "$tmp/new-test-key-2.json" \
	'j[-1]["retry"] is not None and int(j[-1]["retry"]) >= 1'
jcheck "another key's new schemas still compile" "$tmp/new-test-key-1.json" \
	'all(r["status"] == 200 for r in j)'

check "the daemon is still up" kill -0 "$pid"
stop_daemon "$pid"
check "the daemon stops cleanly" [ $? -eq 0 ]
finish
