#!/usr/bin/env bash
# Builds llama.cpp's library (CPU only) and the logits driver
# tests/bench/llamacpp-logits.c from pinned npm packages, by hand with gcc/g++
# (run by hand, never part of the test suite; CI does not build llama.cpp).
#
#   tests/bench/llamacpp-build.sh DIR
#
# Sources, all from the npm registry through `npm pack`:
#   @fugood/llama.node 1.7.15 (llama.cpp build 10257, commit 22dc605c4, as its
#     lib/version.js says): package/src/llama.cpp/{include,src,src/models,
#     ggml/include,ggml/src/ggml-cpu}: libllama and the CPU backend.
#   llama.rn 0.12.9 (llama.cpp build 10256, commit 6c8dcaa, one commit
#     before): package/cpp/{ggml.c, ggml-alloc.c, ggml-backend*.cpp,
#     ggml-quants.c, ggml-threading.cpp, gguf.cpp, ggml-opt.cpp} and their
#     private headers, which llama.node's package leaves out.  llama.rn
#     prefixes every ggml symbol (lm_ggml_, LM_GGML_, lm_gguf_); the prefix
#     is taken off with sed, after which llama.rn's public ggml headers and
#     its ggml-cpu tree are byte for byte llama.node's (checked below).
#
# Outputs: DIR/lib/libllama.a, DIR/bin/llamacpp-logits, DIR/BUILD-INFO (the
# build number and commit, the tarballs' sha256).  A DIR that already holds
# libllama.a with the same BUILD-INFO is not rebuilt; the driver is rebuilt
# when its source is newer.  Flags: -O2, no -march (portable scalar/SSE2
# kernels, the same numbers on any x86-64), no OpenMP (ggml's own threads).
# Environment: JOBS (parallel compiles, default 2), CC, CXX.
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
DIR=$(mkdir -p "$1" && cd "$1" && pwd)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
JOBS=${JOBS:-2}
CC=${CC:-gcc}
CXX=${CXX:-g++}
NODE_PKG=@fugood/llama.node@1.7.15
RN_PKG=llama.rn@0.12.9
log() { echo "llamacpp-build: $*" >&2; }

# ---- fetch and unpack the two packages (kept in DIR/pkgs)
mkdir -p "$DIR/pkgs"
for p in "$NODE_PKG" "$RN_PKG"; do
	name=$(echo "$p" | sed 's/^@//; s/\//-/; s/@/-/')
	if [ ! -f "$DIR/pkgs/$name.tgz" ]; then
		log "npm pack $p"
		(cd "$DIR/pkgs" && npm pack "$p" >/dev/null 2>&1)
	fi
	[ -f "$DIR/pkgs/$name.tgz" ] || { log "npm pack $p gave no $name.tgz"; exit 1; }
done
NODE_TGZ=$DIR/pkgs/fugood-llama.node-1.7.15.tgz
RN_TGZ=$DIR/pkgs/llama.rn-0.12.9.tgz

info() {
	local ver
	ver=$(tar xzf "$NODE_TGZ" -O package/lib/version.js)
	local num commit
	num=$(echo "$ver" | sed -n "s/.*BUILD_NUMBER = '\([0-9]*\)'.*/\1/p")
	commit=$(echo "$ver" | sed -n "s/.*BUILD_COMMIT = '\([0-9a-f]*\)'.*/\1/p")
	echo "llama.cpp build $num ($commit) from $NODE_PKG"
	echo "ggml core from $RN_PKG (llama.cpp $(tar xzf "$RN_TGZ" -O package/cpp/common/build-info.cpp |
		sed -n 's/.*LLAMA_BUILD_NUMBER = \([0-9]*\);.*/build \1/p; s/.*LLAMA_COMMIT = "\([0-9a-f]*\)";.*/commit \1/p' | paste -sd' '))"
	echo "sha256 $(sha256sum "$NODE_TGZ" | cut -d' ' -f1) $(basename "$NODE_TGZ")"
	echo "sha256 $(sha256sum "$RN_TGZ" | cut -d' ' -f1) $(basename "$RN_TGZ")"
	echo "flags -O2 $($CC --version | head -1)"
}
INFO=$(info)

if [ -f "$DIR/lib/libllama.a" ] && [ "$(cat "$DIR/BUILD-INFO" 2>/dev/null)" = "$INFO" ]; then
	log "library up to date in $DIR"
