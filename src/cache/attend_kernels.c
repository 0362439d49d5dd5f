/* Attention inner loops (see attend_kernels.h), written with GCC vector
 * extensions over 8 floats so the same source is compiled for AVX2+FMA and
 * for the baseline ISA; on AVX-512 CPUs, f32/f16/bf16 rows of a multiple of
 * 16 elements and the softmax exps take 16-wide versions (below).  Scores
 * are made 8 rows at a time: per head, 8 product vectors summed by one tree
 * of pairwise adds into the 8 scores (not one horizontal sum per row).
 * Value sums stay in registers over a whole run (ATTEND_PARTS partial sums
 * by row index, for independent FMA chains), written back once.  bf16 rows
 * of head size 8 are read two per 32-byte load and split into even and odd
 * elements by a shift and a mask.  Each score and each value part depends
 * only on its row's data and index, never on how the rows are split into
 * calls or the heads into groups.  Rows whose length is not a multiple of 8
 * take a scalar path.  They know nothing about tiers or positions. */
#include "cache/attend_kernels.h"

#include <math.h>
#include <string.h>

#include "cache/kvquant.h"
#include "cache/sinkcache_impl.h"
#include "util/cpu.h"
#include "util/fastexp.h"

/* The helpers below are always inlined into each clone; their vector
 * arguments never cross an ABI boundary. */
#pragma GCC diagnostic ignored "-Wpsabi"
/* -std=c11 turns off contraction; the kernels want fused multiply-adds. */
#pragma GCC optimize("fp-contract=fast")
#define ATTEND_INLINE static inline __attribute__((always_inline))

/* Not under ThreadSanitizer: the clones' ifunc resolver runs before its
 * runtime is up and crashes the program at load. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(ATTEND_NO_CLONES) && \
    !defined(__SANITIZE_THREAD__)
#define ATTEND_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define ATTEND_CLONES
#endif

typedef float v8f __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef uint16_t v8h __attribute__((vector_size(16)));
typedef uint8_t v8b __attribute__((vector_size(8)));

ATTEND_INLINE v8f ld_f32(const void *p)
{
	v8f v;
	memcpy(&v, p, sizeof(v));
	return v;
}

ATTEND_INLINE v8f ld_bf16(const void *p)
{
	v8h h;
	memcpy(&h, p, sizeof(h));
	v8u u = __builtin_convertvector(h, v8u) << 16;
	v8f f;
	memcpy(&f, &u, sizeof(f));
	return f;
}

/* Half to float without branches: magnitude bits moved into a float and
 * rescaled by 2^112 (right for normals and subnormals; inf/nan are not
 * expected in a KV cache and come out as large finite values). */
ATTEND_INLINE v8f ld_f16(const void *p)
{
	v8h h;
	memcpy(&h, p, sizeof(h));
	v8u u = __builtin_convertvector(h, v8u);
	v8u sign = (u & 0x8000u) << 16, mag = (u & 0x7fffu) << 13;
	v8f f;
	memcpy(&f, &mag, sizeof(f));
	f *= 0x1p112f;
	memcpy(&mag, &f, sizeof(f));
	mag |= sign;
	memcpy(&f, &mag, sizeof(f));
	return f;
}

/* 8 elements starting at element c of a row. */
ATTEND_INLINE v8f ld_row(enum kv_dtype dt, const unsigned char *row, int c)
{
	switch (dt) {
	case KV_DTYPE_F16:
		return ld_f16(row + 2 * (size_t)c);
	case KV_DTYPE_BF16:
		return ld_bf16(row + 2 * (size_t)c);
	default:
		return ld_f32(row + 4 * (size_t)c);
	}
}

typedef int32_t v8i __attribute__((vector_size(32)));

