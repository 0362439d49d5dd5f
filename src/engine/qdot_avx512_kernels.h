/* The 512-bit kernels of qdot_avx512.c, included once per build there: with
 * QX_VNNI 0 (AVX-512BW: maddubs + madd) and 1 (AVX-512 VNNI: vpdpbusd /
 * vpdpwssd).  The includer defines QX_TARGET and QX(name) as for
 * qdot_avx2_kernels.h.  One register holds 64 values: two 32-value blocks
 * of Q8_0/Q4_0 (a row's odd last block pairs with zeros), or a quarter of
 * a K-quant super-block. */

/* clang-format would read QX(type) *p as a multiplication. */
/* clang-format off */

#define QX_INLINE static inline __attribute__((always_inline, target(QX_TARGET)))
#define QX_FN static __attribute__((target(QX_TARGET)))

/* acc + the 16-bit pair products p16 * s16, summed in pairs to 32 bits. */
QX_INLINE __m512i QX(madd_acc)(__m512i acc, __m512i p16, __m512i s16)
{
#if QX_VNNI
	return _mm512_dpwssd_epi32(acc, p16, s16);
#else
	return _mm512_add_epi32(acc, _mm512_madd_epi16(p16, s16));
#endif
}

/* acc + unsigned u times signed s, summed in fours to 32 bits (exact: the
 * callers keep |u * s| pairs within 16 bits, or use VNNI). */
QX_INLINE __m512i QX(dot_acc)(__m512i acc, __m512i u, __m512i s)
{
#if QX_VNNI
	return _mm512_dpbusd_epi32(acc, u, s);
#else
	return _mm512_add_epi32(
	    acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
#endif
}

QX_INLINE float QX(half)(const uint8_t *p)
{
	uint16_t h;
	memcpy(&h, p, 2);
	return _cvtsh_ss(h);
}

QX_INLINE __m512i QX(join)(__m256i lo, __m256i hi)
{
	return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* Two 256-bit vectors side by side; hi absent (zero) when !two. */
QX_INLINE __m512i QX(load_pair)(const int8_t *lo, const int8_t *hi, bool two)
{
	__m256i h = two ? _mm256_loadu_si256((const __m256i *)hi) : _mm256_setzero_si256();
	return QX(join)(_mm256_loadu_si256((const __m256i *)lo), h);
}

/* d0 in the low 8 lanes, d1 in the high 8. */
QX_INLINE __m512 QX(scales_pair)(float d0, float d1)
{
	return _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(d0), _mm512_set1_ps(d1));
}

/* ------------------------------------------------------- Q8_0 and Q4_0 */

struct QX(u_q32) {
	__m512i q;   /* two blocks' codes */
	__m512i aux; /* Q8_0: -128 * (sum of w per lane) (VNNI) or |w| (BW) */
	__m512 d;    /* each block's scale in its 8 lanes */
};

/* Activations of two blocks. */
struct QX(p_q32) {
	__m512i x;    /* Q8_0 with VNNI: x + 128, as unsigned */
	__m512i corr; /* Q4_0: -8 * sum of x in lanes 0 and 8 */
	__m512 d;
};

QX_INLINE void QX(unpack_q8_0)(const uint8_t *b, bool two, struct QX(u_q32) *u)
{
	const uint8_t *b1 = b + QDOT_Q8_0_BYTES;
	u->q = QX(load_pair)((const int8_t *)(b + 2), (const int8_t *)(b1 + 2), two);
	u->d = QX(scales_pair)(QX(half)(b), two ? QX(half)(b1) : 0.0f);
#if QX_VNNI
	/* AVX-512 has no sign_epi8: x + 128 is unsigned, and 128 sum w comes off. */
	__m512i sw = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), u->q);
	u->aux = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sw, 7));
#else
	u->aux = _mm512_abs_epi8(u->q);
#endif
}

QX_INLINE void QX(prep_q8_0)(const uint8_t *xb, bool two, struct QX(p_q32) *p)
{
	const struct qdot_q8_block *x = (const struct qdot_q8_block *)xb;
	p->x = QX(load_pair)(x[0].qs, two ? x[1].qs : NULL, two);
	p->d = QX(scales_pair)(x[0].d, two ? x[1].d : 0.0f);
#if QX_VNNI
	p->x = _mm512_xor_si512(p->x, _mm512_set1_epi8((char)0x80));
#endif
}

