#!/usr/bin/env bash
# Prepares, on a build machine (nvcc + the Debian packages), what a GPU
# machine needs to run the CUDA suite and benchmark without building: the
# test binaries, sinkd-mkmodel and the bench driver (sm_80 + sm_90), the
# non-system shared libraries they load, and the two shared files the tests
# read (stories260K and its reference logits), in .gpu/ (git-ignored via
# .git/info/exclude, never committed).  Then, with the device tool:
#   run(command: "bash tests/bench/cuda-gpu-run.sh", carry: [".gpu"], timeout_s: 600)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${SINKD_SHARED:-$ROOT/../shared}
BUILD=${BUILD:-$ROOT/build-cuda}
cd "$ROOT"
if [ ! -f "$BUILD/build.ninja" ]; then
	PATH=/usr/local/cuda/bin:$PATH meson setup "$BUILD" -Dcuda=enabled -Dwerror=true >/dev/null
fi
PATH=/usr/local/cuda/bin:$PATH ninja -C "$BUILD" -j2 src/tools/sinkd-mkmodel \
	tests/unit/cuda/test-cuda-kernels tests/unit/cuda/test-cuda-backend \
	tests/unit/cuda/test-cuda-kvplan tests/unit/cuda/cuda-bench >/dev/null
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
rm -rf .gpu
mkdir -p .gpu/bin .gpu/lib .gpu/shared/models .gpu/shared/reference
BINS="$BUILD/src/tools/sinkd-mkmodel $BUILD/tests/unit/cuda/test-cuda-kernels
      $BUILD/tests/unit/cuda/test-cuda-backend $BUILD/tests/unit/cuda/test-cuda-kvplan
      $BUILD/tests/unit/cuda/cuda-bench"
cp $BINS .gpu/bin/
# Libraries from the Debian packages; the C runtime and CUDA's own come from the GPU machine.
for b in $BINS; do ldd "$b"; done | awk '/=> \// {print $3}' | sort -u |
	grep -Ev '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|libcuda|libcudart|libcublas|libcublasLt)\.so' |
	xargs -r -I{} cp -L {} .gpu/lib/
cp "$SHARED/models/stories260K.gguf" .gpu/shared/models/
cp "$SHARED/reference/stories260K-logits.json" .gpu/shared/reference/
du -sh .gpu