ATTEND_INLINE float hsum(v8f v)
{
	return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

/* Row formats the kernels read: the three dtypes, then int8 and int4 codes. */
enum { K_F32 = KV_DTYPE_F32, K_F16 = KV_DTYPE_F16, K_BF16 = KV_DTYPE_BF16, K_Q8, K_Q4 };

/* F(kind, args...) with the kind of dtype dt as a compile-time constant, so
 * that each instance resolves its loads when inlined. */
#define BY_DTYPE(dt, F, ...)                                                                       \
	do {                                                                                       \
		if ((dt) == KV_DTYPE_BF16)                                                         \
			F(K_BF16, __VA_ARGS__);                                                    \
		else if ((dt) == KV_DTYPE_F16)                                                     \
			F(K_F16, __VA_ARGS__);                                                     \
		else                                                                               \
			F(K_F32, __VA_ARGS__);                                                     \
	} while (0)

/* 8 elements starting at element c (a multiple of 8) of a row of kind k. */
ATTEND_INLINE v8f ld8(int k, const unsigned char *row, int c)
{
	if (k == K_Q8) { /* shifts, not a byte conversion (which GCC does byte by byte) */
		uint32_t w[2];
		memcpy(w, row + c, sizeof(w));
		const v8u sh = {0, 8, 16, 24, 0, 8, 16, 24};
		v8u x = ((v8u){w[0], w[0], w[0], w[0], w[1], w[1], w[1], w[1]} >> sh) & 255u;
		return __builtin_convertvector(__builtin_convertvector(x, v8i), v8f);
	}
	if (k == K_Q4) { /* element c + u is nibble u of the 4 bytes (low first) */
		uint32_t w;
		memcpy(&w, row + c / 2, sizeof(w));
		const v8u sh = {0, 4, 8, 12, 16, 20, 24, 28};
		v8u x = ((v8u){w, w, w, w, w, w, w, w} >> sh) & 15u;
		return __builtin_convertvector(__builtin_convertvector(x, v8i), v8f);
	}
	return ld_row((enum kv_dtype)k, row, c);
}

ATTEND_INLINE void st_f32(float *p, v8f v)
{
	memcpy(p, &v, sizeof(v));
}

/* Pair sums within each 128-bit half: (a0+a1, a2+a3, b0+b1, b2+b3 | same
 * for elements 4..7), as the hadd instruction. */
ATTEND_INLINE v8f hadd(v8f a, v8f b)
{
	const v8i ev = {0, 2, 8, 10, 4, 6, 12, 14}, od = {1, 3, 9, 11, 5, 7, 13, 15};
	return __builtin_shuffle(a, b, ev) + __builtin_shuffle(a, b, od);
}

/* Element sums of 8 vectors: result[u] = sum of p[u]'s elements (a tree of
 * pairwise adds; 7 vector adds instead of 8 horizontal sums). */
ATTEND_INLINE v8f reduce8(const v8f *p)
{
	v8f s[4], t[2];
	for (int u = 0; u < 4; u++) /* s[u]: pair sums of p[2u] and p[2u+1], per lane */
		s[u] = hadd(p[2 * u], p[2 * u + 1]);
	for (int u = 0; u < 2; u++) /* t[u]: p[4u..4u+3], each half summed per lane */
		t[u] = hadd(s[2 * u], s[2 * u + 1]);
	const v8i lo = {0, 1, 2, 3, 12, 13, 14, 15}, hi = {4, 5, 6, 7, 8, 9, 10, 11};
	return __builtin_shuffle(t[0], t[1], lo) + __builtin_shuffle(t[0], t[1], hi);
}

/* The first m (<= 8) of 8 scores to out. */
ATTEND_INLINE void store_scores(float *out, v8f s, int m)
{
	if (m == 8) {
		st_f32(out, s);
		return;
	}
	for (int u = 0; u < m; u++)
		out[u] = s[u];
}

/* Scores of r heads for 8 rows of kind k (rows row_bytes apart, d a
 * multiple of 8): out[h*ld + u] for u < m (the rows past m must be
 * readable and may hold anything). */
ATTEND_INLINE void score8(int k, const unsigned char *rows, size_t row_bytes, int d, const float *q,
                          int r, float *out, int ld, int m)
{
	for (int h = 0; h < r; h++) {
		const float *qh = q + (size_t)h * d;
		v8f p[8], qv = ld_f32(qh);
		for (int u = 0; u < 8; u++)
			p[u] = qv * ld8(k, rows + (size_t)u * row_bytes, 0);
		for (int c = 8; c < d; c += 8) {
			qv = ld_f32(qh + c);
			for (int u = 0; u < 8; u++)
				p[u] += qv * ld8(k, rows + (size_t)u * row_bytes, c);
		}
		v8f s = reduce8(p);
		store_scores(out + (size_t)h * ld, s, m);
	}
}

/* Head size 8: the 8 rows stay in registers for all heads. */
ATTEND_INLINE void score8_d8(int k, const unsigned char *rows, size_t row_bytes, const float *q,
                             int r, float *out, int ld, int m)
{
	v8f x[8];
	for (int u = 0; u < 8; u++)
		x[u] = u < m ? ld8(k, rows + (size_t)u * row_bytes, 0) : (v8f){0};
	for (int h = 0; h < r; h++) {
		v8f qv = ld_f32(q + 8 * (size_t)h), p[8];
		for (int u = 0; u < 8; u++)
			p[u] = qv * x[u];
		v8f s = reduce8(p);
		store_scores(out + (size_t)h * ld, s, m);
	}
}

/* bf16 rows of 8 elements, 16 bytes apart (m <= 8 of them): two rows per
 * 32-byte load, split into even and odd elements by a shift and a mask (no
 * conversion shuffles).  qe, qo: (r) each head's even and odd query
 * elements, twice over. */
ATTEND_INLINE void score8_bf16_d8(const unsigned char *rows, const v8f *qe, const v8f *qo, int r,
                                  float *out, int ld, int m)
{
	v8f e[4], o[4]; /* e[k]: rows 2k and 2k+1 (a half each), even elements */
	for (int k = 0; k < 4; k++) {
		v8u w = {0}, lo, hi;
		if (2 * k + 2 <= m)
			memcpy(&w, rows + 32 * k, sizeof(w));
		else if (2 * k + 1 == m) /* rows past m are zeros */
			memcpy(&w, rows + 32 * k, 16);
		lo = w << 16;
		hi = w & 0xffff0000u;
		memcpy(&e[k], &lo, sizeof(lo));
		memcpy(&o[k], &hi, sizeof(hi));
	}
	const v8i order = {0, 4, 1, 5, 2, 6, 3, 7};
	for (int h = 0; h < r; h++) {
		v8f p[4];
		for (int k = 0; k < 4; k++)
			p[k] = e[k] * qe[h] + o[k] * qo[h];
		/* halves: (rows 0, 2, 4, 6 | rows 1, 3, 5, 7) */
		v8f s = __builtin_shuffle(hadd(hadd(p[0], p[1]), hadd(p[2], p[3])), order);
		store_scores(out + (size_t)h * ld, s, m);
	}
}

/* scores[h*ld + i] = q[h] . row_i over n rows of kind k, d a multiple of 8,
 * 8 rows at a time; rows of other kinds than f32 are converted once into a
 * block of f32 when several heads read them. */
ATTEND_INLINE void score_rows_k(int k, const unsigned char *base, size_t row_bytes, int n, int d,
                                const float *q, int r, float *scores, int ld)
{
	float tmp[8 * SINKCACHE_MAX_HEAD_DIM];
	if (k == K_BF16 && d == 8 && row_bytes == 16 && r <= ATTEND_MAX_HEADS) {
		v8f qe[ATTEND_MAX_HEADS], qo[ATTEND_MAX_HEADS];
		const v8i ev = {0, 2, 4, 6, 0, 2, 4, 6}, od = {1, 3, 5, 7, 1, 3, 5, 7};
		for (int h = 0; h < r; h++) {
			qe[h] = __builtin_shuffle(ld_f32(q + 8 * (size_t)h), ev);
			qo[h] = __builtin_shuffle(ld_f32(q + 8 * (size_t)h), od);
		}
		for (int i = 0; i < n; i += 8)
			score8_bf16_d8(base + (size_t)i * 16, qe, qo, r, scores + i, ld,
			               n - i < 8 ? n - i : 8);
		return;
	}
	for (int i = 0; i < n; i += 8) {
		const unsigned char *rows = base + (size_t)i * row_bytes;
		int m = n - i < 8 ? n - i : 8;
		if (d == 8) {
			score8_d8(k, rows, row_bytes, q, r, scores + i, ld, m);
			continue;
		}
		if (m == 8 && (k == K_F32 || r == 1)) {
			score8(k, rows, row_bytes, d, q, r, scores + i, ld, 8);
			continue;
		}
		for (int u = 0; u < 8; u++)
			for (int c = 0; c < d; c += 8)
				st_f32(tmp + (size_t)u * d + c,
				       u < m ? ld8(k, rows + (size_t)u * row_bytes, c) : (v8f){0});
		score8(K_F32, (const unsigned char *)tmp, 4 * (size_t)d, d, q, r, scores + i, ld,
		       m);
	}
}

/* Part of the value accumulator that row g (its index in the whole score
 * row) adds into: see attend_kernels.h. */
ATTEND_INLINE float *part(float *acc, int d, int h, int g)
{
	return acc + ((size_t)h * ATTEND_PARTS + (size_t)(g % ATTEND_PARTS)) * (size_t)d;
}

/* Columns [c0, c0 + 8T) of R heads (R*T <= 2): the ATTEND_PARTS partial
 * sums of each stay in registers over all n rows (8 independent chains), in
 * slots rotated so that row i goes to slot i % ATTEND_PARTS. */
ATTEND_INLINE void mix_tile(int k, const unsigned char *base, size_t row_bytes, int n, int d,
                            int c0, const float *p, int ld, float *acc, int g0, const int R,
                            const int T)
{
	enum { U = ATTEND_PARTS };
	v8f a[8]; /* slot u, head h, vector t at (u*R + h)*T + t */
	for (int u = 0; u < U; u++)
		for (int h = 0; h < R; h++)
			for (int t = 0; t < T; t++)
				a[(u * R + h) * T + t] =
				    ld_f32(part(acc, d, h, g0 + u) + c0 + 8 * t);
	int i = 0;
	for (; i + U <= n; i += U)
		for (int u = 0; u < U; u++) {
			const unsigned char *row = base + (size_t)(i + u) * row_bytes;
			for (int t = 0; t < T; t++) {
				v8f v = ld8(k, row, c0 + 8 * t);
				for (int h = 0; h < R; h++)
					a[(u * R + h) * T + t] += p[(size_t)h * ld + i + u] * v;
			}
		}
	for (int u = 0; u < U - 1; u++) {
		if (i + u >= n)
			break;
		const unsigned char *row = base + (size_t)(i + u) * row_bytes;
		for (int t = 0; t < T; t++) {
			v8f v = ld8(k, row, c0 + 8 * t);
			for (int h = 0; h < R; h++)
				a[(u * R + h) * T + t] += p[(size_t)h * ld + i + u] * v;
		}
	}
	for (int u = 0; u < U; u++)
		for (int h = 0; h < R; h++)
			for (int t = 0; t < T; t++)
				st_f32(part(acc, d, h, g0 + u) + c0 + 8 * t,
				       a[(u * R + h) * T + t]);
}

/* Even and odd elements of two bf16 rows of 8 (32 bytes): (row a | row b)
 * each. */
ATTEND_INLINE void split_bf16(v8u w, v8f *e, v8f *o)
{
	v8u lo = w << 16, hi = w & 0xffff0000u;
	memcpy(e, &lo, sizeof(lo));
	memcpy(o, &hi, sizeof(hi));
}

/* (a a a a | b b b b) */
ATTEND_INLINE v8f two_weights(float a, float b)
{
	const v8i blend = {0, 1, 2, 3, 12, 13, 14, 15};
	return __builtin_shuffle((v8f){a, a, a, a, a, a, a, a}, (v8f){b, b, b, b, b, b, b, b},
	                         blend);
}

/* mix_tile for bf16 rows of 8 elements 16 bytes apart and R <= 2 heads:
 * rows in pairs (g, g+1), g even, one 32-byte load split into even and odd
 * elements (no conversion shuffles), the low half adding into part g % 4
 * and the high half into the next.  Registers E/O[j][h]: pair slot j holds
 * parts 2*((s + j) % 2) and the one after, s the slot of the first whole
 * pair, so that the loop over two pairs indexes them at compile time. */
ATTEND_INLINE void mix_bf16_d8(const unsigned char *base, int n, const float *p, int ld, float *acc,
                               int g0, const int R)
{
	const v8i ev = {0, 2, 4, 6, 8, 10, 12, 14}, od = {1, 3, 5, 7, 9, 11, 13, 15};
	const v8i lo = {0, 8, 1, 9, 2, 10, 3, 11}, hi = {4, 12, 5, 13, 6, 14, 7, 15};
	int s = ((g0 + (g0 & 1)) % 4) / 2;
	v8f E[2][2], O[2][2], e, o;
	for (int j = 0; j < 2; j++)
		for (int h = 0; h < R; h++) {
			int u = 2 * ((s + j) % 2);
			v8f a = ld_f32(part(acc, 8, h, u)), b = ld_f32(part(acc, 8, h, u + 1));
			E[j][h] = __builtin_shuffle(a, b, ev);
			O[j][h] = __builtin_shuffle(a, b, od);
		}
	int i = 0;
	if (g0 & 1) { /* row 0 is the high half of the pair before slot s */
		v8u w = {0};
		memcpy((unsigned char *)&w + 16, base, 16);
		split_bf16(w, &e, &o);
		for (int h = 0; h < R; h++) {
			v8f wv = two_weights(0.0f, p[(size_t)h * ld]);
			E[1][h] += wv * e;
			O[1][h] += wv * o;
		}
		i = 1;
	}
	for (; i + 4 <= n; i += 4)
		for (int j = 0; j < 2; j++) {
			v8u w;
			memcpy(&w, base + (size_t)(i + 2 * j) * 16, sizeof(w));
			split_bf16(w, &e, &o);
			for (int h = 0; h < R; h++) {
				const float *ph = p + (size_t)h * ld + i + 2 * j;
				v8f wv = two_weights(ph[0], ph[1]);
				E[j][h] += wv * e;
				O[j][h] += wv * o;
			}
		}
	int j1 = 0; /* slot of a last single row */
	if (i + 2 <= n) {
		v8u w;
		memcpy(&w, base + (size_t)i * 16, sizeof(w));
		split_bf16(w, &e, &o);
		for (int h = 0; h < R; h++) {
			const float *ph = p + (size_t)h * ld + i;
			v8f wv = two_weights(ph[0], ph[1]);
			E[0][h] += wv * e;
			O[0][h] += wv * o;
		}
		i += 2;
		j1 = 1;
	}
	if (i < n) {
		v8u w = {0};
		memcpy(&w, base + (size_t)i * 16, 16);
		split_bf16(w, &e, &o);
		for (int h = 0; h < R; h++) {
			v8f wv = two_weights(p[(size_t)h * ld + i], 0.0f);
			if (j1) {
				E[1][h] += wv * e;
				O[1][h] += wv * o;
			} else {
				E[0][h] += wv * e;
				O[0][h] += wv * o;
			}
		}
	}
	for (int j = 0; j < 2; j++)
		for (int h = 0; h < R; h++) {
			int u = 2 * ((s + j) % 2);
			st_f32(part(acc, 8, h, u), __builtin_shuffle(E[j][h], O[j][h], lo));
			st_f32(part(acc, 8, h, u + 1), __builtin_shuffle(E[j][h], O[j][h], hi));
		}
}

/* Value accumulation of r heads over n rows of kind k, d a multiple of 8:
 * heads in pairs (one vector of columns per pass) and a last single head
 * (two vectors per pass). */
ATTEND_INLINE void mix_rows_k(int k, const unsigned char *base, size_t row_bytes, int n, int d,
                              const float *p, int ld, int r, float *acc, int g0)
{
	int h = 0;
	if (k == K_BF16 && d == 8 && row_bytes == 16) {
		for (; h + 2 <= r; h += 2)
			mix_bf16_d8(base, n, p + (size_t)h * ld, ld,
			            acc + (size_t)h * ATTEND_PARTS * d, g0, 2);
		if (h < r)
			mix_bf16_d8(base, n, p + (size_t)h * ld, ld,
			            acc + (size_t)h * ATTEND_PARTS * d, g0, 1);
		return;
	}
	for (; h + 2 <= r; h += 2)
		for (int c = 0; c < d; c += 8)
			mix_tile(k, base, row_bytes, n, d, c, p + (size_t)h * ld, ld,
			         acc + (size_t)h * ATTEND_PARTS * d, g0, 2, 1);
	if (h == r)
		return;
	int c = 0;
	for (; c + 16 <= d; c += 16)
		mix_tile(k, base, row_bytes, n, d, c, p + (size_t)h * ld, ld,
		         acc + (size_t)h * ATTEND_PARTS * d, g0, 1, 2);
	if (c < d)
		mix_tile(k, base, row_bytes, n, d, c, p + (size_t)h * ld, ld,
		         acc + (size_t)h * ATTEND_PARTS * d, g0, 1, 1);
}

/* Element j of a row: a code of `bits` bits when bits > 0, else a value
 * of type dt.  For the scalar paths (head dims not a multiple of 8). */
static float elem_at(enum kv_dtype dt, int bits, const unsigned char *row, int j)
{
	uint16_t h;
	float f;
	if (bits > 0)
		return (float)kvq_code_at(row, j, bits);
	if (dt == KV_DTYPE_F32) {
		memcpy(&f, row + 4 * (size_t)j, 4);
		return f;
	}
	memcpy(&h, row + 2 * (size_t)j, 2);
	return dt == KV_DTYPE_F16 ? kv_f16_to_f32(h) : kv_bf16_to_f32(h);
}

static void score_rows_scalar(enum kv_dtype dt, int bits, const unsigned char *base,
                              size_t row_bytes, int n, int d, const float *q, int r, float *scores,
                              int ld)
{
	for (int i = 0; i < n; i++)
		for (int h = 0; h < r; h++) {
			float s = 0.0f;
			for (int j = 0; j < d; j++)
				s += q[(size_t)h * d + j] *
				     elem_at(dt, bits, base + (size_t)i * row_bytes, j);
			scores[(size_t)h * ld + i] = s;
		}
}

static void mix_rows_scalar(enum kv_dtype dt, int bits, const unsigned char *base, size_t row_bytes,
                            int n, int d, const float *p, int ld, int r, float *acc, int g0)
{
	for (int i = 0; i < n; i++)
		for (int h = 0; h < r; h++) {
			float *a = part(acc, d, h, g0 + i);
			for (int j = 0; j < d; j++)
				a[j] += p[(size_t)h * ld + i] *
				        elem_at(dt, bits, base + (size_t)i * row_bytes, j);
		}
}

/* exp(x) for x <= 0 (scores minus their maximum), Cephes' expf: x = n ln2
 * + r with ln2 in two parts, exp(r) by a degree-5 polynomial (relative
 * error ~2e-7, constants util/fastexp.h); below EXP_MIN it gives 2^-126
 * (no weight).  exp_neg and exp_neg16 below, on 8 and 16 lanes. */
#define EXP_MIN -87.0f

/* ------------------------------------------------ AVX-512 (when present)
 * f32/f16/bf16 rows of a multiple of 16 elements (head sizes 64, 128):
 * scores 16 rows at a time, each row's 16-lane product vector summed by one
 * tree of shuffles and adds that treats every row alike, so a score still
 * depends only on its row; values into the same ATTEND_PARTS partial sums
 * in the same order as the 8-wide kernels. */
/* Not under ThreadSanitizer: the clones' ifunc resolver runs before its
 * runtime is up and crashes the program at load. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(ATTEND_NO_CLONES) && \
    !defined(__SANITIZE_THREAD__)
#include <immintrin.h>
#define ATTEND_HAVE_512 1
#define AK512_TARGET "avx512f,avx512bw,avx512vl,avx2,fma,f16c"
#define AK512_FN __attribute__((target(AK512_TARGET)))
#define AK512_INLINE static inline __attribute__((always_inline, target(AK512_TARGET)))

/* 16 elements from element c of a row of kind k (a dtype). */
AK512_INLINE __m512 ld16(int k, const unsigned char *row, int c)
{
	if (k == K_BF16)
		return _mm512_castsi512_ps(_mm512_slli_epi32(
		    _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(row + 2 * (size_t)c))),
		    16));
	if (k == K_F16)
		return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 2 * (size_t)c)));
	return _mm512_loadu_ps((const float *)row + c);
}

