#!/usr/bin/env bash
# Hostile request bodies against the real daemon over HTTPS: every known
# field of completions, chat, sessions (create, PUT, append), tokenize and
# detokenize with every wrong type (a table: 400 naming the field in
# "param"); malformed JSON, bytes after the body, leading zeros, huge
# numbers, 100,000-deep nesting, invalid UTF-8 and NUL bytes (carried as
# text both ways); 160,000 token ids parsed in linear time while /health
# answers; limits.max_prompt_tokens under the default sliding window, for
# prompts, chat messages and session appends, changed by a reload.
set -u
. "$(dirname "$0")/server-lib.sh"

port=$(free_port)
write_config "$tmp/base.yaml" "$port"
# write_limits N: the config with limits.max_prompt_tokens N (0 = max_context_length).
write_limits() {
	{
		cat "$tmp/base.yaml"
		printf 'limits:\n  max_body_bytes: "4MiB"\n  max_tokens: 100000\n  max_prompt_tokens: %s\n' "$1"
	} >"$tmp/in.yaml"
}
write_limits 200000
start_daemon input "$tmp/in.yaml" --set inference.cache.window_size=1020
check "daemon ready" [ $? -eq 0 ]
input_pid=$pid
generation=1
reload_limit() { # N: rewrite, SIGHUP, wait for the next generation
	write_limits "$1"
	kill -HUP "$input_pid"
	generation=$((generation + 1))
	wait_metric sinkd_config_generation '==' "$generation"
}

# run_py PHASE: the Python half below, its "ok -" / "not ok -" lines counted as checks.
run_py() {
	local out
	out=$("$py" "$tmp/input.py" "$port" "$api_key" "$1" 2>&1)
	echo "$out"
	n_checks=$((n_checks + $(grep -c -e '^ok - ' -e '^not ok - ' <<<"$out")))
	fails=$((fails + $(grep -c '^not ok - ' <<<"$out")))
	grep -q '^phase done' <<<"$out" || { echo "not ok - python phase $1 did not finish"; fails=$((fails + 1)); }
}

cat >"$tmp/input.py" <<'PY'
import http.client, json, ssl, sys, threading, time

port, key, phase = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE


class Client:
    """One keep-alive HTTPS connection; reconnects when the server closes."""

    def __init__(self):
        self.c = None

    def req(self, method, path, body=b"", auth=True):
        if isinstance(body, str):
            body = body.encode()
        for attempt in range(2):
            try:
                if self.c is None:
                    self.c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
                hdr = {"Content-Type": "application/json"}
                if auth:
                    hdr["Authorization"] = "Bearer " + key
                self.c.request(method, path, body=body, headers=hdr)
                r = self.c.getresponse()
                data = r.read()
                if (r.getheader("Connection") or "").lower() == "close":
                    self.c.close()
                    self.c = None
                return r.status, data
            except (http.client.HTTPException, OSError):
                if self.c:
                    self.c.close()
                self.c = None
                if attempt:
                    raise


cl = Client()


def check(desc, cond, got=None):
    print(("ok - " if cond else "not ok - ") + desc)
    if not cond and got is not None:
        print("   got:", repr(got)[:400])


def error_of(status, data):
    """The OpenAI error object of a 400, or None."""
    try:
        e = json.loads(data)["error"]
        if status == 400 and all(k in e for k in ("message", "type", "param", "code")):
            return e
    except Exception:
        pass
    return None


def expect_400(desc, method, path, body, param, code=None, says=None):
    st, data = cl.req(method, path, body)
    e = error_of(st, data)
    ok = e is not None and e["param"] == param and (code is None or e["code"] == code)
    ok = ok and (says is None or all(s in e["message"] for s in says))
    check(desc, ok, (st, data[:300]))
    return e


def ok_json(method, path, body):
    st, data = cl.req(method, path, body)
    try:
        return st, json.loads(data)
    except Exception:
        return st, data


# ---- the table: every field, every wrong type ----------------------------------
STR, INT, FRAC, BOOL, NULL, ARR, OBJ = 1, 2, 4, 8, 16, 32, 64
NUM = INT | FRAC
samples = [('"x"', STR), ("1", INT), ("1.5", FRAC), ("true", BOOL), ("null", NULL),
           ("[]", ARR), ("{}", OBJ)]


