/* Weight panels and their AVX-512 kernels (layout: see panels.h).
 *
 * Why a copy of the weights: in the stored layout (one row after another) a
 * batch tile must either pack the weights per call (a transpose that costs
 * as much as the multiply-adds it feeds at 16 batch rows) or broadcast from
 * 24 row streams at once, which needs 24 pointers that GCC spills.  In
 * panels, a tile reads 3 sequential streams, x is read by broadcasts from
 * one transposed block, and decode reads 4 sequential streams with no
 * horizontal sums. */
#include "engine/panels.h"

#include <stdint.h>
#include <string.h>

#include "util/cpu.h"
#include "util/tuning.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define PANELS_X86 1
#endif

#define GROUP_ROWS 16
/* Groups per batch tile and per decode step; a decode step reads
 * DECODE_GROUPS streams, each its own share of the rows a call gets, and
 * prefetches each TUNING_PREFETCH_BYTES ahead (util/tuning.h says why). */
#define TILE_GROUPS TUNING_PANELS_TILE_GROUPS
#define DECODE_GROUPS TUNING_PANELS_DECODE_GROUPS

static size_t elem_size(int type)
{
	return type == GGML_TYPE_F32 ? 4 : 2;
}

/* Bytes of one column of a group. */
static size_t column_bytes(int type)
{
	return GROUP_ROWS * elem_size(type);
}

static size_t group_bytes(const struct weight_matrix *w)
{
	return (size_t)w->cols * column_bytes(w->type);
}

static int n_groups(const struct weight_matrix *w)
{
	return (w->rows + GROUP_ROWS - 1) / GROUP_ROWS;
}

size_t panels_bytes(const struct weight_matrix *w)
{
	return (size_t)n_groups(w) * group_bytes(w);
}

size_t panels_xt_floats(int B, int cols)
{
	size_t blocks = ((size_t)B + PANELS_BATCH_ROWS - 1) / PANELS_BATCH_ROWS;
	return blocks * PANELS_BATCH_ROWS * (size_t)cols;
}

void panels_transpose_x_scalar(const float *x, int B, int cols, float *xt)
{
	for (int b0 = 0; b0 < B; b0 += PANELS_BATCH_ROWS) {
		float *t = xt + (size_t)b0 * cols;
		for (int k = 0; k < cols; k++)
			for (int b = 0; b < PANELS_BATCH_ROWS; b++)
				t[(size_t)k * PANELS_BATCH_ROWS + b] =
				    b0 + b < B ? x[(size_t)(b0 + b) * cols + k] : 0.0f;
	}
}

#ifdef PANELS_X86
#define PANELS_TARGET "avx512f,avx512bw,avx512vl,avx2,fma,f16c"
#define PANELS_FN __attribute__((target(PANELS_TARGET)))
#define PANELS_INLINE static inline __attribute__((always_inline, target(PANELS_TARGET)))

bool panels_supported(int ggml_type)
{
	return cpu_has_avx512() && (ggml_type == GGML_TYPE_F32 || ggml_type == GGML_TYPE_F16 ||
	             ggml_type == GGML_TYPE_BF16);
}

/* Eight rows by eight columns at a time, the classic 8x8 in-register
 * transpose: it runs on the calling thread before every batch product while
 * the other threads wait. */
static PANELS_FN void transpose_x_avx(const float *x, int B, int cols, float *xt)
{
	for (int b0 = 0; b0 < B; b0 += PANELS_BATCH_ROWS) {
		float *t = xt + (size_t)b0 * cols;
		int nb = B - b0 < PANELS_BATCH_ROWS ? B - b0 : PANELS_BATCH_ROWS;
		const float *rows[PANELS_BATCH_ROWS];
		for (int b = 0; b < PANELS_BATCH_ROWS; b++)
			rows[b] = b < nb ? x + (size_t)(b0 + b) * cols : NULL;
		int k = 0;
		for (; k + 8 <= cols; k += 8) {
			__m256 r[8];
			for (int b = 0; b < 8; b++)
				r[b] = rows[b] ? _mm256_loadu_ps(rows[b] + k) : _mm256_setzero_ps();
			__m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
			__m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
			__m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
			__m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
			__m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
			__m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
			__m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
			__m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
			float *o = t + (size_t)k * PANELS_BATCH_ROWS;
			_mm256_storeu_ps(o + 0, _mm256_permute2f128_ps(s0, s4, 0x20));
			_mm256_storeu_ps(o + 8, _mm256_permute2f128_ps(s1, s5, 0x20));
			_mm256_storeu_ps(o + 16, _mm256_permute2f128_ps(s2, s6, 0x20));
			_mm256_storeu_ps(o + 24, _mm256_permute2f128_ps(s3, s7, 0x20));
			_mm256_storeu_ps(o + 32, _mm256_permute2f128_ps(s0, s4, 0x31));
			_mm256_storeu_ps(o + 40, _mm256_permute2f128_ps(s1, s5, 0x31));
			_mm256_storeu_ps(o + 48, _mm256_permute2f128_ps(s2, s6, 0x31));
			_mm256_storeu_ps(o + 56, _mm256_permute2f128_ps(s3, s7, 0x31));
		}
		for (; k < cols; k++)
			for (int b = 0; b < PANELS_BATCH_ROWS; b++)
				t[(size_t)k * PANELS_BATCH_ROWS + b] = rows[b] ? rows[b][k] : 0.0f;
	}
}

