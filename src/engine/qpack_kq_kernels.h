/* The K-quant kernels of qpack_x86.c, included once per build there: the
 * includer defines QX_TARGET, QX_VNNI (0: maddubs + madd, 1: vpdpbusd /
 * vpdpwssd), QX_512 (1: 512-bit, one register per 16-row line; 0: 256-bit,
 * two registers of 8 rows) and QX(name).  A group's 16 rows are the lanes:
 * every activation step is a broadcast of 4 bytes from memory, and a
 * product needs no shuffle until the group's 16 sums are stored.
 *
 * Q4_K per super-block and activation vector b: per pair of sub-blocks the
 * low-nibble and high-nibble dots of 16 rows accumulate in 32-bit lanes,
 * times their 6-bit scales (vpmulld); the mins take vpdpwssd against the
 * sub-block sums of x.  The VNNI builds multiply the high nibbles in place
 * (q & 0xf0 = 16 q) and the low scales by 16 to match, one shift fewer per
 * line; without VNNI maddubs would saturate on that, so they shift. */

/* clang-format would read QX(type) *p as a multiplication. */
/* clang-format off */

#define QX_INLINE static inline __attribute__((always_inline, target(QX_TARGET)))
#define QX_FN static __attribute__((target(QX_TARGET)))

#if QX_512
typedef __m512i QX(vi);
typedef __m512 QX(vf);
#define QX_LANES 16
#define QX_V(op) _mm512_##op
#define QX_LOAD(p) _mm512_load_si512((const void *)(p))
#define QX_U8_TO_32(p) _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(p)))
#define QX_U8_TO_16(p) _mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *)(p)))
#define QX_HALF_TO_F(p) _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(p)))
#define QX_ZERO() _mm512_setzero_si512()
#define QX_AND(a, b) _mm512_and_si512(a, b)
#define QX_I8_TO_32(p) _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(p)))
/* a | (b & c) */
#define QX_OR_AND(a, b, c) _mm512_ternarylogic_epi32(a, b, c, 0xf8)
#else
typedef __m256i QX(vi);
typedef __m256 QX(vf);
#define QX_LANES 8
#define QX_V(op) _mm256_##op
#define QX_LOAD(p) _mm256_load_si256((const __m256i *)(p))
#define QX_U8_TO_32(p) _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p)))
#define QX_U8_TO_16(p) _mm256_cvtepu8_epi16(_mm_load_si128((const __m128i *)(p)))
#define QX_HALF_TO_F(p) _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(p)))
#define QX_ZERO() _mm256_setzero_si256()
#define QX_AND(a, b) _mm256_and_si256(a, b)
#define QX_I8_TO_32(p) _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p)))
#define QX_OR_AND(a, b, c) _mm256_or_si256(a, _mm256_and_si256(b, c))
#endif
/* Register halves of a 16-row line: 1 at 512 bits, 2 at 256. */
#define QX_PARTS (QPACK_ROWS / QX_LANES)
/* Activation vectors of one register tile. */
#define QX_NB 4

/* acc + unsigned u times signed s, summed in fours to 32 bits. */
QX_INLINE QX(vi) QX(dot_acc)(QX(vi) acc, QX(vi) u, QX(vi) s)
{
#if QX_VNNI && QX_512
	return _mm512_dpbusd_epi32(acc, u, s);
#elif QX_VNNI
	return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
	return QX_V(add_epi32)(acc, QX_V(madd_epi16)(QX_V(maddubs_epi16)(u, s),
	                                               QX_V(set1_epi16)(1)));
#endif
}

/* acc + the 16-bit pair products a * b, summed in pairs to 32 bits. */
QX_INLINE QX(vi) QX(madd_acc)(QX(vi) acc, QX(vi) a, QX(vi) b)
{
#if QX_VNNI && QX_512
	return _mm512_dpwssd_epi32(acc, a, b);
#elif QX_VNNI
	return _mm256_dpwssd_avx_epi32(acc, a, b);
#else
	return QX_V(add_epi32)(acc, QX_V(madd_epi16)(a, b));
#endif
}

QX_INLINE int32_t QX(load32)(const int8_t *p)
{
	int32_t v;
	memcpy(&v, p, 4);
	return v;
}

/* The sums of x over sub-blocks 2t and 2t+1 as a pair of int16 in 32 bits
 * (each at most 32 * 127: no overflow). */
