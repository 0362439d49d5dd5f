/* The AMX kernels of Q8_0 and Q4_0 packed (layout: qpack_impl.h) for
 * batches, and their tile emulation: the same code over plain-C stand-ins
 * for the tile instructions, so that every machine tests the addressing
 * and the per-block scaling that the real tiles run only where the CPU has
 * AMX (matmul's QPACK_AMX family picks them there, behind
 * cpu_has_amx_int8, which also asks Linux for the tile state).  Compiled
 * with target attributes: nothing here needs global -mamx flags.
 *
 * The instruction: TDPBSUD tmm_c, tmm_a, tmm_b adds to the int32 C[m][n]
 * the sum over k4 < K/4 and t < 4 of A[m][4 k4 + t] (signed byte) times
 * B[k4][4 n + t] (unsigned byte).  A is M rows of K bytes (a.colsb = K); B
 * is K/4 rows of N x 4 bytes (b.colsb = 4 N, "VNNI" order: four
 * consecutive k of one column side by side); C is M rows of N int32.
 * Here, per 32-value block:
 *   A (tile 1): 16 activation vectors x that block's 32 codes, M = 16,
 *               K = 32: row m read in place at vector m's block (the
 *               activation buffer's own stride, xq_bytes);
 *   B (tile 2): the packed block of 16 weight rows, K/4 = 8 steps of
 *               16 rows x 4 bytes: exactly qpack_impl.h's qs[h], 64 bytes a
 *               row (Q4_0's nibbles are unpacked to bytes first);
 *   C (tile 0): 16 vectors x 16 weight rows of int32, zeroed per block.
 * C goes to memory and each vector's row of 16 sums becomes float with the
 * block's scales, as in the AVX-512 kernel (the offset's correction -o x
 * sum first), so the integers are the twin's.  Vectors past the last whole
 * 16 go to the AVX-512 VNNI kernel, which every AMX CPU runs. */
#include "engine/qdot_impl.h"
#include "engine/qpack_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <string.h>

#define AMX_TARGET "amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"
#define EMU_TARGET "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"

/* Vectors (A and C rows) and weight rows (C columns) of one tile. */
#define AMX_M 16
#define AMX_K 32 /* bytes of A per row: one 32-value block */

/* The tile configuration (palette 1): tile 0 C, 1 A, 2 B. */
struct amx_config {
	uint8_t palette;
	uint8_t start_row;
	uint8_t reserved[14];
	uint16_t colsb[16]; /* bytes per row of tile i */
	uint8_t rows[16];   /* rows of tile i */
};
_Static_assert(sizeof(struct amx_config) == 64, "the tile configuration is 64 bytes");

static void amx_config_init(struct amx_config *c)
{
	memset(c, 0, sizeof(*c));
	c->palette = 1;
	c->rows[0] = AMX_M, c->colsb[0] = QPACK_ROWS * 4;     /* C: int32 per weight row */
	c->rows[1] = AMX_M, c->colsb[1] = AMX_K;              /* A: one block's codes */
	c->rows[2] = AMX_K / 4, c->colsb[2] = QPACK_ROWS * 4; /* B: steps x rows x 4 */
}

/* The tile operations a kernel body uses, as real instructions (AMX_*) or
 * plain C over a struct of three tiles (EMU_*). */
struct amx_emu {
	int8_t a[AMX_M][AMX_K];
	uint8_t b[AMX_K / 4][QPACK_ROWS * 4];
	int32_t c[AMX_M][QPACK_ROWS];
};

static inline void emu_load_a(struct amx_emu *t, const int8_t *a, size_t stride)
{
	for (int m = 0; m < AMX_M; m++)
		memcpy(t->a[m], a + (size_t)m * stride, AMX_K);
}

static inline void emu_dpbsud(struct amx_emu *t)
{
	for (int m = 0; m < AMX_M; m++)
		for (int n = 0; n < QPACK_ROWS; n++)
			for (int k4 = 0; k4 < AMX_K / 4; k4++)
				for (int i = 0; i < 4; i++)
					t->c[m][n] += (int32_t)t->a[m][4 * k4 + i] *
					              (int32_t)t->b[k4][4 * n + i];
}

