// Element-wise and row kernels of the CUDA forward pass: embedding gather,
// RMSNorm, RoPE, SwiGLU, bias, row gather, Gemma's GeGLU, post-norm with
// residual add, scale and soft-cap, and a copy-bandwidth probe.
// Each mirrors a twin in twins.c (same arguments, host memory) and the CPU
// backend's arithmetic: RMSNorm sums squares in double, RoPE rotates in
// double with cos/sin computed on the host by rope_cos_sin() (exact angles at
// any position), so results differ from the CPU only by summation order.
// Projections are cuBLAS calls in backend_cuda.c, attention in kv_kernels.cu.
#include <cmath>
#include <cstdio>

#include "cuda_common.cuh"
#include "cuda_kernels.h"

extern "C" const char *cuda_error_string(int code)
{
	return cudaGetErrorString((cudaError_t)code);
}

static cudaStream_t st(void *stream)
{
	return (cudaStream_t)stream;
}

// ---------------------------------------------------------------- embed

// grid (n), block threads over dim.
__global__ void embed_kernel(const void *table, int dtype, int dim, const int32_t *tok, float *x)
{
	size_t row = (size_t)tok[blockIdx.x] * dim;
	for (int j = threadIdx.x; j < dim; j += blockDim.x)
		x[(size_t)blockIdx.x * dim + j] = dt_load(table, dtype, row + j);
}

extern "C" int cuda_embed(const void *table, int dtype, int dim, const int32_t *tok, int n,
                          float *x, void *stream)
{
	if (n <= 0)
		return 0;
	CUDA_LAUNCH(embed_kernel, n, 256, st(stream), table, dtype, dim, tok, x);
	return CUDA_LAUNCH_RC();
}

// -------------------------------------------------------------- rmsnorm

#define RMS_THREADS 256

// 1 / rms of row xr (dim), summed in double over the block (RMS_THREADS);
// every thread of the block gets it.
static __device__ float row_rms_scale(const float *xr, int dim, float eps)
{
	__shared__ double part[RMS_THREADS];
	double ss = 0.0;
	for (int j = threadIdx.x; j < dim; j += blockDim.x)
		ss += (double)xr[j] * xr[j];
	part[threadIdx.x] = ss;
	__syncthreads();
	for (int s = blockDim.x / 2; s > 0; s >>= 1) {
		if ((int)threadIdx.x < s)
			part[threadIdx.x] += part[threadIdx.x + s];
		__syncthreads();
	}
	return (float)(1.0 / sqrt(part[0] / dim + (double)eps));
}

// grid (n), block RMS_THREADS: out row = x row * (1/rms) * w.
__global__ void rmsnorm_kernel(const float *x, const float *w, int dim, float eps, void *out,
                               int out_dtype)
{
	const float *xr = x + (size_t)blockIdx.x * dim;
	float scale = row_rms_scale(xr, dim, eps);
	for (int j = threadIdx.x; j < dim; j += blockDim.x)
		dt_store(out, out_dtype, (size_t)blockIdx.x * dim + j,
		         __fmul_rn(__fmul_rn(xr[j], scale), w[j]));
}

extern "C" int cuda_rmsnorm(const float *x, const float *w, int n, int dim, float eps, void *out,
                            int out_dtype, void *stream)
{
	if (n <= 0)
		return 0;
	CUDA_LAUNCH(rmsnorm_kernel, n, RMS_THREADS, st(stream), x, w, dim, eps, out, out_dtype);
	return CUDA_LAUNCH_RC();
}

// ----------------------------------------------------------------- rope

// grid (n_vec), block threads over rope_dim: the rotated dims times scale
// (YaRN's / longrope's magnitude, rope_scale_rotated()).
__global__ void rope_scale_kernel(float *x, int head_dim, int rope_dim, float scale)
{
	size_t at = (size_t)blockIdx.x * head_dim;
	for (int j = threadIdx.x; j < rope_dim; j += blockDim.x)
		x[at + j] = __fmul_rn(x[at + j], scale);
}

extern "C" int cuda_rope_scale(float *x, int n_vec, int head_dim, int rope_dim, float scale,
                               void *stream)
{
	if (n_vec <= 0 || rope_dim <= 0)
		return 0;
	CUDA_LAUNCH(rope_scale_kernel, n_vec, 64, st(stream), x, head_dim, rope_dim, scale);
	return CUDA_LAUNCH_RC();
}