QX_INLINE int32_t QX(bsum_pair)(const struct qdot_q8k_block *x, int t)
{
	int lo = x->bsums[4 * t] + x->bsums[4 * t + 1];
	int hi = x->bsums[4 * t + 2] + x->bsums[4 * t + 3];
	return (int32_t)(((uint32_t)(uint16_t)hi << 16) | (uint16_t)lo);
}

/* v shifted left by n bits in each 16-bit lane (right for n < 0). */
QX_INLINE QX(vi) QX(shift16)(QX(vi) v, int n)
{
	return n >= 0 ? QX_V(slli_epi16)(v, (unsigned)n) : QX_V(srli_epi16)(v, (unsigned)-n);
}

/* acc[b][h] += rows (lanes h of the group) of one Q4_K (qh NULL) or Q5_K
 * group block (scales ps, lines qs and qh) times activation block k of
 * each of the NB vectors at x, xq_bytes apart. */
QX_INLINE void QX(k4_block)(const struct qpack_k4_scales *ps,
                            const uint8_t (*qs)[8][QPACK_ROWS][4],
                            const uint8_t (*qh)[QPACK_ROWS][4], const uint8_t *x,
                            size_t xq_bytes, int k, int NB, QX(vf) acc[QX_NB][QX_PARTS])
{
	/* the fifth bit would not fit beside the high nibble in place */
	const int hi_shift = QX_VNNI && !qh ? 4 : 0;
	const QX(vi) bit4 = QX_V(set1_epi8)(0x10);
	const QX(vi) lo_mask = QX_V(set1_epi8)(0x0f), hi_mask = QX_V(set1_epi8)((char)0xf0);
	const struct qdot_q8k_block *xb[QX_NB];
	for (int b = 0; b < NB; b++)
		xb[b] = (const struct qdot_q8k_block *)(x + (size_t)b * xq_bytes) + k;
	for (int h = 0; h < QX_PARTS; h++) {
		QX(vi) sumi[QX_NB], summ[QX_NB];
		for (int b = 0; b < NB; b++)
			sumi[b] = summ[b] = QX_ZERO();
		for (int m = 0; m < 4; m++) {
			QX(vi) alo[QX_NB], ahi[QX_NB];
			for (int b = 0; b < NB; b++)
				alo[b] = ahi[b] = QX_ZERO();
			for (int c = 0; c < 8; c++) {
				QX(vi) q = QX_LOAD(qs[m][c][h * QX_LANES]);
				QX(vi) qlo = QX_AND(q, lo_mask), qhi;
				if (hi_shift)
					qhi = QX_AND(q, hi_mask);
				else
					qhi = QX_AND(QX_V(srli_epi16)(q, 4), lo_mask);
				if (qh) {
					QX(vi) hb = QX_LOAD(qh[c][h * QX_LANES]);
					qlo = QX_OR_AND(qlo, QX(shift16)(hb, 4 - 2 * m), bit4);
					qhi = QX_OR_AND(qhi, QX(shift16)(hb, 3 - 2 * m), bit4);
				}
				for (int b = 0; b < NB; b++) {
					const int8_t *xs = xb[b]->qs + 64 * m + 4 * c;
					alo[b] = QX(dot_acc)(alo[b], qlo, QX_V(set1_epi32)(QX(load32)(xs)));
					ahi[b] = QX(dot_acc)(ahi[b], qhi,
					                     QX_V(set1_epi32)(QX(load32)(xs + 32)));
				}
			}
			QX(vi) sl = QX_V(slli_epi32)(QX_U8_TO_32(ps->sc[2 * m] + h * QX_LANES), hi_shift);
			QX(vi) sh = QX_U8_TO_32(ps->sc[2 * m + 1] + h * QX_LANES);
			for (int b = 0; b < NB; b++)
				sumi[b] = QX_V(add_epi32)(sumi[b],
				                          QX_V(add_epi32)(QX_V(mullo_epi32)(alo[b], sl),
				                                          QX_V(mullo_epi32)(ahi[b], sh)));
		}
		for (int t = 0; t < 4; t++) {
			QX(vi) mn = QX_U8_TO_16(ps->mn[t][h * QX_LANES]);
			for (int b = 0; b < NB; b++)
				summ[b] = QX(madd_acc)(summ[b], mn, QX_V(set1_epi32)(QX(bsum_pair)(xb[b], t)));
		}
		QX(vf) d = QX_HALF_TO_F(ps->d + h * QX_LANES);
		QX(vf) dm = QX_HALF_TO_F(ps->dmin + h * QX_LANES);
		d = QX_V(mul_ps)(d, QX_V(set1_ps)(1.0f / (float)(1 << hi_shift)));
		for (int b = 0; b < NB; b++) {
			QX(vf) dx = QX_V(set1_ps)(xb[b]->d);
			acc[b][h] = QX_V(fmadd_ps)(QX_V(cvtepi32_ps)(sumi[b]), QX_V(mul_ps)(d, dx),
			                           acc[b][h]);
			acc[b][h] = QX_V(fnmadd_ps)(QX_V(cvtepi32_ps)(summ[b]), QX_V(mul_ps)(dm, dx),
			                            acc[b][h]);
		}
	}
}

