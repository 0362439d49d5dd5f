// Shared device helpers of the CUDA backend's kernels: element loads and
// rounding stores for f32/f16/bf16 rows, the KIVI quantization rule of
// src/cache/kvquant.c, warp reductions, and the launch-check macro.
// Internal to cuda/*.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_kv.h"

// kernel<<<grid, block, 0, stream>>>(args), spelled so that the host
// emulation (emu/cuda_emu.h) can run the same source on the CPU.
#ifndef CUDA_LAUNCH
#define CUDA_LAUNCH(kernel, grid, block, stream, ...)                                              \
	kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#endif

// Returns the launch error (0 when none); never aborts.
#define CUDA_LAUNCH_RC() ((int)cudaGetLastError())

__device__ __forceinline__ float dt_load(const void *row, int dtype, size_t i)
{
	if (dtype == CUDA_DT_F32)
		return ((const float *)row)[i];
	if (dtype == CUDA_DT_F16)
		return __half2float(((const __half *)row)[i]);
	return __bfloat162float(((const __nv_bfloat16 *)row)[i]);
}

// Round to nearest even, like kv_row_store().
__device__ __forceinline__ void dt_store(void *row, int dtype, size_t i, float x)
{
	if (dtype == CUDA_DT_F32)
		((float *)row)[i] = x;
	else if (dtype == CUDA_DT_F16)
		((__half *)row)[i] = __float2half_rn(x);
	else
		((__nv_bfloat16 *)row)[i] = __float2bfloat16_rn(x);
}

__device__ __forceinline__ float warp_sum(float x)
{
	for (int o = 16; o > 0; o >>= 1)
		x += __shfl_xor_sync(0xffffffffu, x, o);
	return x;
}

__device__ __forceinline__ float warp_max(float x)
{
	for (int o = 16; o > 0; o >>= 1)
		x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
	return x;
}

__device__ __forceinline__ float warp_min(float x)
{
	for (int o = 16; o > 0; o >>= 1)
		x = fminf(x, __shfl_xor_sync(0xffffffffu, x, o));
	return x;
}

// kvq_params(): scale 0 when the range is a single value (or not finite).
__device__ __forceinline__ void quant_params(float lo, float hi, int bits, float *scale, float *mn)
{
	*mn = lo;
	*scale = (hi - lo) / (float)((1 << bits) - 1);
	if (!(*scale > 0.0f) || !isfinite(*scale))
		*scale = 0.0f;
}

// kvq_code(): round half to even, clamped to the code range.
__device__ __forceinline__ int quant_code(float x, float scale, float mn, int bits)
{
	if (scale == 0.0f)
		return 0;
	int c = __float2int_rn(__fdiv_rn(x - mn, scale));
	int top = (1 << bits) - 1;
	return c < 0 ? 0 : c > top ? top : c;
}
