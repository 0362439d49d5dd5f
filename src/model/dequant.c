/* Element conversions between ggml storage types and float: whole rows of
 * the block-quantized formats the loader accepts (Q4_0, Q4_1, Q5_0, Q5_1,
 * Q8_0, Q4_K, Q5_K, Q6_K, MXFP4; the half and bfloat16 scalars are util/half.c).
 * Block layouts are ggml's; all reads go through memcpy so blocks need no
 * alignment.  This is the reference (scalar) path used at load time and by
 * tests; fast compute kernels live in the engine, not here; quantizing is
 * quantize.c's job. */
#include "model/dequant.h"

#include <errno.h>
#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * 32-element blocks. */

/* Q4_0: fp16 d, 16 bytes of nibbles; x = (q - 8) * d.  18 bytes. */
static void deq_q4_0(const uint8_t *b, float *y)
{
	float d = fp16_load_f32(b);
	const uint8_t *qs = b + 2;
	for (int j = 0; j < 16; j++) {
		y[j] = (float)((qs[j] & 0xf) - 8) * d;
		y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
	}
}

/* Q4_1: fp16 d, fp16 m, 16 bytes of nibbles; x = q * d + m.  20 bytes. */
static void deq_q4_1(const uint8_t *b, float *y)
{
	float d = fp16_load_f32(b), m = fp16_load_f32(b + 2);
	const uint8_t *qs = b + 4;
	for (int j = 0; j < 16; j++) {
		y[j] = (float)(qs[j] & 0xf) * d + m;
		y[j + 16] = (float)(qs[j] >> 4) * d + m;
	}
}

/* Q5_0: fp16 d, u32 high bits, 16 bytes of nibbles; x = (q - 16) * d.  22 bytes. */
static void deq_q5_0(const uint8_t *b, float *y)
{
	float d = fp16_load_f32(b);
	uint32_t qh;
	memcpy(&qh, b + 2, 4);
	const uint8_t *qs = b + 6;
	for (int j = 0; j < 16; j++) {
		int h0 = (int)((qh >> j) << 4) & 0x10;
		int h1 = (int)(qh >> (j + 12)) & 0x10;
		y[j] = (float)(((qs[j] & 0xf) | h0) - 16) * d;
		y[j + 16] = (float)(((qs[j] >> 4) | h1) - 16) * d;
	}
}

/* Q5_1: fp16 d, fp16 m, u32 high bits, 16 bytes of nibbles; x = q * d + m.  24 bytes. */
static void deq_q5_1(const uint8_t *b, float *y)
{
	float d = fp16_load_f32(b), m = fp16_load_f32(b + 2);
	uint32_t qh;
	memcpy(&qh, b + 4, 4);
	const uint8_t *qs = b + 8;
	for (int j = 0; j < 16; j++) {
		int h0 = (int)((qh >> j) << 4) & 0x10;
		int h1 = (int)(qh >> (j + 12)) & 0x10;
		y[j] = (float)((qs[j] & 0xf) | h0) * d + m;
		y[j + 16] = (float)((qs[j] >> 4) | h1) * d + m;
	}
}

/* Q8_0: fp16 d, 32 int8; x = q * d.  34 bytes. */
static void deq_q8_0(const uint8_t *b, float *y)
{
	float d = fp16_load_f32(b);
	const int8_t *qs = (const int8_t *)(b + 2);
	for (int j = 0; j < 32; j++)
		y[j] = (float)qs[j] * d;
}

/* ------------------------------------------------------------------------
 * 256-element super-blocks. */