/* Q6_K: per pair of 32-value sub-blocks, low and high nibbles each with
 * their 2 high bits at bits 4-5, dots kept per 16-value scale group; each
 * group's accumulator starts at -32 times its sum of x, which is the
 * stored values' offset, so no extra step per line removes it. */
QX_INLINE void QX(q6k_block)(const struct qpack_q6k_block *p, const uint8_t *x,
                             size_t xq_bytes, int k, int NB, QX(vf) acc[QX_NB][QX_PARTS])
{
	const QX(vi) lo_mask = QX_V(set1_epi8)(0x0f), hi_mask = QX_V(set1_epi8)(0x30);
	const struct qdot_q8k_block *xb[QX_NB];
	for (int b = 0; b < NB; b++)
		xb[b] = (const struct qdot_q8k_block *)(x + (size_t)b * xq_bytes) + k;
	for (int h = 0; h < QX_PARTS; h++) {
		QX(vi) sumi[QX_NB];
		for (int b = 0; b < NB; b++)
			sumi[b] = QX_ZERO();
		for (int m = 0; m < 4; m++) {
			int plo = 4 * (m % 2), phi = plo + 2; /* bits of the 2 high bits in qh */
			for (int f = 0; f < 2; f++) { /* the 16-value halves: one scale each */
				QX(vi) alo[QX_NB], ahi[QX_NB];
				for (int b = 0; b < NB; b++) {
					alo[b] = QX_V(set1_epi32)(-32 * xb[b]->bsums[4 * m + f]);
					ahi[b] = QX_V(set1_epi32)(-32 * xb[b]->bsums[4 * m + 2 + f]);
				}
				for (int c = 4 * f; c < 4 * f + 4; c++) {
					QX(vi) q = QX_LOAD(p->qs[m][c][h * QX_LANES]);
					QX(vi) qh = QX_LOAD(p->qh[m / 2][c][h * QX_LANES]);
					/* two streams a block: the hardware prefetcher
					 * alone left them waiting on memory */
					_mm_prefetch((const char *)(p + 2) + 128 * (8 * m + c), _MM_HINT_T0);
					QX(vi) lo = QX_OR_AND(QX_AND(q, lo_mask), QX(shift16)(qh, 4 - plo),
					                      hi_mask);
					QX(vi) hi = QX_OR_AND(QX_AND(QX_V(srli_epi16)(q, 4), lo_mask),
					                      QX(shift16)(qh, 4 - phi), hi_mask);
					for (int b = 0; b < NB; b++) {
						const int8_t *xs = xb[b]->qs + 64 * m + 4 * c;
						alo[b] = QX(dot_acc)(alo[b], lo,
						                     QX_V(set1_epi32)(QX(load32)(xs)));
						ahi[b] = QX(dot_acc)(ahi[b], hi,
						                     QX_V(set1_epi32)(QX(load32)(xs + 32)));
					}
				}
				QX(vi) sl = QX_I8_TO_32(p->sc[4 * m + f] + h * QX_LANES);
				QX(vi) sh = QX_I8_TO_32(p->sc[4 * m + 2 + f] + h * QX_LANES);
				for (int b = 0; b < NB; b++)
					sumi[b] = QX_V(add_epi32)(
					    sumi[b], QX_V(add_epi32)(QX_V(mullo_epi32)(alo[b], sl),
					                             QX_V(mullo_epi32)(ahi[b], sh)));
			}
		}
		QX(vf) d = QX_HALF_TO_F(p->d + h * QX_LANES);
		for (int b = 0; b < NB; b++)
			acc[b][h] = QX_V(fmadd_ps)(QX_V(cvtepi32_ps)(sumi[b]),
			                           QX_V(mul_ps)(d, QX_V(set1_ps)(xb[b]->d)), acc[b][h]);
	}
}

