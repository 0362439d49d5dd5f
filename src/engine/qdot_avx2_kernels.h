/* The 256-bit kernels of qdot_avx2.c, included once per build there: with
 * QX_VNNI 0 (AVX2: maddubs + madd) and 1 (AVX-VNNI: vpdpbusd / vpdpwssd).
 * The includer defines QX_TARGET (the target attribute) and QX(name) (the
 * build's suffix).  A tile first unpacks each weight row's block to bytes
 * and 16-bit scales, then runs every activation vector against them. */

/* clang-format would read QX(type) *p as a multiplication. */
/* clang-format off */

#define QX_INLINE static inline __attribute__((always_inline, target(QX_TARGET)))
#define QX_FN static __attribute__((target(QX_TARGET)))

/* acc + the 16-bit pair products p16 * s16, summed in pairs to 32 bits. */
QX_INLINE __m256i QX(madd_acc)(__m256i acc, __m256i p16, __m256i s16)
{
#if QX_VNNI
	return _mm256_dpwssd_avx_epi32(acc, p16, s16);
#else
	return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, s16));
#endif
}

/* acc + unsigned u times signed s, summed in fours to 32 bits (exact: the
 * callers keep |u * s| pairs within 16 bits). */
QX_INLINE __m256i QX(dot_acc)(__m256i acc, __m256i u, __m256i s)
{
#if QX_VNNI
	return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
	return _mm256_add_epi32(
	    acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

QX_INLINE float QX(hsum)(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

QX_INLINE float QX(half)(const uint8_t *p)
{
	uint16_t h;
	memcpy(&h, p, 2);
	return _cvtsh_ss(h);
}

/* ------------------------------------------------------------------ Q8_0 */

struct QX(u_q8_0) {
	__m256i q, aq; /* the codes, and their magnitudes */
	float d;
};

QX_INLINE void QX(unpack_q8_0)(const uint8_t *b, struct QX(u_q8_0) *u)
{
	u->q = _mm256_loadu_si256((const __m256i *)(b + 2));
	u->aq = _mm256_sign_epi8(u->q, u->q);
	u->d = QX(half)(b);
}

/* |w| times x with w's sign: both operands in maddubs's unsigned x signed form. */
QX_INLINE __m256 QX(dot_q8_0)(const struct QX(u_q8_0) *u, const void *xv, __m256 acc)
{
	const struct qdot_q8_block *x = xv;
	__m256i xs = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)x->qs), u->q);
	__m256i s = QX(dot_acc)(_mm256_setzero_si256(), u->aq, xs);
	return _mm256_fmadd_ps(_mm256_set1_ps(u->d * x->d), _mm256_cvtepi32_ps(s), acc);
}

/* ------------------------------------------------------------------ Q4_0 */

struct QX(u_q4_0) {
	__m256i q; /* 0..15 */
	float d;
};

QX_INLINE void QX(unpack_q4_0)(const uint8_t *b, struct QX(u_q4_0) *u)
{
	__m128i p = _mm_loadu_si128((const __m128i *)(b + 2)), m = _mm_set1_epi8(0xf);
	u->q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(p, 4), m), _mm_and_si128(p, m));
	u->d = QX(half)(b);
}

/* sum (q - off) x = sum q x - off sum x, with sum x from the activation block. */
QX_INLINE __m256 QX(dot_offset)(const struct QX(u_q4_0) *u, const void *xv, __m256 acc, int off)
{
	const struct qdot_q8_block *x = xv;
	__m256i s = QX(dot_acc)(_mm256_zextsi128_si256(_mm_cvtsi32_si128(-off * x->sum)), u->q,
	                        _mm256_loadu_si256((const __m256i *)x->qs));
	return _mm256_fmadd_ps(_mm256_set1_ps(u->d * x->d), _mm256_cvtepi32_ps(s), acc);
}

QX_INLINE __m256 QX(dot_q4_0)(const struct QX(u_q4_0) *u, const void *xv, __m256 acc)
{
	return QX(dot_offset)(u, xv, acc, 8);
}

/* ----------------------------------------------------------------- MXFP4
 * The codes looked up as unsigned bytes (pshufb on the 16-entry table of
 * QDOT_MXFP4_KVALUES_U), then Q4_0's product with offset 12. */

QX_INLINE void QX(unpack_mxfp4)(const uint8_t *b, struct QX(u_q4_0) *u)
{
	const __m128i table = _mm_setr_epi8(QDOT_MXFP4_KVALUES_U), m = _mm_set1_epi8(0xf);
	__m128i p = _mm_loadu_si128((const __m128i *)(b + 1));
	__m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(p, m));
	__m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(p, 4), m));
	u->q = _mm256_set_m128i(hi, lo);
	u->d = mxfp4_scale(b[0]);
}

