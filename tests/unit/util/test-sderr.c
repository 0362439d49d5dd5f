/* sinkd's own error codes (util/sderr.h): each has a distinct name, none
 * meets an errno value, and anything else has no name. */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "util/sderr.h"
#include "testutil.h"

START_TEST(test_each_code_has_a_distinct_name)
{
	for (int rc = SDERR_BASE; rc >= SDERR_LAST; rc--) {
		const char *name = sderr_name(rc);
		ck_assert_msg(name != NULL && name[0], "code %d has no name", rc);
		for (int other = SDERR_BASE; other > rc; other--)
			ck_assert_str_ne(name, sderr_name(other));
	}
	static const struct {
		int rc;
		const char *name;
	} want[] = {{SDERR_MODEL_MISMATCH, "model_mismatch"},
	            {SDERR_MAX_SESSIONS, "max_sessions"},
	            {SDERR_OWNER_SESSIONS, "owner_sessions"},
	            {SDERR_OUT_OF_RANGE, "out_of_range"},
	            {SDERR_CONFLICT, "conflict"},
	            {SDERR_UNCHECKED, "unchecked"}};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		ck_assert_str_eq(sderr_name(want[i].rc), want[i].name);
}
END_TEST

START_TEST(test_other_codes_have_no_name)
{
	const int other[] = {0,      -1,      -EINVAL,        -ERANGE,
	                     -EXDEV, -EMFILE, SDERR_BASE + 1, SDERR_LAST - 1};
	for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++)
		ck_assert_ptr_null(sderr_name(other[i]));
	/* below every errno value (the kernel keeps them under 4096) */
	ck_assert_int_le(SDERR_BASE, -4096);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sderr");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_each_code_has_a_distinct_name);
	tcase_add_test(tc, test_other_codes_have_no_name);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
