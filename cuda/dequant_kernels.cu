// Weight dequantization on the device, for the upload of the CUDA backend's
// weights (backend_cuda_weights.c): rows of a GGUF tensor as stored (the
// block types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4, or
// F32, F16, BF16) become rows of the backend's dtype.  Each element is computed in
// float with the operations and order of model/dequant.c (explicit roundings,
// no fused multiply-add) and rounded to nearest even like kv_row_store, so
// the result is the host path's bit for bit.  It does not quantize.
#include <cstring>

#include "cuda_common.cuh"
#include "cuda_kernels.h"
#include "model/gguf.h"

// fp16 at p, read bytewise: rows of blocks have no alignment.
__device__ __forceinline__ float half_at(const uint8_t *p)
{
	__half_raw r;
	r.x = (unsigned short)(p[0] | (p[1] << 8));
	return __half2float(__half(r));
}

__device__ __forceinline__ uint32_t u32_at(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

__device__ __forceinline__ float float_of_bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof(f));
	return f;
}

// Nibble j (0..31) of a 32-element block's 16 bytes: low halves first.
__device__ __forceinline__ int nibble(const uint8_t *qs, int j)
{
	return j < 16 ? qs[j] & 0xf : qs[j - 16] >> 4;
}

// Fifth bit of element j of Q5_0 / Q5_1 (bit j of qh), as 0 or 16.
__device__ __forceinline__ int high5(uint32_t qh, int j)
{
	return (int)((qh >> j) & 1u) << 4;
}

// scale_min_k4() of dequant.c: 6-bit scale and min of sub-block j.
__device__ __forceinline__ void scale_min_k4(int j, const uint8_t *q, int *sc, int *mn)
{
	if (j < 4) {
		*sc = q[j] & 63;
		*mn = q[j + 4] & 63;
	} else {
		*sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
		*mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

// d * sc * q - dmin * m, rounded after each operation as the host does.
__device__ __forceinline__ float k_affine(float d, float dmin, int sc, int m, int q)
{
	return __fmul_rn(__fmul_rn(d, (float)sc), (float)q) - __fmul_rn(dmin, (float)m);
}

// Element j (0..255) of a Q4_K (144 bytes) or Q5_K (176 bytes) super-block.
__device__ float deq_k45(const uint8_t *b, int j, bool five)
{
	int g = j / 64, l = j % 32, hi = (j / 32) & 1, sc, m;
	scale_min_k4(2 * g + hi, b + 4, &sc, &m);
	const uint8_t *ql = b + (five ? 48 : 16) + 32 * g;
	int q = hi ? ql[l] >> 4 : ql[l] & 0xf;
	if (five && (b[16 + l] >> (2 * g + hi) & 1))
		q += 16;
	return k_affine(half_at(b), half_at(b + 2), sc, m, q);
}

// Element j (0..255) of a Q6_K super-block (210 bytes).
__device__ float deq_q6_k(const uint8_t *b, int j)
{
	int half = j / 128, quarter = (j / 32) % 4, l = j % 32;
	const uint8_t *ql = b + 64 * half + (quarter & 1) * 32, *qh = b + 128 + 32 * half;
	const int8_t *sc = (const int8_t *)(b + 192 + 8 * half);
	int lo = quarter < 2 ? ql[l] & 0xf : ql[l] >> 4;
	int q = (lo | (((qh[l] >> (2 * quarter)) & 3) << 4)) - 32;
	return __fmul_rn(__fmul_rn(half_at(b + 208), (float)sc[l / 16 + 2 * quarter]), (float)q);
}

// Element j (0..31) of an MXFP4 block (17 bytes): an E8M0 exponent e, then
// 16 bytes of 4-bit E2M1 codes (nibble() order).  ggml keeps the codes
// doubled and the scale halved, 2^(e - 128) (e < 2: the subnormal float
// with that value); every product is exact, so the order of ggml's
// arithmetic does not matter.
__device__ float deq_mxfp4(const uint8_t *b, int j)
{
	const int8_t kvalues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
	uint32_t e = b[0], bits = e < 2 ? 0x00200000u << e : (e - 1) << 23;
	return __fmul_rn((float)kvalues[nibble(b + 1, j)], float_of_bits(bits));
}

// Element j of the block at b (j < the type's block size).
__device__ float deq_elem(int type, const uint8_t *b, int j)
{
	switch (type) {
	case GGML_TYPE_F32:
		return float_of_bits(u32_at(b));
	case GGML_TYPE_F16:
		return half_at(b);
	case GGML_TYPE_BF16:
		return float_of_bits((uint32_t)(b[0] | (b[1] << 8)) << 16);
	case GGML_TYPE_Q4_0:
		return __fmul_rn((float)(nibble(b + 2, j) - 8), half_at(b));
	case GGML_TYPE_Q4_1:
		return __fmul_rn((float)nibble(b + 4, j), half_at(b)) + half_at(b + 2);
	case GGML_TYPE_Q5_0:
		return __fmul_rn((float)((nibble(b + 6, j) | high5(u32_at(b + 2), j)) - 16),
		                 half_at(b));
	case GGML_TYPE_Q5_1:
		return __fmul_rn((float)(nibble(b + 8, j) | high5(u32_at(b + 4), j)), half_at(b)) +
		       half_at(b + 2);
	case GGML_TYPE_Q8_0:
		return __fmul_rn((float)(int8_t)b[2 + j], half_at(b));
	case GGML_TYPE_Q4_K:
		return deq_k45(b, j, false);
	case GGML_TYPE_Q5_K:
		return deq_k45(b, j, true);
	case GGML_TYPE_MXFP4:
		return deq_mxfp4(b, j);
	default: // GGML_TYPE_Q6_K; the launcher refuses the others
		return deq_q6_k(b, j);
	}
}

// Grid-stride over the rows * cols elements, one thread per element:
// src (rows, src_row_bytes) of blocks of block_elems in block_bytes,
// dst (rows, cols) in dtype.
__global__ void dequant_rows_kernel(int type, const uint8_t *src, size_t src_row_bytes,
                                    int block_elems, int block_bytes, int cols, size_t n, void *dst,
                                    int dtype)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t row = i / (size_t)cols;
		int k = (int)(i - row * (size_t)cols);
		const uint8_t *b =
		    src + row * src_row_bytes + (size_t)(k / block_elems) * (size_t)block_bytes;
		dt_store(dst, dtype, i, deq_elem(type, b, k % block_elems));
	}
}