QX_INLINE __m512 QX(dot_q8_0)(const struct QX(u_q32) *u, const struct QX(p_q32) *p, __m512 acc)
{
#if QX_VNNI
	__m512i s = _mm512_dpbusd_epi32(u->aux, p->x, u->q);
#else
	__mmask64 neg = _mm512_movepi8_mask(u->q);
	__m512i xs = _mm512_mask_sub_epi8(p->x, neg, _mm512_setzero_si512(), p->x);
	__m512i s = QX(dot_acc)(_mm512_setzero_si512(), u->aux, xs);
#endif
	return _mm512_fmadd_ps(_mm512_mul_ps(u->d, p->d), _mm512_cvtepi32_ps(s), acc);
}

/* Two 32-value blocks from their low (lo) and high (hi) nibbles, block 0
 * in the low 128-bit lanes of both and block 1 in the high ones: each
 * block's 16 low values then its 16 high ones. */
QX_INLINE __m512i QX(nibble_blocks)(__m256i lo, __m256i hi)
{
	return QX(join)(_mm256_permute2x128_si256(lo, hi, 0x20),
	                _mm256_permute2x128_si256(lo, hi, 0x31));
}

QX_INLINE void QX(unpack_q4_0)(const uint8_t *b, bool two, struct QX(u_q32) *u)
{
	const uint8_t *b1 = b + QDOT_Q4_0_BYTES;
	const __m256i m = _mm256_set1_epi8(0xf);
	__m128i p0 = _mm_loadu_si128((const __m128i *)(b + 2));
	__m128i p1 = two ? _mm_loadu_si128((const __m128i *)(b1 + 2)) : _mm_setzero_si128();
	__m256i p = _mm256_set_m128i(p1, p0);
	__m256i lo = _mm256_and_si256(p, m), hi = _mm256_and_si256(_mm256_srli_epi16(p, 4), m);
	u->q = QX(nibble_blocks)(lo, hi);
	u->d = QX(scales_pair)(QX(half)(b), two ? QX(half)(b1) : 0.0f);
	u->aux = _mm512_setzero_si512();
}

/* MXFP4, two blocks: the codes looked up as unsigned bytes (vpshufb on the
 * 16-entry table of QDOT_MXFP4_KVALUES_U in every 128-bit lane), then
 * Q4_0's product with offset 12. */
QX_INLINE void QX(unpack_mxfp4)(const uint8_t *b, bool two, struct QX(u_q32) *u)
{
	const uint8_t *b1 = b + QDOT_MXFP4_BYTES;
	const __m256i m = _mm256_set1_epi8(0xf);
	const __m256i table = _mm256_broadcastsi128_si256(_mm_setr_epi8(QDOT_MXFP4_KVALUES_U));
	__m128i p0 = _mm_loadu_si128((const __m128i *)(b + 1));
	__m128i p1 = two ? _mm_loadu_si128((const __m128i *)(b1 + 1)) : _mm_setzero_si128();
	__m256i p = _mm256_set_m128i(p1, p0);
	__m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(p, m));
	__m256i hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(p, 4), m));
	u->q = QX(nibble_blocks)(lo, hi);
	u->d = QX(scales_pair)(mxfp4_scale(b[0]), two ? mxfp4_scale(b1[0]) : 0.0f);
	u->aux = _mm512_setzero_si512();
}

/* Activations of two blocks for unsigned codes offset by off. */
QX_INLINE void QX(prep_offset)(const uint8_t *xb, bool two, struct QX(p_q32) *p, int off)
{
	const struct qdot_q8_block *x = (const struct qdot_q8_block *)xb;
	p->x = QX(load_pair)(x[0].qs, two ? x[1].qs : NULL, two);
	p->d = QX(scales_pair)(x[0].d, two ? x[1].d : 0.0f);
	p->corr = _mm512_mask_set1_epi32(_mm512_maskz_set1_epi32(0x0001, -off * x[0].sum), 0x0100,
	                                 two ? -off * x[1].sum : 0);
}

QX_INLINE void QX(prep_q4_0)(const uint8_t *xb, bool two, struct QX(p_q32) *p)
{
	QX(prep_offset)(xb, two, p, 8);
}