/* The 16 rows of group g (rows [lo, hi) of it stored) times NB vectors. */
QX_INLINE void QX(k_group)(const struct weight_matrix *w, int g, const uint8_t *x,
                           size_t xq_bytes, int NB, float *y, size_t ldy, int lo, int hi)
{
	int nblk = w->cols / 256;
	QX(vf) acc[QX_NB][QX_PARTS];
	for (int b = 0; b < NB; b++)
		for (int h = 0; h < QX_PARTS; h++)
			acc[b][h] = QX_V(setzero_ps)();
	if (w->type == GGML_TYPE_Q6_K) {
		const struct qpack_q6k_block *p =
		    (const struct qpack_q6k_block *)w->panels + (size_t)g * nblk;
		for (int k = 0; k < nblk; k++)
			QX(q6k_block)(p + k, x, xq_bytes, k, NB, acc);
	} else if (w->type == GGML_TYPE_Q5_K) {
		const struct qpack_q5k_block *p =
		    (const struct qpack_q5k_block *)w->panels + (size_t)g * nblk;
		for (int k = 0; k < nblk; k++)
			QX(k4_block)(&p[k].s, p[k].qs, p[k].qh, x, xq_bytes, k, NB, acc);
	} else {
		const struct qpack_q4k_block *p =
		    (const struct qpack_q4k_block *)w->panels + (size_t)g * nblk;
		for (int k = 0; k < nblk; k++)
			QX(k4_block)(&p[k].s, p[k].qs, NULL, x, xq_bytes, k, NB, acc);
	}
	for (int b = 0; b < NB; b++) {
		float out[QPACK_ROWS];
		for (int h = 0; h < QX_PARTS; h++)
			QX_V(storeu_ps)(out + h * QX_LANES, acc[b][h]);
		memcpy(y + (size_t)b * ldy + g * QPACK_ROWS + lo, out + lo,
		       (size_t)(hi - lo) * sizeof(float));
	}
}

QX_FN void QX(k_group_any)(const struct weight_matrix *w, int g, const uint8_t *x,
                           size_t xq_bytes, int NB, float *y, size_t ldy, int lo, int hi)
{
	switch (NB) {
	case 1:
		QX(k_group)(w, g, x, xq_bytes, 1, y, ldy, lo, hi);
		break;
	case 2:
		QX(k_group)(w, g, x, xq_bytes, 2, y, ldy, lo, hi);
		break;
	case 3:
		QX(k_group)(w, g, x, xq_bytes, 3, y, ldy, lo, hi);
		break;
	default:
		QX(k_group)(w, g, x, xq_bytes, QX_NB, y, ldy, lo, hi);
		break;
	}
}

/* qpack_rows_fn for the K-quants: every group of [r0, r1), each in tiles
 * of QX_NB vectors while its blocks are in L1.  The caller hands it the
 * vectors of one pass of the matrix's tile plan (matmul.c rows_qpack), few
 * enough to stay in L2 over all the groups. */
QX_FN void QX(rows_k)(const struct weight_matrix *w, const void *xq, size_t xq_bytes, int B,
                      float *y, size_t ldy, int r0, int r1)
{
	for (int g = r0 / QPACK_ROWS; g * QPACK_ROWS < r1; g++) {
		int lo = r0 > g * QPACK_ROWS ? r0 - g * QPACK_ROWS : 0;
		int hi = r1 < (g + 1) * QPACK_ROWS ? r1 - g * QPACK_ROWS : QPACK_ROWS;
		for (int b = 0; b < B; b += QX_NB)
			QX(k_group_any)(w, g, (const uint8_t *)xq + (size_t)b * xq_bytes, xq_bytes,
			                B - b < QX_NB ? B - b : QX_NB, y + (size_t)b * ldy, ldy, lo,
			                hi);
	}
}

#undef QX_LANES
#undef QX_V
#undef QX_LOAD
#undef QX_U8_TO_32
#undef QX_U8_TO_16
#undef QX_HALF_TO_F
#undef QX_ZERO
#undef QX_I8_TO_32
#undef QX_OR_AND
#undef QX_AND
#undef QX_PARTS
#undef QX_NB
#undef QX_INLINE
#undef QX_FN
/* clang-format on */
