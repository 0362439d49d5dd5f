/* Matrix products y(B, rows) = x(B, cols) · W(rows, cols)^T, the bulk of the
 * CPU forward pass.  Each thread gets one contiguous range of rows and reads
 * it front to back as one stream; a thread that finishes early takes blocks
 * from the back of another's range, so no thread waits at the end.
 *
 * Kernel families (enum matmul_family), each with a plain-C twin that the
 * unit test compares it with:
 *   DOT_AVX2      decode-sized batches stream each weight row once; others
 *                 2 x 4 dot tiles (twin: SCALAR);
 *   Q8_AVX2       Q8_0 weights times x quantized to Q8, in integers, as
 *                 llama.cpp does (twin: Q8_SCALAR);
 *   GEMM_AVX2     packed GEMM: 16 weight rows x 256 columns converted and
 *                 transposed into L1, a 6-row outer-product kernel (SCALAR);
 *   DOT_AVX512    decode rows aligned to cache lines, register tiles up to
 *                 6 x 8 (SCALAR);
 *   GEMM_AVX512   the packed GEMM with a 12-row kernel (SCALAR);
 *   PANELS        the kernels of the weight panels the backend lays out on
 *                 AVX-512 machines, every batch size (PANELS_SCALAR);
 *   QDOT          Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, MXFP4 weights as stored in GGUF
 *                 times x quantized to int8 blocks, through engine/qdot.h's
 *                 R x B register tiles, the best variant this CPU runs
 *                 (QDOT_SCALAR);
 *   QPACK         the same block types packed at load (engine/qpack.h) by
 *                 the backend, x quantized as for QDOT, the best qpack
 *                 kernel this CPU runs (QPACK_SCALAR);
 *   SCALAR        plain C, the portable path (every type).
 * One table (kernel_table) picks the family by ISA level, weight type and
 * batch-size class.  Weights are read in their stored type; activations
 * stay fp32 except in the Q8 and QDOT families, which quantize x once per
 * dispatch before the threads start.  The FFN's gate and up products can
 * run fused with the SwiGLU activation (matmul_swiglu).  It does not own
 * buffers or know about layers: see backend_cpu.c. */
#include "engine/matmul.h"
#include "util/tuning.h"

#include "engine/panels.h"
#include "engine/qdot.h"
#include "engine/qpack.h"
#include "model/dequant.h"
#include "model/wtype.h"
#include "util/cpu.h"
#include "util/fastexp.h"
#include "util/half.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define MATMUL_X86 1
#endif

/* Work below this many multiply-adds runs on the calling thread (util/tuning.h). */
#define MATMUL_PARALLEL_MIN_MACS TUNING_MATMUL_PARALLEL_MIN_MACS
/* Columns converted per step of the portable path (util/tuning.h). */
#define GENERIC_CHUNK TUNING_MATMUL_GENERIC_CHUNK

struct block_q8_0 {
	uint16_t d; /* fp16 scale */
	int8_t qs[32];
};
_Static_assert(sizeof(struct block_q8_0) == 34, "Q8_0 block is 34 bytes");

/* Activations quantized for the Q8_0 integer path: 32 values, one scale. */
struct block_q8_x {
	float d;
	int8_t qs[32];
};

/* x(n), n a multiple of 32 -> n/32 blocks: scale amax/127, round to nearest. */
static void quantize_q8_x(const float *x, int n, struct block_q8_x *out)
{
	for (int b = 0; b < n / 32; b++) {
		const float *v = x + 32 * b;
		float amax = 0.0f;
		for (int i = 0; i < 32; i++)
			amax = fabsf(v[i]) > amax ? fabsf(v[i]) : amax;
		float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
		out[b].d = d;
		for (int i = 0; i < 32; i++)
			out[b].qs[i] = (int8_t)qdot_round(v[i] * id);
	}
}

void matmul_q8_activation_round(const float *x, int n, float *out)
{
	struct block_q8_x blk;
	for (int b = 0; b < n / 32; b++) {
		quantize_q8_x(x + 32 * b, 32, &blk);
		for (int i = 0; i < 32; i++)
			out[32 * b + i] = blk.d * (float)blk.qs[i];
	}
}

/* ---------------------------------------------------------------- scalars */

/* Converts elements [k0, k0+n) of a row; for the block types, k0 and n are
 * multiples of the block (32 values, 256 for the K-quants). */
static void row_chunk_to_f32(int type, const uint8_t *row, int k0, int n, float *out)
{
	switch (type) {
	case GGML_TYPE_F32:
		memcpy(out, (const float *)row + k0, (size_t)n * sizeof(float));
		break;
	case GGML_TYPE_F16:
		for (int i = 0; i < n; i++)
			out[i] = fp16_to_f32(((const uint16_t *)row)[k0 + i]);
		break;
	case GGML_TYPE_BF16:
		for (int i = 0; i < n; i++)
			out[i] = bf16_to_f32(((const uint16_t *)row)[k0 + i]);
		break;
	default: /* the block types: k0 and n are multiples of their block */
		dequantize_row((enum ggml_type)type,
		               row + ggml_row_bytes((enum ggml_type)type, (uint64_t)k0), out,
		               (uint64_t)n);
		break;
	}
}

bool matmul_type_supported(int type)
{
	return wtype_kept_as_stored((enum ggml_type)type);
}

void matmul_row_to_f32(const struct weight_matrix *w, int row, float *out)
{
	row_chunk_to_f32(w->type, (const uint8_t *)w->data + (size_t)row * w->row_bytes, 0, w->cols,
	                 out);
}

/* ------------------------------------------------------------ portable C */

/* The two kernel signatures: the families that read x (B, cols) as it is,
 * and the Q8 families, which read it quantized once per call, xq (B,
 * cols/32).  Both write rows [r0, r1) of job->y (B, rows).  The qdot
 * families have their own (rows_qdot). */
typedef void (*rows_x_fn)(const struct matmul_job *job, const float *x, int B, int r0, int r1);
typedef void (*rows_q8_fn)(const struct matmul_job *job, const struct block_q8_x *xq, int B, int r0,
                           int r1);

/* The QDOT families: rows [r0, r1) of job->y (B, rows) through the qdot
 * kernels k, whose R x B tiles read each weight block once for up to
 * QDOT_TILE_VECS batch rows; a single x takes the row kernel, whose fixed
 * shape decoded faster than a tile of one vector.  xq: B activation
 * vectors (qdot_act_quantize for w's type), xq_bytes apart. */
static void rows_qdot(const struct matmul_job *job, const struct qdot_kernels *k, const void *xq,
                      size_t xq_bytes, int B, int r0, int r1)
{
	const struct weight_matrix *w = job->w;
	int rows = w->rows;
	const uint8_t *base = (const uint8_t *)w->data;
	if (B == 1)
		for (int r = r0; r < r1; r++)
			job->y[r] = k->dot_row(base + (size_t)r * w->row_bytes, xq, w->cols);
	else
		qdot_rows(k, base + (size_t)r0 * w->row_bytes, w->row_bytes, r1 - r0, xq, xq_bytes,
		          B, w->cols, job->y + r0, (size_t)rows);
	if (!job->bias)
		return;
	for (int b = 0; b < B; b++)
		for (int r = r0; r < r1; r++)
			job->y[(size_t)b * rows + r] += job->bias[r];
}

/* The QPACK families: rows [r0, r1) of job->y (B, rows) through the packed
 * kernel k (qpack.h), then the bias.  xq as for rows_qdot. */
static void rows_qpack(const struct matmul_job *job, qpack_rows_fn k, const void *xq,
                       size_t xq_bytes, int B, int r0, int r1)
{
	int rows = job->w->rows;
	/* passes of the tile plan's vectors over the rows, which stay in L2
	 * between passes (tileplan.h) */
	int pass = job->w->plan_vecs_per_pass > 0 ? job->w->plan_vecs_per_pass : B;
	for (int v0 = 0; v0 < B; v0 += pass)
		k(job->w, (const uint8_t *)xq + (size_t)v0 * xq_bytes, xq_bytes,
		  B - v0 < pass ? B - v0 : pass, job->y + (size_t)v0 * rows, (size_t)rows, r0, r1);
	if (!job->bias)
		return;
	for (int b = 0; b < B; b++)
		for (int r = r0; r < r1; r++)
			job->y[(size_t)b * rows + r] += job->bias[r];
}

/* The portable path, and the twin of the dot and GEMM families. */
static void rows_scalar(const struct matmul_job *job, const float *x, int B, int r0, int r1)
{
	const struct weight_matrix *w = job->w;
	int cols = w->cols, rows = w->rows;
	float buf[GENERIC_CHUNK];
	for (int r = r0; r < r1; r++) {
		const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
		for (int b = 0; b < B; b++)
			job->y[(size_t)b * rows + r] = job->bias ? job->bias[r] : 0.0f;
		for (int k0 = 0; k0 < cols; k0 += GENERIC_CHUNK) {
			int n = cols - k0 < GENERIC_CHUNK ? cols - k0 : GENERIC_CHUNK;
			row_chunk_to_f32(w->type, row, k0, n, buf);
			for (int b = 0; b < B; b++) {
				const float *xb = x + (size_t)b * cols + k0;
				float s = 0.0f;
				for (int i = 0; i < n; i++)
					s += buf[i] * xb[i];
				job->y[(size_t)b * rows + r] += s;
			}
		}
	}
}

/* Twin of the Q8 family: per block of 32, an integer dot product scaled by
 * both block scales. */
