/* The Q8_0, Q4_0 and MXFP4 packed kernels of qpack_q0_x86.c, included once per
 * build there: the includer defines Q0_TARGET, Q0_VNNI (0: maddubs + madd,
 * 1: vpdpbusd), Q0_512 (1: 512-bit, one register per 16-row line; 0:
 * 256-bit, two registers of 8 rows), Q0_RG and Q0_NV (the batch tile:
 * groups by vectors), Q0_DEC_RG (groups decode runs at once) and Q0(name),
 * all of which it undefines at its end.
 *
 * One register tile is RG row groups (one row per 32-bit lane) by V
 * activation vectors over the whole row: per step of four values, one load
 * per line part and one broadcast per vector feed every product.  Per
 * 32-value block the integer sums start at the offset's correction
 * (-offset * x's block sum), then become float with both scales in one
 * multiply-add, so a lane ends as its row's dot product: no horizontal
 * sums, and the stores are rows side by side.  Decode (one vector) runs
 * several groups at once, independent chains that cover the dot's latency;
 * batches run RG x V tiles, each group's weights staying in L1/L2 while
 * every vector passes over them.
 *
 * Without VNNI, Q8_0's codes + 128 would saturate maddubs (255 x 127,
 * twice), so those builds multiply |q| by x with q's sign (offset 0); Q4_0's
 * nibbles (at most 15) cannot saturate it, nor a block's sums in 16 bits.
 * MXFP4 is Q4_0's tile with a decode step: each nibble looked up by a byte
 * shuffle as its unsigned code (QDOT_MXFP4_KVALUES_U, at most 24), offset
 * 12 taken off with x's sum, and E8M0 scales; its codes would overflow a
 * block's 16-bit sums, so without VNNI every second step widens them. */

/* clang-format would read Q0(type) *p as a multiplication. */
/* clang-format off */

#define Q0_INLINE static inline __attribute__((always_inline, target(Q0_TARGET)))
#define Q0_FN static __attribute__((target(Q0_TARGET)))

#if Q0_512
typedef __m512i Q0(vi);
typedef __m512 Q0(vf);
typedef __mmask64 Q0(sign);
#define Q0_LANES 16
#define Q0_OP(op) _mm512_##op
#define Q0_LOAD(p) _mm512_loadu_si512((const void *)(p))
#define Q0_HALF_TO_F(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define Q0_AND(a, b) _mm512_and_si512(a, b)
#else
typedef __m256i Q0(vi);
typedef __m256 Q0(vf);
typedef __m256i Q0(sign);
#define Q0_LANES 8
#define Q0_OP(op) _mm256_##op
#define Q0_LOAD(p) _mm256_loadu_si256((const __m256i *)(p))
#define Q0_HALF_TO_F(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define Q0_AND(a, b) _mm256_and_si256(a, b)
#endif
/* Registers per 16-row line: 1 at 512 bits, 2 at 256. */
#define Q0_PARTS (QPACK_ROWS / Q0_LANES)
/* Register rows of the largest tile. */
#define Q0_MAX_R (4 * Q0_PARTS)
#define Q0_MAX_V 4
/* Q8_0's offset left in the codes the dot multiplies. */
#define Q0_Q8_OFFSET (Q0_VNNI ? 128 : 0)

/* acc + unsigned u times signed s, summed in fours to 32 bits. */
Q0_INLINE Q0(vi) Q0(dot)(Q0(vi) acc, Q0(vi) u, Q0(vi) s)
{
#if Q0_VNNI && Q0_512
	return _mm512_dpbusd_epi32(acc, u, s);
#elif Q0_VNNI
	return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
	return Q0_OP(add_epi32)(acc, Q0_OP(madd_epi16)(Q0_OP(maddubs_epi16)(u, s),
	                                               Q0_OP(set1_epi16)(1)));
#endif
}

/* A Q8_0 line as the dot takes it: the codes + 128 (VNNI), or |q| and the
 * sign of q, which q8_dot moves onto x. */
