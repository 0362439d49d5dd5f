#!/usr/bin/env bash
# sinkd's logits against llama.cpp's on the same synthetic GGUF files, for
# every architecture sinkd-mkmodel writes (run by hand, never part of the
# suite; CI does not build llama.cpp, it runs the arch-logits test against
# the logits this script stores).
#
#   tests/bench/arch-logits.sh LLAMA_CPP_BUILD
#
# LLAMA_CPP_BUILD: the directory tests/bench/llamacpp-build.sh built into
# (bin/llamacpp-logits, BUILD-INFO).
#
# For each row of `sinkd-mkmodel --list-archs` and each RoPE variant (plain;
# rope_freqs.weight with llama3-like factors 1..8; rope.scaling.type linear
# by 4; yarn by 4 over 256 original positions; longrope's long and short
# factor sets with partial rotary; model sliding-window layers over 32
# tokens (gemma2, gemma3); a variant the row's mkmodel refuses is
# left out), a model of SHAPE in F32, Q8_0 and Q4_K (the mixture-of-experts
# rows gpt-oss and qwen3moe: 8 experts of which 2 per token, the variants
# plain, yarn and swa32, in F32, Q8_0 and MXFP4: experts MXFP4, the other
# matrices Q8_0), and three prompts of 50, 160 and 300 token ids (fixed:
# an LCG from the prompt's seed): llama.cpp's last-position logits and 8
# greedy tokens (llamacpp-logits) against sinkd's (sinkd-logits: strategy
# full, F32 K/V) on the CPU backend and on the CUDA host emulation (where the
# build has tests/sinkd-logits-emu).  Prints a table (model, type, prompt,
# backend, max |diff| / max |logit|, greedy tokens equal) and one JSON line;
# exits 1 when a row is over its bound: 1e-3 for F32, 0.04 for Q8_0, Q4_K
# and MXFP4 (the bound of the block-type logits test, test-model.c).  A
# variant sinkd refuses by name (RoPE scaling on gemma2's sliding layers, say) is listed
# as refused and gets no reference file.
#
# It also writes the reference files of the arch-logits test into REFS
# (default tests/data/arch-logits): each F32 model and the plain llama in
# Q8_0 and Q4_K and the plain mixture-of-experts rows in every type, with
# the mkmodel arguments that make the file, the prompts, llama.cpp's logits
# (7 significant digits) and greedy tokens.  With ARCHS set, only those
# rows' reference files are replaced.
#
# Environment: BUILD (sinkd build dir, default build), EMU (1: also the CUDA
# emulation when built; 0: not), REFS (reference folder; empty: write none),
# THREADS (llama.cpp's, default 2), ARCHS (the rows to run, default every
# row of --list-archs).
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 LLAMA_CPP_BUILD" >&2; exit 2; }
LLAMA_DIR=$(cd "$1" && pwd)
LLAMA=$LLAMA_DIR/bin/llamacpp-logits
[ -x "$LLAMA" ] || { echo "arch-logits: no $LLAMA; run tests/bench/llamacpp-build.sh $1" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
EMU=${EMU:-1}
REFS=${REFS-$ROOT/tests/data/arch-logits}
THREADS=${THREADS:-2}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
log() { echo "arch-logits: $*" >&2; }

SHAPE="--dim 256 --layers 2 --heads 4 --kv-heads 2 --ffn 512 --vocab-size 512 --seed 41"
# longrope (phi3): 48 of 64 dims turn, both factor sets and an attention
# factor; the long set where both llama.cpp's context and sinkd's
# max_context_length exceed the original 64, the short one within 4096
LONGROPE="--rope-dim 48 --rope-long 1,1.5,2,3,4,6,8,12 --rope-short 1,1,1.1,1.25,1.5,2 --rope-attn-factor 1.19"
VARIANTS=(plain "rope_freqs:--rope-freqs 1,1,1,1,1,1,1,1,1.5,2,3,4,6,8" "linear:--rope-scaling linear:4"
	"yarn:--rope-scaling yarn:4:256" "swa32:--sliding-window 32"
	"longrope:$LONGROPE --rope-orig-ctx 64" "longrope_short:$LONGROPE --rope-orig-ctx 4096")
TYPES="f32 q8_0 q4_k"
# mixture-of-experts rows: their shape, variants and types
MOE_ARCHS=" gpt-oss qwen3moe "
MOE_SHAPE="--experts 8 --experts-used 2 --expert-ffn 128"
MOE_VARIANTS=(plain "yarn:--rope-scaling yarn:4:256" "swa32:--sliding-window 32")
MOE_TYPES="f32 q8_0 mxfp4"
PROMPTS="1:50 2:160 3:300"
GREEDY=8

ninja -C "$BUILD" src/tools/sinkd-mkmodel tests/sinkd-logits >/dev/null
MK=$BUILD/src/tools/sinkd-mkmodel
BACKENDS=("cpu:$BUILD/tests/sinkd-logits")
if [ "$EMU" = 1 ] && ninja -C "$BUILD" -t targets all 2>/dev/null | grep '^tests/sinkd-logits-emu:' >/dev/null; then
	ninja -C "$BUILD" tests/sinkd-logits-emu >/dev/null
	BACKENDS+=("cuda-emu:$BUILD/tests/sinkd-logits-emu")
fi
INFO=$(head -1 "$LLAMA_DIR/BUILD-INFO")
log "$INFO; sinkd $(git -C "$ROOT" rev-parse --short HEAD); backends: ${BACKENDS[*]%%:*}"

# Prompt p: n ids from a 64-bit LCG seeded with p (the top bits, mod n_vocab).
prompt() {
	python3 -c '
import sys
seed, n, v = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
x, out = seed * 0x9E3779B97F4A7C15 % 2**64, []
for _ in range(n):
    x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
    out.append(str((x >> 33) % v))
print(",".join(out))' "$@"
}

ROWS=$TMP/rows.jsonl
: >"$ROWS"
for arch in ${ARCHS:-$("$MK" --list-archs)}; do
	variants=("${VARIANTS[@]}") types=$TYPES shape=$SHAPE
	if [[ $MOE_ARCHS == *" $arch "* ]]; then
		variants=("${MOE_VARIANTS[@]}") types=$MOE_TYPES shape="$SHAPE $MOE_SHAPE"
	fi
	for v in "${variants[@]}"; do
		vname=${v%%:*}
		vflags=""
		[ "$vname" != "$v" ] && vflags=${v#*:}
		for type in $types; do
			name=$arch-$vname-$type
			args="--arch $arch $shape $vflags --type $type"
			# shellcheck disable=SC2086
			if ! "$MK" --out "$TMP/$name.gguf" $args >"$TMP/mk.txt" 2>&1; then
				log "$name: sinkd-mkmodel refuses it ($(head -1 "$TMP/mk.txt")); left out"
				continue
			fi
			for pr in $PROMPTS; do
				seed=${pr%%:*}
				toks=$(prompt "$seed" "${pr#*:}" 512)
				if ! "$LLAMA" -m "$TMP/$name.gguf" --tokens "$toks" --greedy $GREEDY \
					--threads "$THREADS" >"$TMP/ref.json" 2>"$TMP/ref.err"; then
					log "$name: llama.cpp fails: $(tail -1 "$TMP/ref.err")"
					echo "{\"model\":\"$name\",\"arch\":\"$arch\",\"type\":\"$type\",\"prompt\":$seed,\"backend\":\"llama.cpp\",\"error\":true}" >>"$ROWS"
					continue
				fi
				cp "$TMP/ref.json" "$TMP/$name.p$seed.ref.json"
				echo "$toks" >"$TMP/$name.p$seed.tokens"
				echo "$args" >"$TMP/$name.args"
				for b in "${BACKENDS[@]}"; do
					bname=${b%%:*}
					if ! "${b#*:}" -m "$TMP/$name.gguf" --tokens "$toks" --greedy $GREEDY \
						>"$TMP/got.json" 2>"$TMP/got.err"; then
						log "$name $bname: sinkd fails: $(tail -1 "$TMP/got.err")"
						echo '{}' >"$TMP/got.json"
						# a load refused by name (a variant sinkd does not implement
						# for the row) is reported as such, not as a wrong result
						if grep -q "not implemented\|not supported\|is refused" "$TMP/got.err"; then
							python3 -c 'import json,sys; print(json.dumps({"refused": sys.argv[1]}))' \
								"$(tail -1 "$TMP/got.err")" >"$TMP/got.json"
							touch "$TMP/$name.refused"
						fi
					fi
					python3 - "$TMP/ref.json" "$TMP/got.json" "$name" "$arch" "$type" "$seed" \
						"${pr#*:}" "$bname" >>"$ROWS" <<'EOF'
import json, sys
ref, got = (json.load(open(p)) for p in sys.argv[1:3])
name, arch, typ, seed, n, backend = sys.argv[3:9]
row = {"model": name, "arch": arch, "type": typ, "prompt": int(seed), "tokens": int(n),
       "backend": backend}
if "refused" in got:
    row["refused"] = got["refused"]
elif "logits" not in got or len(got["logits"]) != len(ref["logits"]):
    row["error"] = True
else:
    scale = max(abs(x) for x in ref["logits"])
    row["rel_diff"] = max(abs(a - b) for a, b in zip(ref["logits"], got["logits"])) / scale
    row["max_logit"] = scale
    row["greedy_equal"] = got["greedy"] == ref["greedy"]
row["bound"] = 1e-3 if typ == "f32" else 0.04
row["ok"] = bool(row.get("refused")) or (not row.get("error") and row["rel_diff"] <= row["bound"])
print(json.dumps(row))
EOF
				done
			done
		done
	done
done

# ---- reference files for the arch-logits test
if [ -n "$REFS" ]; then
	mkdir -p "$REFS"
	if [ -n "${ARCHS:-}" ]; then
		for arch in $ARCHS; do rm -f "$REFS/$arch"-*.json; done
	else
		rm -f "$REFS"/*.json
	fi
	for f in "$TMP"/*.args; do
		name=$(basename "$f" .args)
		case $name in
		*-f32 | llama-plain-q8_0 | llama-plain-q4_k | gpt-oss-plain-* | qwen3moe-plain-*) ;;
		*) continue ;;
		esac
		[ -e "$TMP/$name.refused" ] && continue
		python3 - "$TMP" "$name" "$INFO" "$REFS/$name.json" <<'EOF'
import glob, json, shlex, sys
tmp, name, info, out = sys.argv[1:5]
args = shlex.split(open(f"{tmp}/{name}.args").read())
typ = args[args.index("--type") + 1]
prompts = []
for ref in sorted(glob.glob(f"{tmp}/{name}.p*.ref.json")):
    seed = ref[len(f"{tmp}/{name}.p"):-len(".ref.json")]
    r = json.load(open(ref))
    toks = [int(t) for t in open(f"{tmp}/{name}.p{seed}.tokens").read().split(",")]
    prompts.append({"tokens": toks, "greedy": r["greedy"],
                    "logits": [float("%.7g" % x) for x in r["logits"]]})
doc = {"what": "llama.cpp's last-position logits and greedy tokens for a synthetic model, "
               "written by tests/bench/arch-logits.sh; the arch-logits test compares sinkd's",
       "llama_cpp": info, "mkmodel": args, "n_vocab": len(prompts[0]["logits"]),
       "bound": 1e-3 if typ == "f32" else 0.04, "prompts": prompts}
with open(out, "w") as f:
    json.dump(doc, f, separators=(",", ":"))
    f.write("\n")
EOF
	done
	log "wrote $(ls "$REFS"/*.json | wc -l) reference files into $REFS"
fi

python3 - "$ROWS" "$INFO" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"llama.cpp: {sys.argv[2]}")
print(f"{'model':<22} {'type':<5} {'prompt':>6} {'backend':<9} {'max|diff|/max|logit|':>21} {'bound':>6} {'greedy=':>7}")
for r in rows:
    d = "refused" if r.get("refused") else "error" if r.get("error") else "%.3g" % r["rel_diff"]
    g = "-" if r.get("error") or r.get("refused") else ("yes" if r["greedy_equal"] else "no")
    variant = r["model"][len(r["arch"]) + 1:-len(r["type"]) - 1]
    print(f"{r['arch'] + '/' + variant:<22} {r['type']:<5} "
          f"{str(r['prompt']) + ':' + str(r.get('tokens', '')):>6} {r['backend']:<9} {d:>21} "
          f"{r.get('bound', 0):>6g} {g:>7}")
bad = [r for r in rows if not r["ok"]]
worst = {}
for r in rows:
    if not r.get("error") and not r.get("refused"):
        worst[r["type"]] = max(worst.get(r["type"], 0), r["rel_diff"])
refused = sorted({r["model"].rsplit("-", 1)[0] + ": " + r["refused"].split(".gguf: ", 1)[-1]
                  for r in rows if r.get("refused")})
for why in refused:
    print(f"refused by sinkd (by name, not computed): {why}")
print(json.dumps({"llama_cpp": sys.argv[2], "rows": len(rows), "failed": len(bad),
                  "refused": sum(1 for r in rows if r.get("refused")),
                  "greedy_equal": sum(1 for r in rows if r.get("greedy_equal")),
                  "worst_rel_diff": worst}))
sys.exit(1 if bad else 0)
EOF