static void rows_q8_scalar(const struct matmul_job *job, const struct block_q8_x *xq, int B, int r0,
                           int r1)
{
	const struct weight_matrix *w = job->w;
	int rows = w->rows, nblk = w->cols / 32;
	for (int r = r0; r < r1; r++) {
		const struct block_q8_0 *wb = (const struct block_q8_0 *)((const uint8_t *)w->data +
		                                                          (size_t)r * w->row_bytes);
		for (int b = 0; b < B; b++) {
			const struct block_q8_x *xb = xq + (size_t)b * nblk;
			float s = 0.0f;
			for (int k = 0; k < nblk; k++) {
				int32_t dot = 0;
				for (int i = 0; i < 32; i++)
					dot += (int32_t)wb[k].qs[i] * xb[k].qs[i];
				s += fp16_to_f32(wb[k].d) * xb[k].d * (float)dot;
			}
			job->y[(size_t)b * rows + r] = s + (job->bias ? job->bias[r] : 0.0f);
		}
	}
}

/* Element (r, k) of w's panels as fp32. */
static float panel_element(const struct weight_matrix *w, int r, int k)
{
	size_t i = panels_element_index(w, r, k);
	switch (w->type) {
	case GGML_TYPE_F16:
		return fp16_to_f32(((const uint16_t *)w->panels)[i]);
	case GGML_TYPE_BF16:
		return bf16_to_f32(((const uint16_t *)w->panels)[i]);
	default:
		return ((const float *)w->panels)[i];
	}
}

/* Twin of the panel kernels: the same panels, an element at a time. */
static void rows_panels_scalar(const struct matmul_job *job, const float *x, int B, int r0, int r1)
{
	const struct weight_matrix *w = job->w;
	for (int b = 0; b < B; b++)
		for (int r = r0; r < r1; r++) {
			float s = 0.0f;
			for (int k = 0; k < w->cols; k++)
				s += panel_element(w, r, k) * x[(size_t)b * w->cols + k];
			job->y[(size_t)b * w->rows + r] = s + (job->bias ? job->bias[r] : 0.0f);
		}
}

/* --------------------------------------------------------------- AVX2/FMA */
#ifdef MATMUL_X86
#define AVX2_FN __attribute__((target("avx2,fma,f16c")))
#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* 8 weights of a row from column k (a multiple of 8), as fp32. */
AVX2_INLINE __m256 load8(int type, const uint8_t *row, int k)
{
	switch (type) {
	case GGML_TYPE_F16:
		return _mm256_cvtph_ps(
		    _mm_loadu_si128((const __m128i *)((const uint16_t *)row + k)));
	case GGML_TYPE_BF16: {
		__m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + k));
		return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
	}
	case GGML_TYPE_Q8_0: {
		const struct block_q8_0 *b = (const struct block_q8_0 *)row + k / 32;
		__m256 d = _mm256_set1_ps(_cvtsh_ss(b->d));
		__m128i q = _mm_loadl_epi64((const __m128i *)(b->qs + k % 32));
		return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
	}
	default:
		return _mm256_loadu_ps((const float *)row + k);
	}
}

AVX2_INLINE float hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* One register tile: weight rows [r, r+RB) times batch rows [b, b+BB).
 * w: first row of the tile; x: first batch row; y: (.., rows) output at (b, r).
 * k8: columns handled by vectors (multiple of 8); the rest is scalar. */
AVX2_INLINE void tile(int type, int RB, int BB, const uint8_t *w, size_t row_bytes, const float *x,
                      int cols, int k8, float *y, int rows, const float *bias)
{
	__m256 acc[4][4];
	for (int i = 0; i < RB; i++)
		for (int j = 0; j < BB; j++)
			acc[i][j] = _mm256_setzero_ps();
	for (int k = 0; k < k8; k += 8) {
		__m256 wv[4];
		for (int i = 0; i < RB; i++)
			wv[i] = load8(type, w + (size_t)i * row_bytes, k);
		for (int j = 0; j < BB; j++) {
			__m256 xv = _mm256_loadu_ps(x + (size_t)j * cols + k);
			for (int i = 0; i < RB; i++)
				acc[i][j] = _mm256_fmadd_ps(wv[i], xv, acc[i][j]);
		}
	}
	for (int i = 0; i < RB; i++) {
		float tail[8];
		int nt = cols - k8;
		if (nt)
			row_chunk_to_f32(type, w + (size_t)i * row_bytes, k8, nt, tail);
		for (int j = 0; j < BB; j++) {
			float s = hsum8(acc[i][j]);
			for (int t = 0; t < nt; t++)
				s += tail[t] * x[(size_t)j * cols + k8 + t];
			y[(size_t)j * rows + i] = s + (bias ? bias[i] : 0.0f);
		}
	}
}

/* ------------------------------------------ AVX2 packed GEMM (larger batches)
 * For batches the dot-product tiles above are bound by re-reading x from L2.
 * Here a panel of 16 weight rows x GEMM_KC columns is converted to fp32 and
 * transposed (k-major) once, in L1, then every group of 6 batch rows runs an
 * outer-product kernel over it: per column, 2 weight vectors, 6 broadcasts of
 * x, 12 FMAs into 12 accumulators.  Partial sums go through y between panels. */
#define GEMM_KC TUNING_MATMUL_GEMM_KC
#define GEMM_NR 16
#define GEMM_MR 6
/* Batch rows per pass over the weights (an x chunk that stays in L2). */
#define GEMM_BATCH TUNING_MATMUL_GEMM_BATCH

AVX2_INLINE void transpose8(__m256 r[8])
{
	__m256 t[8], u[8];
	for (int i = 0; i < 4; i++) {
		t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
		t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
	}
	for (int h = 0; h < 2; h++) {
		u[4 * h + 0] =
		    _mm256_shuffle_ps(t[4 * h + 0], t[4 * h + 2], _MM_SHUFFLE(1, 0, 1, 0));
		u[4 * h + 1] =
		    _mm256_shuffle_ps(t[4 * h + 0], t[4 * h + 2], _MM_SHUFFLE(3, 2, 3, 2));
		u[4 * h + 2] =
		    _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(1, 0, 1, 0));
		u[4 * h + 3] =
		    _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(3, 2, 3, 2));
	}
	for (int i = 0; i < 4; i++) {
		r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
		r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
	}
}

/* panel(kn, 16) = rows [r, r+nv) x columns [kc, kc+kn) of w, transposed;
 * rows past nv are zero. */
AVX2_INLINE void gemm_pack(int type, const uint8_t *w, size_t row_bytes, int nv, int kc, int kn,
                           float *panel)
{
	int k8 = kn & ~7;
	for (int g = 0; g < 2; g++)
		for (int k = 0; k < k8; k += 8) {
			__m256 v[8];
			for (int i = 0; i < 8; i++)
				v[i] =
				    g * 8 + i < nv
				        ? load8(type, w + (size_t)(g * 8 + i) * row_bytes, kc + k)
				        : _mm256_setzero_ps();
			transpose8(v);
			for (int j = 0; j < 8; j++)
				_mm256_store_ps(panel + (size_t)(k + j) * GEMM_NR + g * 8, v[j]);
		}
	if (k8 == kn)
		return;
	float tail[8] = {0};
	for (int i = 0; i < GEMM_NR; i++) {
		if (i < nv)
			row_chunk_to_f32(type, w + (size_t)i * row_bytes, kc + k8, kn - k8, tail);
		for (int k = k8; k < kn; k++)
			panel[(size_t)k * GEMM_NR + i] = i < nv ? tail[k - k8] : 0.0f;
	}
}

/* c(MB, 16) (+)= x(MB, kn) . panel(kn, 16); ldx, ldc: row strides. */
AVX2_INLINE void gemm_micro(int MB, int kn, const float *panel, const float *x, size_t ldx,
                            float *c, size_t ldc, bool accumulate)
{
	__m256 acc[GEMM_MR][2];
	for (int i = 0; i < MB; i++) {
		acc[i][0] = accumulate ? _mm256_loadu_ps(c + i * ldc) : _mm256_setzero_ps();
		acc[i][1] = accumulate ? _mm256_loadu_ps(c + i * ldc + 8) : _mm256_setzero_ps();
	}
	for (int k = 0; k < kn; k++) {
		__m256 w0 = _mm256_load_ps(panel + (size_t)k * GEMM_NR);
		__m256 w1 = _mm256_load_ps(panel + (size_t)k * GEMM_NR + 8);
		for (int i = 0; i < MB; i++) {
			__m256 xb = _mm256_broadcast_ss(x + i * ldx + k);
			acc[i][0] = _mm256_fmadd_ps(xb, w0, acc[i][0]);
			acc[i][1] = _mm256_fmadd_ps(xb, w1, acc[i][1]);
		}
	}
	for (int i = 0; i < MB; i++) {
		_mm256_storeu_ps(c + i * ldc, acc[i][0]);
		_mm256_storeu_ps(c + i * ldc + 8, acc[i][1]);
	}
}

static AVX2_FN void gemm_micro_any(int mb, int kn, const float *panel, const float *x, size_t ldx,
                                   float *c, size_t ldc, bool accumulate)
{
	switch (mb) {
	case 6:
		gemm_micro(6, kn, panel, x, ldx, c, ldc, accumulate);
		break;
	case 5:
		gemm_micro(5, kn, panel, x, ldx, c, ldc, accumulate);
		break;
	case 4:
		gemm_micro(4, kn, panel, x, ldx, c, ldc, accumulate);
		break;
	case 3:
		gemm_micro(3, kn, panel, x, ldx, c, ldc, accumulate);
		break;
	case 2:
		gemm_micro(2, kn, panel, x, ldx, c, ldc, accumulate);
		break;
	default:
		gemm_micro(1, kn, panel, x, ldx, c, ldc, accumulate);
		break;
	}
}

/* --------------------------------------------------- AVX-512 (when present)
 * The packed panel holds 16 floats per column: one zmm.  The micro kernel
 * keeps 12 batch rows in 12 zmm accumulators (one load, 12 broadcast-FMAs
 * per column), twice the work per instruction of the AVX2 one.  Decode
 * rows (dot_row512) start with a masked head so that their 512-bit loads
 * never split a cache line (GGUF rows are only 32-byte aligned). */
