/* Prefill pacing (sched_pace.c) from given batch times, no model and no
 * clock: the rows a batch may carry beside 16 decoders in blocks of 8 rows,
 * how the cap follows what prompt rows cost, the median that one slow tick
 * does not move, and the decode-only batches that keep the reference
 * fresh. */
#include <check.h>
#include <stdbool.h>
#include <stdlib.h>

#include "sched/sched_pace.h"
#include "testutil.h"

#define DECODERS 16
#define BATCH_MAX 512

/* The pacing's batch sizes from given measurements: 16 decoders fill two
 * blocks of 8, a decode-only batch takes 20 ms. */
static size_t pace_limit(double cap, double row_s, size_t n_decode, size_t max_tokens, bool *part)
{
	struct sched_pace p;
	sched_pace_init(&p, 8);
	p.cap = cap;
	p.row_s = row_s;
	p.decode_s = 0.020;
	return sched_pace_limit(&p, n_decode, max_tokens, part);
}

START_TEST(test_pace_limit)
{
	bool part = true;
	/* cheap rows (a block adds 8 ms): one whole block beyond the cap */
	ck_assert_uint_eq(pace_limit(3, 0.001, 16, 512, &part), 24);
	ck_assert(!part);
	/* rows whose block would add 40 ms: the cap's rows, not a block */
	ck_assert_uint_eq(pace_limit(3, 0.005, 16, 512, &part), 19);
	ck_assert(part);
	/* a cap under one row still advances the prompt by one */
	ck_assert_uint_eq(pace_limit(0.4, 0.05, 16, 512, &part), 17);
	ck_assert(part);
	/* free rows of the decoders' last block come first, dear or not */
	ck_assert_uint_eq(pace_limit(1, 0.005, 13, 512, &part), 16);
	ck_assert(!part);
	/* a cap that pays for whole blocks gets them */
	ck_assert_uint_eq(pace_limit(17, 0.005, 16, 512, &part), 32);
	ck_assert(!part);
	/* never past max_batch_tokens; no decoders: all of it */
	ck_assert_uint_eq(pace_limit(40, 0.001, 16, 20, &part), 20);
	ck_assert_uint_eq(pace_limit(3, 0.001, 0, 512, &part), 512);
	/* nothing measured yet: blocks, as before any batch was timed */
	ck_assert_uint_eq(pace_limit(3, 0, 16, 512, &part), 24);
	ck_assert(!part);
}
END_TEST

static void decode_only(struct sched_pace *p, double seconds)
{
	struct sched_pace_batch b = {.n_decode = DECODERS};
	sched_pace_update(p, &b, seconds, BATCH_MAX);
}

/* A batch of the 16 decoders and the prompt rows the pacing grants now,
 * which takes `decode_s` plus `row_s` for each prompt row. */
static size_t paced(struct sched_pace *p, double decode_s, double row_s)
{
	struct sched_pace_batch b = {.n_decode = DECODERS};
	size_t limit = sched_pace_limit(p, DECODERS, BATCH_MAX, &b.part_block);
	b.n_prefill = limit - DECODERS;
	sched_pace_update(p, &b, decode_s + row_s * (double)b.n_prefill, BATCH_MAX);
	return b.n_prefill;
}

static size_t prompt_rows(const struct sched_pace *p)
{
	bool part;
	return sched_pace_limit(p, DECODERS, BATCH_MAX, &part) - DECODERS;
}

