/* The AVX-512 VNNI kernels of Q8_0 and Q4_0 packed (layout: qpack_impl.h),
 * compiled with target attributes as qdot's ISA files are; qpack.c hands
 * them out only where the CPU has the features.
 *
 * One register tile is RG row groups (16 rows each, one row per 32-bit
 * lane) by V activation vectors over the whole row: per step of four
 * values, one load per group and one broadcast per vector feed RG x V
 * vpdpbusd.  Per 32-value block the integer sums start at the offset's
 * correction (-offset * x's block sum), then become float with both scales
 * in one multiply-add, so a lane ends as its row's dot product: no
 * horizontal sums, and the stores are rows side by side.  Decode (one
 * vector) runs up to four groups at once, independent chains that cover
 * vpdpbusd's latency; batches run 2 x 4 tiles, each group pair's weights
 * staying in L1/L2 while every vector passes over them.  Nothing here off
 * x86. */
#include "engine/qdot_impl.h"
#include "engine/qpack_impl.h"
#include "util/tuning.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <string.h>

#define Q0_TARGET "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"
#define Q0_INLINE static inline __attribute__((always_inline, target(Q0_TARGET)))
#define Q0_FN static __attribute__((target(Q0_TARGET)))

/* The largest tile: groups by vectors (accumulators 2 x RG x V <= 24). */
#define Q0_MAX_RG 4
#define Q0_MAX_V 4
/* The batch tile. */
#define Q0_RG 2
#define Q0_V 4

/* Four activation bytes in every lane. */
Q0_INLINE __m512i q0_bcast4(const int8_t *p)
{
	int32_t v;
	memcpy(&v, p, 4);
	return _mm512_set1_epi32(v);
}

/* acc[rg][v] += (d_w * d_x) * isum[rg][v] for one 32-value block h of the
 * group blocks gb[rg] and activation blocks xb[v]. */
#define Q0_SCALE(RG, V, gb, h, xb, isum, acc)                                                      \
	do {                                                                                       \
		__m512 dw_[Q0_MAX_RG];                                                             \
		_Pragma("GCC unroll 4") for (int i = 0; i < (RG); i++) dw_[i] =                    \
		    _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)gb[i]->d[h]));              \
		_Pragma("GCC unroll 4") for (int v = 0; v < (V); v++)                              \
		{                                                                                  \
			__m512 dx_ = _mm512_set1_ps(xb[v]->d);                                     \
			_Pragma("GCC unroll 4") for (int i = 0; i < (RG); i++) acc[i][v] =         \
			    _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i][v]),                        \
			                    _mm512_mul_ps(dw_[i], dx_), acc[i][v]);                \
		}                                                                                  \
	} while (0)

/* xb[v] = block kb of vector v of x (xs apart), and isum[rg][v] =
 * -offset * (its sum), every lane. */
#define Q0_START(RG, V, OFFSET, x, xs, kb, xb, isum)                                               \
	do {                                                                                       \
		_Pragma("GCC unroll 4") for (int v = 0; v < (V); v++)                              \
		{                                                                                  \
			xb[v] = (const struct qdot_q8_block *)((x) + (size_t)v * (xs)) + (kb);     \
			__m512i c_ = _mm512_set1_epi32(-(OFFSET) * xb[v]->sum);                    \
			_Pragma("GCC unroll 4") for (int i = 0; i < (RG); i++) isum[i][v] = c_;    \
		}                                                                                  \
	} while (0)

/* One Q8_0 tile: groups g[0..RG) by activation vectors x (xs apart), the
 * whole row of npair group blocks; acc[rg][v] lane r = row r's dot. */