QX_INLINE void QX(prep_mxfp4)(const uint8_t *xb, bool two, struct QX(p_q32) *p)
{
	QX(prep_offset)(xb, two, p, QDOT_MXFP4_OFFSET);
}

/* sum (q - off) x = sum q x - off sum x (off 8, or MXFP4's 12 from
 * prep_mxfp4), q unsigned as the instructions want. */
QX_INLINE __m512 QX(dot_q4_0)(const struct QX(u_q32) *u, const struct QX(p_q32) *p, __m512 acc)
{
	__m512i s = QX(dot_acc)(p->corr, u->q, p->x);
	return _mm512_fmadd_ps(_mm512_mul_ps(u->d, p->d), _mm512_cvtepi32_ps(s), acc);
}

/* ------------------------------------------------------------- K-quants */

/* K-quant activations are read in place. */
struct QX(p_k) {
	const struct qdot_q8k_block *x;
};

QX_INLINE void QX(prep_k)(const uint8_t *xb, bool two, struct QX(p_k) *p)
{
	p->x = (const struct qdot_q8k_block *)xb;
}

struct QX(u_k4) {
	__m512i q[4];  /* values 64 k .. 64 k + 63 (sub-blocks 2 k, 2 k + 1), 0..31 */
	__m512i sc[4]; /* scale of sub-block 2 k in 16-bit lanes 0..15, 2 k + 1 above */
	__m256i mins;  /* min of sub-block g / 2 in 16-bit lane g */
	float d, dmin;
};

/* The 12 packed bytes -> scales and mins (ggml's kmask shuffle). */
QX_INLINE void QX(k4_scales)(const uint8_t *p, struct QX(u_k4) *u)
{
	uint32_t a[4];
	uint8_t s8[16];
	memcpy(a, p, 12);
	a[3] = ((a[2] >> 4) & 0x0f0f0f0fu) | (((a[1] >> 6) & 0x03030303u) << 4);
	uint32_t mins_lo = a[1] & 0x3f3f3f3fu;
	a[1] = (a[2] & 0x0f0f0f0fu) | (((a[0] >> 6) & 0x03030303u) << 4);
	a[2] = mins_lo;
	a[0] &= 0x3f3f3f3fu;
	memcpy(s8, a, 16);
#pragma GCC unroll 8
	for (int k = 0; k < 4; k++)
		u->sc[k] = _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16(s8[2 * k]),
		                                   _mm512_set1_epi16(s8[2 * k + 1]));
	__m128i m = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(s8 + 8)));
	u->mins = _mm256_set_m128i(_mm_unpackhi_epi16(m, m), _mm_unpacklo_epi16(m, m));
}

/* Low nibbles of p in the low half, high nibbles in the high half. */
QX_INLINE __m512i QX(nibbles)(__m256i p)
{
	return _mm512_and_si512(QX(join)(p, _mm256_srli_epi16(p, 4)), _mm512_set1_epi8(0xf));
}

QX_INLINE void QX(unpack_q4_k)(const uint8_t *b, bool two, struct QX(u_k4) *u)
{
	u->d = QX(half)(b);
	u->dmin = QX(half)(b + 2);
	QX(k4_scales)(b + 4, u);
#pragma GCC unroll 8
	for (int k = 0; k < 4; k++)
		u->q[k] = QX(nibbles)(_mm256_loadu_si256((const __m256i *)(b + 16 + 32 * k)));
}

QX_INLINE void QX(unpack_q5_k)(const uint8_t *b, bool two, struct QX(u_k4) *u)
{
	const __m256i one = _mm256_set1_epi8(1);
	__m256i hb = _mm256_loadu_si256((const __m256i *)(b + 16));
	u->d = QX(half)(b);
	u->dmin = QX(half)(b + 2);
	QX(k4_scales)(b + 4, u);
#pragma GCC unroll 8
	for (int k = 0; k < 4; k++) {
		__m256i h0 = _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(2 * k)), one);
		__m256i h1 =
		    _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(2 * k + 1)), one);
		__m512i q = QX(nibbles)(_mm256_loadu_si256((const __m256i *)(b + 48 + 32 * k)));
		u->q[k] = _mm512_or_si512(q, _mm512_slli_epi16(QX(join)(h0, h1), 4));
	}
}

