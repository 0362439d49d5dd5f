#!/usr/bin/env bash
# Shared pinned prefixes over HTTPS with the real daemon (stories260K): N
# sessions open at once with the same pinned prefix and each asks for a
# greedy reply to its own line: half as a voice client does (an opening
# append of the system text with pin_prefix_tokens, no reply, then the line
# with "generate"), half with one completion on the session (the prefix and
# the line, pin_prefix_tokens).  Daemon A has
# the prefix cache (inference.prefix_cache.max_bytes default), daemon B has
# it off (0).  A holds the prefix's K/V once: /metrics
# sinkd_prefix_cache_bytes is one entry's bytes and _shared_sessions is N,
# every session shows shared_prefix_tokens, the budget counts the shared
# rows once (B's reserved bytes minus A's are N-1 entries), the replies'
# usage.prompt_tokens_details.cached_tokens names the reused tokens; every
# reply (tokens and logprobs) equals B's.  A snapshot of a sharing session
# restores on a fresh daemon C (nothing cached) and continues with the same
# tokens and logprobs as the original, and restored on A it shares again.
set -u
. "$(dirname "$0")/server-lib.sh"

N=${PREFIX_SESSIONS:-40}
geometry=(--set inference.cache.window_size=96 --set inference.cache.sink_keep_count=4
	--set inference.cache.max_pinned_tokens=80 --set inference.attention.dtype=float32
	--set limits.max_tokens=64 --set scheduler.max_queue=256)
port_a=$(free_port)
port_b=$(free_port)
port_c=$(free_port)
write_config "$tmp/a.yaml" "$port_a"
write_config "$tmp/b.yaml" "$port_b"
write_config "$tmp/c.yaml" "$port_c"
start_daemon shared "$tmp/a.yaml" "${geometry[@]}"
check "daemon A (prefix cache on) ready" [ $? -eq 0 ]
pid_a=$pid
base_a=$base
start_daemon unshared "$tmp/b.yaml" "${geometry[@]}" --set inference.prefix_cache.max_bytes=0
check "daemon B (prefix cache off) ready" [ $? -eq 0 ]
base_b=$base
start_daemon fresh "$tmp/c.yaml" "${geometry[@]}"
check "daemon C (fresh, for the restore) ready" [ $? -eq 0 ]
base_c=$base

system='Lily and Tom are friends. They like to play in the park with a big red ball. When it rains they read books about the sea and draw fish.'

# run_sessions BASE NAME: N sessions at once, each: PUT, the opening append
# (system text pinned, no reply), then its own line with an 8-token greedy
# reply; then every session's GET and /metrics.  $tmp/NAME.json.
run_sessions() {
	"$py" - "$1" "$api_key" "$N" "$system" "$tmp/$2.json" <<'PY'
import json, sys, threading
import https_json
base, key, n, system, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
call = lambda m, p, b=None: https_json.call(base, key, m, p, b)
st, j = call("POST", "/tokenize", {"content": system, "add_special": True})
n_pin = len(j["tokens"])
res = [None] * n
names = ["Tom", "Lily", "Ben", "Sue", "Max"]
lines = ["saw a cat.", "was sad.", "ran home", "ate a big cake.", "said", "had a dog named",
         "found a box. In the box", "went to the"]

gen = {"max_tokens": 8, "temperature": 0, "logprobs": 0, "ignore_eos": True}

def conv(i):
    sid = "%04x" % (0x100 + i)
    line = " %s %s" % (names[i % len(names)], lines[i % len(lines)])
    r = {"id": sid, "status": [], "voice": i % 2 == 0}
    st, _ = call("PUT", "/v1/sessions/" + sid)
    r["status"].append(st)
    if r["voice"]:  # the opening append, then the line with a reply
        st, _ = call("POST", "/v1/sessions/%s/append" % sid, {"text": system, "pin_prefix_tokens": n_pin})
        r["status"].append(st)
        st, j = call("POST", "/v1/sessions/%s/append" % sid, {"text": line, "generate": gen})
    else:  # one completion on the session: the prefix and the line
        st, j = call("POST", "/v1/completions", dict(gen, session_id=sid, prompt=system + line,
                                                     pin_prefix_tokens=n_pin))
        r["status"].append(200)
    r["status"].append(st)
    if st == 200:
        c = j["choices"][0]
        r.update(text=c["text"], tokens=c["logprobs"]["tokens"], lp=c["logprobs"]["token_logprobs"],
                 usage=j.get("usage", {}))
    res[i] = r

ts = [threading.Thread(target=conv, args=(i,)) for i in range(n)]
for t in ts:
    t.start()
for t in ts:
    t.join()
for r in res:
    st, j = call("GET", "/v1/sessions/" + r["id"])
    r["info"] = j
st, raw = https_json.call_raw(base, key, "GET", "/metrics")
metrics = {}
for line in raw.decode().splitlines():
    p = line.split()
    if len(p) == 2 and not line.startswith("#"):
        metrics[p[0]] = float(p[1])
json.dump({"n_pin": n_pin, "sessions": res, "metrics": metrics}, open(out, "w"))
PY
}
run_sessions "$base_a" shared
check "A: $N sessions ran" test -s "$tmp/shared.json"
run_sessions "$base_b" unshared
check "B: $N sessions ran" test -s "$tmp/unshared.json"