#define AVX512_TARGET "avx512f,avx512bw,avx512vl,avx2,fma,f16c"
#define AVX512_FN __attribute__((target(AVX512_TARGET)))
#define AVX512_INLINE static inline __attribute__((always_inline, target(AVX512_TARGET)))
#define GEMM_MR_512 12

AVX512_INLINE void gemm_micro512(int MB, int kn, const float *panel, const float *x, size_t ldx,
                                 float *c, size_t ldc, bool accumulate)
{
	__m512 acc[GEMM_MR_512];
	for (int i = 0; i < MB; i++)
		acc[i] = accumulate ? _mm512_loadu_ps(c + i * ldc) : _mm512_setzero_ps();
	for (int k = 0; k < kn; k++) {
		__m512 w = _mm512_load_ps(panel + (size_t)k * GEMM_NR);
		for (int i = 0; i < MB; i++)
			acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(x[i * ldx + k]), w, acc[i]);
	}
	for (int i = 0; i < MB; i++)
		_mm512_storeu_ps(c + i * ldc, acc[i]);
}

static AVX512_FN void gemm_micro_any_512(int mb, int kn, const float *panel, const float *x,
                                         size_t ldx, float *c, size_t ldc, bool accumulate)
{
	switch (mb) {
#define MICRO512_CASE(M)                                                                           \
	case M:                                                                                    \
		gemm_micro512(M, kn, panel, x, ldx, c, ldc, accumulate);                           \
		break;
		MICRO512_CASE(12)
		MICRO512_CASE(11)
		MICRO512_CASE(10)
		MICRO512_CASE(9)
		MICRO512_CASE(8)
		MICRO512_CASE(7)
		MICRO512_CASE(6)
		MICRO512_CASE(5)
		MICRO512_CASE(4)
		MICRO512_CASE(3)
		MICRO512_CASE(2)
#undef MICRO512_CASE
	default:
		gemm_micro512(1, kn, panel, x, ldx, c, ldc, accumulate);
		break;
	}
}


/* 16 weights of a row from column k as fp32; lanes outside m are zero. */
AVX512_INLINE __m512 load16(int type, const uint8_t *row, int k, __mmask16 m)
{
	switch (type) {
	case GGML_TYPE_F16:
		return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + k));
	case GGML_TYPE_BF16:
		return _mm512_castsi512_ps(_mm512_slli_epi32(
		    _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + k)),
		    16));
	default:
		return _mm512_maskz_loadu_ps(m, (const float *)row + k);
	}
}

/* The same, all 16 lanes (plain loads: the hot loops). */
AVX512_INLINE __m512 load16_full(int type, const uint8_t *row, int k)
{
	switch (type) {
	case GGML_TYPE_F16:
		return _mm512_cvtph_ps(
		    _mm256_loadu_si256((const __m256i *)((const uint16_t *)row + k)));
	case GGML_TYPE_BF16:
		return _mm512_castsi512_ps(_mm512_slli_epi32(
		    _mm512_cvtepu16_epi32(
		        _mm256_loadu_si256((const __m256i *)((const uint16_t *)row + k))),
		    16));
	default:
		return _mm512_loadu_ps((const float *)row + k);
	}
}

/* Decode: one row times one x as one sequential stream.  The first few
 * columns (masked) bring the weight pointer to a 64-byte boundary, so no
 * 512-bit load of the loop splits a cache line whatever GGUF's 32-byte
 * alignment put the tensor at; four accumulators cover the FMA latency. */
