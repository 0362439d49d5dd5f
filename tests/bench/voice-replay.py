#!/usr/bin/env python3
"""Voice-assistant replay driver for tests/bench/voice-replay.sh (Python 3
standard library only).  One run: N concurrent conversations against one
server, each a thread with its own keep-alive connection; prints one JSON
object (the run's figures) on stdout.  The script's header defines what is
measured; this file only carries it out.

  voice-replay.py plan   --base URL [--key K] --seed S --n N --utterances U
                         --sys-tokens T --out PLAN.json
  voice-replay.py run    --target sinkd|llama --mode session|plain|ahead
                         --base URL [--key K] --plan PLAN.json

The plan (system prompt, every burst of every utterance, revisions, pauses)
is made once from the seed with the server's /tokenize (sinkd and
llama-server answer it alike) and replayed unchanged against every server,
so every run sees the same words at the same times.
"""
import argparse
import http.client
import json
import random
import ssl
import sys
import threading
import time
import urllib.parse

REPLY_TOKENS = 30
WORDS = """the a and to of in is it you that he was for on are with as his they be at one
have this from or had by hot word but what some we can out other were all there when up use
your how said an each she which do their time if will way about many then them write would
like so these her long make thing see him two has look more day could go come did number
sound no most people my over know water than call first who may down side been now find any
new work part take get place made live where after back little only round man year came show
every good me give our under name very through just form sentence great think say help low
line differ turn cause much mean before move right boy old too same tell does set three want
air well also play small end put home read hand port large spell add even land here must big
high such follow act why ask men change went light kind off need house picture try us again
animal point mother world near build self earth father head stand own page should country
found answer school grow study still learn plant cover food sun four between state keep eye
never last let thought city tree cross farm hard start might story saw far sea draw left late
run while press close night real life few north open seem together next white children begin
got walk example ease paper group always music those both mark often letter until mile river
car feet care second book carry took science eat room friend began idea fish mountain stop
once base hear horse cut sure watch color face wood main enough plain girl usual young ready
above ever red list though feel talk bird soon body dog family direct pose leave song measure
door product black short numeral class wind question happen complete ship area half rock
order fire south problem piece told knew pass since top whole king space heard best hour better
true during hundred five remember step early hold west ground interest reach fast verb sing
listen six table travel less morning ten simple several vowel toward war lay against pattern
slow center love person money serve appear road map rain rule govern pull cold notice voice
unit power town fine certain fly fall lead cry dark machine note wait plan figure star box noun
field rest correct able pound done beauty drive stood contain front teach week final gave green
oh quick develop ocean warm free minute strong special mind behind clear tail produce fact
""".split()


# ---- HTTP -----------------------------------------------------------------

class Client:
    """One keep-alive connection to the server (reopened after a failure)."""

    def __init__(self, base, key, timeout=600):
        u = urllib.parse.urlsplit(base)
        self.https = u.scheme == "https"
        self.host, self.port = u.hostname, u.port
        self.key, self.timeout = key, timeout
        self.conn = None

    def _open(self):
        if self.https:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            return http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=ctx)
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def request(self, method, path, body=None):
        """The response, its status read; the caller reads the body."""
        data = json.dumps(body).encode() if body is not None else None
        hdr = {"Content-Type": "application/json"} if data is not None else {}
        if self.key:
            hdr["Authorization"] = "Bearer " + self.key
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = self._open()
            try:
                self.conn.request(method, path, body=data, headers=hdr)
                return self.conn.getresponse()
            except (http.client.HTTPException, OSError):
                self.close()
                if attempt:
                    raise
        raise OSError("unreachable")

    def call(self, method, path, body=None):
        """(status, parsed JSON or None)."""
        r = self.request(method, path, body)
        raw = r.read()
        if r.getheader("Connection", "").lower() == "close":
            self.close()
        try:
            return r.status, json.loads(raw) if raw else None
        except ValueError:
            return r.status, None

    def stream(self, path, body):
        """POST an SSE request: (status, [(time, text) per token event], text)."""
        t_send = time.monotonic()
        r = self.request("POST", path, body)
        if r.status != 200:
            raw = r.read()
            return r.status, [], raw.decode(errors="replace")[:300], t_send
        events, parts = [], []
        while True:
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                break
            now = time.monotonic()
            try:
                ev = json.loads(payload)
            except ValueError:
                continue
            for ch in ev.get("choices") or []:
                delta = ch.get("delta") or {}
                txt = ch.get("text", delta.get("content"))
                # a token whose text is not complete yet (a split UTF-8
                # character) comes as an empty event; a role or closing
                # event is no token
                if isinstance(txt, str) and (txt or (ch.get("finish_reason") is None and
                                                     "role" not in delta)):
                    events.append(now)
                    parts.append(txt)
        r.read()
        if r.getheader("Connection", "").lower() == "close":
            self.close()
        return 200, events, "".join(parts), t_send

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


