#!/usr/bin/env bash
# On the GPU machine, from the repository root, with .gpu/ carried (made by
# cuda-gpu-pack.sh): runs the CUDA suite (kernel-vs-twin and end-to-end
# tests) and then the benchmark.  Logs go to $OUT when it is set.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp}
export LD_LIBRARY_PATH=$ROOT/.gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
export SINKD_SHARED=$ROOT/.gpu/shared CK_DEFAULT_TIMEOUT=300
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
rc=0
for t in test-cuda-kvplan test-cuda-kernels; do
	echo "== $t"
	timeout 240 ".gpu/bin/$t" 2>&1 | tee "$OUT/$t.log" || rc=1
done
echo "== test-cuda-backend"
timeout 240 .gpu/bin/test-cuda-backend .gpu/bin/sinkd-mkmodel 2>&1 | tee "$OUT/test-cuda-backend.log" || rc=1
if [ "${SKIP_BENCH:-0}" != 1 ]; then
	echo "== cuda-bench"
	BIN=$ROOT/.gpu/bin TIMEOUT=${BENCH_TIMEOUT:-300} bash tests/bench/cuda-bench.sh 2>&1 |
		tee "$OUT/cuda-bench.log" || rc=1
fi
exit $rc