/* v[j]'s 16 lanes summed into lane j, by the same tree for every j. */
AK512_INLINE __m512 reduce16(const __m512 v[16])
{
	__m512 a[8], b[4], c[2];
	for (int j = 0; j < 8; j++) /* 256-bit halves: rows 2j, 2j+1 */
		a[j] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0x44),
		                     _mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0xee));
	for (int j = 0; j < 4; j++) /* 128-bit lane L: row 4j + L */
		b[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], 0x88),
		                     _mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], 0xdd));
	for (int j = 0; j < 2; j++) /* lane L: rows 8j + L and 8j + 4 + L, two sums each */
		c[j] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * j], b[2 * j + 1], 0x44),
		                     _mm512_shuffle_ps(b[2 * j], b[2 * j + 1], 0xee));
	/* element 4L + m: row L + 4m */
	__m512 t = _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], 0x88),
	                         _mm512_shuffle_ps(c[0], c[1], 0xdd));
	const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
	return _mm512_permutexvar_ps(order, t);
}

AK512_INLINE void score_rows_512_k(int k, const unsigned char *base, size_t row_bytes, int n, int d,
                                   const float *q, int r, float *scores, int ld, bool prefetch)
{
	for (int i0 = 0; i0 < n; i0 += 16) {
		int m = n - i0 < 16 ? n - i0 : 16;
		const unsigned char *rows = base + (size_t)i0 * row_bytes;
		/* two blocks ahead: a small gain at most on rows from memory */
		if (prefetch && i0 + 32 < n) {
			int pe = n - i0 - 32 < 16 ? n - i0 - 32 : 16;
			const unsigned char *pf = rows + 32 * row_bytes;
			for (size_t o = 0; o < (size_t)pe * row_bytes; o += 64)
				__builtin_prefetch(pf + o, 0, 3);
		}
		for (int h = 0; h < r; h++) {
			const float *qh = q + (size_t)h * d;
			__m512 acc[16];
			for (int u = 0; u < 16; u++)
				acc[u] = _mm512_setzero_ps();
			if (m == 16) { /* a whole block: the accumulators stay in registers */
				for (int c = 0; c < d; c += 16) {
					__m512 qv = _mm512_loadu_ps(qh + c);
					_Pragma("GCC unroll 16")
					for (int u = 0; u < 16; u++)
						acc[u] = _mm512_fmadd_ps(
						    qv, ld16(k, rows + (size_t)u * row_bytes, c), acc[u]);
				}
			} else {
				for (int c = 0; c < d; c += 16) {
					__m512 qv = _mm512_loadu_ps(qh + c);
					for (int u = 0; u < m; u++)
						acc[u] = _mm512_fmadd_ps(
						    qv, ld16(k, rows + (size_t)u * row_bytes, c), acc[u]);
				}
			}
			_mm512_mask_storeu_ps(scores + (size_t)h * ld + i0, (__mmask16)((1u << m) - 1u),
			                      reduce16(acc));
		}
	}
}