# ---- the plan ---------------------------------------------------------------

def n_tokens(cl, text, special):
    st, j = cl.call("POST", "/tokenize", {"content": text, "add_special": special})
    if st != 200 or not j or "tokens" not in j:
        raise SystemExit("voice-replay: /tokenize answered %s %s" % (st, j))
    return len(j["tokens"])


def make_plan(a):
    cl = Client(a.base, a.key)
    rng = random.Random(a.seed)
    # each word's token count with its leading space, as a continuation
    cost = {w: n_tokens(cl, " " + w, False) for w in WORDS}
    words = [w for w in WORDS if cost[w] <= 2]
    # sentences are added while the prompt stays within sys_tokens
    sys_text, n_sys = "You are a voice assistant in a car.", 0
    while True:
        sentence = "%s %s." % (rng.choice(["Always", "Never", "Please", "Remember to"]),
                               " ".join(rng.choice(words) for _ in range(rng.randint(6, 14))))
        n = n_tokens(cl, sys_text + " " + sentence, True)
        if n > a.sys_tokens:
            break
        sys_text, n_sys = sys_text + " " + sentence, n
    convs = []
    for c in range(a.n):
        utts = []
        for u in range(a.utterances):
            utts.append(plan_utterance(rng, words, cost, u))
        convs.append({"id": "%08x%08x" % (a.seed & 0xffffffff, c),
                      "start_s": rng.uniform(0, 0.2), "utterances": utts})
    cl.close()
    return {"seed": a.seed, "system": sys_text, "system_tokens": n_sys,
            "n": a.n, "utterances": a.utterances, "conversations": convs}


def plan_utterance(rng, words, cost, index):
    """Bursts of 3-8 tokens every 100-300 ms; some bursts first revise the
    last 1-4 tokens (whole words) as an ASR corrects itself.  The last burst
    asks for the reply."""
    target = rng.randint(12, 36)
    held = []          # words of this utterance the server holds now
    bursts, at, sent = [], 0.0, 0
    while sent < target:
        revise, text = 0, ""
        if held and rng.random() < 0.35:
            k, tok = 0, 0
            while k < len(held) and tok + cost[held[-1 - k]] <= 4:
                tok += cost[held[-1 - k]]
                k += 1
            if k:
                k = rng.randint(1, k)
                revise = sum(cost[w] for w in held[-k:])
                fixed = [rng.choice(words) for _ in range(k)]
                del held[-k:]
                held += fixed
                text += "".join(" " + w for w in fixed)
        want, new = rng.randint(3, 8), []
        while want > 0 and sent < target:
            w = rng.choice(words)
            new.append(w)
            want -= cost[w]
            sent += cost[w]
        held += new
        text += "".join(" " + w for w in new)
        if not bursts:
            text = "\nUser:" + text
        bursts.append({"at_s": round(at, 3), "revise": revise, "text": text})
        at += rng.uniform(0.1, 0.3)
    bursts[-1]["text"] += "\nAssistant:"
    return {"bursts": bursts, "final_text": " ".join(held),
            "pause_s": round(rng.uniform(0.2, 0.6), 3) if index else 0.0}


# ---- one conversation ---------------------------------------------------------

