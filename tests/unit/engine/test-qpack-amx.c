/* The AMX kernels of Q8_0 and Q4_0 packed (engine/qpack.h,
 * qpack_amx_rows_get) on real tiles: against the packed twin and the stored
 * layout's qdot twin on whole tiles of 16 vectors and the rest, and the
 * QPACK_AMX matmul family (the table's pick for a packed batch) with a
 * bias and threads.  Only AMX is here: without AMX int8 (and Linux's grant
 * of the tile state) the whole file skips (77); the same code with the
 * tiles emulated runs everywhere in test-qpack-q0.c. */
#include "engine/matmul.h"
#include "qpack_q0_check.h"
#include "testutil.h"
#include "util/cpu.h"

START_TEST(test_amx_kernels)
{
	for (int ti = 0; ti < N_AMX_TYPES; ti++) {
		qpack_rows_fn k = qpack_amx_rows_get(types[ti]);
		ck_assert_ptr_nonnull(k);
		check_amx_shapes(types[ti], "amx", k);
	}
}
END_TEST

/* A packed batch of 64 takes the AMX family; one of 8 and decode do not. */
START_TEST(test_table_picks_amx)
{
	for (int ti = 0; ti < N_AMX_TYPES; ti++) {
		struct weight_matrix w = random_matrix(types[ti], 32, 128);
		void *p = pack(&w, NULL);
		ck_assert_int_eq(matmul_family_pick(MATMUL_ISA_AUTO, &w, 64),
		                 MATMUL_FAMILY_QPACK_AMX);
		ck_assert_int_ne(matmul_family_pick(MATMUL_ISA_AUTO, &w, 8),
		                 MATMUL_FAMILY_QPACK_AMX);
		ck_assert_int_ne(matmul_family_pick(MATMUL_ISA_AUTO, &w, 1),
		                 MATMUL_FAMILY_QPACK_AMX);
		free(p);
		free((void *)w.data);
	}
}
END_TEST

START_TEST(test_amx_family)
{
	check_family(MATMUL_FAMILY_QPACK_AMX);
}
END_TEST

int main(void)
{
	if (!cpu_has_amx_int8()) {
		printf("skipped: this CPU (or kernel) has no AMX int8 tiles\n");
		return 77;
	}
	Suite *s = suite_create("qpack-amx");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_amx_kernels);
	tcase_add_test(tc, test_table_picks_amx);
	tcase_add_test(tc, test_amx_family);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