static AK512_FN void score_rows_512(enum kv_dtype dt, const unsigned char *base, size_t row_bytes,
                                    int n, int d, const float *q, int r, float *scores, int ld,
                                    bool prefetch)
{
	BY_DTYPE(dt, score_rows_512_k, base, row_bytes, n, d, q, r, scores, ld, prefetch);
}

/* Columns [c0, c0 + 16T) of one head: acc parts in registers, row i into
 * part (g0 + i) % ATTEND_PARTS, rows in increasing order. */
AK512_INLINE void mix_cols_512(int k, const unsigned char *base, size_t row_bytes, int n, int c0,
                               const int T, const float *p, float *acc, int d, int g0,
                               bool prefetch)
{
	enum { U = ATTEND_PARTS };
	__m512 a[U][4];
	for (int u = 0; u < U; u++)
		for (int t = 0; t < T; t++)
			a[u][t] = _mm512_loadu_ps(acc + (size_t)u * d + c0 + 16 * t);
#define MIX_ROW(PART, I)                                                                           \
	do {                                                                                       \
		const unsigned char *row_ = base + (size_t)(I) * row_bytes;                        \
		__m512 w_ = _mm512_set1_ps(p[I]);                                                  \
		for (int t = 0; t < T; t++)                                                        \
			a[PART][t] = _mm512_fmadd_ps(w_, ld16(k, row_, c0 + 16 * t), a[PART][t]);  \
	} while (0)
	/* a row into the part its index picks (the unaligned head and tail) */
#define MIX_ROW_ANY(I)                                                                             \
	do {                                                                                       \
		switch ((g0 + (I)) % U) {                                                          \
		case 0:                                                                            \
			MIX_ROW(0, I);                                                             \
			break;                                                                     \
		case 1:                                                                            \
			MIX_ROW(1, I);                                                             \
			break;                                                                     \
		case 2:                                                                            \
			MIX_ROW(2, I);                                                             \
			break;                                                                     \
		default:                                                                           \
			MIX_ROW(3, I);                                                             \
			break;                                                                     \
		}                                                                                  \
	} while (0)
	int i = 0;
	for (; i < n && (g0 + i) % U != 0; i++)
		MIX_ROW_ANY(i);
	for (; i + U <= n; i += U) {
		if (prefetch && c0 == 0 && i + 32 < n) {
			const unsigned char *pf = base + (size_t)(i + 32) * row_bytes;
			for (size_t o = 0; o < (size_t)U * row_bytes; o += 64)
				__builtin_prefetch(pf + o, 0, 3);
		}
		MIX_ROW(0, i);
		MIX_ROW(1, i + 1);
		MIX_ROW(2, i + 2);
		MIX_ROW(3, i + 3);
	}
	for (; i < n; i++)
		MIX_ROW_ANY(i);
#undef MIX_ROW_ANY
#undef MIX_ROW
	for (int u = 0; u < U; u++)
		for (int t = 0; t < T; t++)
			_mm512_storeu_ps(acc + (size_t)u * d + c0 + 16 * t, a[u][t]);
}