void panels_transpose_x(const float *x, int B, int cols, float *xt)
{
	if (cpu_has_avx512()) {
		transpose_x_avx(x, B, cols, xt);
		return;
	}
	panels_transpose_x_scalar(x, B, cols, xt);
}

/* Groups [g0, g1) of w into out, one column of 16 rows per gather, F32
 * columns written with streaming stores (the copy is written once and read
 * later, so caching it only evicts).  F16/BF16
 * gather 32 bits and keep the low half; their last column goes element by
 * element so no read passes the end of a row. */
static PANELS_FN void pack_groups(const struct weight_matrix *w, uint8_t *out, int g0, int g1)
{
	size_t esz = elem_size(w->type), gb = group_bytes(w);
	int cols = w->cols;
	for (int g = g0; g < g1; g++) {
		uint8_t *dst = out + (size_t)g * gb;
		int n = w->rows - g * GROUP_ROWS < GROUP_ROWS ? w->rows - g * GROUP_ROWS : GROUP_ROWS;
		const uint8_t *src = (const uint8_t *)w->data + (size_t)g * GROUP_ROWS * w->row_bytes;
		__mmask16 m = (__mmask16)((1u << n) - 1u);
		__m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
		                                                   12, 13, 14, 15),
		                                 _mm512_set1_epi32((int)w->row_bytes));
		int k = 0;
		if (esz == 4) {
			for (; k < cols; k++)
				_mm512_stream_si512((__m512i *)(dst + (size_t)k * 64),
				                    _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m,
				                                                idx, src + (size_t)k * 4, 1));
			continue;
		}
		for (; k + 1 < cols; k++) {
			__m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx,
			                                        src + (size_t)k * 2, 1);
			_mm256_storeu_si256((__m256i *)(dst + (size_t)k * 32), _mm512_cvtepi32_epi16(v));
		}
		uint16_t *last = (uint16_t *)(dst + (size_t)k * 32);
		for (int j = 0; j < GROUP_ROWS; j++)
			if (j < n)
				memcpy(&last[j], src + (size_t)j * w->row_bytes + (size_t)k * 2, 2);
			else
				last[j] = 0;
	}
	_mm_sfence(); /* the streaming stores, before the pool reports the task done */
}

struct pack_job {
	const struct weight_matrix *w;
	uint8_t *out;
	int groups, parts;
};

static void pack_task(void *ctx, int task, int thread)
{
	(void)thread;
	struct pack_job *j = ctx;
	int g0, g1;
	threadpool_split(j->groups, j->parts, task, 1, &g0, &g1);
	pack_groups(j->w, j->out, g0, g1);
}

void panels_pack(struct threadpool *pool, const struct weight_matrix *w, void *out)
{
	int groups = n_groups(w);
	if (!pool) {
		pack_groups(w, out, 0, groups);
		return;
	}
	struct pack_job j = {.w = w, .out = out, .groups = groups, .parts = 4 * threadpool_size(pool)};
	threadpool_run(pool, j.parts, pack_task, &j);
}

/* Column k of a group: 16 weights as fp32. */
PANELS_INLINE __m512 load_column(int type, const uint8_t *group, int k)
{
	switch (type) {
	case GGML_TYPE_F16:
		return _mm512_cvtph_ps(
		    _mm256_loadu_si256((const __m256i *)(group + (size_t)k * 32)));
	case GGML_TYPE_BF16:
		return _mm512_castsi512_ps(_mm512_slli_epi32(
		    _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(group + (size_t)k * 32))),
		    16));
	default:
		return _mm512_loadu_ps((const float *)(group + (size_t)k * 64));
	}
}

/* Stores the 16 rows of group g that lie in [r0, r1) (+ bias). */
PANELS_INLINE void store_group(__m512 v, float *y, const float *bias, int g, int r0, int r1)
{
	int base = g * GROUP_ROWS;
	int lo = r0 > base ? r0 - base : 0;
	int hi = r1 - base < GROUP_ROWS ? r1 - base : GROUP_ROWS;
	__mmask16 m = (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
	if (bias)
		v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + base));
	_mm512_mask_storeu_ps(y + base, m, v);
}