def common(base, end, pre):
    f = [("model", STR | NULL), ("stream", BOOL | NULL), ("stream_options", OBJ | NULL),
         ("n", INT | NULL), ("max_tokens", INT | NULL), ("temperature", NUM | NULL),
         ("top_p", NUM | NULL), ("top_k", INT | NULL), ("min_p", NUM | NULL),
         ("repeat_penalty", NUM | NULL), ("presence_penalty", NUM | NULL),
         ("frequency_penalty", NUM | NULL), ("seed", INT | NULL), ("stop", STR | ARR | NULL),
         ("ignore_eos", BOOL | NULL)]
    rows = [(base + '"%s":%%s' % k + end, acc, pre + k) for k, acc in f]
    rows.append((base + '"stop":[%s]' + end, STR, pre + "stop"))
    rows.append((base + '"stream_options":{"include_usage":%s}' + end, BOOL | NULL,
                 pre + "stream_options.include_usage"))
    return rows


def table(sid):
    cmpl = '{"prompt":"x",'
    chat = '{"messages":[{"role":"user","content":"x"}],'
    app = '{"text":"x","generate":{'
    t = []
    for fmt, acc, param in common(cmpl, "}", "") + [
            (cmpl + '"logprobs":%s}', INT | NULL, "logprobs"),
            (cmpl + '"session_id":%s}', STR | NULL, "session_id"),
            ('{"prompt":%s}', STR, "prompt"), ('{"prompt":[%s]}', STR | INT | ARR, "prompt"),
            ('{"prompt":[1,%s]}', INT, "prompt"), ('{"prompt":[[%s]]}', INT, "prompt")]:
        t.append(("POST", "/v1/completions", fmt, acc, param))
    for fmt, acc, param in common(chat, "}", "") + [
            (chat + '"max_completion_tokens":%s}', INT | NULL, "max_completion_tokens"),
            (chat + '"logprobs":%s}', BOOL | NULL, "logprobs"),
            (chat + '"logprobs":true,"top_logprobs":%s}', INT | NULL, "top_logprobs"),
            (chat + '"session_id":%s}', STR | NULL, "session_id"),
            ('{"messages":%s}', 0, "messages"), ('{"messages":[%s]}', 0, "messages"),
            ('{"messages":[{"role":%s,"content":"x"}]}', 0, "messages"),
            ('{"messages":[{"role":"user","content":%s}]}', STR | ARR | NULL, "messages"),
            ('{"messages":[{"role":"user","content":[%s]}]}', 0, "messages"),
            ('{"messages":[{"role":"user","content":[{"type":%s,"text":"x"}]}]}', 0, "messages"),
            ('{"messages":[{"role":"user","content":[{"type":"text","text":%s}]}]}', STR,
             "messages")]:
        t.append(("POST", "/v1/chat/completions", fmt, acc, param))
    for path in ("/v1/sessions", "/v1/sessions/0123abcd"):
        for k in ("window_size", "sink_keep_count"):
            t.append(("POST" if path == "/v1/sessions" else "PUT", path, '{"%s":%%s}' % k,
                      INT | NULL, k))
    ap = "/v1/sessions/%s/append" % sid
    for fmt, acc, param in common(app, "}}", "generate.") + [
            ('{"generate":{},"text":%s}', STR | NULL, "text"),
            ('{"text":"x","revise_last_tokens":%s}', INT | NULL, "revise_last_tokens"),
            ('{"text":"x","generate":%s}', OBJ | NULL, "generate"),
            (app + '"logprobs":%s}}', INT | NULL, "generate.logprobs")]:
        t.append(("POST", ap, fmt, acc, param))
    for fmt, acc, param in [('{"content":%s}', STR, "content"),
                            ('{"content":"x","add_special":%s}', BOOL | NULL, "add_special"),
                            ('{"content":"x","parse_special":%s}', BOOL | NULL, "parse_special")]:
        t.append(("POST", "/tokenize", fmt, acc, param))
    for fmt in ('{"tokens":%s}', '{"tokens":[%s]}', '{"tokens":[1,%s]}'):
        t.append(("POST", "/detokenize", fmt, ARR if fmt == '{"tokens":%s}' else INT, "tokens"))
    return t