struct Q0(q8_line) {
	Q0(vi) u;
	Q0(sign) s;
};

Q0_INLINE struct Q0(q8_line) Q0(q8_prep)(const void *p)
{
	struct Q0(q8_line) l;
	l.u = Q0_LOAD(p);
#if !Q0_VNNI && Q0_512
	__m512i q = _mm512_xor_si512(l.u, _mm512_set1_epi8((char)0x80));
	l.s = _mm512_movepi8_mask(q);
	l.u = _mm512_abs_epi8(q);
#elif !Q0_VNNI
	__m256i q = _mm256_xor_si256(l.u, _mm256_set1_epi8((char)0x80));
	l.s = q;
	l.u = _mm256_abs_epi8(q);
#else
	memset(&l.s, 0, sizeof(l.s));
#endif
	return l;
}

Q0_INLINE Q0(vi) Q0(q8_dot)(Q0(vi) acc, struct Q0(q8_line) l, Q0(vi) x)
{
#if !Q0_VNNI && Q0_512
	x = _mm512_mask_sub_epi8(x, l.s, _mm512_setzero_si512(), x);
#elif !Q0_VNNI
	x = _mm256_sign_epi8(x, l.s);
#endif
	return Q0(dot)(acc, l.u, x);
}

/* Q4_0's products of one block: VNNI sums them in 32 bits as they come;
 * maddubs sums them in 16 bits (8 pairs of at most 2 x 15 x 127 per block
 * fit), widened once per block by q4_widen, one madd fewer per product. */
Q0_INLINE Q0(vi) Q0(q4_dot)(Q0(vi) acc, Q0(vi) u, Q0(vi) s)
{
#if Q0_VNNI
	return Q0(dot)(acc, u, s);
#else
	return Q0_OP(add_epi16)(acc, Q0_OP(maddubs_epi16)(u, s));
#endif
}

/* acc + the products of step j of an MXFP4 line pair (lo: step j, hi:
 * step j + 4): without VNNI the maddubs (at most 2 x 24 x 128 each) of two
 * steps add in 16 bits (*part holds an even step's) and widen on the odd
 * step. */
Q0_INLINE Q0(vi) Q0(mx_dot2)(Q0(vi) acc, Q0(vi) *part, int j, Q0(vi) lo, Q0(vi) xl, Q0(vi) hi,
                             Q0(vi) xh)
{
#if Q0_VNNI
	(void)part, (void)j;
	return Q0(dot)(Q0(dot)(acc, lo, xl), hi, xh);
#else
	Q0(vi) p = Q0_OP(add_epi16)(Q0_OP(maddubs_epi16)(lo, xl), Q0_OP(maddubs_epi16)(hi, xh));
	if (j % 2 == 0) {
		*part = p;
		return acc;
	}
	p = Q0_OP(add_epi16)(*part, p);
	return Q0_OP(add_epi32)(acc, Q0_OP(madd_epi16)(p, Q0_OP(set1_epi16)(1)));
#endif
}

/* MXFP4 nibbles (0..15 per byte) as their unsigned codes. */
Q0_INLINE Q0(vi) Q0(mx_decode)(Q0(vi) n)
{
#if Q0_512
	const __m512i table = _mm512_broadcast_i32x4(_mm_setr_epi8(QDOT_MXFP4_KVALUES_U));
#else
	const __m256i table = _mm256_broadcastsi128_si256(_mm_setr_epi8(QDOT_MXFP4_KVALUES_U));
#endif
	return Q0_OP(shuffle_epi8)(table, n);
}

/* Q0_LANES E8M0 scale bytes at p as floats, the bits of mxfp4_scale:
 * (e - 1) << 23, or a denormal's 0x00200000 << e for e < 2. */
Q0_INLINE Q0(vf) Q0(e8m0_to_f)(const uint8_t *p)
{
#if Q0_512
	__m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
	__m512i norm = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
	__m512i den = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
	__mmask16 small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
	return _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, norm, den));