// Elements and bytes of one block of type; false for a type not read here.
static bool block_shape(int type, int *elems, int *bytes)
{
	static const struct {
		int type, elems, bytes;
	} shapes[] = {
	    {GGML_TYPE_F32, 1, 4},      {GGML_TYPE_F16, 1, 2},      {GGML_TYPE_BF16, 1, 2},
	    {GGML_TYPE_Q4_0, 32, 18},   {GGML_TYPE_Q4_1, 32, 20},   {GGML_TYPE_Q5_0, 32, 22},
	    {GGML_TYPE_Q5_1, 32, 24},   {GGML_TYPE_Q8_0, 32, 34},   {GGML_TYPE_Q4_K, 256, 144},
	    {GGML_TYPE_Q5_K, 256, 176}, {GGML_TYPE_Q6_K, 256, 210}, {GGML_TYPE_MXFP4, 32, 17}};
	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
		if (shapes[i].type == type) {
			*elems = shapes[i].elems;
			*bytes = shapes[i].bytes;
			return true;
		}
	return false;
}

extern "C" bool cuda_dequant_supported(int ggml_type)
{
	int e, b;
	return block_shape(ggml_type, &e, &b);
}

extern "C" int cuda_dequant_rows(int ggml_type, const void *src, size_t src_row_bytes, int rows,
                                 int cols, void *dst, int dst_dtype, void *stream)
{
	int elems, bytes;
	if (!block_shape(ggml_type, &elems, &bytes) || cols % elems != 0 || rows < 0)
		return (int)cudaErrorInvalidValue;
	size_t n = (size_t)rows * (size_t)cols;
	if (n == 0)
		return 0;
	size_t want = (n + 255) / 256;
	unsigned grid = (unsigned)(want > 65535 * 8 ? 65535 * 8 : want);
	CUDA_LAUNCH(dequant_rows_kernel, grid, 256, (cudaStream_t)stream, ggml_type,
	            (const uint8_t *)src, src_row_bytes, elems, bytes, cols, n, dst, dst_dtype);
	return CUDA_LAUNCH_RC();
}