Q0_INLINE void q8_0_tile(const int RG, const int V, const struct qpack_q8_0_block *const *g,
                         int npair, const uint8_t *x, size_t xs, __m512 acc[Q0_MAX_RG][Q0_MAX_V])
{
	for (int i = 0; i < RG; i++)
		for (int v = 0; v < V; v++)
			acc[i][v] = _mm512_setzero_ps();
	for (int k = 0; k < npair; k++) {
		const struct qpack_q8_0_block *gb[Q0_MAX_RG];
		for (int i = 0; i < RG; i++) {
			gb[i] = g[i] + k;
			_mm_prefetch((const char *)gb[i] + TUNING_PREFETCH_BYTES, _MM_HINT_T0);
			_mm_prefetch((const char *)gb[i] + TUNING_PREFETCH_BYTES + 512,
			             _MM_HINT_T0);
		}
#pragma GCC unroll 2
		for (int h = 0; h < QPACK_Q0_PAIR; h++) {
			const struct qdot_q8_block *xb[Q0_MAX_V];
			__m512i isum[Q0_MAX_RG][Q0_MAX_V];
			Q0_START(RG, V, 128, x, xs, QPACK_Q0_PAIR * k + h, xb, isum);
#pragma GCC unroll 8
			for (int s = 0; s < 8; s++) {
				__m512i wv[Q0_MAX_RG];
				for (int i = 0; i < RG; i++)
					wv[i] = _mm512_load_si512((const void *)gb[i]->qs[h][s]);
				for (int v = 0; v < V; v++) {
					__m512i xv = q0_bcast4(xb[v]->qs + 4 * s);
					for (int i = 0; i < RG; i++)
						isum[i][v] =
						    _mm512_dpbusd_epi32(isum[i][v], wv[i], xv);
				}
			}
			Q0_SCALE(RG, V, gb, h, xb, isum, acc);
		}
	}
}

/* One Q4_0 tile, as q8_0_tile: each loaded line is two steps, low nibbles
 * step j and high nibbles step j + 4. */
Q0_INLINE void q4_0_tile(const int RG, const int V, const struct qpack_q4_0_block *const *g,
                         int npair, const uint8_t *x, size_t xs, __m512 acc[Q0_MAX_RG][Q0_MAX_V])
{
	const __m512i low = _mm512_set1_epi8(0x0f);
	for (int i = 0; i < RG; i++)
		for (int v = 0; v < V; v++)
			acc[i][v] = _mm512_setzero_ps();
	for (int k = 0; k < npair; k++) {
		const struct qpack_q4_0_block *gb[Q0_MAX_RG];
		for (int i = 0; i < RG; i++) {
			gb[i] = g[i] + k;
			_mm_prefetch((const char *)gb[i] + TUNING_PREFETCH_BYTES, _MM_HINT_T0);
		}
#pragma GCC unroll 2
		for (int h = 0; h < QPACK_Q0_PAIR; h++) {
			const struct qdot_q8_block *xb[Q0_MAX_V];
			__m512i isum[Q0_MAX_RG][Q0_MAX_V];
			Q0_START(RG, V, 8, x, xs, QPACK_Q0_PAIR * k + h, xb, isum);
#pragma GCC unroll 4
			for (int j = 0; j < 4; j++) {
				__m512i lo[Q0_MAX_RG], hi[Q0_MAX_RG];
				for (int i = 0; i < RG; i++) {
					__m512i raw =
					    _mm512_load_si512((const void *)gb[i]->qs[h][j]);
					lo[i] = _mm512_and_si512(raw, low);
					hi[i] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low);
				}
				for (int v = 0; v < V; v++) {
					__m512i xl = q0_bcast4(xb[v]->qs + 4 * j);
					__m512i xh = q0_bcast4(xb[v]->qs + 16 + 4 * j);
					for (int i = 0; i < RG; i++) {
						isum[i][v] =
						    _mm512_dpbusd_epi32(isum[i][v], lo[i], xl);
						isum[i][v] =
						    _mm512_dpbusd_epi32(isum[i][v], hi[i], xh);
					}
				}
			}
			Q0_SCALE(RG, V, gb, h, xb, isum, acc);
		}
	}
}