#else
	__m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
	__m256i norm = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
	__m256i den = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
	__m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
	return _mm256_castsi256_ps(_mm256_blendv_epi8(norm, den, small));
#endif
}

/* A block's Q4_0 sums as 32-bit lanes less 8 times x's block sum (the
 * VNNI builds started from that already). */
Q0_INLINE Q0(vi) Q0(q4_widen)(Q0(vi) acc, int32_t x_sum)
{
#if Q0_VNNI
	(void)x_sum;
	return acc;
#else
	return Q0_OP(add_epi32)(Q0_OP(madd_epi16)(acc, Q0_OP(set1_epi16)(1)),
	                        Q0_OP(set1_epi32)(-8 * x_sum));
#endif
}

/* Four activation bytes in every lane. */
Q0_INLINE Q0(vi) Q0(bcast4)(const int8_t *p)
{
	int32_t v;
	memcpy(&v, p, 4);
	return Q0_OP(set1_epi32)(v);
}

/* Register row i of a tile: part i % Q0_PARTS of group i / Q0_PARTS. */
#define Q0_GROUP(i) ((i) / Q0_PARTS)
#define Q0_LANE0(i) ((i) % Q0_PARTS * Q0_LANES)

/* acc[i][v] += (d_w * d_x) * isum[i][v] for one 32-value block of the
 * weight scales dw_[i] (register row i's, as floats) and activation blocks
 * xb[v]. */
#define Q0_SCALE(R, V, dw_, xb, isum, acc)                                                         \
	do {                                                                                       \
		_Pragma("GCC unroll 4") for (int v = 0; v < (V); v++)                              \
		{                                                                                  \
			Q0(vf) dx_ = Q0_OP(set1_ps)(xb[v]->d);                                      \
			_Pragma("GCC unroll 8") for (int i = 0; i < (R); i++) acc[i][v] =          \
			    Q0_OP(fmadd_ps)(Q0_OP(cvtepi32_ps)(isum[i][v]),                          \
			                   Q0_OP(mul_ps)(dw_[i], dx_), acc[i][v]);                  \
		}                                                                                  \
	} while (0)

/* xb[v] = block kb of vector v of x (xs apart), and isum[i][v] =
 * -offset * (its sum), every lane. */
#define Q0_START(R, V, OFFSET, x, xs, kb, xb, isum)                                                \
	do {                                                                                       \
		_Pragma("GCC unroll 4") for (int v = 0; v < (V); v++)                              \
		{                                                                                  \
			xb[v] = (const struct qdot_q8_block *)((x) + (size_t)v * (xs)) + (kb);     \
			Q0(vi) c_ = Q0_OP(set1_epi32)(-(OFFSET) * xb[v]->sum);                      \
			_Pragma("GCC unroll 8") for (int i = 0; i < (R); i++) isum[i][v] = c_;     \
		}                                                                                  \
	} while (0)

/* One Q8_0 tile: register rows of groups g[0..RG) by activation vectors x
 * (xs apart), the whole row of npair group blocks; acc[i][v] lane l = the
 * dot of row Q0_LANE0(i) + l of group Q0_GROUP(i). */