AK512_INLINE void mix_rows_512_k(int k, const unsigned char *base, size_t row_bytes, int n, int d,
                                 const float *p, int ld, int r, float *acc, int g0, bool prefetch)
{
	for (int h = 0; h < r; h++) {
		float *ah = acc + (size_t)h * ATTEND_PARTS * d;
		const float *ph = p + (size_t)h * ld;
		int c = 0;
		for (; c + 64 <= d; c += 64)
			mix_cols_512(k, base, row_bytes, n, c, 4, ph, ah, d, g0, prefetch);
		for (; c < d; c += 16)
			mix_cols_512(k, base, row_bytes, n, c, 1, ph, ah, d, g0, prefetch);
	}
}

static AK512_FN void mix_rows_512(enum kv_dtype dt, const unsigned char *base, size_t row_bytes,
                                  int n, int d, const float *p, int ld, int r, float *acc, int g0,
                                  bool prefetch)
{
	BY_DTYPE(dt, mix_rows_512_k, base, row_bytes, n, d, p, ld, r, acc, g0, prefetch);
}

/* exp_neg below on 16 lanes, the same operations lane for lane. */
AK512_INLINE __m512 exp_neg16(__m512 x)
{
	x = _mm512_max_ps(x, _mm512_set1_ps(EXP_MIN));
	__m512i n = _mm512_cvttps_epi32(
	    _mm512_fmsub_ps(x, _mm512_set1_ps(FASTEXP_LOG2E), _mm512_set1_ps(0.5f)));
	__m512 nf = _mm512_cvtepi32_ps(n);
	__m512 r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(FASTEXP_LN2_HI), x);
	r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(FASTEXP_LN2_LO), r);
	__m512 p = _mm512_fmadd_ps(r, _mm512_set1_ps(FASTEXP_P0), _mm512_set1_ps(FASTEXP_P1));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FASTEXP_P2));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FASTEXP_P3));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FASTEXP_P4));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FASTEXP_P5));
	__m512 y = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
	__m512i e = _mm512_slli_epi32(_mm512_add_epi32(n, _mm512_set1_epi32(127)), 23);
	return _mm512_mul_ps(y, _mm512_castsi512_ps(e));
}

