/* KV cache number formats: fp16/bf16 rows (element conversions are the
 * loader's, model/dequant.c) and asymmetric int8/int4
 * quantization of runs of values, per row (values per token, sink keys) or
 * per channel over a group of rows (keys, KIVI).  It does not decide what is
 * quantized when; that is the cache's business (sinkcache.c). */
#include "cache/kvquant.h"

#include <math.h>
#include <string.h>

#include "util/cpu.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define KVQUANT_X86 1
#endif

/* The element loop: the reference for the AVX-512 rows below. */
void kv_row_store_scalar(enum kv_dtype dt, void *dst, const float *src, int n)
{
	uint16_t *d16 = dst;
	switch (dt) {
	case KV_DTYPE_F32:
		memcpy(dst, src, (size_t)n * 4);
		break;
	case KV_DTYPE_F16:
		for (int i = 0; i < n; i++)
			d16[i] = kv_f32_to_f16(src[i]);
		break;
	case KV_DTYPE_BF16:
		for (int i = 0; i < n; i++)
			d16[i] = kv_f32_to_bf16(src[i]);
		break;
	}
}

#ifdef KVQUANT_X86
#define KVQ_AVX512_TARGET "avx512f,avx512bw,avx512vl,avx2,fma,f16c"
#define KVQ_AVX512_FN __attribute__((target(KVQ_AVX512_TARGET)))

/* 16 halves, a plain store when all lanes are on: an appended row's lines
 * are cold, and masked stores to cold lines are slower. */
static inline __attribute__((always_inline, target(KVQ_AVX512_TARGET))) void
store_halves(uint16_t *d, __mmask16 m, __m256i h)
{
	if (m == 0xffff)
		_mm256_storeu_si256((__m256i *)d, h);
	else
		_mm256_mask_storeu_epi16(d, m, h);
}

/* 16 values per step: a row of 64 becomes four 32-byte stores instead of 64
 * two-byte ones, each from an out-of-line conversion call.  Same
 * rounding as the scalar conversions: bf16 to nearest even with nan kept
 * quiet, f16 by the hardware's round to nearest even (identical results
 * except the payload bits of a nan). */
static KVQ_AVX512_FN void row_store_avx512(enum kv_dtype dt, uint16_t *d, const float *s, int n)
{
	int i = 0;
	if (dt == KV_DTYPE_BF16) {
		const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7fff);
		const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
		const __m512i inf = _mm512_set1_epi32(0x7f800000), quiet = _mm512_set1_epi32(0x40);
		for (; i < n; i += 16) {
			/* the last step masked: heads of 8 dims are one step */
			__mmask16 m = cpu_lanes16_mask(n - i);
			__m512i x = _mm512_maskz_loadu_epi32(m, s + i), hi = _mm512_srli_epi32(x, 16);
			__m512i r = _mm512_add_epi32(x, _mm512_add_epi32(half, _mm512_and_si512(hi, one)));
			r = _mm512_srli_epi32(r, 16);
			__mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, abs_mask), inf);
			r = _mm512_mask_or_epi32(r, nan, hi, quiet);
			store_halves(d + i, m, _mm512_cvtepi32_epi16(r));
		}
	} else {
		for (; i < n; i += 16) {
			__mmask16 m = cpu_lanes16_mask(n - i);
			__m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, s + i),
			                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
			store_halves(d + i, m, h);
		}
	}
}
#endif

void kv_row_store(enum kv_dtype dt, void *dst, const float *src, int n)
{
#ifdef KVQUANT_X86
	if (dt != KV_DTYPE_F32 && cpu_has_avx512()) {
		row_store_avx512(dt, dst, src, n);
		return;
	}
#endif
	kv_row_store_scalar(dt, dst, src, n);
}

#ifdef KVQUANT_X86
static KVQ_AVX512_FN void row_load_avx512(enum kv_dtype dt, const uint16_t *s, float *d, int n)
{
	for (int i = 0; i < n; i += 16) {
		__mmask16 m = cpu_lanes16_mask(n - i);
		__m256i h = _mm256_maskz_loadu_epi16(m, s + i);
		__m512 v = dt == KV_DTYPE_F16
		               ? _mm512_cvtph_ps(h)
		               : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
		_mm512_mask_storeu_ps(d + i, m, v);
	}
}
#endif

void kv_row_load(enum kv_dtype dt, const void *src, float *dst, int n)
{
#ifdef KVQUANT_X86
	if (dt != KV_DTYPE_F32 && cpu_has_avx512()) {
		row_load_avx512(dt, src, dst, n);
		return;
	}
#endif
	const uint16_t *s16 = src;
	switch (dt) {
	case KV_DTYPE_F32:
		memcpy(dst, src, (size_t)n * 4);
		break;
	case KV_DTYPE_F16:
		for (int i = 0; i < n; i++)
			dst[i] = kv_f16_to_f32(s16[i]);
		break;
	case KV_DTYPE_BF16:
		for (int i = 0; i < n; i++)
			dst[i] = kv_bf16_to_f32(s16[i]);
		break;
	}
}

