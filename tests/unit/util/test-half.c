/* util/half: all 65536 f16 values and the bf16 edges against a reference
 * computed another way (ldexp over sign, exponent and mantissa fields), and
 * the round trips back, ties to even included. */
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "util/half.h"
#include "testutil.h"

static uint32_t bits_of(float f)
{
	uint32_t b;
	memcpy(&b, &f, sizeof(b));
	return b;
}

static float float_of(uint32_t b)
{
	float f;
	memcpy(&f, &b, sizeof(f));
	return f;
}

/* The value an f16 stands for, from its fields by ldexp (NaN: any NaN). */
static double f16_reference(uint16_t h)
{
	int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
	double v;
	if (exp == 0x1f)
		v = mant ? NAN : INFINITY;
	else if (exp == 0)
		v = ldexp((double)mant, -24); /* subnormal: no implicit 1 */
	else
		v = ldexp((double)(mant | 0x400), exp - 25);
	return sign ? -v : v;
}

START_TEST(test_f16_all_values)
{
	int wrong = -1;
	for (uint32_t h = 0; h < 0x10000 && wrong < 0; h++) {
		float got = fp16_to_f32((uint16_t)h);
		double want = f16_reference((uint16_t)h);
		bool ok = isnan(want) ? isnan(got) : (double)got == want && !signbit(got) == !signbit(want);
		/* back again: exact, NaNs stay NaNs (quiet) */
		uint16_t back = f32_to_fp16(got);
		ok = ok && (isnan(want) ? (back & 0x7c00) == 0x7c00 && (back & 0x3ff) != 0 : back == h);
		uint8_t raw[2];
		memcpy(raw, &h, 2);
		ok = ok && (isnan(want) ? isnan(fp16_load_f32(raw))
		                        : bits_of(fp16_load_f32(raw)) == bits_of(got));
		if (!ok)
			wrong = (int)h;
	}
	ck_assert_msg(wrong < 0, "f16 0x%04x converts wrongly", (unsigned)wrong);
}
END_TEST

START_TEST(test_f16_rounding)
{
	/* 1 + 2^-11 is half-way between 1 and the next f16: ties go to even. */
	ck_assert_uint_eq(f32_to_fp16(1.0f + 0x1p-11f), 0x3c00);
	ck_assert_uint_eq(f32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);
	ck_assert_uint_eq(f32_to_fp16(65504.0f), 0x7bff);
	ck_assert_uint_eq(f32_to_fp16(65520.0f), 0x7c00); /* rounds past the largest: inf */
	ck_assert_uint_eq(f32_to_fp16(0x1p-25f), 0x0000);   /* half the smallest subnormal: even */
	ck_assert_uint_eq(f32_to_fp16(0x1.8p-24f), 0x0002); /* 1.5 ulp: to even */
	ck_assert_uint_eq(f32_to_fp16(-0.0f), 0x8000);
	ck_assert_uint_eq(f32_to_fp16(-INFINITY), 0xfc00);
}
END_TEST

START_TEST(test_bf16_edges)
{
	const struct {
		uint16_t b;
		double want;
	} cases[] = {
	    {0x0000, 0.0},
	    {0x8000, -0.0},
	    {0x3f80, 1.0},
	    {0xc000, -2.0},
	    {0x0001, 0x1p-133},     /* smallest subnormal */
	    {0x007f, 127 * 0x1p-133}, /* largest subnormal */
	    {0x0080, 0x1p-126},     /* smallest normal */
	    {0x7f7f, 0x1.fep127},   /* largest finite */
	    {0x7f80, INFINITY},
	    {0xff80, -INFINITY},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		float got = bf16_to_f32(cases[i].b);
		ck_assert_msg((double)got == cases[i].want && !signbit(got) == !signbit(cases[i].want),
		              "bf16 0x%04x", cases[i].b);
		ck_assert_uint_eq(f32_to_bf16(got), cases[i].b);
	}
	ck_assert(isnan(bf16_to_f32(0x7fc0)));
	ck_assert(isnan(bf16_to_f32(f32_to_bf16(NAN))));
	/* A signalling NaN whose payload is only in the low half stays a NaN. */
	ck_assert(isnan(bf16_to_f32(f32_to_bf16(float_of(0x7f800001u)))));
	/* Ties to even: 1 + 2^-8 lies half-way between 1 and 1 + 2^-7. */
	ck_assert_uint_eq(f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
	ck_assert_uint_eq(f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
	ck_assert_uint_eq(f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("half");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_f16_all_values);
	tcase_add_test(tc, test_f16_rounding);
	tcase_add_test(tc, test_bf16_edges);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