/* attend_exp_sum on 16 lanes (the tail by masks): with small heads a
 * score's exp costs more than its dot product. */
static AK512_FN float exp_sum_512(float *scores, int n, float sink, float *sink_exp)
{
	const __m512 ninf = _mm512_set1_ps(-INFINITY);
	int nv = n - n % 16;
	__mmask16 tail = (__mmask16)((1u << (n % 16)) - 1u);
	/* max(sink, x) gives x when either is NaN, as the scores alone did */
	__m512 m =
	    _mm512_max_ps(_mm512_set1_ps(sink), _mm512_mask_loadu_ps(ninf, tail, scores + nv));
	for (int i = 0; i < nv; i += 16)
		m = _mm512_max_ps(m, _mm512_loadu_ps(scores + i));
	__m512 mv = _mm512_set1_ps(_mm512_reduce_max_ps(m)), sum = _mm512_setzero_ps();
	if (sink_exp)
		*sink_exp = _mm512_cvtss_f32(exp_neg16(_mm512_sub_ps(_mm512_set1_ps(sink), mv)));
	for (int i = 0; i < nv; i += 16) {
		__m512 e = exp_neg16(_mm512_sub_ps(_mm512_loadu_ps(scores + i), mv));
		_mm512_storeu_ps(scores + i, e);
		sum = _mm512_add_ps(sum, e);
	}
	if (tail) {
		__m512 e =
		    exp_neg16(_mm512_sub_ps(_mm512_mask_loadu_ps(mv, tail, scores + nv), mv));
		_mm512_mask_storeu_ps(scores + nv, tail, e);
		sum = _mm512_mask_add_ps(sum, tail, sum, e);
	}
	return _mm512_reduce_add_ps(sum);
}
#endif