AVX512_INLINE float dot_row512(int type, const uint8_t *row, const float *x, int cols)
{
	int esz = type == GGML_TYPE_F32 ? 4 : 2;
	int head = (int)((64 - ((uintptr_t)row & 63)) & 63) / esz;
	head = head > cols ? cols : head > 15 ? 15 : head;
	__m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
	if (head) {
		__mmask16 m = cpu_lanes16_mask(head);
		a0 = _mm512_mul_ps(load16(type, row, 0, m), _mm512_maskz_loadu_ps(m, x));
	}
	int k = head;
	for (; k + 64 <= cols; k += 64) {
		a0 = _mm512_fmadd_ps(load16_full(type, row, k), _mm512_loadu_ps(x + k), a0);
		a1 = _mm512_fmadd_ps(load16_full(type, row, k + 16), _mm512_loadu_ps(x + k + 16),
		                     a1);
		a2 = _mm512_fmadd_ps(load16_full(type, row, k + 32), _mm512_loadu_ps(x + k + 32),
		                     a2);
		a3 = _mm512_fmadd_ps(load16_full(type, row, k + 48), _mm512_loadu_ps(x + k + 48),
		                     a3);
	}
	for (; k < cols; k += 16) {
		__mmask16 m = cpu_lanes16_mask(cols - k);
		a1 = _mm512_fmadd_ps(load16(type, row, k, m), _mm512_maskz_loadu_ps(m, x + k), a1);
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

/* Small batches: a register tile of RB weight rows x BB batch rows, dot
 * products over the whole row (RB*BB <= 24 accumulators).  The weight
 * vectors are converted once and used BB times; x rows come from L1/L2.
 * No packing, so it wins over the packed GEMM until the batch is large. */
AVX512_INLINE void tile512(int type, int RB, int BB, const uint8_t *w, size_t row_bytes,
                           const float *x, int cols, float *y, int rows, const float *bias)
{
	__m512 acc[6][8];
	_Pragma("GCC unroll 24")
	for (int i = 0; i < RB; i++)
		_Pragma("GCC unroll 24")
		for (int j = 0; j < BB; j++)
			acc[i][j] = _mm512_setzero_ps();
	int k16 = cols & ~15, esz = type == GGML_TYPE_F32 ? 4 : 2;
	for (int k = 0; k < k16; k += 16) {
		__m512 wv[6];
		_Pragma("GCC unroll 24")
		for (int i = 0; i < RB; i++) {
			/* the hardware prefetcher alone leaves these few streams
			 * latency-bound when the FMAs between loads are many */
			_mm_prefetch((const char *)w + (size_t)i * row_bytes + (size_t)k * esz +
			                 TUNING_PREFETCH_BYTES,
			             _MM_HINT_T0);
			wv[i] = load16_full(type, w + (size_t)i * row_bytes, k);
		}
		_Pragma("GCC unroll 24")
		for (int j = 0; j < BB; j++) {
			__m512 xv = _mm512_loadu_ps(x + (size_t)j * cols + k);
			_Pragma("GCC unroll 24")
			for (int i = 0; i < RB; i++)
				acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
		}
	}
	if (k16 < cols) {
		__mmask16 m = cpu_lanes16_mask(cols - k16);
		__m512 wv[6];
		_Pragma("GCC unroll 24")
		for (int i = 0; i < RB; i++)
			wv[i] = load16(type, w + (size_t)i * row_bytes, k16, m);
		_Pragma("GCC unroll 24")
		for (int j = 0; j < BB; j++) {
			__m512 xv = _mm512_maskz_loadu_ps(m, x + (size_t)j * cols + k16);
			_Pragma("GCC unroll 24")
			for (int i = 0; i < RB; i++)
				acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
		}
	}
	_Pragma("GCC unroll 24")
	for (int i = 0; i < RB; i++)
		_Pragma("GCC unroll 24")
		for (int j = 0; j < BB; j++)
			y[(size_t)j * rows + i] =
			    _mm512_reduce_add_ps(acc[i][j]) + (bias ? bias[i] : 0.0f);
}

/* Weight rows per tile for a batch tile of BB rows (RB * BB <= 24). */
#define TILE512_RB(BB) ((BB) >= 7 ? 3 : (BB) >= 5 ? 4 : 6)
/* Batch rows per tile. */
#define TILE512_BB 8

/* Rows [r0, r1) for batch rows [b, b + BB) with the tile shape for BB. */
#define TILE512_CASE(TYPE, BB)                                                                     \
	case BB: {                                                                                 \
		int r = r0;                                                                        \
		for (; r + TILE512_RB(BB) <= r1; r += TILE512_RB(BB))                              \
			tile512(TYPE, TILE512_RB(BB), BB, base + r * rb, rb, xb, cols, yb + r,     \
			        rows, bias ? bias + r : NULL);                                     \
		for (; r < r1; r++)                                                                \
			tile512(TYPE, 1, BB, base + r * rb, rb, xb, cols, yb + r, rows,            \
			        bias ? bias + r : NULL);                                           \
		break;                                                                             \
	}

/* The DOT_AVX512 family: B == 1 streams each row once (dot_row512); larger
 * batches run register tiles over batch chunks of TILE512_BB; the caller
 * hands over blocks of MATMUL_BLOCK_ROWS_BATCH rows, which stay in L2
 * across the chunks. */
#define DEFINE_ROWS_AVX512(NAME, TYPE)                                                             \
	static AVX512_FN void NAME(const struct matmul_job *job, const float *x, int B, int r0,    \
	                           int r1)                                                         \
	{                                                                                          \
		const struct weight_matrix *w = job->w;                                            \
		int cols = w->cols, rows = w->rows;                                                \
		const uint8_t *base = (const uint8_t *)w->data;                                    \
		size_t rb = w->row_bytes;                                                          \
		const float *bias = job->bias;                                                     \
		if (B == 1) {                                                                      \
			for (int r = r0; r < r1; r++)                                              \
				job->y[r] = dot_row512(TYPE, base + r * rb, x, cols) +             \
				            (bias ? bias[r] : 0.0f);                               \
			return;                                                                    \
		}                                                                                  \
		for (int b = 0; b < B; b += TILE512_BB) {                                          \
			int bb = B - b < TILE512_BB ? B - b : TILE512_BB;                          \
			const float *xb = x + (size_t)b * cols;                                    \
			float *yb = job->y + (size_t)b * rows;                                     \
			switch (bb) {                                                              \
				TILE512_CASE(TYPE, 8)                                              \
				TILE512_CASE(TYPE, 7)                                              \
				TILE512_CASE(TYPE, 6)                                              \
				TILE512_CASE(TYPE, 5)                                              \
				TILE512_CASE(TYPE, 4)                                              \
				TILE512_CASE(TYPE, 3)                                              \
				TILE512_CASE(TYPE, 2)                                              \
				TILE512_CASE(TYPE, 1)                                              \
			}                                                                          \
		}                                                                                  \
	}

DEFINE_ROWS_AVX512(rows_avx512_f32, GGML_TYPE_F32)
DEFINE_ROWS_AVX512(rows_avx512_f16, GGML_TYPE_F16)
DEFINE_ROWS_AVX512(rows_avx512_bf16, GGML_TYPE_BF16)

/* Rows [r, r+nv) (nv <= 16) for batch rows x(B, cols) into y(B, rows); a
 * partial tile goes through ctile (B, 16) so y is only written in range. */
AVX2_INLINE void gemm_row_tile(int type, bool z, const struct matmul_job *job, const float *x,
                               float *y, int B, int r, int nv, float *panel, float *ctile)
{
	const struct weight_matrix *w = job->w;
	int cols = w->cols, rows = w->rows;
	const uint8_t *wr = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
	bool full = nv == GEMM_NR;
	float *c = full ? y + r : ctile;
	size_t ldc = full ? (size_t)rows : GEMM_NR;
	for (int kc = 0; kc < cols; kc += GEMM_KC) {
		int kn = cols - kc < GEMM_KC ? cols - kc : GEMM_KC;
		gemm_pack(type, wr, w->row_bytes, nv, kc, kn, panel);
		int mr = z ? GEMM_MR_512 : GEMM_MR;
		for (int b = 0; b < B; b += mr) {
			int mb = B - b < mr ? B - b : mr;
			if (z)
				gemm_micro_any_512(mb, kn, panel, x + (size_t)b * cols + kc,
				                   (size_t)cols, c + (size_t)b * ldc, ldc, kc > 0);
			else
				gemm_micro_any(mb, kn, panel, x + (size_t)b * cols + kc,
				               (size_t)cols, c + (size_t)b * ldc, ldc, kc > 0);
		}
	}
	for (int b = 0; b < B; b++) {
		float *yb = y + (size_t)b * rows + r;
		for (int i = 0; i < nv; i++)
			yb[i] = (full ? yb[i] : ctile[(size_t)b * GEMM_NR + i]) +
			        (job->bias ? job->bias[r + i] : 0.0f);
	}
}

/* The GEMM_AVX2 (Z false) and GEMM_AVX512 (Z true) families. */
#define DEFINE_GEMM_AVX2(NAME, TYPE, Z)                                                            \
	static AVX2_FN void NAME(const struct matmul_job *job, const float *x, int B, int r0,      \
	                         int r1)                                                           \
	{                                                                                          \
		float panel[GEMM_KC * GEMM_NR] __attribute__((aligned(64)));                       \
		float ctile[GEMM_BATCH * GEMM_NR];                                                 \
		int cols = job->w->cols, rows = job->w->rows;                                      \
		for (int c0 = 0; c0 < B; c0 += GEMM_BATCH) {                                       \
			int cb = B - c0 < GEMM_BATCH ? B - c0 : GEMM_BATCH;                        \
			for (int r = r0; r < r1; r += GEMM_NR) {                                   \
				int nv = r1 - r < GEMM_NR ? r1 - r : GEMM_NR;                      \
				gemm_row_tile(TYPE, Z, job, x + (size_t)c0 * cols,                 \
				              job->y + (size_t)c0 * rows, cb, r, nv, panel,        \
				              ctile);                                              \
			}                                                                          \
		}                                                                                  \
	}

DEFINE_GEMM_AVX2(gemm_avx2_f32, GGML_TYPE_F32, false)
DEFINE_GEMM_AVX2(gemm_avx2_f16, GGML_TYPE_F16, false)
DEFINE_GEMM_AVX2(gemm_avx2_bf16, GGML_TYPE_BF16, false)
DEFINE_GEMM_AVX2(gemm_avx2_q8_0, GGML_TYPE_Q8_0, false)
DEFINE_GEMM_AVX2(gemm_avx512_q8_0, GGML_TYPE_Q8_0, true)
DEFINE_GEMM_AVX2(gemm_avx512_f32, GGML_TYPE_F32, true)
DEFINE_GEMM_AVX2(gemm_avx512_f16, GGML_TYPE_F16, true)
DEFINE_GEMM_AVX2(gemm_avx512_bf16, GGML_TYPE_BF16, true)

/* One row times one x: the whole row is read as one sequential stream (four
 * accumulators cover the FMA latency), which the hardware prefetcher follows
 * better than four interleaved short rows when rows are a few KB. */
AVX2_INLINE float dot_row(int type, const uint8_t *row, const float *x, int cols, int k8)
{
	__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
	int k = 0;
	for (; k + 32 <= k8; k += 32) {
		a0 = _mm256_fmadd_ps(load8(type, row, k), _mm256_loadu_ps(x + k), a0);
		a1 = _mm256_fmadd_ps(load8(type, row, k + 8), _mm256_loadu_ps(x + k + 8), a1);
		a2 = _mm256_fmadd_ps(load8(type, row, k + 16), _mm256_loadu_ps(x + k + 16), a2);
		a3 = _mm256_fmadd_ps(load8(type, row, k + 24), _mm256_loadu_ps(x + k + 24), a3);
	}
	for (; k < k8; k += 8)
		a0 = _mm256_fmadd_ps(load8(type, row, k), _mm256_loadu_ps(x + k), a0);
	float s = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
	if (k8 < cols) {
		float tail[8];
		row_chunk_to_f32(type, row, k8, cols - k8, tail);
		for (int t = 0; t < cols - k8; t++)
			s += tail[t] * x[k8 + t];
	}
	return s;
}

/* The DOT_AVX2 family: decode-sized batches (< 4 rows) stream each weight
 * row sequentially (dot_row); larger ones use 2 weight rows x 4 batch rows
 * register tiles so the conversion is amortised over 4 multiply-adds. */
#define DEFINE_ROWS_AVX2(NAME, TYPE)                                                               \
	static AVX2_FN void NAME(const struct matmul_job *job, const float *x, int B, int r0,      \
	                         int r1)                                                           \
	{                                                                                          \
		const struct weight_matrix *w = job->w;                                            \
		int cols = w->cols, rows = w->rows, k8 = cols & ~7;                                \
		const uint8_t *base = (const uint8_t *)w->data;                                    \
		size_t rb = w->row_bytes;                                                          \
		const float *bias = job->bias;                                                     \
		if (B < 4) {                                                                       \
			for (int r = r0; r < r1; r++)                                              \
				for (int b = 0; b < B; b++)                                        \
					job->y[(size_t)b * rows + r] =                             \
					    dot_row(TYPE, base + r * rb, x + (size_t)b * cols,     \
					            cols, k8) +                                    \
					    (bias ? bias[r] : 0.0f);                               \
			return;                                                                    \
		}                                                                                  \
		for (int r = r0; r < r1; r += 2) {                                                 \
			int two = r + 2 <= r1;                                                     \
			const float *br = bias ? bias + r : NULL;                                  \
			int b = 0;                                                                 \
			for (; b + 4 <= B; b += 4) {                                               \
				if (two)                                                           \
					tile(TYPE, 2, 4, base + r * rb, rb, x + (size_t)b * cols,  \
					     cols, k8, job->y + (size_t)b * rows + r, rows, br);   \
				else                                                               \
					tile(TYPE, 1, 4, base + r * rb, rb, x + (size_t)b * cols,  \
					     cols, k8, job->y + (size_t)b * rows + r, rows, br);   \
			}                                                                          \
			for (; b < B; b++)                                                         \
				tile(TYPE, two ? 2 : 1, 1, base + r * rb, rb,                      \
				     x + (size_t)b * cols, cols, k8,                               \
				     job->y + (size_t)b * rows + r, rows, br);                     \
		}                                                                                  \
	}

/* Q8_0 weights times Q8 activations in integers (as llama.cpp's
 * vec_dot_q8_0_q8_0): per 32 columns, |w| (unsigned) times x with w's sign
 * gives 16-bit pair sums, then 32-bit sums, scaled by both block scales. */
AVX2_INLINE void tile_q8(int RB, int BB, const uint8_t *w, size_t row_bytes,
                         const struct block_q8_x *xq, int nblk, float *y, int rows,
                         const float *bias)
{
	__m256 acc[4][4];
	const __m256i ones = _mm256_set1_epi16(1);
	for (int i = 0; i < RB; i++)
		for (int j = 0; j < BB; j++)
			acc[i][j] = _mm256_setzero_ps();
	for (int blk = 0; blk < nblk; blk++) {
		__m256i wq[4], aw[4];
		float dw[4];
		for (int i = 0; i < RB; i++) {
			const struct block_q8_0 *b =
			    (const struct block_q8_0 *)(w + i * row_bytes) + blk;
			wq[i] = _mm256_loadu_si256((const __m256i *)b->qs);
			aw[i] = _mm256_sign_epi8(wq[i], wq[i]);
			dw[i] = _cvtsh_ss(b->d);
		}
		for (int j = 0; j < BB; j++) {
			const struct block_q8_x *xb = xq + (size_t)j * nblk + blk;
			__m256i xv = _mm256_loadu_si256((const __m256i *)xb->qs);
			for (int i = 0; i < RB; i++) {
				__m256i p16 =
				    _mm256_maddubs_epi16(aw[i], _mm256_sign_epi8(xv, wq[i]));
				__m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
				acc[i][j] =
				    _mm256_fmadd_ps(_mm256_set1_ps(dw[i] * xb->d), p, acc[i][j]);
			}
		}
	}
	for (int i = 0; i < RB; i++)
		for (int j = 0; j < BB; j++)
			y[(size_t)j * rows + i] = hsum8(acc[i][j]) + (bias ? bias[i] : 0.0f);
}

/* One Q8_0 row times one quantized x, blocks in order, two accumulators. */
AVX2_INLINE float dot_row_q8(const uint8_t *row, const struct block_q8_x *xq, int nblk)
{
	const struct block_q8_0 *wb = (const struct block_q8_0 *)row;
	const __m256i ones = _mm256_set1_epi16(1);
	__m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
	for (int b = 0; b < nblk; b++) {
		__m256i wq = _mm256_loadu_si256((const __m256i *)wb[b].qs);
		__m256i xv = _mm256_loadu_si256((const __m256i *)xq[b].qs);
		__m256i p16 =
		    _mm256_maddubs_epi16(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(xv, wq));
		__m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
		__m256 d = _mm256_set1_ps(_cvtsh_ss(wb[b].d) * xq[b].d);
		acc[b & 1] = _mm256_fmadd_ps(d, p, acc[b & 1]);
	}
	return hsum8(_mm256_add_ps(acc[0], acc[1]));
}

/* The Q8_AVX2 family: decode-sized batches stream each row once, larger
 * ones run 2 x 4 tiles.  xq: (B, cols/32). */
static AVX2_FN void rows_avx2_q8(const struct matmul_job *job, const struct block_q8_x *xq, int B,
                                 int r0, int r1)
{
	const struct weight_matrix *w = job->w;
	int rows = w->rows, nblk = w->cols / 32;
	const uint8_t *base = (const uint8_t *)w->data;
	size_t rb = w->row_bytes;
	if (B < 4) {
		for (int r = r0; r < r1; r++)
			for (int b = 0; b < B; b++)
				job->y[(size_t)b * rows + r] =
				    dot_row_q8(base + r * rb, xq + (size_t)b * nblk, nblk) +
				    (job->bias ? job->bias[r] : 0.0f);
		return;
	}
	for (int r = r0; r < r1;) {
		int rr = r + 2 <= r1 ? 2 : 1;
		const float *br = job->bias ? job->bias + r : NULL;
		int b = 0;
		for (; b + 4 <= B; b += 4) {
			const struct block_q8_x *xb = xq + (size_t)b * nblk;
			float *yb = job->y + (size_t)b * rows + r;
			if (rr == 2)
				tile_q8(2, 4, base + r * rb, rb, xb, nblk, yb, rows, br);
			else
				tile_q8(1, 4, base + r * rb, rb, xb, nblk, yb, rows, br);
		}
		for (; b < B; b++) {
			const struct block_q8_x *xb = xq + (size_t)b * nblk;
			float *yb = job->y + (size_t)b * rows + r;
			if (rr == 2)
				tile_q8(2, 1, base + r * rb, rb, xb, nblk, yb, rows, br);
			else
				tile_q8(1, 1, base + r * rb, rb, xb, nblk, yb, rows, br);
		}
		r += rr;
	}
}

DEFINE_ROWS_AVX2(rows_avx2_f32, GGML_TYPE_F32)
DEFINE_ROWS_AVX2(rows_avx2_f16, GGML_TYPE_F16)
DEFINE_ROWS_AVX2(rows_avx2_bf16, GGML_TYPE_BF16)
DEFINE_ROWS_AVX2(rows_avx2_q8_0, GGML_TYPE_Q8_0)

#endif

bool matmul_have_avx2(void)
{
	return cpu_has_avx2();
}

bool matmul_have_avx512(void)
{
	return cpu_has_avx512();
}

/* ------------------------------------------------------- kernel families */

/* What a family reads of x: x itself, x quantized to Q8 (xq), x
 * transposed for the panel kernels (xt, which read x itself at B == 1), or
 * x quantized for the qdot kernels (one copy per activation format). */
enum family_input { INPUT_X, INPUT_Q8, INPUT_XT, INPUT_QDOT };

/* The qdot activation formats: 32-value blocks (Q8_0, Q4_0 weights) and
 * 256-value blocks (the K-quants); a dispatch quantizes x once per format
 * its jobs read. */
enum qdot_format { QDOT_FORMAT_32, QDOT_FORMAT_256, N_QDOT_FORMATS };

static enum qdot_format qdot_format_of(int type)
{
	return qdot_block_values((enum ggml_type)type) == 256 ? QDOT_FORMAT_256 : QDOT_FORMAT_32;
}

/* A weight type that reads the format, to quantize x with. */
static enum ggml_type qdot_format_type(enum qdot_format f)
{
	return f == QDOT_FORMAT_256 ? GGML_TYPE_Q4_K : GGML_TYPE_Q8_0;
}

#ifdef MATMUL_X86
#define X86_FN(fn) fn
#else
#define X86_FN(fn) NULL
#endif

/* clang-format off */
static const struct family {
	const char *name;
	enum family_input input;
	bool (*cpu_has)(void);     /* NULL: every CPU */
	bool reads_panels;         /* runs only on weights with panels */
	enum matmul_family twin;   /* the plain-C family the tests compare it with */
	rows_x_fn rows_x[WTYPE_N_STORED]; /* INPUT_X, by enum wtype_stored; NULL: not for that type */
	rows_q8_fn rows_q8;        /* INPUT_Q8 (Q8_0 weights) */
	bool qdot_best;            /* INPUT_QDOT: the best qdot variant, else its twin */
	/* INPUT_QDOT with reads_panels: the packed copy (qpack.h) of the types
	 * that have one */
} families[MATMUL_FAMILY_COUNT] = {
	[MATMUL_FAMILY_SCALAR] = {"scalar", INPUT_X, NULL, false, MATMUL_FAMILY_SCALAR,
		{rows_scalar, rows_scalar, rows_scalar, rows_scalar, rows_scalar, rows_scalar,
		 rows_scalar, rows_scalar, rows_scalar}, NULL},
	[MATMUL_FAMILY_Q8_SCALAR] = {"q8_scalar", INPUT_Q8, NULL, false, MATMUL_FAMILY_Q8_SCALAR,
		{NULL}, rows_q8_scalar},
	[MATMUL_FAMILY_PANELS_SCALAR] = {"panels_scalar", INPUT_X, NULL, true,
		MATMUL_FAMILY_PANELS_SCALAR,
		{rows_panels_scalar, rows_panels_scalar, rows_panels_scalar, NULL}, NULL},
	[MATMUL_FAMILY_DOT_AVX2] = {"dot_avx2", INPUT_X, cpu_has_avx2, false, MATMUL_FAMILY_SCALAR,
		{X86_FN(rows_avx2_f32), X86_FN(rows_avx2_f16), X86_FN(rows_avx2_bf16),
		 X86_FN(rows_avx2_q8_0)}, NULL},
	[MATMUL_FAMILY_Q8_AVX2] = {"q8_avx2", INPUT_Q8, cpu_has_avx2, false,
		MATMUL_FAMILY_Q8_SCALAR, {NULL}, X86_FN(rows_avx2_q8)},
	[MATMUL_FAMILY_GEMM_AVX2] = {"gemm_avx2", INPUT_X, cpu_has_avx2, false, MATMUL_FAMILY_SCALAR,
		{X86_FN(gemm_avx2_f32), X86_FN(gemm_avx2_f16), X86_FN(gemm_avx2_bf16),
		 X86_FN(gemm_avx2_q8_0)}, NULL},
	[MATMUL_FAMILY_DOT_AVX512] = {"dot_avx512", INPUT_X, cpu_has_avx512, false,
		MATMUL_FAMILY_SCALAR,
		{X86_FN(rows_avx512_f32), X86_FN(rows_avx512_f16), X86_FN(rows_avx512_bf16), NULL},
		NULL},
	[MATMUL_FAMILY_GEMM_AVX512] = {"gemm_avx512", INPUT_X, cpu_has_avx512, false,
		MATMUL_FAMILY_SCALAR,
		{X86_FN(gemm_avx512_f32), X86_FN(gemm_avx512_f16), X86_FN(gemm_avx512_bf16),
		 X86_FN(gemm_avx512_q8_0)}, NULL},
	[MATMUL_FAMILY_PANELS] = {"panels", INPUT_XT, cpu_has_avx512, true,
		MATMUL_FAMILY_PANELS_SCALAR, {NULL}, NULL},
	[MATMUL_FAMILY_QDOT_SCALAR] = {"qdot_scalar", INPUT_QDOT, NULL, false,
		MATMUL_FAMILY_QDOT_SCALAR, {NULL}, NULL, false},
	[MATMUL_FAMILY_QDOT] = {"qdot", INPUT_QDOT, cpu_has_avx2, false,
		MATMUL_FAMILY_QDOT_SCALAR, {NULL}, NULL, true},
	[MATMUL_FAMILY_QPACK_SCALAR] = {"qpack_scalar", INPUT_QDOT, NULL, true,
		MATMUL_FAMILY_QPACK_SCALAR, {NULL}, NULL, false},
	[MATMUL_FAMILY_QPACK] = {"qpack", INPUT_QDOT, cpu_has_avx2, true,
		MATMUL_FAMILY_QPACK_SCALAR, {NULL}, NULL, true},
	/* qpack_amx_rows_get's kernels, not qpack_rows_get's (prepare_qdot_x) */
	[MATMUL_FAMILY_QPACK_AMX] = {"qpack_amx", INPUT_QDOT, cpu_has_amx_int8, true,
		MATMUL_FAMILY_QPACK_SCALAR, {NULL}, NULL, true},
};
/* clang-format on */

/* ISA levels, the table's first index.  AVX2_EXACT is MATMUL_ISA_AVX2_F32:
 * AVX2 with Q8_0 dequantized, so x stays exact. */
enum level {
	LEVEL_GENERIC,
	LEVEL_AVX2_EXACT,
	LEVEL_AVX2,
	LEVEL_AVX2_PACKED,
	LEVEL_AVX512,
	LEVEL_AVX512_PANELS,
	LEVEL_AVX512_AMX, /* packed, a batch of 12 or more, and AMX int8 */
	N_LEVELS
};

/* Batch-size classes, the table's last index: their edges are the batch
 * sizes at which the table below switches family. */
enum batch_class { BATCH_1, BATCH_2_5, BATCH_6_11, BATCH_12_UP, N_BATCH_CLASSES };

static int batch_class(int B)
{
	return B <= 1 ? BATCH_1 : B < 6 ? BATCH_2_5 : B < 12 ? BATCH_6_11 : BATCH_12_UP;
}

/* clang-format off */
#define SCALAR MATMUL_FAMILY_SCALAR
#define DOT2 MATMUL_FAMILY_DOT_AVX2
#define Q8INT MATMUL_FAMILY_Q8_AVX2
#define GEMM2 MATMUL_FAMILY_GEMM_AVX2
#define DOT512 MATMUL_FAMILY_DOT_AVX512
#define GEMM512 MATMUL_FAMILY_GEMM_AVX512
#define PANEL MATMUL_FAMILY_PANELS
#define QDOT MATMUL_FAMILY_QDOT
#define QPACK MATMUL_FAMILY_QPACK
#define QAMX MATMUL_FAMILY_QPACK_AMX
#define ALL4(f) {f, f, f, f}
/* The qdot types (Q4_0, Q4_K, Q5_K, Q6_K, MXFP4) at every level but the
 * exact ones: only the qdot kernels read them, at every batch size. */
#define QDOT_TYPES \
		[WTYPE_Q4_0] = ALL4(QDOT), [WTYPE_Q4_K] = ALL4(QDOT), [WTYPE_Q5_K] = ALL4(QDOT), \
		[WTYPE_Q6_K] = ALL4(QDOT), [WTYPE_MXFP4] = ALL4(QDOT)
/* The same where the backend packed the weights (qpack.h): the types with
 * a packed layout read it at every batch size. */
#define QPACK_TYPES \
		[WTYPE_Q4_0] = ALL4(QPACK), [WTYPE_Q4_K] = ALL4(QPACK), [WTYPE_Q5_K] = ALL4(QPACK), \
		[WTYPE_Q6_K] = ALL4(QPACK), [WTYPE_MXFP4] = ALL4(QPACK)
/* The one place a family is chosen: [level][type][batch class].
 *   generic        plain C for everything;
 *   AVX2 (exact)   dot tiles below 12 rows, where the packed GEMM's
 *                  per-call packing costs more than it saves, the GEMM
 *                  from 12; Q8_0 takes the integer kernels below 12 rows
 *                  except in the exact level, which leaves the other
 *                  block types to plain C (they have no float kernels);
 *   AVX-512        the GEMM from 6 rows (its 12-row micro-kernel repays
 *                  the packing sooner); Q8_0 takes qdot at every batch
 *                  size, ahead of both the Q8 family and the GEMM there
 *                  (compare with matmul-perf and MATMUL_FAMILY; the AVX2
 *                  level keeps Q8 until qdot is compared on such a CPU);
 *   with panels    the panel kernels at every batch size (F32/F16/BF16),
 *                  the packed kernels (QPACK) for the block types the
 *                  backend packed, on AVX2 machines as on AVX-512 ones;
 *   with AMX       as with panels, but packed Q8_0 and Q4_0 batches of 12
 *                  or more on AMX int8 tiles (QPACK_AMX), where the CPU
 *                  has them and Linux granted the tile state.
 * Without panels the AVX-512 level still runs for matrices the loader
 * dequantized to F16 (they get no panels, to avoid holding them twice). */
static const enum matmul_family kernel_table[N_LEVELS][WTYPE_N_STORED][N_BATCH_CLASSES] = {
	/*                      B = 1    2..5    6..11    12.. */
	[LEVEL_GENERIC] = {
		/* every type */  ALL4(SCALAR), ALL4(SCALAR), ALL4(SCALAR), ALL4(SCALAR),
		ALL4(SCALAR), ALL4(SCALAR), ALL4(SCALAR), ALL4(SCALAR), ALL4(SCALAR)},
	[LEVEL_AVX2_EXACT] = {
		[WTYPE_F32]  = {DOT2,   DOT2,   DOT2,    GEMM2},
		[WTYPE_F16]  = {DOT2,   DOT2,   DOT2,    GEMM2},
		[WTYPE_BF16] = {DOT2,   DOT2,   DOT2,    GEMM2},
		[WTYPE_Q8_0] = {DOT2,   DOT2,   DOT2,    GEMM2},
		[WTYPE_Q4_0] = ALL4(SCALAR), [WTYPE_Q4_K] = ALL4(SCALAR), [WTYPE_Q5_K] = ALL4(SCALAR),
		[WTYPE_Q6_K] = ALL4(SCALAR), [WTYPE_MXFP4] = ALL4(SCALAR)},
	[LEVEL_AVX2] = {
		[WTYPE_F32]  = {DOT2,   DOT2,   DOT2,    GEMM2},
		[WTYPE_F16]  = {DOT2,   DOT2,   DOT2,    GEMM2},
		[WTYPE_BF16] = {DOT2,   DOT2,   DOT2,    GEMM2},
		[WTYPE_Q8_0] = {Q8INT,  Q8INT,  Q8INT,   GEMM2},
		QDOT_TYPES},
	[LEVEL_AVX2_PACKED] = {
		[WTYPE_F32]  = {DOT2,   DOT2,   DOT2,    GEMM2},
		[WTYPE_F16]  = {DOT2,   DOT2,   DOT2,    GEMM2},
		[WTYPE_BF16] = {DOT2,   DOT2,   DOT2,    GEMM2},
		[WTYPE_Q8_0] = ALL4(QPACK),
		QPACK_TYPES},
	[LEVEL_AVX512] = {
		[WTYPE_F32]  = {DOT512, DOT512, GEMM512, GEMM512},
		[WTYPE_F16]  = {DOT512, DOT512, GEMM512, GEMM512},
		[WTYPE_BF16] = {DOT512, DOT512, GEMM512, GEMM512},
		[WTYPE_Q8_0] = ALL4(QDOT),
		QDOT_TYPES},
	[LEVEL_AVX512_PANELS] = {
		[WTYPE_F32]  = ALL4(PANEL),
		[WTYPE_F16]  = ALL4(PANEL),
		[WTYPE_BF16] = ALL4(PANEL),
		[WTYPE_Q8_0] = ALL4(QPACK),
		QPACK_TYPES},
	[LEVEL_AVX512_AMX] = { /* only the types with AMX kernels reach it */
		[WTYPE_Q8_0] = {QPACK,  QPACK,  QPACK,   QAMX},
		[WTYPE_Q4_0] = {QPACK,  QPACK,  QPACK,   QAMX}},
};
/* clang-format on */
#undef SCALAR
#undef DOT2
#undef Q8INT
#undef GEMM2
#undef DOT512
#undef GEMM512
#undef PANEL
#undef QDOT
#undef QPACK
#undef QAMX
#undef QDOT_TYPES
#undef QPACK_TYPES
#undef ALL4

static enum level table_level(enum matmul_isa isa, const struct weight_matrix *w)
{
	if (isa == MATMUL_ISA_GENERIC || !cpu_has_avx2())
		return LEVEL_GENERIC;
	if (isa == MATMUL_ISA_AVX2_F32)
		return LEVEL_AVX2_EXACT;
	if (!cpu_has_avx512())
		return w->panels ? LEVEL_AVX2_PACKED : LEVEL_AVX2;
	return w->panels ? LEVEL_AVX512_PANELS : LEVEL_AVX512;
}

enum matmul_family matmul_family_pick(enum matmul_isa isa, const struct weight_matrix *w, int B)
{
	int t = wtype_stored_index(w->type);
	if (t < 0)
		return MATMUL_FAMILY_SCALAR;
	enum level level = table_level(isa, w);
	/* the AMX check asks the kernel for the tile state: only for products
	 * that could take the AMX family */
	if (level == LEVEL_AVX512_PANELS && batch_class(B) == BATCH_12_UP &&
	    qpack_amx_rows_get(w->type) && cpu_has_amx_int8())
		level = LEVEL_AVX512_AMX;
	return kernel_table[level][t][batch_class(B)];
}

/* The family a job takes when the buffer its family reads (xq or xt)
 * could not be allocated. */
static enum matmul_family fallback_family(enum matmul_family f, const struct weight_matrix *w,
                                          int B)
{
	switch (f) {
	case MATMUL_FAMILY_Q8_AVX2:
		return MATMUL_FAMILY_DOT_AVX2;
	case MATMUL_FAMILY_Q8_SCALAR:
	case MATMUL_FAMILY_QDOT:
	case MATMUL_FAMILY_QDOT_SCALAR:
	case MATMUL_FAMILY_QPACK: /* the stored layout: its pages come back from the file */
	case MATMUL_FAMILY_QPACK_SCALAR:
	case MATMUL_FAMILY_QPACK_AMX:
		return MATMUL_FAMILY_SCALAR;
	default: /* the panel kernels: what the table picks for the stored layout */
		return kernel_table[LEVEL_AVX512][wtype_stored_index(w->type)][batch_class(B)];
	}
}

static bool family_valid(enum matmul_family f)
{
	return (unsigned)f < MATMUL_FAMILY_COUNT;
}

bool matmul_family_runs(enum matmul_family f, const struct weight_matrix *w)
{
	int t = wtype_stored_index(w->type);
	if (!family_valid(f) || t < 0)
		return false;
	const struct family *fam = &families[f];
	if ((fam->cpu_has && !fam->cpu_has()) || (fam->reads_panels && !w->panels))
		return false;
	switch (fam->input) {
	case INPUT_Q8:
		return t == WTYPE_Q8_0 && fam->rows_q8;
	case INPUT_XT:
		return t == WTYPE_F32 || t == WTYPE_F16 || t == WTYPE_BF16;
	case INPUT_QDOT:
		return qdot_type_supported(w->type) && w->cols % qdot_block_values(w->type) == 0 &&
		       (!fam->reads_panels || qpack_supported(w->type)) &&
		       (f != MATMUL_FAMILY_QPACK_AMX || qpack_amx_rows_get(w->type));
	default:
		return fam->rows_x[t] != NULL;
	}
}

enum matmul_family matmul_family_twin(enum matmul_family f)
{
	return family_valid(f) ? families[f].twin : MATMUL_FAMILY_SCALAR;
}

bool matmul_family_rounds_activations(enum matmul_family f)
{
	return family_valid(f) && (families[f].input == INPUT_Q8 || families[f].input == INPUT_QDOT);
}

const char *matmul_family_name(enum matmul_family f)
{
	return family_valid(f) ? families[f].name : "?";
}

bool matmul_q8_rounds_activations(enum matmul_isa isa, int B)
{
	struct weight_matrix q8 = {.type = GGML_TYPE_Q8_0};
	return matmul_family_rounds_activations(matmul_family_pick(isa, &q8, B));
}

void matmul_activation_round(int ggml_type, const float *x, int n, float *out)
{
	enum ggml_type t = (enum ggml_type)ggml_type;
	if (!qdot_type_supported(t)) {
		memmove(out, x, (size_t)n * sizeof(float));
		return;
	}
	/* a block at a time: its scale depends only on its own values */
	int bv = qdot_block_values(t);
	_Alignas(64) unsigned char xq[512];
	if (qdot_act_bytes(t, bv) > sizeof(xq))
		return;
	for (int k = 0; k + bv <= n; k += bv) {
		qdot_act_quantize(t, x + k, bv, xq);
		qdot_act_dequantize(t, xq, bv, out + k);
	}
}

/* ---------------------------------------------------------------- driver */

/* Rows per unit of work handed to a thread, and decode blocks an owner
 * claims at once (util/tuning.h says why). */
#ifndef MATMUL_BLOCK_ROWS_DECODE /* overridable, to compare by hand */
#define MATMUL_BLOCK_ROWS_DECODE TUNING_MATMUL_BLOCK_ROWS_DECODE
#endif
#define MATMUL_OWNER_BLOCKS_DECODE TUNING_MATMUL_OWNER_BLOCKS_DECODE
#ifndef MATMUL_BLOCK_ROWS_BATCH
#define MATMUL_BLOCK_ROWS_BATCH TUNING_MATMUL_BLOCK_ROWS_BATCH
#endif
#define MATMUL_MAX_RANGES 64

/* The adjacent-line prefetcher pairs lines, hence two of them. */
struct matmul_span {
	_Alignas(128) _Atomic uint64_t v;
};

struct matmul_call {
	const float *x;              /* (B, cols) */
	const struct block_q8_x *xq; /* (B, cols/32): x quantized, for the Q8 families */
	const float *xt;             /* x transposed (panels_transpose_x), for the panel kernels */
	/* x quantized for the qdot kernels, per activation format: B vectors
	 * of qdot_xq_bytes bytes each, and the kernels each such job runs. */
	const void *qdot_xq[N_QDOT_FORMATS];
	size_t qdot_xq_bytes[N_QDOT_FORMATS];
	const struct qdot_kernels *qdot_k[MATMUL_MAX_JOBS];
	qpack_rows_fn qpack_k[MATMUL_MAX_JOBS]; /* the jobs of the qpack families */
	int B;
	const struct matmul_job *jobs;
	enum matmul_family fams[MATMUL_MAX_JOBS];
	int n_jobs;
	bool swiglu;    /* jobs[0] gate, jobs[1] up: rows of both, then the activation */
	bool swiglu_z;  /* the activation with AVX-512 */
	int total_rows; /* the row space split over threads */
	int block_rows;
	int n_ranges;
	/* One contiguous range of blocks per thread: (back << 32) | front.  The
	 * owner takes blocks from the front; a thread that has finished its own
	 * steals from the back of the others, so each thread reads one long
	 * stream and none waits at the end.  Each word has its own pair of
	 * cache lines: the owners claim a block every microsecond or two in
	 * decode, and words sharing a line (or the read-only fields above)
	 * made every claim a cross-core miss. */
	struct matmul_span span[MATMUL_MAX_RANGES];
};

/* gate[b][r0..r1) = silu(gate) * up for every batch row b. */
static void swiglu_scalar(float *gate, const float *up, int B, int ld, int r0, int r1)
{
	for (int b = 0; b < B; b++)
		for (int r = r0; r < r1; r++) {
			float g = gate[(size_t)b * ld + r];
			gate[(size_t)b * ld + r] = g / (1.0f + expf(-g)) * up[(size_t)b * ld + r];
		}
}

#ifdef MATMUL_X86
/* exp(x), Cephes' expf polynomial (relative error ~2e-7, constants
 * util/fastexp.h), inputs clamped to the range where the result is a finite
 * float. */
AVX512_INLINE __m512 exp512(__m512 x)
{
	x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
	__m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(FASTEXP_LOG2E)),
	                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(FASTEXP_LN2_HI), x);
	r = _mm512_fnmadd_ps(n, _mm512_set1_ps(FASTEXP_LN2_LO), r);
	__m512 p = _mm512_set1_ps(FASTEXP_P0);
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FASTEXP_P1));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FASTEXP_P2));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FASTEXP_P3));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FASTEXP_P4));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FASTEXP_P5));
	__m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
	return _mm512_scalef_ps(y, n);
}