Q0_INLINE void Q0(q8_0_tile)(const int RG, const int V, const struct qpack_q8_0_block *const *g,
                             int npair, const uint8_t *x, size_t xs,
                             Q0(vf) acc[Q0_MAX_R][Q0_MAX_V])
{
	const int R = RG * Q0_PARTS;
	for (int i = 0; i < R; i++)
		for (int v = 0; v < V; v++)
			acc[i][v] = Q0_OP(setzero_ps)();
	for (int k = 0; k < npair; k++) {
		const struct qpack_q8_0_block *gb[Q0_MAX_R];
		for (int i = 0; i < RG; i++) {
			gb[i] = g[i] + k;
			_mm_prefetch((const char *)gb[i] + TUNING_PREFETCH_BYTES, _MM_HINT_T0);
			_mm_prefetch((const char *)gb[i] + TUNING_PREFETCH_BYTES + 512,
			             _MM_HINT_T0);
		}
#pragma GCC unroll 2
		for (int h = 0; h < QPACK_Q0_PAIR; h++) {
			const struct qdot_q8_block *xb[Q0_MAX_V];
			Q0(vi) isum[Q0_MAX_R][Q0_MAX_V];
			Q0(vf) dw[Q0_MAX_R];
			Q0_START(R, V, Q0_Q8_OFFSET, x, xs, QPACK_Q0_PAIR * k + h, xb, isum);
#pragma GCC unroll 8
			for (int s = 0; s < 8; s++) {
				struct Q0(q8_line) wv[Q0_MAX_R];
				for (int i = 0; i < R; i++)
					wv[i] = Q0(q8_prep)(gb[Q0_GROUP(i)]->qs[h][s][Q0_LANE0(i)]);
				for (int v = 0; v < V; v++) {
					Q0(vi) xv = Q0(bcast4)(xb[v]->qs + 4 * s);
					for (int i = 0; i < R; i++)
						isum[i][v] = Q0(q8_dot)(isum[i][v], wv[i], xv);
				}
			}
			for (int i = 0; i < R; i++)
				dw[i] = Q0_HALF_TO_F(&gb[Q0_GROUP(i)]->d[h][Q0_LANE0(i)]);
			Q0_SCALE(R, V, dw, xb, isum, acc);
		}
	}
}

/* The nibble lines of Q4_0 and MXFP4 lie alike (qpack_impl.h): one tile
 * body reads both, mx telling the decode, offset, widening and scales. */
_Static_assert(sizeof(struct qpack_q4_0_block) == sizeof(struct qpack_mxfp4_block) &&
                   offsetof(struct qpack_q4_0_block, qs) == offsetof(struct qpack_mxfp4_block, qs),
               "Q4_0 and MXFP4 group blocks share their nibble lines");

/* Line j of block h of group block gb, from lane lane0. */
Q0_INLINE const uint8_t *Q0(nibble_line)(const uint8_t *gb, int h, int j, int lane0)
{
	return gb + offsetof(struct qpack_q4_0_block, qs) +
	       ((size_t)(h * 4 + j) * QPACK_ROWS + (size_t)lane0) * 4;
}

/* The scales of block h of group block gb from lane lane0, as floats. */
Q0_INLINE Q0(vf) Q0(nibble_scales)(const bool mx, const uint8_t *gb, int h, int lane0)
{
	if (mx)
		return Q0(e8m0_to_f)(((const struct qpack_mxfp4_block *)(const void *)gb)->d[h] +
		                     lane0);
	return Q0_HALF_TO_F(((const struct qpack_q4_0_block *)(const void *)gb)->d[h] + lane0);
}

/* One Q4_0 (mx false) or MXFP4 tile, as q8_0_tile on group blocks g[]:
 * each loaded line is two steps, low nibbles step j and high nibbles step
 * j + 4. */
