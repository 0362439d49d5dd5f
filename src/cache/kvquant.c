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

size_t kv_dtype_size(enum kv_dtype dt)
{
	return dt == KV_DTYPE_F32 ? 4 : 2;
}

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
/* 16 values per step: a row of 64 becomes four 32-byte stores instead of 64
 * two-byte ones, each from an out-of-line conversion call (row stores were
 * 8% of the CPU time of a 32-stream decode step of the 134M model, most of
 * it the page faults of fresh rows, since taken off by sinkcache.c).  Same
 * rounding as the scalar conversions: bf16 to nearest even with nan kept
 * quiet, f16 by the hardware's round to nearest even (identical results
 * except the payload bits of a nan). */
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))) static void
row_store_avx512(enum kv_dtype dt, uint16_t *d, const float *s, int n)
{
	int i = 0;
	if (dt == KV_DTYPE_BF16) {
		const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7fff);
		const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
		const __m512i inf = _mm512_set1_epi32(0x7f800000), quiet = _mm512_set1_epi32(0x40);
		for (; i < n; i += 16) {
			/* the last step masked: heads of 8 dims are one step */
			__mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
			__m512i x = _mm512_maskz_loadu_epi32(m, s + i), hi = _mm512_srli_epi32(x, 16);
			__m512i r = _mm512_add_epi32(x, _mm512_add_epi32(half, _mm512_and_si512(hi, one)));
			r = _mm512_srli_epi32(r, 16);
			__mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, abs_mask), inf);
			r = _mm512_mask_or_epi32(r, nan, hi, quiet);
			_mm512_mask_cvtepi32_storeu_epi16(d + i, m, r);
		}
	} else {
		for (; i < n; i += 16) {
			__mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
			__m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, s + i),
			                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
			_mm256_mask_storeu_epi16(d + i, m, h);
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

void kv_row_load(enum kv_dtype dt, const void *src, float *dst, int n)
{
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

void kvq_quant_row(const float *x, int n, int bits, uint8_t *codes, float *scale, float *min)
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

void kvq_quant_channels(const float *const *rows, int n_rows, int d, int bits, uint8_t *codes,
                        float *scale, float *min)
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