/* Decode: R groups from `group`, gstep groups apart, two accumulators each
 * (even and odd columns) to cover the FMA latency. */
PANELS_INLINE void decode_groups(int type, int R, const uint8_t *group, size_t gb, int gstep,
                                 const float *x, int cols, float *y, const float *bias, int g,
                                 int r0, int r1)
{
	__m512 acc[DECODE_GROUPS][2];
	for (int r = 0; r < R; r++)
		acc[r][0] = acc[r][1] = _mm512_setzero_ps();
	size_t col_bytes = column_bytes(type);
	int k = 0;
	for (; k + 2 <= cols; k += 2) {
		__m512 x0 = _mm512_set1_ps(x[k]), x1 = _mm512_set1_ps(x[k + 1]);
		_Pragma("GCC unroll 4")
		for (int r = 0; r < R; r++) {
			const uint8_t *p = group + (size_t)r * gstep * gb;
			/* one line per step for F16/BF16, one per column for F32 */
			_mm_prefetch((const char *)p + (size_t)k * col_bytes + TUNING_PREFETCH_BYTES,
			             _MM_HINT_T0);
			if (col_bytes == 64)
				_mm_prefetch((const char *)p + (size_t)(k + 1) * col_bytes +
				                 TUNING_PREFETCH_BYTES,
				             _MM_HINT_T0);
			acc[r][0] = _mm512_fmadd_ps(load_column(type, p, k), x0, acc[r][0]);
			acc[r][1] = _mm512_fmadd_ps(load_column(type, p, k + 1), x1, acc[r][1]);
		}
	}
	if (k < cols) {
		__m512 x0 = _mm512_set1_ps(x[k]);
		for (int r = 0; r < R; r++)
			acc[r][0] = _mm512_fmadd_ps(
			    load_column(type, group + (size_t)r * gstep * gb, k), x0, acc[r][0]);
	}
	for (int r = 0; r < R; r++)
		store_group(_mm512_add_ps(acc[r][0], acc[r][1]), y, bias, g + r * gstep, r0, r1);
}

/* Batch tile: R groups from `group` times one block of 8 transposed batch
 * rows; stores batch rows [0, nb) of the block.  Meanwhile it prefetches
 * its share of the n_next groups at `next`: the tile's batch blocks split
 * the groups' cache lines into pf_every consecutive parts and block
 * pf_phase takes part pf_phase, evenly over its columns.
 * The first batch block of a tile reads its weights from memory and the
 * others from L2, so without this the memory stream idles during the later
 * blocks and the first runs memory-bound; spread over all the blocks, the
 * stream never stops. */
PANELS_INLINE void batch_tile(int type, int R, const uint8_t *group, size_t gb, const float *xtb,
                              int cols, float *y, size_t ldy, int nb, const float *bias, int g,
                              int r0, int r1, const uint8_t *next, int n_next, int pf_phase,
                              int pf_every)
{
	__m512 acc[TILE_GROUPS][PANELS_BATCH_ROWS];
	_Pragma("GCC unroll 32")
	for (int r = 0; r < R; r++)
		_Pragma("GCC unroll 32")
		for (int b = 0; b < PANELS_BATCH_ROWS; b++)
			acc[r][b] = _mm512_setzero_ps();
	/* lines [pf_line, pf_end) of each next group, one each time pf_acc
	 * passes cols (pf_end - pf_line lines spread over cols columns) */
	int lines = (int)(gb / 64);
	int pf_line = lines * pf_phase / pf_every, pf_end = lines * (pf_phase + 1) / pf_every;
	int pf_acc = 0, pf_step = n_next > 0 ? pf_end - pf_line : 0;
	for (int k = 0; k < cols; k++) {
		pf_acc += pf_step;
		if (pf_acc >= cols) {
			pf_acc -= cols;
			for (int r = 0; r < n_next; r++)
				_mm_prefetch((const char *)next + (size_t)r * gb + (size_t)pf_line * 64,
				             _MM_HINT_T0);
			pf_line++;
		}
		__m512 wv[TILE_GROUPS];
		_Pragma("GCC unroll 32")
		for (int r = 0; r < R; r++)
			wv[r] = load_column(type, group + (size_t)r * gb, k);
		const float *xk = xtb + (size_t)k * PANELS_BATCH_ROWS;
		_Pragma("GCC unroll 32")
		for (int b = 0; b < PANELS_BATCH_ROWS; b++) {
			__m512 xb = _mm512_set1_ps(xk[b]);
			_Pragma("GCC unroll 32")
			for (int r = 0; r < R; r++)
				acc[r][b] = _mm512_fmadd_ps(wv[r], xb, acc[r][b]);
		}
	}
	for (int b = 0; b < nb; b++)
		for (int r = 0; r < R; r++)
			store_group(acc[r][b], y + (size_t)b * ldy, bias, g + r, r0, r1);
}