ATTEND_CLONES
void attend_score_rows(enum kv_dtype dt, const unsigned char *base, size_t row_bytes, int n, int d,
                       const float *q, int r, float *scores, int ld, bool prefetch)
{
#ifdef ATTEND_HAVE_512
	if (d % 16 == 0 && cpu_has_avx512()) {
		score_rows_512(dt, base, row_bytes, n, d, q, r, scores, ld, prefetch);
		return;
	}
#endif
	(void)prefetch;
	if (d % 8 == 0) {
		BY_DTYPE(dt, score_rows_k, base, row_bytes, n, d, q, r, scores, ld);
		return;
	}
	score_rows_scalar(dt, 0, base, row_bytes, n, d, q, r, scores, ld);
}

ATTEND_CLONES
void attend_mix_rows(enum kv_dtype dt, const unsigned char *base, size_t row_bytes, int n, int d,
                     const float *p, int ld, int r, float *acc, int g0, bool prefetch)
{
#ifdef ATTEND_HAVE_512
	if (d % 16 == 0 && cpu_has_avx512()) {
		mix_rows_512(dt, base, row_bytes, n, d, p, ld, r, acc, g0, prefetch);
		return;
	}
#endif
	(void)prefetch;
	if (d % 8 == 0) {
		BY_DTYPE(dt, mix_rows_k, base, row_bytes, n, d, p, ld, r, acc, g0);
		return;
	}
	mix_rows_scalar(dt, 0, base, row_bytes, n, d, p, ld, r, acc, g0);
}