A="json.load(open(tmp + '/shared.json'))"
B="json.load(open(tmp + '/unshared.json'))"
pcheck "the pinned prefix is 20..80 tokens" "20 <= $A['n_pin'] <= 80"
pcheck "A: every request of every session 200" "all(r['status'] == [200, 200, 200] for r in $A['sessions'])"
pcheck "B: every request of every session 200" "all(r['status'] == [200, 200, 200] for r in $B['sessions'])"
# Sessions that run at once are batched as they come, and a batch's shape
# moves the last float bits of a logprob (B against itself varies so too),
# so logprobs compare within 1e-4, the tokens exactly.
pcheck "greedy replies with the prefix shared == computed per session ($N sessions: tokens, logprobs within 1e-4)" \
	"all(a['tokens'] == b['tokens'] and max(abs(x - y) for x, y in zip(a['lp'], b['lp'])) < 1e-4 for a, b in zip($A['sessions'], $B['sessions']))"
pcheck "… and the sessions' replies differ among themselves (their lines differ)" \
	"len({tuple(r['tokens']) for r in $A['sessions']}) > 1"
pcheck "A: one prefix entry" "$A['metrics'].get('sinkd_prefix_cache_entries') == 1"
pcheck "A: sinkd_prefix_cache_shared_sessions == $N" "$A['metrics'].get('sinkd_prefix_cache_shared_sessions') == $N"
pcheck "A: sinkd_prefix_cache_bytes > 0" "$A['metrics'].get('sinkd_prefix_cache_bytes', 0) > 0"
pcheck "A: hits >= N-1" "$A['metrics'].get('sinkd_prefix_cache_hits_total', 0) >= $N - 1"
pcheck "A: tokens reused >= (N-1) x the prefix (the voice openings' included)" \
	"$A['metrics'].get('sinkd_prefix_cache_tokens_reused_total', 0) >= ($N - 1) * $A['n_pin']"
pcheck "A: the budget counts the prefix once (B reserved - A reserved == (N-1) x one entry)" \
	"$B['metrics']['sinkd_kv_bytes_reserved'] - $A['metrics']['sinkd_kv_bytes_reserved'] == ($N - 1) * $A['metrics']['sinkd_prefix_cache_bytes']"
pcheck "A: each session's reservation is B's less one entry" \
	"all(b['info']['bytes_reserved'] - a['info']['bytes_reserved'] == $A['metrics']['sinkd_prefix_cache_bytes'] for a, b in zip($A['sessions'], $B['sessions']))"
pcheck "A: every session shows shared_prefix_tokens == the prefix" \
	"all(r['info'].get('shared_prefix_tokens') == $A['n_pin'] and r['info']['pinned_tokens'] == $A['n_pin'] for r in $A['sessions'])"
pcheck "A: usage cached_tokens is filled, at most the prompt's tokens" \
	"all(0 <= r['usage']['prompt_tokens_details']['cached_tokens'] <= r['usage']['prompt_tokens'] for r in $A['sessions'])"
