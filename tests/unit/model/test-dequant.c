/* Element conversions: half/bfloat scalars at the edges of their range, and
 * each block format dequantized from hand-built blocks whose logical values
 * (scales, mins, quants) are chosen by the test and packed following the
 * format's documented bit layout. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/dequant.h"
#include "model/quantize.h"
#include "testutil.h"

static void put_half(uint8_t *p, float v)
{
	uint16_t h = f32_to_fp16(v);
	memcpy(p, &h, 2);
}

START_TEST(test_fp16_scalars)
{
	ck_assert_uint_eq(f32_to_fp16(1.0f), 0x3c00);
	ck_assert_uint_eq(f32_to_fp16(-2.0f), 0xc000);
	ck_assert_uint_eq(f32_to_fp16(65504.0f), 0x7bff);
	ck_assert_uint_eq(f32_to_fp16(65520.0f), 0x7c00); /* rounds up to inf */
	ck_assert_uint_eq(f32_to_fp16(65519.0f), 0x7bff);
	ck_assert_uint_eq(f32_to_fp16(0x1p-24f), 0x0001);        /* smallest subnormal */
	ck_assert_uint_eq(f32_to_fp16(0x1p-26f), 0x0000);        /* below half of it */
	ck_assert_uint_eq(f32_to_fp16(1.0f + 0x1p-11f), 0x3c00); /* tie -> even */
	ck_assert_uint_eq(f32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);
	ck_assert_uint_eq(f32_to_fp16(-0.0f), 0x8000);
	ck_assert_uint_eq(f32_to_fp16(INFINITY), 0x7c00);
	ck_assert(isnan(fp16_to_f32(f32_to_fp16(NAN))));
	ck_assert_float_eq(fp16_to_f32(0x3555), 0.333251953125f);
	ck_assert_float_eq(fp16_to_f32(0x0001), 0x1p-24f);
	ck_assert_float_eq(fp16_to_f32(0x03ff), 1023 * 0x1p-24f);
	ck_assert_float_eq(fp16_to_f32(0xfbff), -65504.0f);
	ck_assert(isinf(fp16_to_f32(0x7c00)));
	/* every finite half survives a round trip */
	for (uint32_t h = 0; h < 0x10000; h++)
		if ((h & 0x7c00) != 0x7c00)
			ck_assert_uint_eq(f32_to_fp16(fp16_to_f32((uint16_t)h)), h);
}
END_TEST