def pct(xs, p):
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(-(-p * len(s) // 100)) - 1))]


def sleep_until(t):
    d = t - time.monotonic()
    if d > 0:
        time.sleep(d)


class Conversation(threading.Thread):
    def __init__(self, a, plan, conv, t_start, out):
        super().__init__(daemon=True)
        self.a, self.plan, self.conv, self.out = a, plan, conv, out
        self.t0 = t_start + conv["start_s"]
        self.cl = Client(a.base, a.key)

    def fail(self, what):
        self.out["errors"].append("%s: %s" % (self.conv["id"], what))

    def run(self):
        try:
            self.replay()
        except Exception as e:  # a failed conversation is an error, not a crash
            self.fail("%s %s" % (type(e).__name__, e))
        finally:
            self.cl.close()

    def open(self):
        p, sid = self.plan, self.conv["id"]
        if self.a.target == "sinkd":
            st, _ = self.cl.call("PUT", "/v1/sessions/" + sid)
            if st != 200:
                return self.fail("PUT session %d" % st)
            st, j = self.cl.call("POST", "/v1/sessions/%s/append" % sid,
                                 {"text": p["system"], "pin_prefix_tokens": p["system_tokens"]})
            if st != 200:
                return self.fail("opening append %d %s" % (st, j))
        elif self.a.mode == "ahead":
            body = {"messages": [{"role": "system", "content": p["system"]}],
                    "max_tokens": 1, "temperature": 0}
            body.update(self.extra())
            st, j = self.cl.call("POST", "/v1/chat/completions", body)
            if st != 200:
                return self.fail("system prompt ahead %d %s" % (st, j))
        return True

    def extra(self):
        return {"cache_prompt": True} if self.a.target == "llama" else {}

    def reply(self, utt, messages):
        """Sends the utterance's final request; (status, token times, text, send time)."""
        gen = {"max_tokens": REPLY_TOKENS, "temperature": 0, "ignore_eos": True, "stream": True}
        if self.a.target == "sinkd":
            last = utt["bursts"][-1]
            body = {"text": last["text"], "generate": gen}
            if last["revise"]:
                body["revise_last_tokens"] = last["revise"]
            return self.cl.stream("/v1/sessions/%s/append" % self.conv["id"], body)
        messages.append({"role": "user", "content": utt["final_text"]})
        body = dict(gen, messages=messages)
        body.update(self.extra())
        return self.cl.stream("/v1/chat/completions", body)

    def replay(self):
        sleep_until(self.t0)
        t_open = time.monotonic()
        if not self.open():
            return
        messages = [{"role": "system", "content": self.plan["system"]}]
        t_next = self.t0
        for u, utt in enumerate(self.conv["utterances"]):
            start = t_next + utt["pause_s"]
            if self.a.target == "sinkd":
                for b in utt["bursts"][:-1]:
                    sleep_until(start + b["at_s"])
                    body = {"text": b["text"]}
                    if b["revise"]:
                        body["revise_last_tokens"] = b["revise"]
                    st, j = self.cl.call("POST", "/v1/sessions/%s/append" % self.conv["id"], body)
                    if st != 200:
                        return self.fail("utterance %d burst %d %s" % (u, st, j))
            end = start + utt["bursts"][-1]["at_s"]
            sleep_until(end)
            st, times, text, _ = self.reply(utt, messages)
            if st != 200 or not times:
                return self.fail("utterance %d reply %d %s" % (u, st, text))
            messages.append({"role": "assistant", "content": text})
            o = self.out
            with o["lock"]:
                # a server may carry two tokens in one event (held back for
                # a stop string): counted, not an error
                o["other_length_replies"] += len(times) != REPLY_TOKENS
                if u == 0:
                    o["new_ttft"].append(times[0] - t_open)
                    o["first_after_speech"].append(times[0] - end)
                    o["speech1"].append(end - t_open)
                else:
                    o["utt_end"].append(times[0] - end)
                o["itl"].extend(times[i] - times[i - 1] for i in range(1, len(times)))
                o["replies"] += 1
            t_next = times[-1]


def sinkd_kv(a, plan):
    """Resident KV per session (GET /v1/sessions/{id}) and /metrics gauges."""
    cl = Client(a.base, a.key)
    res, rsv, shared = [], [], []
    for c in plan["conversations"]:
        st, j = cl.call("GET", "/v1/sessions/" + c["id"])
        if st == 200 and j:
            res.append(j.get("bytes_resident", 0))
            rsv.append(j.get("bytes_reserved", 0))
            if "shared_prefix_tokens" in j:
                shared.append(j["shared_prefix_tokens"])
    r = cl.request("GET", "/metrics")
    text = r.read().decode(errors="replace")
    m = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and (parts[0].startswith("sinkd_prefix_cache_") or
                                parts[0].startswith("sinkd_kv_bytes_")):
            m[parts[0]] = float(parts[1])
    for c in plan["conversations"]:
        cl.call("DELETE", "/v1/sessions/" + c["id"])
    cl.close()
    mean = lambda xs: sum(xs) / len(xs) if xs else None
    return {"bytes_resident_mean": mean(res), "bytes_reserved_mean": mean(rsv),
            "shared_prefix_tokens_min": min(shared) if shared else None,
            "prefix_cache_bytes": m.get("sinkd_prefix_cache_bytes"),
            "prefix_cache_shared_sessions": m.get("sinkd_prefix_cache_shared_sessions"),
            "prefix_cache_hits": m.get("sinkd_prefix_cache_hits_total"),
            "kv_bytes_resident": m.get("sinkd_kv_bytes_resident"),
            "kv_bytes_reserved": m.get("sinkd_kv_bytes_reserved")}


def warm_up(a, plan):
    """One conversation opened and closed before the timed ones: the system
    prompt has been seen once, as on a server that has been running."""
    cl = Client(a.base, a.key)
    gen = {"max_tokens": 1, "temperature": 0}
    if a.target == "sinkd":
        sid = "%08xffffffff" % (plan["seed"] & 0xffffffff)
        steps = [("PUT", "/v1/sessions/" + sid, None),
                 ("POST", "/v1/sessions/%s/append" % sid,
                  {"text": plan["system"], "pin_prefix_tokens": plan["system_tokens"]}),
                 ("POST", "/v1/sessions/%s/append" % sid, {"text": " Hello", "generate": gen}),
                 ("DELETE", "/v1/sessions/" + sid, None)]
    else:
        body = dict(gen, messages=[{"role": "system", "content": plan["system"]},
                                   {"role": "user", "content": "Hello"}])
        if a.target == "llama":
            body["cache_prompt"] = True
        steps = [("POST", "/v1/chat/completions", body)]
    for method, path, body in steps:
        st, j = cl.call(method, path, body)
        if st != 200:
            raise SystemExit("voice-replay: warm-up %s %s answered %d %s" % (method, path, st, j))
    cl.close()


def run(a):
    plan = json.load(open(a.plan))
    if a.warm:
        warm_up(a, plan)
    out = {"lock": threading.Lock(), "new_ttft": [], "first_after_speech": [], "speech1": [],
           "utt_end": [], "itl": [], "replies": 0, "other_length_replies": 0, "errors": []}
    t_start = time.monotonic() + 0.2
    threads = [Conversation(a, plan, c, t_start, out) for c in plan["conversations"]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t_start
    ms = lambda x: None if x is None else round(x * 1000, 1)
    r = {"target": a.target, "mode": a.mode, "warm": a.warm, "n": plan["n"], "utterances": plan["utterances"],
         "system_tokens": plan["system_tokens"], "replies": out["replies"],
         "other_length_replies": out["other_length_replies"],
         "wall_s": round(wall, 2), "errors": len(out["errors"]), "error_samples": out["errors"][:5]}
    for k in ("new_ttft", "first_after_speech", "speech1", "utt_end", "itl"):
        r[k + "_ms_p50"] = ms(pct(out[k], 50))
        r[k + "_ms_p99"] = ms(pct(out[k], 99))
    if a.target == "sinkd":
        r.update(sinkd_kv(a, plan))
    print(json.dumps(r))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["plan", "run"])
    ap.add_argument("--base", required=True)
    ap.add_argument("--key", default="")
    ap.add_argument("--seed", type=int, default=43)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--utterances", type=int, default=10)
    ap.add_argument("--sys-tokens", type=int, default=1000)
    ap.add_argument("--out")
    ap.add_argument("--plan")
    ap.add_argument("--target", choices=["sinkd", "llama", "openai"], default="sinkd")
    ap.add_argument("--mode", choices=["session", "plain", "ahead"], default="session")
    ap.add_argument("--warm", action="store_true", help="one conversation first, untimed")
    a = ap.parse_args()
    if a.what == "plan":
        json.dump(make_plan(a), open(a.out, "w"))
    else:
        run(a)


if __name__ == "__main__":
    sys.exit(main())