/* scale and min of a range; scale 0 when the range is a single value. */
static void kvq_params(float lo, float hi, int bits, float *scale, float *min)
{
	*min = lo;
	*scale = (hi - lo) / (float)((1 << bits) - 1);
	if (!(*scale > 0.0f) || !isfinite(*scale))
		*scale = 0.0f;
}

static int kvq_code(float x, float scale, float min, int bits)
{
	if (scale == 0.0f)
		return 0;
	int c = (int)lrintf((x - min) / scale);
	int top = (1 << bits) - 1;
	return c < 0 ? 0 : c > top ? top : c;
}

static void kvq_put(uint8_t *codes, int j, int bits, int c)
{
	if (bits == 8)
		codes[j] = (uint8_t)c;
	else if (j & 1)
		codes[j >> 1] = (uint8_t)((codes[j >> 1] & 0x0f) | (c << 4));
	else
		codes[j >> 1] = (uint8_t)((codes[j >> 1] & 0xf0) | c);
}

void kvq_quant_row_scalar(const float *x, int n, int bits, uint8_t *codes, float *scale,
                          float *min)
{
	float lo = x[0], hi = x[0];
	for (int i = 1; i < n; i++) {
		lo = fminf(lo, x[i]);
		hi = fmaxf(hi, x[i]);
	}
	kvq_params(lo, hi, bits, scale, min);
	for (int i = 0; i < n; i++)
		kvq_put(codes, i, bits, kvq_code(x[i], *scale, *min, bits));
}

void kvq_dequant_row(const uint8_t *codes, int n, int bits, float scale, float min, float *out)
{
	for (int i = 0; i < n; i++)
		out[i] = (float)kvq_code_at(codes, i, bits) * scale + min;
}

void kvq_quant_channels_scalar(const float *const *rows, int n_rows, int d, int bits,
                               uint8_t *codes, float *scale, float *min)
{
	size_t row_bytes = kvq_code_bytes(d, bits);
	for (int j = 0; j < d; j++) {
		float lo = rows[0][j], hi = rows[0][j];
		for (int r = 1; r < n_rows; r++) {
			lo = fminf(lo, rows[r][j]);
			hi = fmaxf(hi, rows[r][j]);
		}
		kvq_params(lo, hi, bits, &scale[j], &min[j]);
		for (int r = 0; r < n_rows; r++)
			kvq_put(codes + (size_t)r * row_bytes, j, bits,
			        kvq_code(rows[r][j], scale[j], min[j], bits));
	}
}

#ifdef KVQUANT_X86
/* The quantizers 16 values at a time, with the scalar code's exact results
 * (min/max are exact, the code is (x - min) / scale rounded to nearest even
 * by the same IEEE division and conversion): the scalar loops pay a call of
 * fminf and a division per value.  A run
 * with an infinite or all-NaN extreme takes the scalar path. */

/* 16 codes (int32 lanes, each <= 15) -> 8 bytes, lane 2j low nibble. */
static inline KVQ_AVX512_FN __m128i nibbles_of(__m512i c)
{
	__m128i w = _mm512_cvtepi32_epi8(c);
	__m128i packed = _mm_or_si128(_mm_and_si128(w, _mm_set1_epi16(0x00ff)),
	                              _mm_srli_epi16(w, 4));
	return _mm_packus_epi16(packed, packed);
}

/* Codes of lanes m of x into codes at element j (j % 16 == 0). */
static inline KVQ_AVX512_FN void put_codes(uint8_t *codes, int j, int bits, __mmask16 m,
                                           __m512 x, __m512 min, __m512 scale,
                                           __mmask16 valid)
{
	__m512 q = _mm512_div_ps(_mm512_sub_ps(x, min), scale);
	__m512i c = _mm512_maskz_cvtps_epi32(valid, q);
	c = _mm512_min_epi32(_mm512_max_epi32(c, _mm512_setzero_si512()),
	                     _mm512_set1_epi32((1 << bits) - 1));
	if (bits == 8) {
		_mm_mask_storeu_epi8(codes + j, m, _mm512_cvtepi32_epi8(c));
	} else {
		/* m covers an even number of lanes: one bit per byte of the pair */
		__mmask16 bytes = (__mmask16)((1u << (__builtin_popcount(m) / 2)) - 1u);
		_mm_mask_storeu_epi8(codes + j / 2, bytes, nibbles_of(c));
	}
}