static AVX512_FN void swiglu_avx512(float *gate, const float *up, int B, int ld, int r0, int r1)
{
	for (int b = 0; b < B; b++) {
		float *g = gate + (size_t)b * ld;
		const float *u = up + (size_t)b * ld;
		for (int r = r0; r < r1; r += 16) {
			__mmask16 m = cpu_lanes16_mask(r1 - r);
			__m512 gv = _mm512_maskz_loadu_ps(m, g + r);
			__m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), gv));
			__m512 s = _mm512_div_ps(gv, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
			_mm512_mask_storeu_ps(g + r, m,
			                      _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, u + r)));
		}
	}
}
#endif

/* Rows [r0, r1) of job j, its family handed only the input it reads. */
static void job_rows(const struct matmul_call *c, int j, int r0, int r1)
{
	const struct matmul_job *job = &c->jobs[j];
	const struct family *f = &families[c->fams[j]];
	switch (f->input) {
	case INPUT_Q8:
		f->rows_q8(job, c->xq, c->B, r0, r1);
		break;
	case INPUT_XT:
		panels_rows(job->w, job->bias, c->x, c->xt, c->B, job->y, r0, r1);
		break;
	case INPUT_QDOT: {
		enum qdot_format q = qdot_format_of(job->w->type);
		if (f->reads_panels)
			rows_qpack(job, c->qpack_k[j], c->qdot_xq[q], c->qdot_xq_bytes[q], c->B, r0,
			           r1);
		else
			rows_qdot(job, c->qdot_k[j], c->qdot_xq[q], c->qdot_xq_bytes[q], c->B, r0,
			          r1);
		break;
	}
	default:
		f->rows_x[wtype_stored_index(job->w->type)](job, c->x, c->B, r0, r1);
		break;
	}
}