/* 6-bit scale and min of sub-block j from the 12-byte packed array. */
static void scale_min_k4(int j, const uint8_t *q, int *sc, int *mn)
{
	if (j < 4) {
		*sc = q[j] & 63;
		*mn = q[j + 4] & 63;
	} else {
		*sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
		*mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

/* Q4_K: fp16 d, fp16 dmin, 12 bytes scales, 128 bytes nibbles.  144 bytes. */
static void deq_q4_k(const uint8_t *b, float *y)
{
	float d = fp16_load_f32(b), dmin = fp16_load_f32(b + 2);
	const uint8_t *scales = b + 4, *q = b + 16;
	for (int j = 0; j < 8; j += 2) {
		int sc0, m0, sc1, m1;
		scale_min_k4(j, scales, &sc0, &m0);
		scale_min_k4(j + 1, scales, &sc1, &m1);
		for (int l = 0; l < 32; l++) {
			y[l] = d * (float)sc0 * (float)(q[l] & 0xf) - dmin * (float)m0;
			y[l + 32] = d * (float)sc1 * (float)(q[l] >> 4) - dmin * (float)m1;
		}
		q += 32;
		y += 64;
	}
}

/* Q5_K: fp16 d, fp16 dmin, 12 bytes scales, 32 bytes high bits, 128 bytes
 * nibbles.  176 bytes. */
static void deq_q5_k(const uint8_t *b, float *y)
{
	float d = fp16_load_f32(b), dmin = fp16_load_f32(b + 2);
	const uint8_t *scales = b + 4, *qh = b + 16, *ql = b + 48;
	unsigned u1 = 1, u2 = 2;
	for (int j = 0; j < 8; j += 2) {
		int sc0, m0, sc1, m1;
		scale_min_k4(j, scales, &sc0, &m0);
		scale_min_k4(j + 1, scales, &sc1, &m1);
		for (int l = 0; l < 32; l++) {
			int q0 = (ql[l] & 0xf) + ((qh[l] & u1) ? 16 : 0);
			int q1 = (ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0);
			y[l] = d * (float)sc0 * (float)q0 - dmin * (float)m0;
			y[l + 32] = d * (float)sc1 * (float)q1 - dmin * (float)m1;
		}
		ql += 32;
		y += 64;
		u1 <<= 2;
		u2 <<= 2;
	}
}

/* Q6_K: 128 bytes low nibbles, 64 bytes high 2-bit pairs, 16 int8 scales,
 * fp16 d; x = d * scale * (q - 32).  210 bytes. */
static void deq_q6_k(const uint8_t *b, float *y)
{
	const uint8_t *ql = b, *qh = b + 128;
	const int8_t *sc = (const int8_t *)(b + 192);
	float d = fp16_load_f32(b + 208);
	for (int half = 0; half < 2; half++) {
		for (int l = 0; l < 32; l++) {
			int is = l / 16;
			int q1 = ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) - 32;
			int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
			int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
			int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
			y[l] = d * (float)sc[is] * (float)q1;
			y[l + 32] = d * (float)sc[is + 2] * (float)q2;
			y[l + 64] = d * (float)sc[is + 4] * (float)q3;
			y[l + 96] = d * (float)sc[is + 6] * (float)q4;
		}
		y += 128;
		ql += 64;
		qh += 32;
		sc += 8;
	}
}

/* ------------------------------------------------------------------------
 * MXFP4 (layout: dequant.h). */

const int8_t mxfp4_kvalues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static void deq_mxfp4(const uint8_t *b, float *y)
{
	float d = mxfp4_scale(b[0]);
	const uint8_t *qs = b + 1;
	for (int j = 0; j < 16; j++) {
		y[j] = (float)mxfp4_kvalues[qs[j] & 0xf] * d;
		y[j + 16] = (float)mxfp4_kvalues[qs[j] >> 4] * d;
	}
}

/* ------------------------------------------------------------------------
 * Rows. */

typedef void (*block_fn)(const uint8_t *block, float *y);

static block_fn block_fn_of(enum ggml_type type)
{
	switch (type) {
	case GGML_TYPE_Q4_0:
		return deq_q4_0;
	case GGML_TYPE_Q4_1:
		return deq_q4_1;
	case GGML_TYPE_Q5_0:
		return deq_q5_0;
	case GGML_TYPE_Q5_1:
		return deq_q5_1;
	case GGML_TYPE_Q8_0:
		return deq_q8_0;
	case GGML_TYPE_Q4_K:
		return deq_q4_k;
	case GGML_TYPE_Q5_K:
		return deq_q5_k;
	case GGML_TYPE_Q6_K:
		return deq_q6_k;
	case GGML_TYPE_MXFP4:
		return deq_mxfp4;
	default:
		return NULL;
	}
}

bool dequant_supported(enum ggml_type type)
{
	return type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || type == GGML_TYPE_BF16 ||
	       block_fn_of(type) != NULL;
}

static void convert_16bit(const uint8_t *src, float *dst, uint64_t n, float (*conv)(uint16_t))
{
	for (uint64_t i = 0; i < n; i++) {
		uint16_t h;
		memcpy(&h, src + 2 * i, 2);
		dst[i] = conv(h);
	}
}

int dequantize_row(enum ggml_type type, const void *src, float *dst, uint64_t n)
{
	const uint8_t *s = src;
	switch (type) {
	case GGML_TYPE_F32:
		memcpy(dst, src, (size_t)n * sizeof(float));
		return 0;
	case GGML_TYPE_F16:
		convert_16bit(s, dst, n, fp16_to_f32);
		return 0;
	case GGML_TYPE_BF16:
		convert_16bit(s, dst, n, bf16_to_f32);
		return 0;
	default:
		break;
	}
	block_fn fn = block_fn_of(type);
	uint32_t bs = ggml_block_size(type);
	if (fn == NULL || bs == 0)
		return -ENOTSUP;
	if (n % bs != 0)
		return -EINVAL;
	size_t block_bytes = ggml_row_bytes(type, bs);
	for (uint64_t i = 0; i < n / bs; i++)
		fn(s + i * block_bytes, dst + i * bs);
	return 0;
}