def phase_table():
    st, s = ok_json("POST", "/v1/sessions", "")
    check("a session for the append rows", st == 200, s)
    sid = s["id"] if st == 200 else "0"
    n, bad = 0, []
    t0 = time.monotonic()
    for method, path, fmt, acc, param in table(sid):
        for text, kind in samples:
            if kind & acc:
                continue
            body = fmt % text
            st, data = cl.req(method, path, body)
            e = error_of(st, data)
            n += 1
            leaf = param[len("generate."):] if param.startswith("generate.") else param
            if e is None or e["param"] != param or leaf not in e["message"]:
                bad.append((method, path, body, st, data[:200]))
    for b in bad[:10]:
        print("   wrong:", b)
    check("every field of every endpoint with every wrong type: 400 naming the field "
          "(%d requests, %d wrong, %.1f s)" % (n, len(bad), time.monotonic() - t0),
          n > 350 and not bad)
    cl.req("DELETE", "/v1/sessions/" + sid)


# ---- malformed JSON, huge numbers, nesting, UTF-8 ---------------------------------
def phase_json():
    C = "/v1/completions"
    cases = [
        ("bytes after the body", '{"prompt":"x","max_tokens":1} x', None, "after the JSON value"),
        ("a second object after the body", '{"prompt":"x","max_tokens":1}{}', None,
         "after the JSON value"),
        ("leading zero", '{"prompt":"x","max_tokens":01}', "max_tokens", "leading zero"),
        ("number too long", '{"prompt":"x","temperature":0.%s1}' % ("0" * 70), "temperature",
         "longer than 63"),
        ("1e400", '{"prompt":"x","max_tokens":1e400}', "max_tokens", "between"),
        ("-1e400", '{"prompt":"x","temperature":-1e400}', "temperature", "between"),
        ("1e20 for an int field", '{"prompt":"x","max_tokens":1e20}', "max_tokens", "between"),
        ("1e20 seed", '{"prompt":"x","seed":1e20}', "seed", "between"),
        ("-0 max_tokens", '{"prompt":"x","max_tokens":-0}', "max_tokens", "between"),
        ("NaN", '{"prompt":"x","temperature":NaN}', "temperature", "expected a value"),
        ("trailing comma", '{"prompt":"x",}', None, "string key"),
        ("single quotes", "{'prompt':'x'}", None, "string key"),
        ("unterminated", '{"prompt":"x', "prompt", "unterminated"),
        ("duplicate key", '{"prompt":"x","prompt":"y"}', "prompt", "more than once"),
        ("raw newline in a string", '{"prompt":"a\nb"}', "prompt", "control character 0x0A"),
        ("unpaired surrogate", '{"prompt":"a\\ud800"}', "prompt", "surrogate"),
    ]
    for desc, body, param, says in cases:
        expect_400("JSON: " + desc + " → 400 " + (param or "(no field)"), "POST", C, body,
                   param, None, [says])
    raw = [("invalid UTF-8 (C3 28)", b'{"prompt":"\xc3\x28"}'),
           ("overlong UTF-8 (C0 AF)", b'{"prompt":"\xc0\xaf"}'),
           ("UTF-16 surrogate in UTF-8 (ED A0 80)", b'{"prompt":"\xed\xa0\x80"}'),
           ("above U+10FFFF (F4 90 80 80)", b'{"prompt":"\xf4\x90\x80\x80"}'),
           ("lone FF byte", b'{"prompt":"\xff"}')]
    for desc, body in raw:
        expect_400("JSON: " + desc + " → 400 prompt", "POST", C, body, "prompt", "invalid_json",
                   ["invalid UTF-8"])
    expect_400("JSON: invalid UTF-8 in a chat message names messages[1].content", "POST",
               "/v1/chat/completions",
               b'{"messages":[{"role":"user","content":"x"},{"role":"user","content":"\xe2\x82"}]}',
               "messages", "invalid_json", ["messages[1].content"])
    expect_400("JSON: a byte-order mark → 400", "POST", C, b'\xef\xbb\xbf{"prompt":"x"}', None,
               "invalid_json", ["byte 0"])
    for name, path in (("completions", C), ("tokenize", "/tokenize"),
                       ("sessions", "/v1/sessions")):
        t0 = time.monotonic()
        e = expect_400("100,000-deep array to %s → clear 400" % name, "POST", path,
                       "[" * 100000 + "]" * 100000, None, "invalid_json",
                       ["nested deeper than 64 levels"])
        check("100,000-deep array to %s answered in under 2 s" % name,
              time.monotonic() - t0 < 2)
    expect_400("100,000-deep array inside a field names it", "POST", C,
               '{"prompt":"x","x":' + "[" * 100000 + "]" * 100000 + "}", "x", "invalid_json")
    st, _ = cl.req("GET", "/health")
    check("daemon alive after the hostile bodies", st == 200)