/* Lanes of acc (rows base .. base + 15) that lie in [r0, r1), into y. */
Q0_INLINE void q0_store(__m512 acc, float *y, int base, int r0, int r1)
{
	int lo = r0 > base ? r0 - base : 0, hi = r1 - base < 16 ? r1 - base : 16;
	if (hi <= lo)
		return;
	__mmask16 m = (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
	_mm512_mask_storeu_ps(y + base, m, acc);
}

/* Runs tile shape (RG, V) of type T on groups from gi and vectors from v0
 * and stores rows [r0, r1) of the result. */
#define Q0_RUN(T, RG, V)                                                                           \
	do {                                                                                       \
		const struct qpack_##T##_block *g_[Q0_MAX_RG];                                     \
		for (int i = 0; i < (RG); i++)                                                     \
			g_[i] = base + (size_t)(gi + i) * npair;                                   \
		__m512 acc_[Q0_MAX_RG][Q0_MAX_V];                                                  \
		T##_tile(RG, V, g_, npair, x + (size_t)v0 * xs, xs, acc_);                         \
		for (int i = 0; i < (RG); i++)                                                     \
			for (int v = 0; v < (V); v++)                                              \
				q0_store(acc_[i][v], y + (size_t)(v0 + v) * ldy,                   \
				         (gi + i) * QPACK_ROWS, r0, r1);                           \
	} while (0)

/* Groups from gi (RG of them) by every vector: tiles of Q0_V, then a pair
 * and a single as B's remainder asks. */
#define Q0_ALL_VECTORS(T, RG)                                                                      \
	do {                                                                                       \
		for (v0 = 0; v0 + Q0_V <= B; v0 += Q0_V)                                           \
			Q0_RUN(T, RG, Q0_V);                                                       \
		if (B - v0 >= 2) {                                                                 \
			Q0_RUN(T, RG, 2);                                                          \
			v0 += 2;                                                                   \
		}                                                                                  \
		if (B - v0 == 1)                                                                   \
			Q0_RUN(T, RG, 1);                                                          \
	} while (0)

/* The rows kernel of type T (qpack_rows_fn): decode takes groups four at
 * a time (then two, then one), batches Q0_RG groups by Q0_V vectors. */
#define Q0_DEFINE_ROWS(T)                                                                          \
	Q0_FN void rows_##T(const struct weight_matrix *w, const void *xq, size_t xs, int B,       \
	                    float *y, size_t ldy, int r0, int r1)                                  \
	{                                                                                          \
		const struct qpack_##T##_block *base = w->panels;                                  \
		const uint8_t *x = xq;                                                             \
		int npair = w->cols / (32 * QPACK_Q0_PAIR), v0 = 0;                                \
		int g0 = r0 / QPACK_ROWS, g1 = (r1 + QPACK_ROWS - 1) / QPACK_ROWS, gi = g0;        \
		if (B == 1) {                                                                      \
			for (; gi + 4 <= g1; gi += 4)                                              \
				Q0_RUN(T, 4, 1);                                                   \
			for (; gi + 2 <= g1; gi += 2)                                              \
				Q0_RUN(T, 2, 1);                                                   \
			if (gi < g1)                                                               \
				Q0_RUN(T, 1, 1);                                                   \
			return;                                                                    \
		}                                                                                  \
		for (; gi + Q0_RG <= g1; gi += Q0_RG)                                              \
			Q0_ALL_VECTORS(T, Q0_RG);                                                  \
		if (gi < g1)                                                                       \
			Q0_ALL_VECTORS(T, 1);                                                      \
	}

Q0_DEFINE_ROWS(q8_0)
Q0_DEFINE_ROWS(q4_0)

qpack_rows_fn qpack_q0_avx512_rows(enum ggml_type t, bool vnni)
{
	if (!vnni)
		return NULL;
	return t == GGML_TYPE_Q8_0 ? rows_q8_0 : t == GGML_TYPE_Q4_0 ? rows_q4_0 : NULL;
}
#else
qpack_rows_fn qpack_q0_avx512_rows(enum ggml_type t, bool vnni)
{
	(void)t, (void)vnni;
	return NULL;
}
#endif
