/* Attention inner loops (see attend_kernels.h), written with GCC vector
 * extensions over 8 floats so the same source is compiled for AVX2+FMA and
 * for the baseline ISA.  Rows whose length is not a multiple of 8 take a
 * scalar path.  They know nothing about tiers or positions. */
#include "cache/attend_kernels.h"

#include <math.h>
#include <string.h>

#include "cache/kvquant.h"
#include "cache/sinkcache_impl.h"

/* The helpers below are always inlined into each clone; their vector
 * arguments never cross an ABI boundary. */
#pragma GCC diagnostic ignored "-Wpsabi"
/* -std=c11 turns off contraction; the kernels want fused multiply-adds. */
#pragma GCC optimize("fp-contract=fast")
#define ATTEND_INLINE static inline __attribute__((always_inline))

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(ATTEND_NO_CLONES)
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

/* A row of d codes to floats (plain loops: GCC vectorises these better
 * than vector-extension conversions). */
ATTEND_INLINE void codes_to_floats(int bits, const uint8_t *restrict row, int d,
                                   float *restrict out)
{
	if (bits == 8) {
		for (int j = 0; j < d; j++)
			out[j] = (float)row[j];
	} else {
		for (int j = 0; j < d / 2; j++) {
			out[2 * j] = (float)(row[j] & 15);
			out[2 * j + 1] = (float)(row[j] >> 4);
		}
	}
}