START_TEST(test_prompt_rows_fall_when_batches_get_slower)
{
	struct sched_pace p;
	sched_pace_init(&p, 8);
	ck_assert(sched_pace_wants_decode_only(&p)); /* no reference yet */
	for (int i = 0; i < 5; i++)
		decode_only(&p, 0.020);
	ck_assert(!sched_pace_wants_decode_only(&p));
	/* cheap prompt rows (0.25 ms each): rows grow towards the 10 ms the
	 * pacing allows beyond a 20 ms decode-only batch, 40 rows */
	size_t first = prompt_rows(&p);
	for (int i = 0; i < 12; i++)
		paced(&p, 0.020, 0.00025);
	size_t cheap = prompt_rows(&p);
	ck_assert_uint_gt(cheap, first);
	ck_assert_uint_ge(cheap, 32);
	ck_assert_uint_le(cheap, 48);
	/* each row now costs 2 ms: the paced batches get slower, prompt rows
	 * per batch fall to what fits in those 10 ms */
	for (int i = 0; i < 12; i++)
		paced(&p, 0.020, 0.002);
	size_t dear = prompt_rows(&p);
	ck_assert_uint_lt(dear, cheap);
	ck_assert_uint_le(dear, 8);
	/* however dear, a prompt keeps advancing */
	for (int i = 0; i < 12; i++)
		paced(&p, 0.020, 0.5);
	ck_assert_uint_ge(prompt_rows(&p), 1);
}
END_TEST

START_TEST(test_rows_scale_with_decode_batch_time)
{
	/* the same cost per prompt row beside a decode-only batch of 40 ms and
	 * one of 20 ms: half as many rows fit in the latter's allowance */
	struct sched_pace slow, fast;
	sched_pace_init(&slow, 8);
	sched_pace_init(&fast, 8);
	for (int i = 0; i < 5; i++) {
		decode_only(&slow, 0.040);
		decode_only(&fast, 0.020);
	}
	for (int i = 0; i < 12; i++) {
		paced(&slow, 0.040, 0.0005);
		paced(&fast, 0.020, 0.0005);
	}
	ck_assert_uint_gt(prompt_rows(&slow), prompt_rows(&fast));
	/* decode-only batches of the fast one get faster still: fewer rows */
	size_t before = prompt_rows(&fast);
	for (int i = 0; i < 5; i++)
		decode_only(&fast, 0.010);
	for (int i = 0; i < 12; i++)
		paced(&fast, 0.010, 0.0005);
	ck_assert_uint_lt(prompt_rows(&fast), before);
}
END_TEST

START_TEST(test_one_slow_tick_does_not_move_reference)
{
	struct sched_pace p;
	sched_pace_init(&p, 8);
	for (int i = 0; i < 4; i++)
		decode_only(&p, 0.020);
	decode_only(&p, 0.500); /* preempted once */
	ck_assert(p.decode_s > 0.0199 && p.decode_s < 0.0201);
	/* a lasting change is followed within a few samples */
	for (int i = 0; i < 3; i++)
		decode_only(&p, 0.050);
	ck_assert(p.decode_s > 0.0499 && p.decode_s < 0.0501);
}
END_TEST

START_TEST(test_remeasure_and_crowded)
{
	struct sched_pace p;
	sched_pace_init(&p, 8);
	decode_only(&p, 0.020);
	for (int i = 0; i < 7; i++) {
		ck_assert(!sched_pace_wants_decode_only(&p));
		paced(&p, 0.020, 0.00025);
	}
	paced(&p, 0.020, 0.00025);
	ck_assert(sched_pace_wants_decode_only(&p)); /* every 8th batch is decode-only */
	decode_only(&p, 0.020);
	ck_assert(!sched_pace_wants_decode_only(&p));
	/* a crowded batch is full either way: it teaches nothing of a row's cost */
	size_t rows = prompt_rows(&p);
	struct sched_pace_batch b = {.n_decode = DECODERS, .n_prefill = 200, .crowded = true};
	sched_pace_update(&p, &b, 5.0, BATCH_MAX);
	ck_assert_uint_eq(prompt_rows(&p), rows);
	/* the share prompts keep whatever the measurements say */
	ck_assert_uint_eq(sched_pace_share(512), 64);
	ck_assert_uint_eq(sched_pace_share(4), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sched-pace");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_pace_limit);
	tcase_add_test(tc, test_prompt_rows_fall_when_batches_get_slower);
	tcase_add_test(tc, test_rows_scale_with_decode_batch_time);
	tcase_add_test(tc, test_one_slow_tick_does_not_move_reference);
	tcase_add_test(tc, test_remeasure_and_crowded);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
