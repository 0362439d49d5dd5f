/* Number formats of the KV cache: f16/bf16 rows, and KIVI-style asymmetric
 * integer quantization (int8, or int4 packed two per byte).
 *
 * A quantized run of n values x[0..n) is stored as codes c[i] in [0, 2^b-1]
 * with one fp32 scale and min:
 *     scale = (max(x) - min(x)) / (2^b - 1),  c[i] = round((x[i] - min) / scale)
 *     x'[i] = c[i] * scale + min
 * so |x[i] - x'[i]| <= scale/2 (+ fp32 rounding of the last two operations,
 * a few ulp of max|x|).  A constant run has scale 0 and is exact.
 * int4 packs element 2j in the low nibble and 2j+1 in the high nibble of
 * byte j; n must be even. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "cache/geometry.h"
#include "model/dequant.h"

/* dst (n elements of dt) <- src (n floats), round to nearest even (AVX-512
 * where the CPU has it). */
void kv_row_store(enum kv_dtype dt, void *dst, const float *src, int n);
/* The same one element at a time: the portable path, and the reference the
 * vector path is tested against. */
void kv_row_store_scalar(enum kv_dtype dt, void *dst, const float *src, int n);
/* dst (n floats) <- src (n elements of dt). */
void kv_row_load(enum kv_dtype dt, const void *src, float *dst, int n);

/* Element conversions, round to nearest even: the loader's (model/dequant.h). */
static inline uint16_t kv_f32_to_f16(float f)
{
	return f32_to_fp16(f);
}
static inline float kv_f16_to_f32(uint16_t h)
{
	return fp16_to_f32(h);
}
static inline uint16_t kv_f32_to_bf16(float f)
{
	return f32_to_bf16(f);
}
static inline float kv_bf16_to_f32(uint16_t h)
{
	return bf16_to_f32(h);
}

/* Quantizes one run of n values (x contiguous): codes (kvq_code_bytes(n)).
 * AVX-512 where the CPU has it, with the results of the _scalar twin (the
 * portable path and the tests' reference). */
void kvq_quant_row(const float *x, int n, int bits, uint8_t *codes, float *scale, float *min);
void kvq_quant_row_scalar(const float *x, int n, int bits, uint8_t *codes, float *scale,
                          float *min);
/* out (n floats) <- codes. */
void kvq_dequant_row(const uint8_t *codes, int n, int bits, float scale, float min, float *out);

/* Quantizes n_rows rows of d values per channel (column): channel j of all
 * rows shares scale[j], min[j].  rows: (n_rows) pointers to (d) floats;
 * codes: (n_rows, kvq_code_bytes(d)) row-major; scale, min: (d). */
void kvq_quant_channels(const float *const *rows, int n_rows, int d, int bits, uint8_t *codes,
                        float *scale, float *min);
void kvq_quant_channels_scalar(const float *const *rows, int n_rows, int d, int bits,
                               uint8_t *codes, float *scale, float *min);
/* Code j (0..n) of a row of codes. */
static inline int kvq_code_at(const uint8_t *codes, int j, int bits)
{
	if (bits == 8)
		return codes[j];
	return (codes[j >> 1] >> ((j & 1) * 4)) & 15;
}