#define AMX_BEGIN(cfg) _tile_loadconfig(cfg)
/* GCC's tileloadd names no memory operand: the barrier keeps the stores
 * of an unpacked B before it. */
#define AMX_BLOCK(t, a, xs, bq, cbuf)                                                              \
	do {                                                                                       \
		__asm__ volatile("" ::: "memory");                                                 \
		_tile_zero(0);                                                                     \
		_tile_loadd(1, a, (long)(xs));                                                     \
		_tile_loadd(2, bq, QPACK_ROWS * 4);                                                \
		_tile_dpbsud(0, 1, 2);                                                             \
		_tile_stored(0, cbuf, QPACK_ROWS * 4);                                             \
	} while (0)
#define AMX_END() _tile_release()

#define EMU_BEGIN(cfg) (void)(cfg)
#define EMU_BLOCK(t, a, xs, bq, cbuf)                                                              \
	do {                                                                                       \
		memset((t)->c, 0, sizeof((t)->c));                                                 \
		emu_load_a(t, a, xs);                                                              \
		memcpy((t)->b, bq, sizeof((t)->b));                                                \
		emu_dpbsud(t);                                                                     \
		memcpy(cbuf, (t)->c, sizeof((t)->c));                                              \
	} while (0)
#define EMU_END() ((void)0)

#define SCALE_INLINE static inline __attribute__((always_inline, target(EMU_TARGET)))

/* Q8_0's block h of a group block as B: as packed. */
SCALE_INLINE const uint8_t *q8_b(const struct qpack_q8_0_block *gb, int h, uint8_t *out)
{
	(void)out;
	return (const uint8_t *)gb->qs[h];
}

/* Q4_0's block h of a group block as B, into out: step j the low nibbles
 * of line j, step j + 4 the high ones (qpack_impl.h). */
SCALE_INLINE const uint8_t *q4_b(const struct qpack_q4_0_block *gb, int h, uint8_t *out)
{
	const __m512i low = _mm512_set1_epi8(0x0f);
	for (int j = 0; j < 4; j++) {
		__m512i raw = _mm512_load_si512((const void *)gb->qs[h][j]);
		_mm512_store_si512((void *)(out + 64 * j), _mm512_and_si512(raw, low));
		_mm512_store_si512((void *)(out + 64 * (j + 4)),
		                   _mm512_and_si512(_mm512_srli_epi16(raw, 4), low));
	}
	return out;
}

/* acc[m] += (d_w * d_x) * (C[m] - offset * sum x) for block kb of vectors
 * x (16 of them, xs apart). */
#define AMX_SCALE(acc, cbuf, dw, x, xs, kb, OFFSET)                                                \
	do {                                                                                       \
		for (int m = 0; m < AMX_M; m++) {                                                  \
			const struct qdot_q8_block *xb_ =                                          \
			    (const struct qdot_q8_block *)((x) + (size_t)m * (xs)) + (kb);         \
			__m512i c_ = _mm512_sub_epi32(_mm512_load_si512((const void *)cbuf[m]),    \
			                              _mm512_set1_epi32((OFFSET)*xb_->sum));       \
			acc[m] =                                                                   \
			    _mm512_fmadd_ps(_mm512_cvtepi32_ps(c_),                                \
			                    _mm512_mul_ps(dw, _mm512_set1_ps(xb_->d)), acc[m]);    \
		}                                                                                  \
	} while (0)

/* One tile body: group gi (16 rows) times 16 vectors from x, the whole
 * row, stored into rows [r0, r1) of y. */