Q0_INLINE void Q0(nibble_tile)(const bool mx, const int RG, const int V, const uint8_t *const *g,
                               int npair, const uint8_t *x, size_t xs,
                               Q0(vf) acc[Q0_MAX_R][Q0_MAX_V])
{
	const int R = RG * Q0_PARTS;
	const size_t bb = sizeof(struct qpack_q4_0_block);
	const Q0(vi) low = Q0_OP(set1_epi8)(0x0f);
	for (int i = 0; i < R; i++)
		for (int v = 0; v < V; v++)
			acc[i][v] = Q0_OP(setzero_ps)();
	for (int k = 0; k < npair; k++) {
		const uint8_t *gb[Q0_MAX_R];
		for (int i = 0; i < RG; i++) {
			gb[i] = g[i] + (size_t)k * bb;
			_mm_prefetch((const char *)gb[i] + TUNING_PREFETCH_BYTES, _MM_HINT_T0);
		}
#pragma GCC unroll 2
		for (int h = 0; h < QPACK_Q0_PAIR; h++) {
			const struct qdot_q8_block *xb[Q0_MAX_V];
			Q0(vi) isum[Q0_MAX_R][Q0_MAX_V], part[Q0_MAX_R][Q0_MAX_V];
			Q0(vf) dw[Q0_MAX_R];
			Q0_START(R, V, mx ? QDOT_MXFP4_OFFSET : Q0_VNNI ? 8 : 0, x, xs,
			         QPACK_Q0_PAIR * k + h, xb, isum);
#pragma GCC unroll 4
			for (int j = 0; j < 4; j++) {
				Q0(vi) lo[Q0_MAX_R], hi[Q0_MAX_R];
				for (int i = 0; i < R; i++) {
					Q0(vi) raw = Q0_LOAD(
					    Q0(nibble_line)(gb[Q0_GROUP(i)], h, j, Q0_LANE0(i)));
					lo[i] = Q0_AND(raw, low);
					hi[i] = Q0_AND(Q0_OP(srli_epi16)(raw, 4), low);
					if (mx) {
						lo[i] = Q0(mx_decode)(lo[i]);
						hi[i] = Q0(mx_decode)(hi[i]);
					}
				}
				for (int v = 0; v < V; v++) {
					Q0(vi) xl = Q0(bcast4)(xb[v]->qs + 4 * j);
					Q0(vi) xh = Q0(bcast4)(xb[v]->qs + 16 + 4 * j);
					for (int i = 0; i < R; i++)
						isum[i][v] =
						    mx ? Q0(mx_dot2)(isum[i][v], &part[i][v], j, lo[i],
						                     xl, hi[i], xh)
						       : Q0(q4_dot)(Q0(q4_dot)(isum[i][v], lo[i], xl),
						                    hi[i], xh);
				}
			}
			for (int v = 0; v < V && !mx; v++)
				for (int i = 0; i < R; i++)
					isum[i][v] = Q0(q4_widen)(isum[i][v], xb[v]->sum);
			for (int i = 0; i < R; i++)
				dw[i] = Q0(nibble_scales)(mx, gb[Q0_GROUP(i)], h, Q0_LANE0(i));
			Q0_SCALE(R, V, dw, xb, isum, acc);
		}
	}
}

/* The nibble tile of type T (mx: MXFP4's). */
#define Q0_DEFINE_NIBBLE_TILE(T, MX)                                                               \
	Q0_INLINE void Q0(T##_tile)(const int RG, const int V,                                     \
	                            const struct qpack_##T##_block *const *g, int npair,           \
	                            const uint8_t *x, size_t xs, Q0(vf) acc[Q0_MAX_R][Q0_MAX_V])   \
	{                                                                                          \
		const uint8_t *gp[Q0_MAX_R];                                                       \
		for (int i = 0; i < RG; i++)                                                       \
			gp[i] = (const uint8_t *)g[i];                                             \
		Q0(nibble_tile)(MX, RG, V, gp, npair, x, xs, acc);                                 \
	}

Q0_DEFINE_NIBBLE_TILE(q4_0, false)
Q0_DEFINE_NIBBLE_TILE(mxfp4, true)

/* Lanes of acc (rows base .. base + Q0_LANES - 1) that lie in [r0, r1),
 * into y. */
Q0_INLINE void Q0(store)(Q0(vf) acc, float *y, int base, int r0, int r1)
{
	int lo = r0 > base ? r0 - base : 0, hi = r1 - base < Q0_LANES ? r1 - base : Q0_LANES;
	if (hi <= lo)
		return;
	if (lo == 0 && hi == Q0_LANES) {
		Q0_OP(storeu_ps)(y + base, acc);
		return;
	}
	float t[Q0_LANES];
	Q0_OP(storeu_ps)(t, acc);
	memcpy(y + base + lo, t + lo, (size_t)(hi - lo) * sizeof(float));
}