/* Runs global rows [g0, g1) of the concatenated jobs (swiglu: of both). */
static void call_rows(const struct matmul_call *c, int g0, int g1)
{
	if (c->swiglu) {
		const struct matmul_job *gate = &c->jobs[0], *up = &c->jobs[1];
		job_rows(c, 0, g0, g1);
		job_rows(c, 1, g0, g1);
#ifdef MATMUL_X86
		if (c->swiglu_z) {
			swiglu_avx512(gate->y, up->y, c->B, gate->w->rows, g0, g1);
			return;
		}
#endif
		swiglu_scalar(gate->y, up->y, c->B, gate->w->rows, g0, g1);
		return;
	}
	int base = 0;
	for (int j = 0; j < c->n_jobs && g0 < g1; j++) {
		int rows = c->jobs[j].w->rows;
		int r0 = g0 - base, r1 = g1 - base;
		if (r0 < rows && r1 > 0) {
			r0 = r0 < 0 ? 0 : r0;
			r1 = r1 > rows ? rows : r1;
			job_rows(c, j, r0, r1);
		}
		base += rows;
	}
}

/* Next blocks of a range: up to `most` from the front (owner) or one from
 * the back (thief); the first, and *n of them, or -1 when the range is used
 * up. */
static int claim_blocks(_Atomic uint64_t *span, bool from_back, int most, int *n)
{
	uint64_t v = atomic_load_explicit(span, memory_order_relaxed);
	for (;;) {
		uint32_t front = (uint32_t)v, back = (uint32_t)(v >> 32);
		if (front >= back)
			return -1;
		uint32_t left = back - front;
		uint32_t k = from_back ? 1 : left < (uint32_t)most ? left : (uint32_t)most;
		uint64_t next = from_back ? ((uint64_t)(back - 1) << 32) | front : v + k;
		if (atomic_compare_exchange_weak_explicit(span, &v, next, memory_order_relaxed,
		                                          memory_order_relaxed)) {
			*n = (int)k;
			return (int)(from_back ? back - 1 : front);
		}
	}
}