ATTEND_INLINE float hsum(v8f v)
{
	return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

/* scores[h * ld] = q[h] . k for the r query heads (q: [r][d], k: [d], d a
 * multiple of 8). */
ATTEND_INLINE void dot_heads(const float *q, int r, int d, const float *k, float *scores, int ld)
{
	for (int h = 0; h < r; h++) {
		const float *qh = q + (size_t)h * d;
		v8f acc = ld_f32(qh) * ld_f32(k);
		for (int c = 8; c < d; c += 8)
			acc += ld_f32(qh + c) * ld_f32(k + c);
		scores[(size_t)h * ld] = hsum(acc);
	}
}

static float elem_row(enum kv_dtype dt, const unsigned char *row, int j)
{
	uint16_t h;
	float f;
	if (dt == KV_DTYPE_F32) {
		memcpy(&f, row + 4 * (size_t)j, 4);
		return f;
	}
	memcpy(&h, row + 2 * (size_t)j, 2);
	return dt == KV_DTYPE_F16 ? kv_f16_to_f32(h) : kv_bf16_to_f32(h);
}

ATTEND_INLINE void score_rows_dt(enum kv_dtype dt, const unsigned char *base, size_t row_bytes,
                                 int n, int d, const float *q, int r, float *scores, int ld)
{
	/* the row comes from memory once; the other heads re-read it from L1 */
	float tmp[SINKCACHE_MAX_HEAD_DIM];
	for (int i = 0; i < n; i++) {
		const unsigned char *row = base + (size_t)i * row_bytes;
		const float *k = (const float *)row;
		if (dt != KV_DTYPE_F32) { /* convert once for all heads */
			for (int c = 0; c < d; c += 8) {
				v8f x = ld_row(dt, row, c);
				memcpy(tmp + c, &x, sizeof(x));
			}
			k = tmp;
		}
		dot_heads(q, r, d, k, scores + i, ld);
	}
}

ATTEND_CLONES
void attend_score_rows(enum kv_dtype dt, const unsigned char *base, size_t row_bytes, int n, int d,
                       const float *q, int r, float *scores, int ld)
{
	if (d % 8 == 0) {
		/* one instance per dtype so the loads are resolved at compile time */
		if (dt == KV_DTYPE_F32)
			score_rows_dt(KV_DTYPE_F32, base, row_bytes, n, d, q, r, scores, ld);
		else if (dt == KV_DTYPE_BF16)
			score_rows_dt(KV_DTYPE_BF16, base, row_bytes, n, d, q, r, scores, ld);
		else
			score_rows_dt(KV_DTYPE_F16, base, row_bytes, n, d, q, r, scores, ld);
		return;
	}
	for (int i = 0; i < n; i++)
		for (int h = 0; h < r; h++) {
			float s = 0.0f;
			for (int j = 0; j < d; j++)
				s += q[(size_t)h * d + j] *
				     elem_row(dt, base + (size_t)i * row_bytes, j);
			scores[(size_t)h * ld + i] = s;
		}
}

ATTEND_INLINE void mix_rows_dt(enum kv_dtype dt, const unsigned char *base, size_t row_bytes, int n,
                               int d, const float *p, int ld, int r, float *acc)
{
	for (int i = 0; i < n; i++) {
		const unsigned char *row = base + (size_t)i * row_bytes;
		for (int c = 0; c < d; c += 8) {
			v8f v = ld_row(dt, row, c);
			for (int h = 0; h < r; h++) {
				float *a = acc + (size_t)h * d + c;
				v8f s = ld_f32(a) + p[(size_t)h * ld + i] * v;
				memcpy(a, &s, sizeof(s));
			}
		}
	}
}

ATTEND_CLONES
void attend_mix_rows(enum kv_dtype dt, const unsigned char *base, size_t row_bytes, int n, int d,
                     const float *p, int ld, int r, float *acc)
{
	if (d % 8 == 0) {
		if (dt == KV_DTYPE_F32)
			mix_rows_dt(KV_DTYPE_F32, base, row_bytes, n, d, p, ld, r, acc);
		else if (dt == KV_DTYPE_BF16)
			mix_rows_dt(KV_DTYPE_BF16, base, row_bytes, n, d, p, ld, r, acc);
		else
			mix_rows_dt(KV_DTYPE_F16, base, row_bytes, n, d, p, ld, r, acc);
		return;
	}
	for (int i = 0; i < n; i++)
		for (int h = 0; h < r; h++)
			for (int j = 0; j < d; j++)
				acc[(size_t)h * d + j] +=
				    p[(size_t)h * ld + i] *
				    elem_row(dt, base + (size_t)i * row_bytes, j);
}

ATTEND_CLONES
void attend_score_codes(int bits, const uint8_t *base, size_t row_bytes, int n, int d,
                        const float *q, int r, float *scores, int ld)
{
	for (int i = 0; i < n; i++) {
		const uint8_t *row = base + (size_t)i * row_bytes;
		if (d % 8) {
			for (int h = 0; h < r; h++) {
				float s = 0.0f;
				for (int j = 0; j < d; j++)
					s +=
					    q[(size_t)h * d + j] * (float)kvq_code_at(row, j, bits);
				scores[(size_t)h * ld + i] = s;
			}
			continue;
		}
		/* codes to floats once, then a dot product per head from L1 */
		float k[SINKCACHE_MAX_HEAD_DIM];
		codes_to_floats(bits, row, d, k);
		dot_heads(q, r, d, k, scores + i, ld);
	}
}

ATTEND_CLONES
void attend_mix_codes(int bits, const uint8_t *base, size_t row_bytes, int n, int d, const float *w,
                      int ld, int r, float *acc)
{
	for (int i = 0; i < n; i++) {
		const uint8_t *row = base + (size_t)i * row_bytes;
		if (d % 8) {
			for (int h = 0; h < r; h++)
				for (int j = 0; j < d; j++)
					acc[(size_t)h * d + j] += w[(size_t)h * ld + i] *
					                          (float)kvq_code_at(row, j, bits);
			continue;
		}
		float vf[SINKCACHE_MAX_HEAD_DIM];
		codes_to_floats(bits, row, d, vf);
		for (int c = 0; c < d; c += 8) {
			v8f v = ld_f32(vf + c);
			for (int h = 0; h < r; h++) {
				float *a = acc + (size_t)h * d + c;
				v8f s = ld_f32(a) + w[(size_t)h * ld + i] * v;
				memcpy(a, &s, sizeof(s));
			}
		}
	}
}

typedef int32_t v8i __attribute__((vector_size(32)));

ATTEND_INLINE v8f select8(v8i mask, v8f a, v8f b)
{
	v8i ai, bi;
	memcpy(&ai, &a, sizeof(ai));
	memcpy(&bi, &b, sizeof(bi));
	ai = (mask & ai) | (~mask & bi);
	memcpy(&a, &ai, sizeof(a));
	return a;
}

/* exp(x) for x <= 0 (scores minus their maximum), the Cephes expf
 * polynomial: relative error ~2e-7; below -87 it gives 2^-126 (no weight). */
ATTEND_INLINE v8f exp_neg(v8f x)
{
	const v8f lo = {-87.0f, -87.0f, -87.0f, -87.0f, -87.0f, -87.0f, -87.0f, -87.0f};
	x = select8(x < lo, lo, x);
	/* n = round(x / ln2): x <= 0, so truncating x/ln2 - 0.5 rounds */
	v8i n = __builtin_convertvector(x * 1.44269504088896341f - 0.5f, v8i);
	v8f nf = __builtin_convertvector(n, v8f);
	v8f r = x - nf * 0.693359375f - nf * -2.12194440e-4f;
	v8f p = r * 1.9875691500e-4f + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	v8f y = p * r * r + r + 1.0f;
	v8i e = (n + 127) << 23;
	v8f scale;
	memcpy(&scale, &e, sizeof(scale));
	return y * scale;
}

ATTEND_CLONES
float attend_exp_sum(float *scores, int n)
{
	v8f m8 = {-INFINITY, -INFINITY, -INFINITY, -INFINITY,
	          -INFINITY, -INFINITY, -INFINITY, -INFINITY};
	int i = 0;
	for (; i + 8 <= n; i += 8) {
		v8f x = ld_f32(scores + i);
		m8 = select8(x > m8, x, m8);
	}
	float mx = -INFINITY;
	for (int j = 0; j < 8; j++)
		mx = m8[j] > mx ? m8[j] : mx;
	for (int j = i; j < n; j++)
		mx = scores[j] > mx ? scores[j] : mx;
	v8f sum8 = {0};
	for (i = 0; i + 8 <= n; i += 8) {
		v8f e = exp_neg(ld_f32(scores + i) - mx);
		memcpy(scores + i, &e, sizeof(e));
		sum8 += e;
	}
	float sum = hsum(sum8);
	for (; i < n; i++) {
		scores[i] = expf(scores[i] - mx);
		sum += scores[i];
	}
	return sum;
}