/* Runs tile shape (RG, V) of type T on groups from gi and vectors from v0
 * and stores rows [r0, r1) of the result. */
#define Q0_RUN(T, RG, V)                                                                           \
	do {                                                                                       \
		const struct qpack_##T##_block *g_[Q0_MAX_R];                                      \
		for (int i = 0; i < (RG); i++)                                                     \
			g_[i] = base + (size_t)(gi + i) * npair;                                   \
		Q0(vf) acc_[Q0_MAX_R][Q0_MAX_V];                                                   \
		Q0(T##_tile)(RG, V, g_, npair, x + (size_t)v0 * xs, xs, acc_);                     \
		for (int i = 0; i < (RG) * Q0_PARTS; i++)                                          \
			for (int v = 0; v < (V); v++)                                              \
				Q0(store)(acc_[i][v], y + (size_t)(v0 + v) * ldy,                  \
				          (gi + Q0_GROUP(i)) * QPACK_ROWS + Q0_LANE0(i), r0, r1);  \
	} while (0)

/* Groups from gi (RG of them) by every vector: tiles of Q0_NV, then a pair
 * and a single as B's remainder asks. */
#define Q0_ALL_VECTORS(T, RG)                                                                      \
	do {                                                                                       \
		for (v0 = 0; v0 + Q0_NV <= B; v0 += Q0_NV)                                           \
			Q0_RUN(T, RG, Q0_NV);                                                       \
		if (B - v0 >= 2) {                                                                 \
			Q0_RUN(T, RG, 2);                                                          \
			v0 += 2;                                                                   \
		}                                                                                  \
		if (B - v0 == 1)                                                                   \
			Q0_RUN(T, RG, 1);                                                          \
	} while (0)

/* The rows kernel of type T (qpack_rows_fn): decode takes Q0_DEC_RG groups
 * at a time (then halves), batches Q0_RG groups by Q0_NV vectors. */
#define Q0_DEFINE_ROWS(T)                                                                          \
	Q0_FN void Q0(rows_##T)(const struct weight_matrix *w, const void *xq, size_t xs, int B,   \
	                        float *y, size_t ldy, int r0, int r1)                              \
	{                                                                                          \
		const struct qpack_##T##_block *base = w->panels;                                  \
		const uint8_t *x = xq;                                                             \
		int npair = w->cols / (32 * QPACK_Q0_PAIR), v0 = 0;                                \
		int g0 = r0 / QPACK_ROWS, g1 = (r1 + QPACK_ROWS - 1) / QPACK_ROWS, gi = g0;        \
		if (B == 1) {                                                                      \
			for (; gi + Q0_DEC_RG <= g1; gi += Q0_DEC_RG)                              \
				Q0_RUN(T, Q0_DEC_RG, 1);                                           \
			if (Q0_DEC_RG > 2)                                                         \
				for (; gi + 2 <= g1; gi += 2)                                      \
					Q0_RUN(T, 2, 1);                                           \
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
Q0_DEFINE_ROWS(mxfp4)

#undef Q0_INLINE
#undef Q0_FN
#undef Q0_LANES
#undef Q0_OP
#undef Q0_LOAD
#undef Q0_HALF_TO_F
#undef Q0_AND
#undef Q0_PARTS
#undef Q0_MAX_R
#undef Q0_MAX_V
#undef Q0_Q8_OFFSET
#undef Q0_GROUP
#undef Q0_LANE0
#undef Q0_SCALE
#undef Q0_START
#undef Q0_RUN
#undef Q0_ALL_VECTORS
#undef Q0_DEFINE_ROWS
#undef Q0_DEFINE_NIBBLE_TILE
/* the build's parameters: the includer defines them anew for the next */
#undef Q0_TARGET
#undef Q0_VNNI
#undef Q0_512
#undef Q0_RG
#undef Q0_NV
#undef Q0_DEC_RG
#undef Q0
/* clang-format on */