START_TEST(test_bf16_scalars)
{
	ck_assert_uint_eq(f32_to_bf16(1.0f), 0x3f80);
	ck_assert_float_eq(bf16_to_f32(0xc040), -3.0f);
	ck_assert_uint_eq(f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);     /* tie -> even */
	ck_assert_uint_eq(f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82); /* tie -> even (up) */
	ck_assert_uint_eq(f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
	ck_assert(isnan(bf16_to_f32(f32_to_bf16(NAN))));
	ck_assert(isinf(bf16_to_f32(f32_to_bf16(INFINITY))));
}
END_TEST

START_TEST(test_q4_0_q4_1)
{
	uint8_t b[20];
	float y[32];
	put_half(b, 0.5f);
	for (int j = 0; j < 16; j++)
		b[2 + j] = (uint8_t)(j | ((15 - j) << 4));
	ck_assert_int_eq(dequantize_row(GGML_TYPE_Q4_0, b, y, 32), 0);
	for (int j = 0; j < 16; j++) {
		ck_assert_float_eq(y[j], (float)(j - 8) * 0.5f);
		ck_assert_float_eq(y[j + 16], (float)(15 - j - 8) * 0.5f);
	}
	put_half(b, 0.25f);
	put_half(b + 2, -1.0f);
	for (int j = 0; j < 16; j++)
		b[4 + j] = (uint8_t)(j | ((15 - j) << 4));
	ck_assert_int_eq(dequantize_row(GGML_TYPE_Q4_1, b, y, 32), 0);
	for (int j = 0; j < 16; j++) {
		ck_assert_float_eq(y[j], (float)j * 0.25f - 1.0f);
		ck_assert_float_eq(y[j + 16], (float)(15 - j) * 0.25f - 1.0f);
	}
}
END_TEST

/* Packs 32 logical 5-bit values q[] into qh (bit i = high bit of element i)
 * and 16 nibble bytes (element j low, element j+16 high). */
static void pack_q5(const int *q, uint8_t *qh4, uint8_t *qs)
{
	uint32_t qh = 0;
	for (int i = 0; i < 32; i++)
		qh |= (uint32_t)((q[i] >> 4) & 1) << i;
	memcpy(qh4, &qh, 4);
	for (int j = 0; j < 16; j++)
		qs[j] = (uint8_t)((q[j] & 15) | ((q[j + 16] & 15) << 4));
}

START_TEST(test_q5_0_q5_1)
{
	int q[32];
	for (int i = 0; i < 32; i++)
		q[i] = (i * 7 + 3) % 32;
	uint8_t b[24];
	float y[32];
	put_half(b, 2.0f);
	pack_q5(q, b + 2, b + 6);
	ck_assert_int_eq(dequantize_row(GGML_TYPE_Q5_0, b, y, 32), 0);
	for (int i = 0; i < 32; i++)
		ck_assert_float_eq(y[i], (float)(q[i] - 16) * 2.0f);
	put_half(b, 0.5f);
	put_half(b + 2, 3.0f);
	pack_q5(q, b + 4, b + 8);
	ck_assert_int_eq(dequantize_row(GGML_TYPE_Q5_1, b, y, 32), 0);
	for (int i = 0; i < 32; i++)
		ck_assert_float_eq(y[i], (float)q[i] * 0.5f + 3.0f);
}
END_TEST

START_TEST(test_q8_0)
{
	uint8_t b[68];
	float y[64];
	put_half(b, 0.125f);
	put_half(b + 34, -1.0f);
	for (int j = 0; j < 32; j++) {
		b[2 + j] = (uint8_t)(int8_t)(j * 8 - 128);
		b[36 + j] = (uint8_t)(int8_t)(j - 16);
	}
	ck_assert_int_eq(dequantize_row(GGML_TYPE_Q8_0, b, y, 64), 0);
	for (int j = 0; j < 32; j++) {
		ck_assert_float_eq(y[j], (float)(j * 8 - 128) * 0.125f);
		ck_assert_float_eq(y[32 + j], -(float)(j - 16));
	}
	/* quantize -> dequantize is within half a step */
	float x[64], z[64];
	for (int i = 0; i < 64; i++)
		x[i] = sinf((float)i) * (i < 32 ? 1.0f : 1e-3f);
	ck_assert_int_eq(quantize_row_q8_0(x, b, 64), 0);
	ck_assert_int_eq(dequantize_row(GGML_TYPE_Q8_0, b, z, 64), 0);
	for (int i = 0; i < 64; i++)
		ck_assert_float_le(fabsf(z[i] - x[i]), (i < 32 ? 1.0f : 1e-3f) / 127.0f * 0.51f);
	ck_assert_int_eq(quantize_row_q8_0(x, b, 40), -EINVAL);
}
END_TEST

/* 8 (scale, min) 6-bit pairs into the 12-byte K-quant scale array. */
static void pack_scales_k4(const int *sc, const int *mn, uint8_t *q)
{
	for (int j = 0; j < 4; j++) {
		q[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
		q[j + 4] = (uint8_t)((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
		q[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
	}
}

static void k_scales(int *sc, int *mn)
{
	static const int s[8] = {1, 63, 17, 32, 5, 48, 33, 60};
	static const int m[8] = {0, 7, 63, 20, 41, 16, 3, 50};
	memcpy(sc, s, sizeof(s));
	memcpy(mn, m, sizeof(m));
}

START_TEST(test_q4_k)
{
	int sc[8], mn[8], q[256];
	k_scales(sc, mn);
	uint8_t b[144];
	put_half(b, 0.5f);
	put_half(b + 2, 0.25f);
	pack_scales_k4(sc, mn, b + 4);
	for (int i = 0; i < 256; i++)
		q[i] = (i * 5 + i / 7) % 16;
	/* pairs of sub-blocks share 32 bytes: first in low nibbles, second high */
	for (int p = 0; p < 4; p++)
		for (int l = 0; l < 32; l++)
			b[16 + 32 * p + l] = (uint8_t)(q[64 * p + l] | (q[64 * p + 32 + l] << 4));
	float y[256];
	ck_assert_int_eq(dequantize_row(GGML_TYPE_Q4_K, b, y, 256), 0);
	for (int i = 0; i < 256; i++) {
		int j = i / 32;
		float want = 0.5f * (float)sc[j] * (float)q[i] - 0.25f * (float)mn[j];
		ck_assert_float_eq_tol(y[i], want, 1e-5f);
	}
}
END_TEST

START_TEST(test_q5_k)
{
	int sc[8], mn[8], q[256];
	k_scales(sc, mn);
	uint8_t b[176];
	memset(b, 0, sizeof(b));
	put_half(b, 0.125f);
	put_half(b + 2, 2.0f);
	pack_scales_k4(sc, mn, b + 4);
	for (int i = 0; i < 256; i++)
		q[i] = (i * 11 + i / 5) % 32;
	for (int i = 0; i < 256; i++) {
		int j = i / 32, l = i % 32;
		b[16 + l] |= (uint8_t)(((q[i] >> 4) & 1) << j); /* qh: bit j of byte l */
		b[48 + 32 * (j / 2) + l] |= (uint8_t)((q[i] & 15) << (4 * (j % 2)));
	}
	float y[256];
	ck_assert_int_eq(dequantize_row(GGML_TYPE_Q5_K, b, y, 256), 0);
	for (int i = 0; i < 256; i++) {
		int j = i / 32;
		float want = 0.125f * (float)sc[j] * (float)q[i] - 2.0f * (float)mn[j];
		ck_assert_float_eq_tol(y[i], want, 1e-5f);
	}
}
END_TEST

START_TEST(test_q6_k)
{
	int q[256];
	int8_t sc[16] = {1, -2, 3, -4, 5, -6, 7, -8, 127, -128, 11, 12, -13, 14, 15, 16};
	uint8_t b[210];
	memset(b, 0, sizeof(b));
	for (int i = 0; i < 256; i++)
		q[i] = (i * 13 + i / 3) % 64;
	for (int e = 0; e < 256; e++) {
		int half = e / 128, r = e % 128, g = r / 32, l = r % 32;
		int ql_idx = half * 64 + l + (g & 1) * 32;
		b[ql_idx] |= (uint8_t)((q[e] & 15) << (g < 2 ? 0 : 4));
		b[128 + half * 32 + l] |= (uint8_t)((q[e] >> 4) << (2 * g));
	}
	memcpy(b + 192, sc, 16);
	put_half(b + 208, 0.0625f);
	float y[256];
	ck_assert_int_eq(dequantize_row(GGML_TYPE_Q6_K, b, y, 256), 0);
	for (int e = 0; e < 256; e++) {
		/* each group of 16 consecutive elements shares one scale */
		float want = 0.0625f * (float)sc[e / 16] * (float)(q[e] - 32);
		ck_assert_float_eq_tol(y[e], want, 1e-5f);
	}
}
END_TEST

/* MXFP4: e = 125 is a scale of 2^(125 - 128) = 1/8 on the doubled E2M1
 * codes, low nibbles first; e = 0 and 1 are the denormal scales 2^-128 and
 * 2^-127, e = 254 is 2^126. */
START_TEST(test_mxfp4)
{
	/* E2M1 codes 0..15 as numbers: 0, 0.5, 1, 1.5, 2, 3, 4, 6, then negated */
	static const float e2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
	                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
	uint8_t b[4 * 17] = {125};
	for (int j = 0; j < 16; j++)
		b[1 + j] = (uint8_t)(j | (15 - j) << 4);
	b[17] = 0, b[18] = 0x07;  /* code 7 (6.0) at value 0, 2^-128 */
	b[34] = 1, b[35] = 0x01;  /* code 1 (0.5), 2^-127 */
	b[51] = 254, b[52] = 0x02; /* code 2 (1.0), 2^126 */
	float y[128];
	ck_assert_int_eq(dequantize_row(GGML_TYPE_MXFP4, b, y, 128), 0);
	for (int j = 0; j < 16; j++) {
		ck_assert_float_eq(y[j], e2m1[j] * 0.25f);
		ck_assert_float_eq(y[16 + j], e2m1[15 - j] * 0.25f);
	}
	ck_assert_float_eq(y[32], ldexpf(12.0f, -128));
	ck_assert_float_eq(y[64], ldexpf(1.0f, -127));
	ck_assert_float_eq(y[96], ldexpf(2.0f, 126));
	for (int j = 1; j < 32; j++)
		ck_assert_float_eq(y[32 + j] + y[64 + j] + y[96 + j], 0.0f);
	ck_assert_int_eq(dequantize_row(GGML_TYPE_MXFP4, b, y, 40), -EINVAL);
}
END_TEST

START_TEST(test_float_rows_and_errors)
{
	uint16_t h[4] = {0x3c00, 0xc000, 0x3800, 0x0000};
	uint16_t bf[4] = {0x3f80, 0xc040, 0x4000, 0x8000};
	float f[4] = {1.5f, -2.25f, 0.0f, 3.0f}, y[4];
	ck_assert_int_eq(dequantize_row(GGML_TYPE_F16, h, y, 4), 0);
	ck_assert_float_eq(y[1], -2.0f);
	ck_assert_float_eq(y[2], 0.5f);
	ck_assert_int_eq(dequantize_row(GGML_TYPE_BF16, bf, y, 4), 0);
	ck_assert_float_eq(y[1], -3.0f);
	ck_assert_float_eq(y[2], 2.0f);
	ck_assert_int_eq(dequantize_row(GGML_TYPE_F32, f, y, 4), 0);
	ck_assert_float_eq(y[3], 3.0f);
	uint8_t blk[256] = {0};
	ck_assert_int_eq(dequantize_row(GGML_TYPE_Q2_K, blk, y, 256), -ENOTSUP);
	ck_assert_int_eq(dequantize_row(GGML_TYPE_Q4_0, blk, y, 20), -EINVAL);
	ck_assert(dequant_supported(GGML_TYPE_Q6_K));
	ck_assert(!dequant_supported(GGML_TYPE_Q3_K));
	ck_assert(!dequant_supported((enum ggml_type)17)); /* IQ2_XS */
}
END_TEST

int main(void)
{
	Suite *s = suite_create("dequant");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_fp16_scalars);
	tcase_add_test(tc, test_bf16_scalars);
	tcase_add_test(tc, test_q4_0_q4_1);
	tcase_add_test(tc, test_q5_0_q5_1);
	tcase_add_test(tc, test_q8_0);
	tcase_add_test(tc, test_q4_k);
	tcase_add_test(tc, test_q5_k);
	tcase_add_test(tc, test_q6_k);
	tcase_add_test(tc, test_mxfp4);
	tcase_add_test(tc, test_float_rows_and_errors);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