QX_INLINE __m512 QX(dot_k4)(const struct QX(u_k4) *u, const struct QX(p_k) *p, __m512 acc)
{
	const struct qdot_q8k_block *x = p->x;
	__m512i isum = _mm512_setzero_si512();
#pragma GCC unroll 8
	for (int k = 0; k < 4; k++) {
		__m512i xk = _mm512_loadu_si512((const void *)(x->qs + 64 * k));
		isum = QX(madd_acc)(isum, _mm512_maddubs_epi16(u->q[k], xk), u->sc[k]);
	}
	__m256i msum = _mm256_madd_epi16(u->mins, _mm256_loadu_si256((const __m256i *)x->bsums));
	__m512i mz = _mm512_inserti64x4(_mm512_setzero_si512(), msum, 0);
	acc = _mm512_fmadd_ps(_mm512_set1_ps(x->d * u->d), _mm512_cvtepi32_ps(isum), acc);
	return _mm512_fnmadd_ps(_mm512_set1_ps(x->d * u->dmin), _mm512_cvtepi32_ps(mz), acc);
}

struct QX(u_q6_k) {
	__m512i q[4];  /* values 64 k .. 64 k + 63, 0..63 */
	__m512i sc[4]; /* scale of group 4 k + l / 8 in 16-bit lane l */
	__m256i sc16;  /* scale of group g in 16-bit lane g */
	float d;
};

QX_INLINE void QX(unpack_q6_k)(const uint8_t *b, bool two, struct QX(u_q6_k) *u)
{
	const __m256i m4 = _mm256_set1_epi8(0xf), m2 = _mm256_set1_epi8(0x30);
#pragma GCC unroll 8
	for (int h = 0; h < 2; h++) {
		__m256i ql0 = _mm256_loadu_si256((const __m256i *)(b + 64 * h));
		__m256i ql1 = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32));
		__m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
		__m256i q0 = _mm256_or_si256(_mm256_and_si256(ql0, m4),
		                             _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2));
		__m256i q1 = _mm256_or_si256(_mm256_and_si256(ql1, m4),
		                             _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2));
		__m256i q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
		                             _mm256_and_si256(qh, m2));
		__m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
		                             _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2));
		u->q[2 * h] = QX(join)(q0, q1);
		u->q[2 * h + 1] = QX(join)(q2, q3);
	}
	__m128i s8 = _mm_loadu_si128((const __m128i *)(b + 192));
#pragma GCC unroll 8
	for (int k = 0; k < 4; k++) {
		__m128i lo = _mm_set_epi64x(0x0101010101010101ll * (4 * k + 1),
		                            0x0101010101010101ll * (4 * k));
		__m128i hi = _mm_set_epi64x(0x0101010101010101ll * (4 * k + 3),
		                            0x0101010101010101ll * (4 * k + 2));
		u->sc[k] = QX(join)(_mm256_cvtepi8_epi16(_mm_shuffle_epi8(s8, lo)),
		                    _mm256_cvtepi8_epi16(_mm_shuffle_epi8(s8, hi)));
	}
	u->sc16 = _mm256_cvtepi8_epi16(s8);
	u->d = QX(half)(b + 208);
}

QX_INLINE __m512 QX(dot_q6_k)(const struct QX(u_q6_k) *u, const struct QX(p_k) *p, __m512 acc)
{
	const struct qdot_q8k_block *x = p->x;
	__m512i isum = _mm512_setzero_si512();
#pragma GCC unroll 8
	for (int k = 0; k < 4; k++) {
		__m512i xk = _mm512_loadu_si512((const void *)(x->qs + 64 * k));
		isum = QX(madd_acc)(isum, _mm512_maddubs_epi16(u->q[k], xk), u->sc[k]);
	}
	__m256i corr = _mm256_madd_epi16(u->sc16, _mm256_loadu_si256((const __m256i *)x->bsums));
	__m512i cz = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_slli_epi32(corr, 5), 0);
	isum = _mm512_sub_epi32(isum, cz);
	return _mm512_fmadd_ps(_mm512_set1_ps(x->d * u->d), _mm512_cvtepi32_ps(isum), acc);
}

/* ----------------------------------------------------------------- tiles
 * QX_TILE(T, U, P, PREP, DOT, VALUES, PER, W_BYTES, X_BYTES): the tile and
 * row kernels of type T: unpacked weights U, activations P made by PREP,
 * PER blocks of VALUES values (W_BYTES, X_BYTES each) per step. */

