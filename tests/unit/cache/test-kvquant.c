/* KV number formats: f16/bf16 conversion, int8/int4 quantization error
 * bounds on hand-computed cases and random data, and RoPE angle exactness
 * at large stream positions against long double. */
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cache/kvquant.h"
#include "cache/rope.h"
#include "testutil.h"

START_TEST(test_half_formats)
{
	ck_assert_uint_eq(kv_f32_to_f16(1.0f), 0x3c00);
	ck_assert_uint_eq(kv_f32_to_f16(-2.0f), 0xc000);
	ck_assert_uint_eq(kv_f32_to_f16(65504.0f), 0x7bff);
	ck_assert_uint_eq(kv_f32_to_f16(1e6f), 0x7c00);
	ck_assert_uint_eq(kv_f32_to_f16(5.9604645e-8f), 0x0001);      /* smallest subnormal */
	ck_assert_uint_eq(kv_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00); /* tie to even */
	ck_assert_uint_eq(kv_f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);
	ck_assert_float_eq(kv_f16_to_f32(0x3555), 0.333251953125f);
	ck_assert_uint_eq(kv_f32_to_bf16(1.0f), 0x3f80);
	ck_assert_uint_eq(kv_f32_to_bf16(1.00390625f), 0x3f80); /* tie to even */
	ck_assert_float_eq(kv_bf16_to_f32(0x4049), 3.140625f);
	srand(7);
	for (int i = 0; i < 100000; i++) {
		float x = ((float)rand() / RAND_MAX - 0.5f) * 200.0f;
		float h = kv_f16_to_f32(kv_f32_to_f16(x)), b = kv_bf16_to_f32(kv_f32_to_bf16(x));
		ck_assert_float_le(fabsf(h - x), fabsf(x) * 0x1p-11f + 0x1p-25f);
		ck_assert_float_le(fabsf(b - x), fabsf(x) * 0x1p-8f);
	}
}
END_TEST

/* Row stores (vector where the CPU has it) equal the element conversions
 * for random values of every magnitude, infinities, subnormals and ties,
 * at lengths around the 16-value steps; nan stays nan. */
START_TEST(test_row_store_matches_scalar)
{
	enum kv_dtype dts[2] = {KV_DTYPE_BF16, KV_DTYPE_F16};
	float src[100];
	uint16_t fast[100], ref[100];
	srand(11);
	for (int round = 0; round < 2000; round++) {
		for (int i = 0; i < 100; i++) {
			uint32_t bits = (uint32_t)rand() << 16 ^ (uint32_t)rand();
			float f;
			memcpy(&f, &bits, 4);
			src[i] = round % 2 ? f : ((float)rand() / RAND_MAX - 0.5f) * 1e5f;
		}
		src[3] = INFINITY, src[5] = -INFINITY, src[7] = 1.00390625f, src[9] = 6e-8f;
		src[11] = 65520.0f, src[13] = NAN, src[15] = 1.01171875f, src[17] = -3.0517578e-5f;
		int n = round % 100 + 1;
		for (int t = 0; t < 2; t++) {
			kv_row_store(dts[t], fast, src, n);
			kv_row_store_scalar(dts[t], ref, src, n);
			for (int i = 0; i < n; i++) {
				float back = dts[t] == KV_DTYPE_BF16 ? kv_bf16_to_f32(fast[i])
				                                     : kv_f16_to_f32(fast[i]);
				if (isnan(src[i]))
					ck_assert_msg(isnan(back), "dtype %d: nan became %04x", dts[t],
					              fast[i]);
				else
					ck_assert_msg(fast[i] == ref[i],
					              "dtype %d, %d of %d: %.9g -> %04x, scalar %04x",
					              dts[t], i, n, src[i], fast[i], ref[i]);
			}
		}
	}
}
END_TEST