#define DEFINE_PANEL_ROWS(NAME, TYPE)                                                              \
	static PANELS_FN void NAME(const struct weight_matrix *w, const float *bias,               \
	                           const float *x, const float *xt, int B, float *y, int r0,       \
	                           int r1)                                                         \
	{                                                                                          \
		const uint8_t *panels = w->panels;                                                 \
		size_t gb = group_bytes(w);                                                        \
		int cols = w->cols, g0 = r0 / GROUP_ROWS, g1 = (r1 + GROUP_ROWS - 1) / GROUP_ROWS; \
		if (B == 1) {                                                                      \
			/* DECODE_GROUPS streams, each over a quarter of the range */              \
			int q = (g1 - g0) / DECODE_GROUPS;                                         \
			for (int j = 0; j < q; j++)                                                \
				decode_groups(TYPE, DECODE_GROUPS, panels + (g0 + j) * gb, gb, q,  \
				              x, cols, y, bias, g0 + j, r0, r1);                   \
			for (int g = g0 + q * DECODE_GROUPS; g < g1; g++)                          \
				decode_groups(TYPE, 1, panels + g * gb, gb, 1, x, cols, y, bias,   \
				              g, r0, r1);                                          \
			return;                                                                    \
		}                                                                                  \
		size_t ldy = (size_t)w->rows;                                                      \
		int groups = n_groups(w);                                                          \
		for (int g = g0; g < g1;) {                                                        \
			int R = g + TILE_GROUPS <= g1 ? TILE_GROUPS : 1;                           \
			int n_next = groups - (g + R) < TILE_GROUPS ? groups - (g + R)             \
			                                            : TILE_GROUPS;                 \
			const uint8_t *next = panels + (g + R) * gb;                               \
			int n_blocks = (B + PANELS_BATCH_ROWS - 1) / PANELS_BATCH_ROWS;             \
			for (int bi = 0; bi < n_blocks; bi++) {                                    \
				int b0 = bi * PANELS_BATCH_ROWS;                                   \
				int nb = B - b0 < PANELS_BATCH_ROWS ? B - b0 : PANELS_BATCH_ROWS;  \
				const float *xtb = xt + (size_t)b0 * cols;                         \
				float *yb = y + (size_t)b0 * ldy;                                  \
				if (R == TILE_GROUPS)                                              \
					batch_tile(TYPE, TILE_GROUPS, panels + g * gb, gb, xtb,    \
					           cols, yb, ldy, nb, bias, g, r0, r1, next,       \
					           n_next, bi, n_blocks);                          \
				else                                                               \
					batch_tile(TYPE, 1, panels + g * gb, gb, xtb, cols, yb,    \
					           ldy, nb, bias, g, r0, r1, next, n_next, bi,     \
					           n_blocks);                                      \
			}                                                                          \
			g += R;                                                                    \
		}                                                                                  \
	}

DEFINE_PANEL_ROWS(panel_rows_f32, GGML_TYPE_F32)
DEFINE_PANEL_ROWS(panel_rows_f16, GGML_TYPE_F16)
DEFINE_PANEL_ROWS(panel_rows_bf16, GGML_TYPE_BF16)

void panels_rows(const struct weight_matrix *w, const float *bias, const float *x,
                 const float *xt, int B, float *y, int r0, int r1)
{
	switch (w->type) {
	case GGML_TYPE_F32:
		panel_rows_f32(w, bias, x, xt, B, y, r0, r1);
		break;
	case GGML_TYPE_F16:
		panel_rows_f16(w, bias, x, xt, B, y, r0, r1);
		break;
	default:
		panel_rows_bf16(w, bias, x, xt, B, y, r0, r1);
		break;
	}
}
#else
bool panels_supported(int ggml_type)
{
	(void)ggml_type;
	return false;
}

void panels_transpose_x(const float *x, int B, int cols, float *xt)
{
	panels_transpose_x_scalar(x, B, cols, xt);
}

/* Without AVX-512 no matrix has panels: neither is ever called. */
void panels_pack(struct threadpool *pool, const struct weight_matrix *w, void *out)
{
	(void)pool, (void)w, (void)out;
}

void panels_rows(const struct weight_matrix *w, const float *bias, const float *x,
                 const float *xt, int B, float *y, int r0, int r1)
{
	(void)w, (void)bias, (void)x, (void)xt, (void)B, (void)y, (void)r0, (void)r1;
}
#endif

size_t panels_element_index(const struct weight_matrix *w, int r, int k)
{
	return (size_t)(r / GROUP_ROWS) * w->cols * GROUP_ROWS + (size_t)k * GROUP_ROWS +
	       (size_t)(r % GROUP_ROWS);
}
