#!/usr/bin/env bash
# Chat with session_id as OpenAI-style clients use it: each turn re-sends the
# whole conversation.  Over 5 turns the session holds each message once:
# its tokens_seen equals that of a session fed only the new user message
# each turn (the replies are generated into the session), and its replies
# are the same (greedy; every other turn streamed).  An edited earlier turn that
# is still within the revision history is revised in; one that is not gets
# 409 naming the message; a request of nothing new gets 400.
set -u
. "$(dirname "$0")/server-lib.sh"

write_config "$tmp/chat.yaml" "$(free_port)"
start_daemon chat "$tmp/chat.yaml" --set server.drain_grace_s=0
check "daemon ready" [ $? -eq 0 ]

"$py" - "$base" "$api_key" >"$tmp/resend.json" <<'PY'
import json, sys
import https_json
base, key = sys.argv[1], sys.argv[2]
def call(method, path, body=None):
    return https_json.call(base, key, method, path, body)
def chat(sid, messages, stream=False):
    body = {"session_id": sid, "messages": messages, "max_tokens": 6, "temperature": 0}
    if not stream:
        return call("POST", "/v1/chat/completions", body)
    body["stream"] = True
    text = ""
    with https_json.open_stream(base, key, "/v1/chat/completions", body) as r:
        for line in r.read().decode().split("\n"):
            if line.startswith("data: {"):
                d = json.loads(line[6:])
                for c in d.get("choices", []):
                    text += (c.get("delta") or {}).get("content") or ""
    return 200, {"choices": [{"message": {"role": "assistant", "content": text}}]}
users = ["Once upon a time", "Then the dog ran", "Lily saw a cat", "They played", "The end came"]
out = {}
for sid in ("a1", "b1"):
    call("PUT", f"/v1/sessions/{sid}", {})
history, replies, statuses = [{"role": "system", "content": "Tell a story."}], [], []
new = list(history)
for t, u in enumerate(users):
    history.append({"role": "user", "content": u})
    new.append({"role": "user", "content": u})
    st_a, ja = chat("a1", history, stream=(t % 2 == 1))   # the whole conversation
    st_b, jb = chat("b1", new)                           # only what is new
    statuses += [st_a, st_b]
    ra = ja["choices"][0]["message"]["content"] if st_a == 200 else None
    rb = jb["choices"][0]["message"]["content"] if st_b == 200 else None
    replies.append([ra, rb])
    history.append({"role": "assistant", "content": ra})
    new = []  # the reply is in the session already: next turn, only the user's message
out["statuses"] = statuses
out["replies"] = replies
out["a"] = call("GET", "/v1/sessions/a1")[1]
out["b"] = call("GET", "/v1/sessions/b1")[1]
# nothing new
out["again"] = chat("a1", history)
# the last user message edited: its request is within the revision history
edited = history[:-2] + [{"role": "user", "content": "They slept"}]
out["edit_recent"] = chat("a1", edited)
out["a_after_edit"] = call("GET", "/v1/sessions/a1")[1]
# the first user message edited: long gone from what can be revised
old = [history[0], {"role": "user", "content": "A different start"}] + history[2:]
out["edit_old"] = chat("a1", old)
print(json.dumps(out))
PY
jcheck "every turn 200" "$tmp/resend.json" 'all(s == 200 for s in j["statuses"])'
jcheck "the same replies whether the whole conversation or only the new messages are sent" "$tmp/resend.json" \
	'all(a == b and a is not None for a, b in j["replies"])'
jcheck "the session holds each message once: tokens_seen as a session fed only the new ones" "$tmp/resend.json" \
	'j["a"]["tokens_seen"] == j["b"]["tokens_seen"] and j["a"]["tokens_seen"] > 0'
jcheck "nothing new: 400 naming messages" "$tmp/resend.json" \
	'j["again"][0] == 400 and j["again"][1]["error"]["param"] == "messages"'
jcheck "an edited last turn is revised in (200)" "$tmp/resend.json" 'j["edit_recent"][0] == 200'
jcheck "... and the session does not grow by the whole conversation" "$tmp/resend.json" \
	'j["a_after_edit"]["tokens_seen"] < j["a"]["tokens_seen"] + 40'
jcheck "an edited first turn past the revision history: 409 naming messages[1]" "$tmp/resend.json" \
	'j["edit_old"][0] == 409 and "messages[1]" in j["edit_old"][1]["error"]["message"]'
stop_daemon "$pid"
check "drains, exit 0" [ $? -eq 0 ]
finish