START_TEST(test_quant_hand)
{
	/* int8: min 0, max 63.75 -> scale 0.25 exactly; codes round(x*4), ties to even */
	float x[5] = {0.0f, 0.125f, 0.375f, 63.75f, 10.1f}, y[5], scale, min;
	uint8_t codes[5];
	kvq_quant_row(x, 5, 8, codes, &scale, &min);
	ck_assert_float_eq(min, 0.0f);
	ck_assert_float_eq(scale, 0.25f);
	ck_assert_uint_eq(codes[0], 0);
	ck_assert_uint_eq(codes[1], 0); /* 0.5 -> 0 */
	ck_assert_uint_eq(codes[2], 2); /* 1.5 -> 2 */
	ck_assert_uint_eq(codes[3], 255);
	ck_assert_uint_eq(codes[4], 40); /* 40.4 */
	kvq_dequant_row(codes, 5, 8, scale, min, y);
	ck_assert_float_eq(y[4], 10.0f);
	for (int i = 0; i < 5; i++)
		ck_assert_float_le(fabsf(y[i] - x[i]), scale / 2);
	/* int4: min 0, scale 0.5, exact; element 2j low nibble, 2j+1 high */
	float x4[4] = {0.0f, 1.5f, 3.0f, 7.5f};
	kvq_quant_row(x4, 4, 4, codes, &scale, &min);
	ck_assert_float_eq(scale, 0.5f);
	ck_assert_uint_eq(codes[0], 0x30);
	ck_assert_uint_eq(codes[1], 0xf6);
	kvq_dequant_row(codes, 4, 4, scale, min, y);
	for (int i = 0; i < 4; i++)
		ck_assert_float_eq(y[i], x4[i]);
	/* a constant run is exact with scale 0 */
	float c[2] = {3.25f, 3.25f};
	kvq_quant_row(c, 2, 4, codes, &scale, &min);
	kvq_dequant_row(codes, 2, 4, scale, min, y);
	ck_assert_float_eq(scale, 0.0f);
	ck_assert_float_eq(y[1], 3.25f);
}
END_TEST

START_TEST(test_quant_random_bounds)
{
	enum { N = 32, D = 64 };
	static float rows[N][D];
	const float *rowp[N];
	uint8_t codes[N * D];
	float scale[D], min[D], y[D];
	srand(11);
	for (int bits = 4; bits <= 8; bits += 4) {
		for (int trial = 0; trial < 50; trial++) {
			float amp = trial % 2 ? 100.0f : 0.01f;
			for (int r = 0; r < N; r++) {
				rowp[r] = rows[r];
				for (int j = 0; j < D; j++)
					rows[r][j] =
					    ((float)rand() / RAND_MAX - 0.5f) * amp * (1 + j % 5);
			}
			/* per token */
			float s, m;
			kvq_quant_row(rows[0], D, bits, codes, &s, &m);
			kvq_dequant_row(codes, D, bits, s, m, y);
			for (int j = 0; j < D; j++)
				ck_assert_float_le(fabsf(y[j] - rows[0][j]),
				                   s / 2 + 4e-7f * amp * 5);
			/* per channel */
			kvq_quant_channels(rowp, N, D, bits, codes, scale, min);
			size_t rb = kvq_code_bytes(D, bits);
			for (int r = 0; r < N; r++)
				for (int j = 0; j < D; j++) {
					float v =
					    (float)kvq_code_at(codes + r * rb, j, bits) * scale[j] +
					    min[j];
					ck_assert_float_le(fabsf(v - rows[r][j]),
					                   scale[j] / 2 + 4e-7f * amp * 5);
				}
		}
	}
}
END_TEST

/* A random value: uniform at one of several magnitudes, or now and then a
 * special one (zeros of both signs, a repeat, a nan or an infinity). */
static float quant_value(int kind, float amp, float prev)
{
	int r = rand() % 64;
	if (kind && r == 0)
		return NAN;
	if (kind > 1 && r == 1)
		return rand() % 2 ? INFINITY : -INFINITY;
	if (r == 2)
		return rand() % 2 ? 0.0f : -0.0f;
	if (r == 3)
		return prev;
	return ((float)rand() / RAND_MAX - 0.5f) * amp;
}

/* The quantizers (vector where the CPU has it) give the scalar code's
 * codes, scales and mins: lengths around the 16-value steps, 4 and 8 bits,
 * constant runs (scale 0), ranges from 1e-30 to 1e30, nan and infinities;
 * rows load back (bf16, f16) as the element conversions give them. */