# ---- NUL bytes ------------------------------------------------------------------
ONCE = "Once\\u0000 upon a time"


def phase_nul():
    st, j = ok_json("POST", "/tokenize", '{"content":"%s","add_special":false}' % ONCE)
    check("tokenize: the NUL is a byte token and the text after it stays (5 tokens)",
          st == 200 and j["tokens"] == [403, 3, 407, 261, 378], j)
    st, plain = ok_json("POST", "/tokenize", '{"content":"Once upon a time","add_special":false}')
    check("tokenize without the NUL: 4 tokens", st == 200 and len(plain["tokens"]) == 4, plain)
    st, data = cl.req("POST", "/detokenize", '{"tokens":[403,3,407,261,378]}')
    j = json.loads(data) if st == 200 else {}
    check("detokenize: the 0x00 byte comes back as \\u0000 and the text after it stays",
          st == 200 and j.get("content") == "Once\x00 upon a time" and b"\\u0000" in data,
          data)
    st, j = ok_json("POST", "/v1/completions", '{"prompt":"%s","max_tokens":1}' % ONCE)
    check("completion: the whole prompt counts (BOS + 5 tokens)",
          st == 200 and j["usage"]["prompt_tokens"] == 6, j)
    chat = '{"messages":[{"role":"user","content":"%s"}],"max_tokens":1}'
    st, j = ok_json("POST", "/v1/chat/completions", chat % ONCE)
    st2, j2 = ok_json("POST", "/v1/chat/completions", chat % "Once upon a time")
    check("chat: the NUL adds one token, nothing after it is lost",
          st == 200 and st2 == 200 and
          j["usage"]["prompt_tokens"] == j2["usage"]["prompt_tokens"] + 1, (j, j2))
    st, s = ok_json("POST", "/v1/sessions", "")
    sid = s["id"]
    st, j = ok_json("POST", "/v1/sessions/%s/append" % sid, '{"text":"%s"}' % ONCE)
    check("session append: BOS + 5 tokens appended", st == 200 and j.get("tokens_appended") == 6, j)
    cl.req("DELETE", "/v1/sessions/" + sid)
    expect_400("a raw NUL byte in a string → 400 prompt", "POST", "/v1/completions",
               b'{"prompt":"a\x00b"}', "prompt", "invalid_json", ["control character 0x00"])
    expect_400("a NUL in model → 400 model, never cut", "POST", "/v1/completions",
               '{"prompt":"x","model":"stories260K\\u0000x"}', "model", "invalid_value",
               ["NUL"])
    expect_400("a NUL in a stop string → 400 stop", "POST", "/v1/completions",
               '{"prompt":"x","stop":["a\\u0000"]}', "stop", "invalid_value", ["NUL"])


# ---- 160,000 token ids ------------------------------------------------------------
IDS = '{"tokens":[' + ",".join(["400"] * 160000) + ']}'
PROMPT_IDS = '{"max_tokens":1,"prompt":[' + ",".join(["400"] * 160000) + ']}'


def phase_ids():
    t0 = time.monotonic()
    st, data = cl.req("POST", "/detokenize", IDS)
    dt = time.monotonic() - t0
    check("detokenize of 160,000 ids: 200 in %.2f s (< 5 s; was 90 s)" % dt,
          st == 200 and dt < 5, (st, data[:200]))
    results, threads = [], []

    def one():
        c = Client()
        t = time.monotonic()
        s, _ = c.req("POST", "/detokenize", IDS)
        results.append((s, time.monotonic() - t))

    for _ in range(4):
        threads.append(threading.Thread(target=one))
        threads[-1].start()
    worst = 0
    hc = Client()
    while any(t.is_alive() for t in threads):
        t = time.monotonic()
        s, _ = hc.req("GET", "/health", auth=False)
        worst = max(worst, time.monotonic() - t if s == 200 else 99)
        time.sleep(0.02)
    for t in threads:
        t.join()
    check("4 concurrent 160,000-id detokenize requests: all 200 within 5 s (%s)" %
          ", ".join("%.2f" % r[1] for r in results),
          len(results) == 4 and all(r[0] == 200 and r[1] < 5 for r in results), results)
    # The bound is the detokenize one: on 2 busy cores the client's own GIL
    # and JSON parsing add seconds; a stalled daemon took 90 s.
    check("/health answers meanwhile (slowest %.3f s, < 5 s)" % worst, worst < 5)


