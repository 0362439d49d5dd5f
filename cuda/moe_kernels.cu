// Kernels of the CUDA backend's mixture-of-experts feed-forward
// (backend_cuda_moe.c): the experts' activation (SwiGLU or gpt-oss's clamped
// one, moe_expert_act's arithmetic), a bias per row chosen by the row's
// expert, the scatter of rows to their entries, and each token's sum of its
// k entries by the gating weights in rank order.  Routing is done on the
// host (engine/moe.c); the row gather is cuda_gather_rows (kernels.cu).
// Each mirrors a twin in twins.c.
#include "cuda_common.cuh"
#include "cuda_kernels.h"

static unsigned moe_grid(size_t n, unsigned threads)
{
	size_t b = (n + threads - 1) / threads;
	return (unsigned)(b > 65535 * 8 ? 65535 * 8 : (b ? b : 1));
}

// out[i] = act(gate[i], up[i]) in dtype, explicit roundings as the host
// computes moe_expert_act (no fused multiply-add).
__global__ void moe_act_kernel(const float *gate, const float *up, size_t n, int act, float alpha,
                               float limit, void *out, int dtype)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float x = gate[i], y = up[i], r;
		if (act == CUDA_MOE_ACT_SWIGLU_OAI) {
			x = fminf(x, limit);
			y = fminf(fmaxf(y, -limit), limit);
			float s = __fdiv_rn(x, __fadd_rn(1.0f, expf(__fmul_rn(-alpha, x))));
			r = __fmul_rn(s, __fadd_rn(y, 1.0f));
		} else {
			r = __fmul_rn(__fdiv_rn(x, __fadd_rn(1.0f, expf(-x))), y);
		}
		dt_store(out, dtype, i, r);
	}
}

extern "C" int cuda_moe_act(const float *gate, const float *up, size_t n, int act, float alpha,
                            float limit, void *out, int out_dtype, void *stream)
{
	if (n == 0)
		return 0;
	CUDA_LAUNCH(moe_act_kernel, moe_grid(n, 256), 256, (cudaStream_t)stream, gate, up, n, act,
	            alpha, limit, out, out_dtype);
	return CUDA_LAUNCH_RC();
}

// grid (n), block threads over cols: row i += bias row which[i].
__global__ void add_bias_rows_kernel(float *y, const float *bias, const int32_t *which, int cols)
{
	const float *b = bias + (size_t)which[blockIdx.x] * cols;
	float *row = y + (size_t)blockIdx.x * cols;
	for (int j = threadIdx.x; j < cols; j += blockDim.x)
		row[j] = __fadd_rn(row[j], b[j]);
}

extern "C" int cuda_add_bias_rows(float *y, const float *bias, const int32_t *which, int n,
                                  int cols, void *stream)
{
	if (n <= 0)
		return 0;
	CUDA_LAUNCH(add_bias_rows_kernel, n, 256, (cudaStream_t)stream, y, bias, which, cols);
	return CUDA_LAUNCH_RC();
}

// grid (n), block threads over dim: row i of x to row rows[i] of out.
__global__ void scatter_rows_kernel(const float *x, const int32_t *rows, int dim, float *out)
{
	float *dst = out + (size_t)rows[blockIdx.x] * dim;
	for (int j = threadIdx.x; j < dim; j += blockDim.x)
		dst[j] = x[(size_t)blockIdx.x * dim + j];
}

extern "C" int cuda_scatter_rows(const float *x, const int32_t *rows, int n, int dim, float *out,
                                 void *stream)
{
	if (n <= 0)
		return 0;
	CUDA_LAUNCH(scatter_rows_kernel, n, 256, (cudaStream_t)stream, x, rows, dim, out);
	return CUDA_LAUNCH_RC();
}

// grid (n), block threads over dim: token t's entries t*k .. t*k+k-1
// weighted and summed in rank order, then added to x.
__global__ void moe_sum_kernel(const float *y, const float *w, int k, int dim, float *x)
{
	size_t t = blockIdx.x;
	for (int j = threadIdx.x; j < dim; j += blockDim.x) {
		float acc = 0.0f;
		for (int r = 0; r < k; r++)
			acc = __fadd_rn(acc, __fmul_rn(w[t * k + r], y[(t * k + r) * dim + j]));
		x[t * dim + j] = __fadd_rn(x[t * dim + j], acc);
	}
}

extern "C" int cuda_moe_sum(const float *y, const float *w, int n, int k, int dim, float *x,
                            void *stream)
{
	if (n <= 0)
		return 0;
	CUDA_LAUNCH(moe_sum_kernel, n, 256, (cudaStream_t)stream, y, w, k, dim, x);
	return CUDA_LAUNCH_RC();
}