#define AMX_TILE(OPS, T, BLOCKB, OFFSET)                                                           \
	do {                                                                                       \
		__m512 acc[AMX_M];                                                                 \
		for (int m = 0; m < AMX_M; m++)                                                    \
			acc[m] = _mm512_setzero_ps();                                              \
		for (int kb = 0; kb < 2 * npair; kb++) {                                           \
			const struct qpack_##T##_block *gb = base + (size_t)gi * npair + kb / 2;   \
			int h = kb % 2;                                                            \
			const uint8_t *bq = BLOCKB(gb, h, unpacked);                               \
			const int8_t *a = ((const struct qdot_q8_block *)x + kb)->qs;              \
			OPS##_BLOCK(&emu, a, xs, bq, cbuf);                                        \
			__m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)gb->d[h])); \
			AMX_SCALE(acc, cbuf, dw, x, xs, kb, OFFSET);                               \
		}                                                                                  \
		int lo = r0 > gi * QPACK_ROWS ? r0 - gi * QPACK_ROWS : 0;                          \
		int hi = r1 - gi * QPACK_ROWS < QPACK_ROWS ? r1 - gi * QPACK_ROWS : QPACK_ROWS;    \
		__mmask16 mask = (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));              \
		for (int m = 0; m < AMX_M; m++)                                                    \
			_mm512_mask_storeu_ps(y + (size_t)m * ldy + gi * QPACK_ROWS, mask,         \
			                      acc[m]);                                             \
	} while (0)

/* The rows kernel (qpack_rows_fn) NAME of type T on OPS (AMX or EMU):
 * whole 16-vector tiles here, the rest through the AVX-512 VNNI kernel. */
#define DEFINE_AMX_ROWS(NAME, TARGET, OPS, T, BLOCKB, OFFSET)                                      \
	static __attribute__((target(TARGET))) void NAME(const struct weight_matrix *w,            \
	                                                 const void *xq, size_t xs, int B,         \
	                                                 float *y0, size_t ldy, int r0, int r1)    \
	{                                                                                          \
		const struct qpack_##T##_block *base = w->panels;                                  \
		int npair = w->cols / (32 * QPACK_Q0_PAIR), whole = B / AMX_M * AMX_M;             \
		_Alignas(64) int32_t cbuf[AMX_M][QPACK_ROWS];                                      \
		_Alignas(64) uint8_t unpacked[AMX_K / 4 * QPACK_ROWS * 4];                         \
		struct amx_emu emu;                                                                \
		struct amx_config cfg;                                                             \
		(void)unpacked, (void)emu;                                                         \
		amx_config_init(&cfg);                                                             \
		if (whole > 0 && r0 < r1) {                                                        \
			OPS##_BEGIN(&cfg);                                                         \
			for (int gi = r0 / QPACK_ROWS; gi * QPACK_ROWS < r1; gi++)                 \
				for (int v0 = 0; v0 < whole; v0 += AMX_M) {                        \
					const uint8_t *x = (const uint8_t *)xq + (size_t)v0 * xs;  \
					float *y = y0 + (size_t)v0 * ldy;                          \
					AMX_TILE(OPS, T, BLOCKB, OFFSET);                          \
				}                                                                  \
			OPS##_END();                                                               \
		}                                                                                  \
		if (whole < B)                                                                     \
			qpack_q0_avx512_rows(w->type, true)(w, (const uint8_t *)xq + whole * xs,   \
			                                    xs, B - whole, y0 + whole * ldy, ldy,  \
			                                    r0, r1);                               \
	}

DEFINE_AMX_ROWS(rows_q8_0_amx, AMX_TARGET, AMX, q8_0, q8_b, 128)
DEFINE_AMX_ROWS(rows_q4_0_amx, AMX_TARGET, AMX, q4_0, q4_b, 8)
DEFINE_AMX_ROWS(rows_q8_0_emu, EMU_TARGET, EMU, q8_0, q8_b, 128)
DEFINE_AMX_ROWS(rows_q4_0_emu, EMU_TARGET, EMU, q4_0, q4_b, 8)

qpack_rows_fn qpack_q0_amx_rows(enum ggml_type t)
{
	return t == GGML_TYPE_Q8_0 ? rows_q8_0_amx : t == GGML_TYPE_Q4_0 ? rows_q4_0_amx : NULL;
}

qpack_rows_fn qpack_q0_amx_emulated_rows(enum ggml_type t)
{
	return t == GGML_TYPE_Q8_0 ? rows_q8_0_emu : t == GGML_TYPE_Q4_0 ? rows_q4_0_emu : NULL;
}
#else
qpack_rows_fn qpack_q0_amx_rows(enum ggml_type t)
{
	(void)t;
	return NULL;
}

qpack_rows_fn qpack_q0_amx_emulated_rows(enum ggml_type t)
{
	(void)t;
	return NULL;
}
#endif