/* Blocks [block, block + n). */
static void run_blocks(const struct matmul_call *c, int block, int n)
{
	int g0 = block * c->block_rows, rows = n * c->block_rows;
	int g1 = g0 + rows < c->total_rows ? g0 + rows : c->total_rows;
	call_rows(c, g0, g1);
}

/* Task t: range t front to back, then what is left of the others. */
static void matmul_task(void *ctx, int task, int thread)
{
	struct matmul_call *c = ctx;
	int b, n, most = c->B == 1 ? MATMUL_OWNER_BLOCKS_DECODE : 1;
	while ((b = claim_blocks(&c->span[task].v, false, most, &n)) >= 0)
		run_blocks(c, b, n);
	for (int k = 1; k < c->n_ranges; k++) {
		_Atomic uint64_t *other = &c->span[(task + k) % c->n_ranges].v;
		while ((b = claim_blocks(other, true, 1, &n)) >= 0)
			run_blocks(c, b, n);
	}
}

/* Rows per unit of work of a batch: the tile plan's row groups when every
 * job reads a packed copy that has one (the smallest, so that each job's
 * block stays in L2), else MATMUL_BLOCK_ROWS_BATCH. */
static int batch_block_rows(const struct matmul_call *c)
{
	int groups = 0;
	for (int j = 0; j < c->n_jobs; j++) {
		int g = c->jobs[j].w->plan_groups_per_block;
		if (families[c->fams[j]].input != INPUT_QDOT || !families[c->fams[j]].reads_panels ||
		    g <= 0)
			return MATMUL_BLOCK_ROWS_BATCH;
		groups = groups && groups < g ? groups : g;
	}
	return groups > 0 ? groups * QPACK_ROWS : MATMUL_BLOCK_ROWS_BATCH;
}