pcheck "A: sessions whose first request holds the prefix: cached_tokens is the prefix (all but at most the one that computed it)" \
	"sum(r['usage']['prompt_tokens_details']['cached_tokens'] == $A['n_pin'] for r in $A['sessions'] if not r['voice']) >= $N // 2 - 1"
pcheck "B: nothing cached (metrics 0, cached_tokens 0, shared_prefix_tokens 0)" \
	"$B['metrics'].get('sinkd_prefix_cache_bytes') == 0 and all(r['usage']['prompt_tokens_details']['cached_tokens'] == 0 and r['info'].get('shared_prefix_tokens') == 0 for r in $B['sessions'])"

lp() { printf "json.load(open(tmp + '/%s'))['choices'][0]['logprobs']" "$1"; }

# One-shot completions with the same pinned prefix: served from the cache on
# A (cached_tokens), the same tokens as B.
n_pin=$("$py" -c "import json; print(json.load(open('$tmp/shared.json'))['n_pin'])" 2>/dev/null || echo 0)
oneshot="{\"prompt\":\"$system Then\",\"pin_prefix_tokens\":$n_pin,\"max_tokens\":6,\"temperature\":0,\"logprobs\":0,\"ignore_eos\":true}"
base=$base_a
check "A: one-shot completion with the pinned prefix 200" [ "$(http POST /v1/completions "${auth[@]}" -d "$oneshot")" = 200 ]
cp "$tmp/body" "$tmp/oneshot-a.json"
jcheck "… usage.prompt_tokens_details.cached_tokens == $n_pin" "$tmp/oneshot-a.json" "j['usage']['prompt_tokens_details']['cached_tokens'] == $n_pin"
base=$base_b
check "B: the same completion 200" [ "$(http POST /v1/completions "${auth[@]}" -d "$oneshot")" = 200 ]
cp "$tmp/body" "$tmp/oneshot-b.json"
pcheck "… the same tokens and logprobs as A" "$(lp oneshot-a.json) == $(lp oneshot-b.json)"

# A snapshot of a sharing session carries the shared rows: it restores on a
# fresh daemon and continues exactly as the original.
more='{"text":" Then","generate":{"max_tokens":8,"temperature":0,"logprobs":0,"ignore_eos":true}}'
base=$base_a
check "A: snapshot of a sharing session 200" [ "$(curl -sk -o "$tmp/s.snap" -w '%{http_code}' "${auth[@]}" "$base/v1/sessions/0101/snapshot")" = 200 ]
check "A: restore it under a new id 200" [ "$(http POST '/v1/sessions/restore?id=0a01' "${auth[@]}" --data-binary "@$tmp/s.snap")" = 200 ]
check "A: the original continues 200" [ "$(http POST /v1/sessions/0101/append "${auth[@]}" -d "$more")" = 200 ]
cp "$tmp/body" "$tmp/cont-orig.json"
check "A: the restored copy continues 200" [ "$(http POST /v1/sessions/0a01/append "${auth[@]}" -d "$more")" = 200 ]
cp "$tmp/body" "$tmp/cont-a.json"
http GET /v1/sessions/0a01 "${auth[@]}" >/dev/null
jcheck "A: the restored copy shares the cached prefix again" "$tmp/body" "j.get('shared_prefix_tokens') == $n_pin"
base=$base_c
check "C: restore on a daemon with nothing cached 200" [ "$(http POST '/v1/sessions/restore?id=0c01' "${auth[@]}" --data-binary "@$tmp/s.snap")" = 200 ]
check "C: it continues 200" [ "$(http POST /v1/sessions/0c01/append "${auth[@]}" -d "$more")" = 200 ]
cp "$tmp/body" "$tmp/cont-c.json"
http GET /v1/sessions/0c01 "${auth[@]}" >/dev/null
jcheck "C: the restored session holds the pinned prefix (own copy)" "$tmp/body" "j['pinned_tokens'] == $n_pin and j['tiers']['sink'] == $n_pin"
pcheck "restored on C == the original on A (8 tokens and logprobs)" "$(lp cont-c.json) == $(lp cont-orig.json) and len($(lp cont-c.json)['tokens']) == 8"
pcheck "restored on A == the original on A" "$(lp cont-a.json) == $(lp cont-orig.json)"

check "daemon A still running" kill -0 "$pid_a"
finish
