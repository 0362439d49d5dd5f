/* engine/tileplan: plans for made-up machines (small, middling and large
 * caches) keep a pass's activations within half of L2 and a block's
 * weights within a quarter, in whole register tiles, never below one tile
 * or one group, and give every thread several blocks. */
#include <check.h>
#include <stdbool.h>

#include "engine/tileplan.h"
#include "testutil.h"

static const struct cpu_caches machines[] = {
    {.l1d = 32 << 10, .l2 = 256 << 10, .l3 = 8 << 20}, /* an older desktop */
    {.l1d = 32 << 10, .l2 = 1 << 20, .l3 = 32 << 20},  /* a Zen 4 core */
    {.l1d = 48 << 10, .l2 = 2 << 20, .l3 = 105 << 20}, /* a Sapphire Rapids core */
    {.l1d = 64 << 10, .l2 = 16 << 20, .l3 = 0},        /* one big shared L2, no L3 */
};

START_TEST(test_pass_fits_half_of_l2)
{
	const size_t xq_sizes[] = {40, 960, 2560, 9344, 40000};
	const int granules[] = {1, 4, 6, 8};
	for (size_t m = 0; m < sizeof(machines) / sizeof(machines[0]); m++)
		for (size_t i = 0; i < sizeof(xq_sizes) / sizeof(xq_sizes[0]); i++)
			for (size_t g = 0; g < sizeof(granules) / sizeof(granules[0]); g++) {
				struct tile_plan p = tileplan_make(xq_sizes[i], 13056, 48, 2,
				                                   granules[g], &machines[m]);
				ck_assert_int_ge(p.vecs_per_pass, granules[g]);
				ck_assert_int_eq(p.vecs_per_pass % granules[g], 0);
				size_t bytes = (size_t)p.vecs_per_pass * xq_sizes[i];
				/* within half of L2, or a single tile when even
				 * one tile is larger than that */
				ck_assert(bytes <= machines[m].l2 / 2 ||
				          p.vecs_per_pass == granules[g]);
				/* and not far below it: one granule more would not fit */
				size_t more = (size_t)(p.vecs_per_pass + granules[g]) * xq_sizes[i];
				ck_assert(more > machines[m].l2 / 2);
			}
}
END_TEST

START_TEST(test_block_fits_quarter_of_l2)
{
	const size_t group_sizes[] = {2304, 13056, 34816, 400000};
	for (size_t m = 0; m < sizeof(machines) / sizeof(machines[0]); m++)
		for (size_t i = 0; i < sizeof(group_sizes) / sizeof(group_sizes[0]); i++) {
			/* so many groups that balance does not limit the block */
			struct tile_plan p =
			    tileplan_make(960, group_sizes[i], 1 << 20, 1, 8, &machines[m]);
			size_t bytes = (size_t)p.groups_per_block * group_sizes[i];
			ck_assert_int_ge(p.groups_per_block, 1);
			ck_assert(bytes <= machines[m].l2 / 4 || p.groups_per_block == 1);
			ck_assert((size_t)(p.groups_per_block + 1) * group_sizes[i] >
			          machines[m].l2 / 4);
		}
}
END_TEST

/* Larger caches never give smaller tiles. */
START_TEST(test_monotone_in_l2)
{
	struct tile_plan prev = {0, 0};
	for (size_t m = 0; m < sizeof(machines) / sizeof(machines[0]); m++) {
		struct tile_plan p = tileplan_make(2560, 34816, 1 << 20, 1, 4, &machines[m]);
		ck_assert_int_ge(p.vecs_per_pass, prev.vecs_per_pass);
		ck_assert_int_ge(p.groups_per_block, prev.groups_per_block);
		prev = p;
	}
}
END_TEST

START_TEST(test_threads_get_several_blocks)
{
	const int threads[] = {1, 2, 4, 16, 64};
	for (size_t t = 0; t < sizeof(threads) / sizeof(threads[0]); t++)
		for (int n_groups = 1; n_groups <= 512; n_groups *= 2) {
			struct tile_plan p =
			    tileplan_make(960, 2304, n_groups, threads[t], 8, &machines[3]);
			int blocks = (n_groups + p.groups_per_block - 1) / p.groups_per_block;
			ck_assert_int_ge(p.groups_per_block, 1);
			/* as many blocks as 4 per thread allows, all when fewer */
			int want = n_groups < 4 * threads[t] ? n_groups : 4 * threads[t];
			ck_assert_int_ge(blocks, want);
		}
}
END_TEST

/* Degenerate sizes still plan one tile and one group. */
START_TEST(test_degenerate_inputs)
{
	struct cpu_caches none = {0};
	struct tile_plan p = tileplan_make(0, 0, 0, 0, 0, &none);
	ck_assert_int_ge(p.vecs_per_pass, 1);
	ck_assert_int_ge(p.groups_per_block, 1);
	p = tileplan_make((size_t)1 << 40, (size_t)1 << 40, 3, 2, 8, &machines[0]);
	ck_assert_int_eq(p.vecs_per_pass, 8);
	ck_assert_int_eq(p.groups_per_block, 1);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tileplan");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_pass_fits_half_of_l2);
	tcase_add_test(tc, test_block_fits_quarter_of_l2);
	tcase_add_test(tc, test_monotone_in_l2);
	tcase_add_test(tc, test_threads_get_several_blocks);
	tcase_add_test(tc, test_degenerate_inputs);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