static void run_parallel(struct threadpool *pool, struct matmul_call *c)
{
	int n_threads = threadpool_size(pool);
	c->block_rows = c->B == 1 ? MATMUL_BLOCK_ROWS_DECODE : batch_block_rows(c);
	int n_blocks = (c->total_rows + c->block_rows - 1) / c->block_rows;
	c->n_ranges = n_threads < MATMUL_MAX_RANGES ? n_threads : MATMUL_MAX_RANGES;
	for (int t = 0; t < c->n_ranges; t++) {
		int b0, b1;
		threadpool_split(n_blocks, c->n_ranges, t, 1, &b0, &b1);
		atomic_init(&c->span[t].v, ((uint64_t)(uint32_t)b1 << 32) | (uint32_t)b0);
	}
	threadpool_run(pool, c->n_ranges, matmul_task, c);
}

/* Quantizes x once for the jobs whose family reads it quantized; without
 * memory they take their fallback family.  Returns the buffer to free. */
static struct block_q8_x *prepare_q8_x(struct matmul_call *c, int cols)
{
	bool need = false;
	for (int j = 0; j < c->n_jobs; j++)
		need |= families[c->fams[j]].input == INPUT_Q8;
	if (!need)
		return NULL;
	struct block_q8_x *xq = malloc((size_t)c->B * (cols / 32) * sizeof(*xq));
	for (int j = 0; j < c->n_jobs && !xq; j++)
		if (families[c->fams[j]].input == INPUT_Q8)
			c->fams[j] = fallback_family(c->fams[j], c->jobs[j].w, c->B);
	for (int b = 0; b < c->B && xq; b++)
		quantize_q8_x(c->x + (size_t)b * cols, cols, xq + (size_t)b * (cols / 32));
	c->xq = xq;
	return xq;
}

/* Quantizes x once per activation format that the jobs whose family is a
 * qdot one read (all threads then share the copy), and picks each such
 * job's kernels; without memory they take their fallback family.  The
 * buffers to free go to bufs. */
static void prepare_qdot_x(struct matmul_call *c, int cols, void *bufs[N_QDOT_FORMATS])
{
	bool need[N_QDOT_FORMATS] = {false};
	for (int j = 0; j < c->n_jobs; j++)
		if (families[c->fams[j]].input == INPUT_QDOT)
			need[qdot_format_of(c->jobs[j].w->type)] = true;
	for (int q = 0; q < N_QDOT_FORMATS; q++) {
		bufs[q] = NULL;
		if (!need[q])
			continue;
		enum ggml_type t = qdot_format_type((enum qdot_format)q);
		size_t bytes = qdot_act_bytes(t, cols);
		bufs[q] = aligned_alloc(64, ((size_t)c->B * bytes + 63) & ~(size_t)63);
		for (int b = 0; b < c->B && bufs[q]; b++)
			qdot_act_quantize(t, c->x + (size_t)b * cols, cols,
			                  (unsigned char *)bufs[q] + (size_t)b * bytes);
		c->qdot_xq[q] = bufs[q];
		c->qdot_xq_bytes[q] = bytes;
	}
	enum qdot_variant best = qdot_variant_best();
	for (int j = 0; j < c->n_jobs; j++) {
		const struct family *f = &families[c->fams[j]];
		if (f->input != INPUT_QDOT)
			continue;
		enum ggml_type t = c->jobs[j].w->type;
		bool have;
		if (c->fams[j] == MATMUL_FAMILY_QPACK_AMX) {
			c->qpack_k[j] = qpack_amx_rows_get(t);
			have = c->qpack_k[j] != NULL;
		} else if (f->reads_panels) {
			c->qpack_k[j] = qpack_rows_get(
			    t, f->qdot_best ? qpack_variant_best(t) : QDOT_VARIANT_SCALAR);
			have = c->qpack_k[j] != NULL;
		} else {
			c->qdot_k[j] = qdot_kernels_get(t, f->qdot_best ? best : QDOT_VARIANT_SCALAR);
			have = c->qdot_k[j] != NULL;
		}
		if (!c->qdot_xq[qdot_format_of(t)] || !have)
			c->fams[j] = fallback_family(c->fams[j], c->jobs[j].w, c->B);
	}
}

/* Transposes x once for the jobs that read panels; without memory they take
 * the kernels of the stored layout.  Returns the buffer to free. */
static float *prepare_xt(struct matmul_call *c, int cols)
{
	bool need = false;
	for (int j = 0; j < c->n_jobs; j++)
		need |= families[c->fams[j]].input == INPUT_XT;
	if (!need || c->B == 1)
		return NULL;
	size_t bytes = panels_xt_floats(c->B, cols) * sizeof(float);
	float *xt = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
	if (!xt) {
		for (int j = 0; j < c->n_jobs; j++)
			if (families[c->fams[j]].input == INPUT_XT)
				c->fams[j] = fallback_family(c->fams[j], c->jobs[j].w, c->B);
		return NULL;
	}
	panels_transpose_x(c->x, c->B, cols, xt);
	c->xt = xt;
	return xt;
}

/* Prepares what the jobs' families (c->fams) read and runs the rows on the
 * pool (or the calling thread, for small products). */
static void matmul_run(struct threadpool *pool, struct matmul_call *c)
{
	double macs = 0;
	for (int j = 0; j < c->n_jobs; j++) {
		macs += (double)c->jobs[j].w->rows * c->jobs[j].w->cols * c->B;
		if (!c->swiglu)
			c->total_rows += c->jobs[j].w->rows;
	}
	if (c->B <= 0 || c->total_rows == 0)
		return;
	struct block_q8_x *xq = prepare_q8_x(c, c->jobs[0].w->cols);
	float *xt = prepare_xt(c, c->jobs[0].w->cols);
	void *qdot_xq[N_QDOT_FORMATS];
	prepare_qdot_x(c, c->jobs[0].w->cols, qdot_xq);
	int n_threads = pool ? threadpool_size(pool) : 1;
	if (n_threads == 1 || macs < MATMUL_PARALLEL_MIN_MACS)
		call_rows(c, 0, c->total_rows);
	else
		run_parallel(pool, c);
	free(xq);
	free(xt);
	for (int q = 0; q < N_QDOT_FORMATS; q++)
		free(qdot_xq[q]);
}

void matmul_many(struct threadpool *pool, enum matmul_isa isa, const float *x, int B,
                 const struct matmul_job *jobs, int n_jobs)
{
	struct matmul_call c = {.x = x, .B = B, .jobs = jobs, .n_jobs = n_jobs};
	for (int j = 0; j < n_jobs; j++)
		c.fams[j] = matmul_family_pick(isa, jobs[j].w, B);
	matmul_run(pool, &c);
}

int matmul_many_family(struct threadpool *pool, enum matmul_family family, const float *x, int B,
                       const struct matmul_job *jobs, int n_jobs)
{
	if (n_jobs < 1 || n_jobs > MATMUL_MAX_JOBS)
		return -EINVAL;
	struct matmul_call c = {.x = x, .B = B, .jobs = jobs, .n_jobs = n_jobs};
	for (int j = 0; j < n_jobs; j++) {
		if (!matmul_family_runs(family, jobs[j].w))
			return -EINVAL;
		c.fams[j] = family;
	}
	matmul_run(pool, &c);
	return 0;
}

void matmul_swiglu(struct threadpool *pool, enum matmul_isa isa, const float *x, int B,
                   const struct weight_matrix *w_gate, const struct weight_matrix *w_up,
                   float *gate, float *up)
{
	struct matmul_job jobs[2] = {{.w = w_gate, .y = gate}, {.w = w_up, .y = up}};
	if (w_gate->rows != w_up->rows || w_gate->cols != w_up->cols) {
		matmul_many(pool, isa, x, B, jobs, 2);
		swiglu_scalar(gate, up, B, w_gate->rows, 0, w_gate->rows);
		return;
	}
	struct matmul_call c = {
	    .x = x, .B = B, .jobs = jobs, .n_jobs = 2, .swiglu = true, .total_rows = w_gate->rows};
	c.fams[0] = matmul_family_pick(isa, w_gate, B);
	c.fams[1] = matmul_family_pick(isa, w_up, B);
#ifdef MATMUL_X86
	c.swiglu_z = isa == MATMUL_ISA_AUTO && matmul_have_avx512();
#endif
	matmul_run(pool, &c);
}

void matmul(struct threadpool *pool, const float *x, int B, const struct weight_matrix *w, float *y)
{
	struct matmul_job job = {.w = w, .bias = NULL, .y = y};
	matmul_many(pool, MATMUL_ISA_AUTO, x, B, &job, 1);
}