START_TEST(test_quant_matches_scalar)
{
	enum { MAXR = 33, MAXD = 96 };
	static float rows[MAXR][MAXD];
	const float *rowp[MAXR];
	static uint8_t fast[MAXR * MAXD], ref[MAXR * MAXD];
	float fs[MAXD], fm[MAXD], rs[MAXD], rm[MAXD];
	srand(23);
	for (int round = 0; round < 3000; round++) {
		int bits = round % 2 ? 4 : 8;
		int d = 2 * (1 + rand() % (MAXD / 2)), n_rows = 1 + rand() % MAXR;
		int kind = round % 7 == 0 ? 2 : round % 5 == 0 ? 1 : 0;
		float amp = powf(10.0f, (float)(rand() % 61 - 30));
		bool constant = round % 11 == 0;
		for (int r = 0; r < n_rows; r++) {
			rowp[r] = rows[r];
			for (int j = 0; j < d; j++)
				rows[r][j] = constant ? 1.5f
				                      : quant_value(kind, amp, j ? rows[r][j - 1] : 0.0f);
		}
		memset(fast, 0xa5, sizeof(fast));
		memset(ref, 0xa5, sizeof(ref));
		kvq_quant_row(rows[0], d, bits, fast, &fs[0], &fm[0]);
		kvq_quant_row_scalar(rows[0], d, bits, ref, &rs[0], &rm[0]);
		ck_assert_msg(memcmp(fast, ref, sizeof(fast)) == 0,
		              "row codes differ: round %d, %d values, %d bits", round, d, bits);
		ck_assert_msg(fs[0] == rs[0] && fm[0] == rm[0],
		              "row params differ: round %d: %g %g against %g %g", round, fs[0],
		              fm[0], rs[0], rm[0]);
		memset(fast, 0xa5, sizeof(fast));
		memset(ref, 0xa5, sizeof(ref));
		kvq_quant_channels(rowp, n_rows, d, bits, fast, fs, fm);
		kvq_quant_channels_scalar(rowp, n_rows, d, bits, ref, rs, rm);
		ck_assert_msg(memcmp(fast, ref, sizeof(fast)) == 0,
		              "channel codes differ: round %d, %d rows of %d, %d bits", round,
		              n_rows, d, bits);
		for (int j = 0; j < d; j++)
			ck_assert_msg((fs[j] == rs[j] || (isnan(fs[j]) && isnan(rs[j]))) &&
			                  (fm[j] == rm[j] || (isnan(fm[j]) && isnan(rm[j]))),
			              "channel %d params differ: round %d: %g %g against %g %g", j,
			              round, fs[j], fm[j], rs[j], rm[j]);
		uint16_t half[MAXD];
		float back[MAXD];
		enum kv_dtype dt = round % 2 ? KV_DTYPE_F16 : KV_DTYPE_BF16;
		kv_row_store_scalar(dt, half, rows[0], d);
		kv_row_load(dt, half, back, d);
		for (int j = 0; j < d; j++) {
			float want = dt == KV_DTYPE_F16 ? kv_f16_to_f32(half[j]) : kv_bf16_to_f32(half[j]);
			ck_assert_msg(back[j] == want || (isnan(back[j]) && isnan(want)),
			              "row load %d of %d: %g, element conversion %g", j, d, back[j],
			              want);
		}
	}
}
END_TEST

START_TEST(test_rope_angles_exact)
{
	enum { RD = 128 };
	double hi[RD / 2], lo[RD / 2], cs[RD];
	const double theta = 10000.0;
	rope_freqs_init(theta, RD, NULL, 1.0, hi, lo);
	uint64_t positions[] = {0, 1, 4097, 1000003, 10000000, 10000000 + 777, 1000000000};
	for (size_t p = 0; p < sizeof(positions) / sizeof(positions[0]); p++) {
		rope_cos_sin(hi, lo, RD, positions[p], cs);
		double worst = 0;
		for (int i = 0; i < RD / 2; i++) {
			long double f = powl((long double)theta, -2.0L * i / RD);
			long double a = (long double)positions[p] * f;
			worst = fmax(worst, fabs(cs[2 * i] - (double)cosl(a)));
			worst = fmax(worst, fabs(cs[2 * i + 1] - (double)sinl(a)));
		}
		/* long double itself carries pos*2^-64 of angle error: 5e-11 at 10^9 */
		ck_assert_double_le(worst, 1e-12 + (double)positions[p] * 1e-19);
	}
	/* what a float angle would give at 10^7: radians off */
	float naive = (float)10000000 * 1.0f;
	ck_assert_double_eq((double)naive, 1e7); /* freq 1 is exact... */
	float naive2 = 10000001.0f * (float)hi[1];
	ck_assert_double_gt(fabs((double)naive2 - 10000001.0 * hi[1]), 1e-3);
}
END_TEST

static Suite *kvquant_suite(void)
{
	Suite *s = suite_create("kvquant");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_half_formats);
	tcase_add_test(tc, test_row_store_matches_scalar);
	tcase_add_test(tc, test_quant_hand);
	tcase_add_test(tc, test_quant_random_bounds);
	tcase_add_test(tc, test_quant_matches_scalar);
	tcase_add_test(tc, test_rope_angles_exact);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(kvquant_suite());
}