def phase_ids_over():
    t0 = time.monotonic()
    e = expect_400("completion with 160,000 ids over limits.max_prompt_tokens → 400",
                   "POST", "/v1/completions", PROMPT_IDS, "prompt", "context_length_exceeded",
                   ["160000", "limits.max_prompt_tokens", "32768"])
    check("… answered in %.2f s (< 5 s)" % (time.monotonic() - t0), time.monotonic() - t0 < 5)
    expect_400("detokenize with 160,000 ids over the limit → 400 tokens", "POST", "/detokenize",
               IDS, "tokens", "context_length_exceeded", ["160000", "32768"])


# ---- limits.max_prompt_tokens = 40 under sliding_window -----------------------------
def phase_limit():
    long_text = "Once upon a time " * 15
    st, j = ok_json("POST", "/tokenize", json.dumps({"content": long_text}))
    n = len(j["tokens"]) if st == 200 else -1
    expect_400("prompt of %d tokens over max_prompt_tokens 40 → 400 context_length_exceeded" % n,
               "POST", "/v1/completions", json.dumps({"prompt": long_text, "max_tokens": 1}),
               "prompt", "context_length_exceeded", ["has %d tokens" % n, "at most 40"])
    expect_400("chat over the limit → 400 naming messages", "POST", "/v1/chat/completions",
               json.dumps({"messages": [{"role": "user", "content": long_text}],
                           "max_tokens": 1}),
               "messages", "context_length_exceeded", ["limits.max_prompt_tokens"])
    st, j = ok_json("POST", "/v1/completions",
                    json.dumps({"prompt": "Once upon a time", "max_tokens": 2}))
    check("a prompt under the limit: 200", st == 200, j)
    st, s = ok_json("POST", "/v1/sessions", "")
    sid = s["id"]
    ap = "/v1/sessions/%s/append" % sid
    expect_400("session append over the limit → 400 naming text", "POST", ap,
               json.dumps({"text": long_text}), "text", "context_length_exceeded", ["at most 40"])
    expect_400("session append + generate over the limit → 400 naming text", "POST", ap,
               json.dumps({"text": long_text, "generate": {"max_tokens": 1, "stream": False}}),
               "text", "context_length_exceeded")
    # what one request may send, not what a stream may hold: 4 appends of 30 tokens
    total = 0
    for i in range(4):
        st, j = ok_json("POST", ap, json.dumps({"text": " once upon a time" * 7}))
        total += j.get("tokens_appended", 0) if st == 200 else 0
    st, info = ok_json("GET", "/v1/sessions/" + sid, "")
    check("a sliding-window stream holds more than max_prompt_tokens (%d tokens)" % total,
          st == 200 and info["tokens_seen"] == total and total > 100, info)
    cl.req("DELETE", "/v1/sessions/" + sid)


{"table": phase_table, "json": phase_json, "nul": phase_nul, "ids": phase_ids,
 "ids_over": phase_ids_over, "limit": phase_limit}[phase]()
print("phase done")
PY

# ---- every field, every wrong type; malformed bodies; NUL bytes --------------------
run_py table
run_py json
run_py nul

# ---- 160,000 ids (limit 200,000): linear parse, /health answers --------------------
run_py ids

# ---- reload to the default (0 = max_context_length 32768) ----------------------------
check "reload max_prompt_tokens 0: applied" reload_limit 0
run_py ids_over

# ---- reload to 40: prompts, chat, appends over the limit -----------------------------
check "reload max_prompt_tokens 40: applied" reload_limit 40
run_py limit
grep -q '"limits.max_prompt_tokens"' "$log"
check "the reload names limits.max_prompt_tokens in the log" [ $? -eq 0 ]

check "daemon still running" kill -0 "$input_pid"
stop_daemon "$input_pid"
check "clean stop" [ $? -eq 0 ]
finish