else
	rm -rf "$DIR/src" "$DIR/obj" "$DIR/lib"
	mkdir -p "$DIR/src" "$DIR/obj" "$DIR/lib" "$DIR/unpack"
	rm -rf "$DIR/unpack/node" "$DIR/unpack/rn"
	mkdir -p "$DIR/unpack/node" "$DIR/unpack/rn"
	tar xzf "$NODE_TGZ" -C "$DIR/unpack/node"
	tar xzf "$RN_TGZ" -C "$DIR/unpack/rn"
	N=$DIR/unpack/node/package/src/llama.cpp
	R=$DIR/unpack/rn/package/cpp
	S=$DIR/src
	# llama.node: the library, its public headers, the CPU backend
	cp -r "$N/include" "$N/src" "$S/"
	mkdir -p "$S/ggml/src"
	cp -r "$N/ggml/include" "$S/ggml/"
	cp -r "$N/ggml/src/ggml-cpu" "$S/ggml/src/"
	# llama.rn: ggml's core, prefix taken off
	for f in ggml.c ggml-alloc.c ggml-backend.cpp ggml-backend-reg.cpp ggml-backend-dl.cpp \
		ggml-backend-meta.cpp ggml-quants.c ggml-threading.cpp gguf.cpp ggml-opt.cpp \
		ggml-impl.h ggml-common.h ggml-quants.h ggml-threading.h ggml-backend-impl.h \
		ggml-backend-dl.h; do
		[ -f "$R/$f" ] || { log "$RN_PKG has no cpp/$f"; exit 1; }
		sed -e 's/lm_ggml/ggml/g; s/LM_GGML/GGML/g; s/lm_gguf/gguf/g; s/LM_GGUF/GGUF/g; s/lm_iq/iq/g' \
			"$R/$f" >"$S/ggml/src/$f"
	done
	# the two packages must agree on ggml's interface
	for h in ggml.h gguf.h ggml-backend.h ggml-alloc.h ggml-cpu.h; do
		sed -e 's/lm_ggml/ggml/g; s/LM_GGML/GGML/g; s/lm_gguf/gguf/g; s/LM_GGUF/GGUF/g; s/lm_iq/iq/g' \
			"$R/$h" | cmp -s - "$S/ggml/include/$h" ||
			{ log "$h differs between $NODE_PKG and $RN_PKG"; exit 1; }
	done

	case $(uname -m) in
	x86_64) ARCH=x86 ;;
	aarch64 | arm64) ARCH=arm ;;
	*) log "no ggml-cpu arch directory for $(uname -m)"; exit 1 ;;
	esac
	CPU=ggml/src/ggml-cpu
	SRCS=(
		ggml/src/ggml.c ggml/src/ggml-alloc.c ggml/src/ggml-backend.cpp
		ggml/src/ggml-backend-reg.cpp ggml/src/ggml-backend-dl.cpp ggml/src/ggml-backend-meta.cpp
		ggml/src/ggml-quants.c ggml/src/ggml-threading.cpp ggml/src/gguf.cpp ggml/src/ggml-opt.cpp
		$CPU/ggml-cpu.c $CPU/ggml-cpu.cpp $CPU/ops.cpp $CPU/quants.c $CPU/repack.cpp
		$CPU/traits.cpp $CPU/unary-ops.cpp $CPU/binary-ops.cpp $CPU/vec.cpp
		$CPU/arch/$ARCH/quants.c $CPU/arch/$ARCH/repack.cpp
	)
	for f in "$S"/src/*.cpp "$S"/src/models/*.cpp; do
		SRCS+=("${f#"$S"/}")
	done
	DEFS="-DNDEBUG -D_GNU_SOURCE -D_XOPEN_SOURCE=600 -DGGML_USE_CPU -DGGML_SCHED_MAX_COPIES=4"
	DEFS="$DEFS -DGGML_VERSION=\"0.0.10257\" -DGGML_COMMIT=\"22dc605c4\""
	INCS="-I$S/include -I$S/ggml/include -I$S/ggml/src -I$S/$CPU -I$S/src"
	export S DIR CC CXX DEFS INCS
	log "compiling ${#SRCS[@]} files with $JOBS jobs"
	printf '%s\n' "${SRCS[@]}" | xargs -P "$JOBS" -I{} bash -c '
		f={}; o=$DIR/obj/$(echo "$f" | tr / _).o
		case $f in
		*.c) $CC -O2 -std=c11 $DEFS $INCS -c "$S/$f" -o "$o" ;;
		*) $CXX -O2 -std=c++17 $DEFS $INCS -c "$S/$f" -o "$o" ;;
		esac || { echo "llamacpp-build: failed: $f" >&2; exit 255; }'
	ar rcs "$DIR/lib/libllama.a" "$DIR"/obj/*.o
	rm -rf "$DIR/unpack"
	echo "$INFO" >"$DIR/BUILD-INFO"
fi

# ---- the driver
mkdir -p "$DIR/bin"
if [ ! -x "$DIR/bin/llamacpp-logits" ] || [ "$ROOT/tests/bench/llamacpp-logits.c" -nt "$DIR/bin/llamacpp-logits" ] ||
	[ "$DIR/lib/libllama.a" -nt "$DIR/bin/llamacpp-logits" ]; then
	log "linking llamacpp-logits"
	$CC -O2 -std=c11 -I"$DIR/src/include" -I"$DIR/src/ggml/include" -c \
		"$ROOT/tests/bench/llamacpp-logits.c" -o "$DIR/obj/llamacpp-logits.o"
	$CXX -o "$DIR/bin/llamacpp-logits" "$DIR/obj/llamacpp-logits.o" "$DIR/lib/libllama.a" -lpthread -ldl -lm
fi
cat "$DIR/BUILD-INFO"