static KVQ_AVX512_FN bool quant_row_avx512(const float *x, int n, int bits, uint8_t *codes,
                                           float *scale, float *min)
{
	__m512 lo = _mm512_set1_ps(INFINITY), hi = _mm512_set1_ps(-INFINITY);
	for (int i = 0; i < n; i += 16) {
		__mmask16 m = cpu_lanes16_mask(n - i);
		__m512 v = _mm512_maskz_loadu_ps(m, x + i);
		/* min/max return their second operand when one is NaN: NaNs skipped */
		lo = _mm512_mask_min_ps(lo, m, v, lo);
		hi = _mm512_mask_max_ps(hi, m, v, hi);
	}
	float l = _mm512_reduce_min_ps(lo), h = _mm512_reduce_max_ps(hi);
	if (!isfinite(l) || !isfinite(h))
		return false;
	kvq_params(l, h, bits, scale, min);
	__m512 vmin = _mm512_set1_ps(*min), vscale = _mm512_set1_ps(*scale);
	__mmask16 valid = *scale == 0.0f ? 0 : 0xffff;
	for (int i = 0; i < n; i += 16) {
		__mmask16 m = cpu_lanes16_mask(n - i);
		put_codes(codes, i, bits, m, _mm512_maskz_loadu_ps(m, x + i), vmin, vscale, valid);
	}
	return true;
}

static KVQ_AVX512_FN bool quant_channels_avx512(const float *const *rows, int n_rows, int d,
                                                int bits, uint8_t *codes, float *scale,
                                                float *min)
{
	size_t row_bytes = kvq_code_bytes(d, bits);
	/* all extremes first: a non-finite one anywhere sends the call to the
	 * scalar code before any output is written */
	for (int j = 0; j < d; j += 16) {
		__mmask16 m = cpu_lanes16_mask(d - j);
		__m512 lo = _mm512_set1_ps(INFINITY), hi = _mm512_set1_ps(-INFINITY);
		for (int r = 0; r < n_rows; r++) {
			__m512 v = _mm512_maskz_loadu_ps(m, rows[r] + j);
			lo = _mm512_mask_min_ps(lo, m, v, lo);
			hi = _mm512_mask_max_ps(hi, m, v, hi);
		}
		__m512 inf = _mm512_set1_ps(INFINITY);
		__mmask16 fin = _mm512_mask_cmp_ps_mask(m, _mm512_abs_ps(lo), inf, _CMP_LT_OQ) &
		                _mm512_mask_cmp_ps_mask(m, _mm512_abs_ps(hi), inf, _CMP_LT_OQ);
		if (fin != m)
			return false;
		__m512 top = _mm512_set1_ps((float)((1 << bits) - 1));
		__m512 sc = _mm512_div_ps(_mm512_sub_ps(hi, lo), top);
		/* kvq_params: scale 0 unless positive and finite */
		__mmask16 ok = _mm512_cmp_ps_mask(sc, _mm512_setzero_ps(), _CMP_GT_OQ) &
		               _mm512_cmp_ps_mask(sc, inf, _CMP_LT_OQ);
		sc = _mm512_maskz_mov_ps(ok, sc);
		_mm512_mask_storeu_ps(scale + j, m, sc);
		_mm512_mask_storeu_ps(min + j, m, lo);
	}
	for (int j = 0; j < d; j += 16) {
		__mmask16 m = cpu_lanes16_mask(d - j);
		__m512 sc = _mm512_maskz_loadu_ps(m, scale + j), lo = _mm512_maskz_loadu_ps(m, min + j);
		__mmask16 valid = _mm512_cmp_ps_mask(sc, _mm512_setzero_ps(), _CMP_NEQ_UQ);
		for (int r = 0; r < n_rows; r++)
			put_codes(codes + (size_t)r * row_bytes, j, bits, m,
			          _mm512_maskz_loadu_ps(m, rows[r] + j), lo, sc, valid);
	}
	return true;
}
#endif

void kvq_quant_row(const float *x, int n, int bits, uint8_t *codes, float *scale, float *min)
{
#ifdef KVQUANT_X86
	if (cpu_has_avx512() && quant_row_avx512(x, n, bits, codes, scale, min))
		return;
#endif
	kvq_quant_row_scalar(x, n, bits, codes, scale, min);
}

void kvq_quant_channels(const float *const *rows, int n_rows, int d, int bits, uint8_t *codes,
                        float *scale, float *min)
{
#ifdef KVQUANT_X86
	if (cpu_has_avx512() &&
	    quant_channels_avx512(rows, n_rows, d, bits, codes, scale, min))
		return;
#endif
	kvq_quant_channels_scalar(rows, n_rows, d, bits, codes, scale, min);
}