ATTEND_CLONES
void attend_score_codes(int bits, const uint8_t *base, size_t row_bytes, int n, int d,
                        const float *q, int r, float *scores, int ld)
{
	if (d % 8 == 0) {
		score_rows_k(bits == 8 ? K_Q8 : K_Q4, base, row_bytes, n, d, q, r, scores, ld);
		return;
	}
	score_rows_scalar(KV_DTYPE_F32, bits, base, row_bytes, n, d, q, r, scores, ld);
}

ATTEND_CLONES
void attend_mix_codes(int bits, const uint8_t *base, size_t row_bytes, int n, int d, const float *w,
                      int ld, int r, float *acc, int g0)
{
	if (d % 8 == 0) {
		if (bits == 8)
			mix_rows_k(K_Q8, base, row_bytes, n, d, w, ld, r, acc, g0);
		else
			mix_rows_k(K_Q4, base, row_bytes, n, d, w, ld, r, acc, g0);
		return;
	}
	mix_rows_scalar(KV_DTYPE_F32, bits, base, row_bytes, n, d, w, ld, r, acc, g0);
}

ATTEND_INLINE v8f select8(v8i mask, v8f a, v8f b)
{
	v8i ai, bi;
	memcpy(&ai, &a, sizeof(ai));
	memcpy(&bi, &b, sizeof(bi));
	ai = (mask & ai) | (~mask & bi);
	memcpy(&a, &ai, sizeof(a));
	return a;
}

/* exp(x) for x <= 0 on 8 lanes (the EXP_ constants above). */
ATTEND_INLINE v8f exp_neg(v8f x)
{
	const v8f lo = {EXP_MIN, EXP_MIN, EXP_MIN, EXP_MIN, EXP_MIN, EXP_MIN, EXP_MIN, EXP_MIN};
	x = select8(x < lo, lo, x);
	/* n = round(x / ln2): x <= 0, so truncating x/ln2 - 0.5 rounds */
	v8i n = __builtin_convertvector(x * FASTEXP_LOG2E - 0.5f, v8i);
	v8f nf = __builtin_convertvector(n, v8f);
	v8f r = x - nf * FASTEXP_LN2_HI - nf * FASTEXP_LN2_LO;
	v8f p = r * FASTEXP_P0 + FASTEXP_P1;
	p = p * r + FASTEXP_P2;
	p = p * r + FASTEXP_P3;
	p = p * r + FASTEXP_P4;
	p = p * r + FASTEXP_P5;
	v8f y = p * r * r + r + 1.0f;
	v8i e = (n + 127) << 23;
	v8f scale;
	memcpy(&scale, &e, sizeof(scale));
	return y * scale;
}

float attend_exp_sum(float *scores, int n)
{
	return attend_exp_sum_sink(scores, n, -INFINITY, NULL);
}

ATTEND_CLONES
float attend_exp_sum_sink(float *scores, int n, float sink, float *sink_exp)
{
#ifdef ATTEND_HAVE_512
	if (cpu_has_avx512())
		return exp_sum_512(scores, n, sink, sink_exp);
#endif
	const v8f ninf = {-INFINITY, -INFINITY, -INFINITY, -INFINITY,
	                  -INFINITY, -INFINITY, -INFINITY, -INFINITY};
	const v8i lane = {0, 1, 2, 3, 4, 5, 6, 7};
	int nv = n - n % 8, m = n % 8;
	/* the last m as a vector: the 8 last scores (their first 8 - m are
	 * also in the last whole vector), or padded with -inf when n < 8 */
	v8f tail = ninf, m8 = ninf;
	if (n >= 8) {
		tail = ld_f32(scores + n - 8);
	} else {
		float t[8];
		for (int j = 0; j < 8; j++)
			t[j] = j < n ? scores[j] : -INFINITY;
		tail = ld_f32(t);
	}
	const v8f s8 = {sink, sink, sink, sink, sink, sink, sink, sink};
	m8 = select8(s8 > tail, s8, tail);
	for (int i = 0; i < nv; i += 8) {
		v8f x = ld_f32(scores + i);
		m8 = select8(x > m8, x, m8);
	}
	/* every lane to the maximum */
	v8f t = __builtin_shuffle(m8, (v8i){4, 5, 6, 7, 0, 1, 2, 3});
	m8 = select8(t > m8, t, m8);
	t = __builtin_shuffle(m8, (v8i){2, 3, 0, 1, 6, 7, 4, 5});
	m8 = select8(t > m8, t, m8);
	t = __builtin_shuffle(m8, (v8i){1, 0, 3, 2, 5, 4, 7, 6});
	m8 = select8(t > m8, t, m8);
	/* the tail's exps before the whole vectors overwrite their scores; its
	 * lanes that are also in the last whole vector get the same value */
	v8f et = exp_neg(tail - m8);
	if (sink_exp)
		*sink_exp = exp_neg(s8 - m8)[0];
	v8f sum8 = select8(n >= 8 ? lane >= 8 - m : lane < n, et, (v8f){0});
	for (int i = 0; i < nv; i += 8) {
		v8f e = exp_neg(ld_f32(scores + i) - m8);
		st_f32(scores + i, e);
		sum8 += e;
	}
	if (n >= 8)
		st_f32(scores + n - 8, et);
	else
		for (int j = 0; j < n; j++)
			scores[j] = et[j];
	return hsum(sum8);
}