// grid (n, n_heads), block threads over head_dim: pairs (a, b) rotated in
// double and rounded once (rope_apply()), then every element times scale.
__global__ void rope_kernel(const float *x, float *out, int n_heads, int head_dim, int rope_dim,
                            bool neox, const double *cs, int cs_stride, float scale)
{
	size_t at = ((size_t)blockIdx.x * n_heads + blockIdx.y) * head_dim;
	const double *c = cs + (size_t)blockIdx.x * cs_stride;
	int half = rope_dim / 2;
	for (int i = threadIdx.x; i < half; i += blockDim.x) {
		int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
		double x0 = x[at + a], x1 = x[at + b];
		double co = c[2 * i], si = c[2 * i + 1];
		// explicit roundings: no fused multiply-add, as the CPU computes it
		float r0 = (float)__dsub_rn(__dmul_rn(x0, co), __dmul_rn(x1, si));
		float r1 = (float)__dadd_rn(__dmul_rn(x0, si), __dmul_rn(x1, co));
		out[at + a] = __fmul_rn(r0, scale);
		out[at + b] = __fmul_rn(r1, scale);
	}
	for (int j = rope_dim + threadIdx.x; j < head_dim; j += blockDim.x)
		out[at + j] = __fmul_rn(x[at + j], scale);
}

extern "C" int cuda_rope(const float *x, float *out, int n, int n_heads, int head_dim, int rope_dim,
                         bool neox, const double *cs, int cs_stride, float scale, void *stream)
{
	if (n <= 0)
		return 0;
	dim3 grid(n, n_heads);
	CUDA_LAUNCH(rope_kernel, grid, 64, st(stream), x, out, n_heads, head_dim, rope_dim, neox,
	            cs, cs_stride, scale);
	return CUDA_LAUNCH_RC();
}

// --------------------------------------------------------------- swiglu

__global__ void swiglu_kernel(const float *gate, const float *up, size_t n, void *out, int dtype)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float g = gate[i];
		dt_store(out, dtype, i, __fmul_rn(__fdiv_rn(g, 1.0f + expf(-g)), up[i]));
	}
}

static unsigned grid_for(size_t n, unsigned threads)
{
	size_t b = (n + threads - 1) / threads;
	return (unsigned)(b > 65535 * 8 ? 65535 * 8 : (b ? b : 1));
}

extern "C" int cuda_swiglu(const float *gate, const float *up, size_t n, void *out, int out_dtype,
                           void *stream)
{
	if (n == 0)
		return 0;
	CUDA_LAUNCH(swiglu_kernel, grid_for(n, 256), 256, st(stream), gate, up, n, out, out_dtype);
	return CUDA_LAUNCH_RC();
}

// ---------------------------------------------------------------- gemma

// GeGLU: gelu(gate) * up, GELU in llama.cpp's tanh approximation.
__global__ void geglu_kernel(const float *gate, const float *up, size_t n, void *out, int dtype)
{
	const float sqrt_2_over_pi = 0.79788456080286535587989211986876f, coef_a = 0.044715f;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float x = gate[i];
		float inner = __fmul_rn(__fmul_rn(sqrt_2_over_pi, x),
		                        __fadd_rn(1.0f, __fmul_rn(__fmul_rn(coef_a, x), x)));
		float g = __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, tanhf(inner)));
		dt_store(out, dtype, i, __fmul_rn(g, up[i]));
	}
}

extern "C" int cuda_geglu(const float *gate, const float *up, size_t n, void *out, int out_dtype,
                          void *stream)
{
	if (n == 0)
		return 0;
	CUDA_LAUNCH(geglu_kernel, grid_for(n, 256), 256, st(stream), gate, up, n, out, out_dtype);
	return CUDA_LAUNCH_RC();
}

// grid (n), block RMS_THREADS: x row += y row * (1/rms(y row)) * w.
__global__ void rmsnorm_add_kernel(float *x, const float *y, const float *w, int dim, float eps)
{
	const float *yr = y + (size_t)blockIdx.x * dim;
	float *xr = x + (size_t)blockIdx.x * dim;
	float scale = row_rms_scale(yr, dim, eps);
	for (int j = threadIdx.x; j < dim; j += blockDim.x)
		xr[j] = __fadd_rn(xr[j], __fmul_rn(__fmul_rn(yr[j], scale), w[j]));
}

extern "C" int cuda_rmsnorm_add(float *x, const float *y, const float *w, int n, int dim,
                                float eps, void *stream)
{
	if (n <= 0)
		return 0;
	CUDA_LAUNCH(rmsnorm_add_kernel, n, RMS_THREADS, st(stream), x, y, w, dim, eps);
	return CUDA_LAUNCH_RC();
}

// x = x * scale (cap 0), or cap * tanh(x / cap) as llama.cpp computes it.
__global__ void scale_cap_kernel(float *x, size_t n, float scale, float cap)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		x[i] = cap > 0.0f ? __fmul_rn(tanhf(__fmul_rn(x[i], 1.0f / cap)), cap)
		                  : __fmul_rn(x[i], scale);
}

extern "C" int cuda_scale(float *x, size_t n, float scale, void *stream)
{
	if (n == 0)
		return 0;
	CUDA_LAUNCH(scale_cap_kernel, grid_for(n, 256), 256, st(stream), x, n, scale, 0.0f);
	return CUDA_LAUNCH_RC();
}

