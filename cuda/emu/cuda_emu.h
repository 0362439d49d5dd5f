// Host emulation of the little CUDA C++ that cuda/*.cu uses, so that the
// same kernel source runs on a CPU for the tests of machines without a GPU
// (the test-cuda-*-emu tests).  Included before a .cu file compiled by the
// host C++ compiler: each block's threads are coroutines on the calling
// thread, __syncthreads is a barrier, warp shuffles go through a buffer,
// __shared__ arrays are statics (one block runs at a time).  Only for
// kernels that keep warps converged at shuffles and barriers, as ours do.
// Not for production: it is slow and proves logic, not speed.
#pragma once

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <functional>

#define SINKD_CUDA_EMU 1

struct emu_thread_ctx {
	uint3 tid, bid;
	dim3 bdim, gdim;
};
extern emu_thread_ctx emu_ctx; /* of the thread (coroutine) running now */

#undef __shared__
#define __shared__ static
#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __host__
#define __host__
#define __launch_bounds__(...)
#define threadIdx (emu_ctx.tid)
#define blockIdx (emu_ctx.bid)
#define blockDim (emu_ctx.bdim)
#define gridDim (emu_ctx.gdim)

void emu_syncthreads();
float emu_shfl_xor(float v, int mask);
void emu_launch(dim3 grid, dim3 block, const std::function<void()> &body);

#define __syncthreads() emu_syncthreads()
#define __shfl_xor_sync(m, v, o) emu_shfl_xor((v), (o))
#define __fdiv_rn(a, b) ((float)(a) / (float)(b))
#define __fmul_rn(a, b) ((float)(a) * (float)(b))
#define __fadd_rn(a, b) ((float)(a) + (float)(b))
#define __dmul_rn(a, b) ((double)(a) * (double)(b))
#define __dadd_rn(a, b) ((double)(a) + (double)(b))
#define __dsub_rn(a, b) ((double)(a) - (double)(b))
#define __float2int_rn(x) ((int)std::nearbyint((float)(x)))
using std::isfinite;
using std::max;
using std::min;

#define CUDA_LAUNCH(kernel, grid, block, stream, ...)                                              \
	emu_launch(dim3(grid), dim3(block), [&]() { kernel(__VA_ARGS__); })
