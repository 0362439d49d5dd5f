/* model/wtype: the one table of weight types agrees with what the rest of
 * the tree can do with each type (dequant converts every loadable one, qdot
 * sizes its blocks for the integer-dot ones, matmul's stored index is dense
 * and in the enum's order), and the loader's message lists them in order. */
#include <check.h>
#include <string.h>

#include "engine/matmul.h"
#include "engine/qdot.h"
#include "model/dequant.h"
#include "model/wtype.h"
#include "testutil.h"

START_TEST(test_table_agrees)
{
	bool seen[WTYPE_N_STORED] = {false};
	for (int t = 0; t < GGML_TYPE_COUNT; t++) {
		enum ggml_type type = (enum ggml_type)t;
		ck_assert_int_eq(wtype_loadable(type), dequant_supported(type));
		int i = wtype_stored_index(type);
		ck_assert_int_eq(wtype_kept_as_stored(type), i >= 0);
		ck_assert_int_eq(matmul_type_supported(t), i >= 0);
		if (i >= 0) {
			ck_assert_int_lt(i, WTYPE_N_STORED);
			ck_assert(!seen[i]);
			seen[i] = true;
		}
		if (wtype_integer_dot(type)) {
			ck_assert(wtype_kept_as_stored(type));
			ck_assert_int_gt(qdot_block_values(type), 0);
		}
	}
	for (int i = 0; i < WTYPE_N_STORED; i++)
		ck_assert(seen[i]);
	ck_assert_int_eq(wtype_stored_index(GGML_TYPE_F32), WTYPE_F32);
	ck_assert_int_eq(wtype_stored_index(GGML_TYPE_Q8_0), WTYPE_Q8_0);
	ck_assert_int_eq(wtype_stored_index(GGML_TYPE_Q6_K), WTYPE_Q6_K);
	ck_assert_int_eq(wtype_stored_index(GGML_TYPE_Q4_1), -1);
	ck_assert(!wtype_integer_dot(GGML_TYPE_F16));
}
END_TEST

START_TEST(test_names)
{
	char names[160];
	wtype_names(names, sizeof(names));
	ck_assert_str_eq(names, "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4");
	char small[8];
	wtype_names(small, sizeof(small));
	ck_assert_uint_lt(strlen(small), sizeof(small));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("wtype");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_table_agrees);
	tcase_add_test(tc, test_names);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