extern "C" int cuda_softcap(float *x, size_t n, float cap, void *stream)
{
	if (n == 0)
		return 0;
	CUDA_LAUNCH(scale_cap_kernel, grid_for(n, 256), 256, st(stream), x, n, 1.0f, cap);
	return CUDA_LAUNCH_RC();
}

// ------------------------------------------------------- key weights

// grid n, block threads over columns: the anchor policy scores a key by the
// largest weight any head gave it; a cache trace also shows the mean.
__global__ void key_weight_reduce_kernel(const float *w, int n_heads, int ld, int cols,
                                         float *out_max, float *out_mean)
{
	const float *row = w + (size_t)blockIdx.x * n_heads * ld;
	for (int j = threadIdx.x; j < cols; j += blockDim.x) {
		float m = 0.0f, sum = 0.0f;
		for (int h = 0; h < n_heads; h++) {
			float x = row[(size_t)h * ld + j];
			m = fmaxf(m, x);
			sum = __fadd_rn(sum, x);
		}
		out_max[(size_t)blockIdx.x * ld + j] = m;
		if (out_mean)
			out_mean[(size_t)blockIdx.x * ld + j] = __fdiv_rn(sum, (float)n_heads);
	}
}

extern "C" int cuda_key_weight_reduce(const float *w, int n, int n_heads, int ld, int cols,
                                      float *out_max, float *out_mean, void *stream)
{
	if (n <= 0 || cols <= 0)
		return 0;
	CUDA_LAUNCH(key_weight_reduce_kernel, n, 256, st(stream), w, n_heads, ld, cols, out_max,
	            out_mean);
	return CUDA_LAUNCH_RC();
}

// ----------------------------------------------------------- bias, gather

__global__ void add_bias_kernel(float *y, const float *bias, int cols)
{
	for (int j = threadIdx.x; j < cols; j += blockDim.x)
		y[(size_t)blockIdx.x * cols + j] += bias[j];
}

extern "C" int cuda_add_bias(float *y, const float *bias, int n, int cols, void *stream)
{
	if (n <= 0)
		return 0;
	CUDA_LAUNCH(add_bias_kernel, n, 256, st(stream), y, bias, cols);
	return CUDA_LAUNCH_RC();
}

__global__ void gather_rows_kernel(const float *x, const int32_t *rows, int dim, float *out)
{
	const float *src = x + (size_t)rows[blockIdx.x] * dim;
	for (int j = threadIdx.x; j < dim; j += blockDim.x)
		out[(size_t)blockIdx.x * dim + j] = src[j];
}

extern "C" int cuda_gather_rows(const float *x, const int32_t *rows, int n, int dim, float *out,
                                void *stream)
{
	if (n <= 0)
		return 0;
	CUDA_LAUNCH(gather_rows_kernel, n, 256, st(stream), x, rows, dim, out);
	return CUDA_LAUNCH_RC();
}

// ------------------------------------------------------ bandwidth probe

__global__ void copy_kernel(const float4 *src, float4 *dst, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		dst[i] = src[i];
}

extern "C" int cuda_bandwidth_probe(size_t bytes, int iters, double *bytes_per_s, char *err,
                                    size_t err_len)
{
	float4 *a = NULL, *b = NULL;
	cudaEvent_t e0 = NULL, e1 = NULL;
	size_t n = bytes / sizeof(float4);
	double best = 0.0;
	cudaError_t rc = cudaMalloc(&a, n * sizeof(float4));
	if (rc == cudaSuccess)
		rc = cudaMalloc(&b, n * sizeof(float4));
	if (rc == cudaSuccess)
		rc = cudaMemset(a, 0, n * sizeof(float4));
	if (rc == cudaSuccess)
		rc = cudaEventCreate(&e0);
	if (rc == cudaSuccess)
		rc = cudaEventCreate(&e1);
	for (int it = 0; it < iters + 1 && rc == cudaSuccess; it++) {
		float ms = 0.0f;
		cudaEventRecord(e0);
		CUDA_LAUNCH(copy_kernel, 1024, 256, (cudaStream_t)0, a, b, n);
		cudaEventRecord(e1);
		rc = cudaEventSynchronize(e1);
		if (rc == cudaSuccess)
			rc = cudaEventElapsedTime(&ms, e0, e1);
		if (rc == cudaSuccess && it > 0 && ms > 0.0f) { /* the first is a warm-up */
			double bps = 2.0 * (double)(n * sizeof(float4)) / (ms * 1e-3);
			best = bps > best ? bps : best;
		}
	}
	if (e0)
		cudaEventDestroy(e0);
	if (e1)
		cudaEventDestroy(e1);
	cudaFree(a);
	cudaFree(b);
	*bytes_per_s = best;
	if (rc != cudaSuccess) {
		if (err && err_len)
			snprintf(err, err_len, "cuda bandwidth probe: %s", cudaGetErrorString(rc));
		return -5;
	}
	return 0;
}