QX_INLINE __m256 QX(dot_mxfp4)(const struct QX(u_q4_0) *u, const void *xv, __m256 acc)
{
	return QX(dot_offset)(u, xv, acc, QDOT_MXFP4_OFFSET);
}

/* ---------------------------------------------------------- Q4_K and Q5_K */

struct QX(u_k4) {
	__m256i q[8];  /* sub-block j's 32 values, 0..31 */
	__m256i sc[8]; /* sub-block j's scale in every 16-bit lane */
	__m256i mins;  /* min of sub-block g / 2 in lane g (one per 16 values) */
	float d, dmin;
};

/* The 12 packed bytes -> scales in bytes 0..7, mins in 8..15 (ggml's kmask
 * shuffle on 32-bit words). */
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
	for (int j = 0; j < 8; j++)
		u->sc[j] = _mm256_set1_epi16(s8[j]);
	__m128i m = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(s8 + 8)));
	u->mins = _mm256_set_m128i(_mm_unpackhi_epi16(m, m), _mm_unpacklo_epi16(m, m));
}

QX_INLINE void QX(unpack_q4_k)(const uint8_t *b, struct QX(u_k4) *u)
{
	const __m256i m = _mm256_set1_epi8(0xf);
	u->d = QX(half)(b);
	u->dmin = QX(half)(b + 2);
	QX(k4_scales)(b + 4, u);
#pragma GCC unroll 8
	for (int k = 0; k < 4; k++) {
		__m256i p = _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * k));
		u->q[2 * k] = _mm256_and_si256(p, m);
		u->q[2 * k + 1] = _mm256_and_si256(_mm256_srli_epi16(p, 4), m);
	}
}

QX_INLINE void QX(unpack_q5_k)(const uint8_t *b, struct QX(u_k4) *u)
{
	const __m256i m = _mm256_set1_epi8(0xf), one = _mm256_set1_epi8(1);
	__m256i hb = _mm256_loadu_si256((const __m256i *)(b + 16));
	u->d = QX(half)(b);
	u->dmin = QX(half)(b + 2);
	QX(k4_scales)(b + 4, u);
#pragma GCC unroll 8
	for (int k = 0; k < 4; k++) {
		__m256i p = _mm256_loadu_si256((const __m256i *)(b + 48 + 32 * k));
		__m256i h0 = _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(2 * k)), one);
		__m256i h1 =
		    _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(2 * k + 1)), one);
		u->q[2 * k] = _mm256_or_si256(_mm256_and_si256(p, m), _mm256_slli_epi16(h0, 4));
		u->q[2 * k + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(p, 4), m),
		                                  _mm256_slli_epi16(h1, 4));
	}
}

/* d dx sum_j sc_j (q . x)_j - dmin dx sum_g min_g bsum_g. */
QX_INLINE __m256 QX(dot_k4)(const struct QX(u_k4) *u, const void *xv, __m256 acc)
{
	const struct qdot_q8k_block *x = xv;
	__m256i isum = _mm256_setzero_si256();
#pragma GCC unroll 8
	for (int j = 0; j < 8; j++) {
		__m256i xj = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * j));
		isum = QX(madd_acc)(isum, _mm256_maddubs_epi16(u->q[j], xj), u->sc[j]);
	}
	__m256i msum = _mm256_madd_epi16(u->mins, _mm256_loadu_si256((const __m256i *)x->bsums));
	acc = _mm256_fmadd_ps(_mm256_set1_ps(x->d * u->d), _mm256_cvtepi32_ps(isum), acc);
	return _mm256_fnmadd_ps(_mm256_set1_ps(x->d * u->dmin), _mm256_cvtepi32_ps(msum), acc);
}

/* ------------------------------------------------------------------ Q6_K */

struct QX(u_q6_k) {
	__m256i q[8];  /* values 32 s .. 32 s + 31, 0..63 (stored value + 32) */
	__m256i sc[8]; /* scales of groups 2 s (low 8 lanes) and 2 s + 1 */
	__m256i sc16;  /* scale of group g in 16-bit lane g */
	float d;
};

