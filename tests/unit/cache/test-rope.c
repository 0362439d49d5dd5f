/* RoPE of the cache (src/cache/rope.c) with llama3's per-pair frequency
 * factors and linear scaling: the rotation equals one computed here from
 * the definition (cos/sin of p * scale * theta^(-2i/d) / f[i] in long
 * double), for both pair styles, and factors of 1 change no bit; YaRN's
 * blend keeps the fast pairs, scales the slow ones and blends between. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cache/rope.h"
#include "testutil.h"

#define RD 64

/* x rotated as the definition says, for pair style neox. */
static void reference(const float *x, float *out, double theta, const float *f, double scale,
                      uint64_t pos, bool neox)
{
	int half = RD / 2;
	memcpy(out, x, RD * sizeof(float));
	for (int i = 0; i < half; i++) {
		long double freq = powl((long double)theta, -2.0L * i / RD) * scale / f[i];
		long double a = (long double)pos * freq;
		double c = (double)cosl(a), s = (double)sinl(a);
		int p = neox ? i : 2 * i, q = neox ? i + half : 2 * i + 1;
		out[p] = (float)(x[p] * c - x[q] * s);
		out[q] = (float)(x[p] * s + x[q] * c);
	}
}

static void rotate(const float *x, float *out, double theta, const float *f, double scale,
                   uint64_t pos, bool neox)
{
	double hi[RD / 2], lo[RD / 2], cs[RD];
	rope_freqs_init(theta, RD, f, scale, hi, lo);
	rope_cos_sin(hi, lo, RD, pos, cs);
	memcpy(out, x, RD * sizeof(float));
	rope_apply(out, cs, RD, neox);
}

static void vector(float *x)
{
	for (int i = 0; i < RD; i++)
		x[i] = (float)sin(0.7 * i + 0.3) * (1.0f + 0.1f * (float)i);
}

START_TEST(test_factors_match_definition)
{
	float f[RD / 2], x[RD], got[RD], want[RD];
	for (int i = 0; i < RD / 2; i++)
		f[i] = (float)(1 << (i % 4)) * (i > 20 ? 8.0f : 1.0f); /* 1, 2, 4, 8, ... */
	vector(x);
	const uint64_t positions[] = {0, 1, 7, 100, 4095, 131071, 1000003};
	for (int neox = 0; neox < 2; neox++)
		for (size_t k = 0; k < sizeof(positions) / sizeof(positions[0]); k++)
			for (int sc = 0; sc < 2; sc++) {
				double scale = sc ? 0.25 : 1.0;
				rotate(x, got, 500000.0, f, scale, positions[k], neox);
				reference(x, want, 500000.0, f, scale, positions[k], neox);
				for (int i = 0; i < RD; i++)
					ck_assert_msg(
					    fabsf(got[i] - want[i]) <=
					        2e-6f * (1.0f + fabsf(want[i])),
					    "neox %d pos %llu scale %g: [%d] %.9g vs %.9g", neox,
					    (unsigned long long)positions[k], scale, i,
					    (double)got[i], (double)want[i]);
			}
}
END_TEST

START_TEST(test_unit_factors_change_no_bit)
{
	float ones[RD / 2], x[RD], with[RD], without[RD];
	for (int i = 0; i < RD / 2; i++)
		ones[i] = 1.0f;
	vector(x);
	for (int neox = 0; neox < 2; neox++)
		for (uint64_t pos = 0; pos < 5000; pos += 37) {
			rotate(x, with, 10000.0, ones, 1.0, pos, neox);
			rotate(x, without, 10000.0, NULL, 1.0, pos, neox);
			ck_assert_int_eq(memcmp(with, without, sizeof(with)), 0);
		}
	double hi1[RD / 2], lo1[RD / 2], hi0[RD / 2], lo0[RD / 2];
	rope_freqs_init(10000.0, RD, ones, 1.0, hi1, lo1);
	rope_freqs_init(10000.0, RD, NULL, 1.0, hi0, lo0);
	ck_assert_int_eq(memcmp(hi1, hi0, sizeof(hi0)), 0);
	ck_assert_int_eq(memcmp(lo1, lo0, sizeof(lo0)), 0);
}
END_TEST

/* A factor f turns its pair as a pair of frequency freq/f would: pair i
 * with factor 2 at position 2p is pair i without factors at p. */
START_TEST(test_factor_slows_its_pair)
{
	float f[RD / 2];
	for (int i = 0; i < RD / 2; i++)
		f[i] = i == 5 ? 2.0f : 1.0f;
	double hi[RD / 2], lo[RD / 2], hi0[RD / 2], lo0[RD / 2], cs[RD], cs0[RD];
	rope_freqs_init(10000.0, RD, f, 1.0, hi, lo);
	rope_freqs_init(10000.0, RD, NULL, 1.0, hi0, lo0);
	rope_cos_sin(hi, lo, RD, 2000, cs);
	rope_cos_sin(hi0, lo0, RD, 1000, cs0);
	ck_assert(fabs(cs[10] - cs0[10]) < 1e-12 && fabs(cs[11] - cs0[11]) < 1e-12);
	ck_assert(fabs(cs[12] - cs0[12]) > 1e-3 || fabs(cs[13] - cs0[13]) > 1e-3);
}
END_TEST

/* YaRN over 2048 original positions, base 10000, 64 dims: ggml's band is
 * pairs 8..21 (floor / ceil of its corr_dim for betas 32 and 1).  Pairs up
 * to 8 keep their unscaled frequency, pairs from 21 on take the scaled one,
 * those between lie strictly between; ext_factor 0 is plain scaling. */
START_TEST(test_yarn_blend)
{
	double one_hi[RD / 2], one_lo[RD / 2], sc_hi[RD / 2], sc_lo[RD / 2];
	double y_hi[RD / 2], y_lo[RD / 2];
	rope_freqs_init(10000.0, RD, NULL, 1.0, one_hi, one_lo);
	rope_freqs_init(10000.0, RD, NULL, 0.25, sc_hi, sc_lo);
	struct rope_yarn y = {.ext_factor = 0.0,
	                      .ctx_orig = 2048,
	                      .beta_fast = ROPE_YARN_BETA_FAST,
	                      .beta_slow = ROPE_YARN_BETA_SLOW};
	rope_freqs_init_yarn(10000.0, RD, NULL, 0.25, &y, y_hi, y_lo);
	ck_assert_int_eq(memcmp(y_hi, sc_hi, sizeof(y_hi)), 0);
	ck_assert_int_eq(memcmp(y_lo, sc_lo, sizeof(y_lo)), 0);
	y.ext_factor = 1.0;
	rope_freqs_init_yarn(10000.0, RD, NULL, 0.25, &y, y_hi, y_lo);
	for (int i = 0; i < RD / 2; i++) {
		double f = y_hi[i] + y_lo[i], one = one_hi[i] + one_lo[i], sc = sc_hi[i] + sc_lo[i];
		if (i <= 8)
			ck_assert_msg(fabs(f - one) <= 1e-15 * one, "pair %d: %g, not %g", i, f, one);
		else if (i >= 21)
			ck_assert_msg(fabs(f - sc) <= 1e-15 * sc, "pair %d: %g, not %g", i, f, sc);
		else
			ck_assert_msg(f < one && f > sc, "pair %d: %g not in (%g, %g)", i, f, sc, one);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("rope");
	TCase *tc = tcase_create("factors");
	tcase_add_test(tc, test_factors_match_definition);
	tcase_add_test(tc, test_unit_factors_change_no_bit);
	tcase_add_test(tc, test_factor_slows_its_pair);
	tcase_add_test(tc, test_yarn_blend);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