#define QX_TILE(T, U, P, PREP, DOT, VALUES, PER, W_BYTES, X_BYTES)                                 \
	QX_INLINE void QX(tile_body_##T)(const int R, const int B, const uint8_t *w, size_t ws,    \
	                                 const uint8_t *xq, size_t xs, int n, float *y,            \
	                                 size_t ldy)                                               \
	{                                                                                          \
		__m512 acc[QDOT_TILE_ROWS][QDOT_TILE_VECS];                                        \
		for (int i = 0; i < R; i++)                                                        \
			for (int j = 0; j < B; j++)                                                \
				acc[i][j] = _mm512_setzero_ps();                                   \
		int nblk = n / (VALUES);                                                           \
		for (int k = 0; k < nblk; k += (PER)) {                                            \
			bool two = (PER) == 2 && k + 1 < nblk;                                     \
			struct QX(U) u[QDOT_TILE_ROWS];                                            \
			for (int i = 0; i < R; i++) {                                              \
				const uint8_t *b = w + i * ws + (size_t)k * (W_BYTES);             \
				_mm_prefetch((const char *)b + TUNING_PREFETCH_BYTES, _MM_HINT_T0);\
				QX(unpack_##T)(b, two, &u[i]);                                     \
			}                                                                          \
			for (int j = 0; j < B; j++) {                                              \
				struct QX(P) p;                                                    \
				QX(PREP)(xq + j * xs + (size_t)k * (X_BYTES), two, &p);            \
				for (int i = 0; i < R; i++)                                        \
					acc[i][j] = QX(DOT)(&u[i], &p, acc[i][j]);                 \
			}                                                                          \
		}                                                                                  \
		for (int i = 0; i < R; i++)                                                        \
			for (int j = 0; j < B; j++)                                                \
				y[(size_t)j * ldy + i] = _mm512_reduce_add_ps(acc[i][j]);          \
	}                                                                                          \
	QX_FN void QX(tile_##T)(const void *w, size_t ws, int R, const void *xq, size_t xs, int B, \
	                        int n, float *y, size_t ldy)                                       \
	{                                                                                          \
		QX(tile_body_##T)(R, B, w, ws, xq, xs, n, y, ldy);                                 \
	}                                                                                          \
	QX_FN float QX(row_##T)(const void *w, const void *xq, int n)                              \
	{                                                                                          \
		float y;                                                                           \
		QX(tile_body_##T)(1, 1, w, 0, xq, 0, n, &y, 1);                                    \
		return y;                                                                          \
	}                                                                                          \
	static const struct qdot_kernels QX(kernels_##T) = {QX(row_##T), QX(tile_##T)};

QX_TILE(q8_0, u_q32, p_q32, prep_q8_0, dot_q8_0, 32, 2, QDOT_Q8_0_BYTES, 40)
QX_TILE(q4_0, u_q32, p_q32, prep_q4_0, dot_q4_0, 32, 2, QDOT_Q4_0_BYTES, 40)
QX_TILE(q4_k, u_k4, p_k, prep_k, dot_k4, 256, 1, QDOT_Q4_K_BYTES, 292)
QX_TILE(q5_k, u_k4, p_k, prep_k, dot_k4, 256, 1, QDOT_Q5_K_BYTES, 292)
QX_TILE(q6_k, u_q6_k, p_k, prep_k, dot_q6_k, 256, 1, QDOT_Q6_K_BYTES, 292)
QX_TILE(mxfp4, u_q32, p_q32, prep_mxfp4, dot_q4_0, 32, 2, QDOT_MXFP4_BYTES, 40)

static const struct qdot_kernels *QX(kernels)(enum ggml_type t)
{
	switch (t) {
	case GGML_TYPE_Q8_0:
		return &QX(kernels_q8_0);
	case GGML_TYPE_Q4_0:
		return &QX(kernels_q4_0);
	case GGML_TYPE_Q4_K:
		return &QX(kernels_q4_k);
	case GGML_TYPE_Q5_K:
		return &QX(kernels_q5_k);
	case GGML_TYPE_Q6_K:
		return &QX(kernels_q6_k);
	case GGML_TYPE_MXFP4:
		return &QX(kernels_mxfp4);
	default:
		return NULL;
	}
}

#undef QX_TILE
#undef QX_INLINE
#undef QX_FN
/* clang-format on */