QX_INLINE void QX(unpack_q6_k)(const uint8_t *b, struct QX(u_q6_k) *u)
{
	const __m256i m4 = _mm256_set1_epi8(0xf), m2 = _mm256_set1_epi8(0x30);
#pragma GCC unroll 8
	for (int h = 0; h < 2; h++) {
		__m256i ql0 = _mm256_loadu_si256((const __m256i *)(b + 64 * h));
		__m256i ql1 = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32));
		__m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
		u->q[4 * h] = _mm256_or_si256(_mm256_and_si256(ql0, m4),
		                              _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2));
		u->q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
		                                  _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2));
		u->q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
		                                  _mm256_and_si256(qh, m2));
		u->q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
		                                  _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2));
	}
	__m128i s8 = _mm_loadu_si128((const __m128i *)(b + 192));
#pragma GCC unroll 8
	for (int s = 0; s < 8; s++) {
		__m128i pick = _mm_set_epi64x(0x0101010101010101ll * (2 * s + 1),
		                              0x0101010101010101ll * (2 * s));
		u->sc[s] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(s8, pick));
	}
	u->sc16 = _mm256_cvtepi8_epi16(s8);
	u->d = QX(half)(b + 208);
}

/* d dx (sum_g sc_g (q . x)_g - 32 sum_g sc_g bsum_g). */
QX_INLINE __m256 QX(dot_q6_k)(const struct QX(u_q6_k) *u, const void *xv, __m256 acc)
{
	const struct qdot_q8k_block *x = xv;
	__m256i isum = _mm256_setzero_si256();
#pragma GCC unroll 8
	for (int s = 0; s < 8; s++) {
		__m256i xs = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * s));
		isum = QX(madd_acc)(isum, _mm256_maddubs_epi16(u->q[s], xs), u->sc[s]);
	}
	__m256i corr = _mm256_madd_epi16(u->sc16, _mm256_loadu_si256((const __m256i *)x->bsums));
	isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(corr, 5));
	return _mm256_fmadd_ps(_mm256_set1_ps(x->d * u->d), _mm256_cvtepi32_ps(isum), acc);
}

/* ----------------------------------------------------------------- tiles
 * QX_TILE(T, U, DOT, VALUES, W_BYTES): the tile and row kernels of type T
 * with unpacked struct U, dot function DOT, VALUES per block of W_BYTES. */

#define QX_TILE(T, U, DOT, VALUES, W_BYTES, X_BYTES)                                               \
	QX_INLINE void QX(tile_body_##T)(const int R, const int B, const uint8_t *w, size_t ws,    \
	                                 const uint8_t *xq, size_t xs, int n, float *y,            \
	                                 size_t ldy)                                               \
	{                                                                                          \
		__m256 acc[QDOT_TILE_ROWS][QDOT_TILE_VECS];                                        \
		for (int i = 0; i < R; i++)                                                        \
			for (int j = 0; j < B; j++)                                                \
				acc[i][j] = _mm256_setzero_ps();                                   \
		for (int k = 0; k < n / (VALUES); k++) {                                           \
			struct QX(U) u[QDOT_TILE_ROWS];                                            \
			for (int i = 0; i < R; i++) {                                              \
				const uint8_t *b = w + i * ws + (size_t)k * (W_BYTES);             \
				_mm_prefetch((const char *)b + TUNING_PREFETCH_BYTES, _MM_HINT_T0);\
				QX(unpack_##T)(b, &u[i]);                                          \
			}                                                                          \
			for (int j = 0; j < B; j++) {                                              \
				const uint8_t *xb = xq + j * xs + (size_t)k * (X_BYTES);           \
				for (int i = 0; i < R; i++)                                        \
					acc[i][j] = QX(DOT)(&u[i], xb, acc[i][j]);                 \
			}                                                                          \
		}                                                                                  \
		for (int i = 0; i < R; i++)                                                        \
			for (int j = 0; j < B; j++)                                                \
				y[(size_t)j * ldy + i] = QX(hsum)(acc[i][j]);                      \
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

QX_TILE(q8_0, u_q8_0, dot_q8_0, 32, QDOT_Q8_0_BYTES, 40)
QX_TILE(q4_0, u_q4_0, dot_q4_0, 32, QDOT_Q4_0_BYTES, 40)
QX_TILE(q4_k, u_k4, dot_k4, 256, QDOT_Q4_K_BYTES, 292)
QX_TILE(q5_k, u_k4, dot_k4, 256, QDOT_Q5_K_BYTES, 292)
QX_TILE(q6_k, u_q6_k, dot_q6_k, 256, QDOT_Q6_K_BYTES, 292)
QX_TILE(mxfp4, u_q4_0, dot_mxfp4, 32, QDOT_MXFP4_BYTES, 40)

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
