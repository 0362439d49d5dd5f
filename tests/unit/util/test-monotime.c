/* util/monotime: the three units read the same clock, and it never goes
 * back. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <time.h>

#include "util/monotime.h"
#include "testutil.h"

START_TEST(test_units_agree)
{
	double s0 = monotime_s();
	int64_t ms = monotime_ms();
	uint64_t us = monotime_us();
	double s1 = monotime_s();
	ck_assert(s0 <= s1);
	ck_assert(fabs((double)ms * 1e-3 - s0) < 1.0);
	ck_assert(fabs((double)us * 1e-6 - s0) < 1.0);
	ck_assert((double)ms * 1e-3 <= s1 + 1e-3);
	ck_assert((double)us * 1e-6 <= s1 + 1e-6);
}
END_TEST

START_TEST(test_monotonic_over_sleep)
{
	double a = monotime_s();
	uint64_t ua = monotime_us();
	struct timespec nap = {0, 5 * 1000 * 1000};
	nanosleep(&nap, NULL);
	double b = monotime_s();
	uint64_t ub = monotime_us();
	ck_assert(b - a >= 0.004);
	ck_assert(ub - ua >= 4000);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("monotime");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_units_agree);
	tcase_add_test(tc, test_monotonic_over_sleep);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
