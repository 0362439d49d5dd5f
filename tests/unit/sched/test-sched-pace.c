/* Prefill pacing (sched_pace.c) from given batch times, no model and no
 * clock: the rows a batch may carry beside 16 decoders in blocks of 8 rows,
 * how the cap follows what prompt rows cost, the median that one slow tick
 * does not move, and the decode-only batches that keep the reference
 * fresh; for a mixture-of-experts model, rows priced by the experts they
 * touch beyond the decoders', on a simulated machine. */
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "sched/sched_pace.h"
#include "testutil.h"
#include "util/tuning.h"

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

/* ---- mixture of experts ------------------------------------------------ */

#define MOE_EXPERTS 32
#define MOE_USED 4
#define MOE_SHARE (0.008 / 0.012) /* the k experts' share of a one-token step's bytes */

/* The experts n tokens touch, each picking MOE_USED of MOE_EXPERTS
 * uniformly (the test's own copy of the expectation). */
static double moe_touched(double n)
{
	return MOE_EXPERTS * (1 - pow(1 - (double)MOE_USED / MOE_EXPERTS, n));
}

/* A simulated MoE machine: a batch of n rows reads the dense weights once
 * (4 ms) and every expert its rows touch (2 ms each), and computes 0.15 ms
 * per row. */
static double moe_batch_s(size_t rows)
{
	return 0.004 + 0.00015 * (double)rows + 0.002 * moe_touched((double)rows);
}

/* `batches` batches of n_dec decoders while a prompt waits, as the engine
 * runs them (decode-only when the pacing asks); *rows: the prompt rows of
 * the last paced one.  Returns the worst ratio of a paced batch carrying
 * more than the one row that always advances a prompt to a decode-only
 * batch of the same decoders. */
static double moe_phase(struct sched_pace *p, size_t n_dec, int batches, size_t *rows)
{
	double worst = 0;
	for (int i = 0; i < batches; i++) {
		struct sched_pace_batch b = {.n_decode = n_dec};
		if (!sched_pace_wants_decode_only(p))
			b.n_prefill = sched_pace_limit(p, n_dec, BATCH_MAX, &b.part_block) - n_dec;
		double t = moe_batch_s(n_dec + b.n_prefill);
		sched_pace_update(p, &b, t, BATCH_MAX);
		if (b.n_prefill > 1 && t / moe_batch_s(n_dec) > worst)
			worst = t / moe_batch_s(n_dec);
		if (b.n_prefill)
			*rows = b.n_prefill;
	}
	return worst;
}

START_TEST(test_moe_rows_follow_the_experts_decoders_touch)
{
	struct sched_pace moe, dense;
	sched_pace_init(&moe, 8);
	sched_pace_init(&dense, 1);
	sched_pace_set_moe(&moe, MOE_EXPERTS, MOE_USED, MOE_SHARE);
	ck_assert_uint_eq(moe.granule, 1); /* rows one by one */
	size_t rows = 0, rows_dense = 0, rows_at[33] = {0};
	/* rows learn their price beside 32 decoders, which touch nearly
	 * every expert, then the decoders come and go */
	moe_phase(&moe, 32, 40, &rows);
	moe_phase(&dense, 32, 40, &rows_dense);
	const size_t decoders[] = {2, 32, 8, 1, 16, 2, 32};
	double worst = 0, worst_dense = 0;
	for (size_t i = 0; i < sizeof(decoders) / sizeof(decoders[0]); i++) {
		size_t n = decoders[i];
		worst = fmax(worst, moe_phase(&moe, n, 24, &rows_at[n]));
		worst_dense = fmax(worst_dense, moe_phase(&dense, n, 24, &rows_dense));
	}
	/* paced batches stay within the pacing's factor of a decode-only
	 * one whatever the decoders (the estimate errs towards fewer rows) */
	ck_assert_double_le(worst, TUNING_PACE_FACTOR * 1.05);
	/* prompt rows beside few decoders pay for experts nobody else reads:
	 * fewer of them fit than beside many */
	ck_assert_uint_eq(rows_at[1], 1);
	ck_assert_uint_lt(rows_at[2], rows_at[8]);
	ck_assert_uint_lt(rows_at[8], rows_at[32]);
	ck_assert_uint_ge(rows_at[32], 4 * rows_at[2]);
	/* a price per row alone, learned beside many decoders, overshoots
	 * beside few: the simulated machine is one where this matters */
	ck_assert_double_gt(worst_dense, 2 * TUNING_PACE_FACTOR);
}
END_TEST

START_TEST(test_moe_shape_refused_stays_dense)
{
	const struct {
		int n_experts, k;
		double share;
	} bad[] = {{0, 4, 0.5}, {32, 0, 0.5}, {32, 33, 0.5}, {32, 4, 0}, {32, 4, 1.5}};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct sched_pace p;
		sched_pace_init(&p, 8);
		sched_pace_set_moe(&p, bad[i].n_experts, bad[i].k, bad[i].share);
		ck_assert_int_eq(p.moe_experts, 0);
		ck_assert_uint_eq(p.granule, 8);
		/* and it paces as a dense model: the same rows from the same times */
		struct sched_pace plain;
		sched_pace_init(&plain, 8);
		for (int j = 0; j < 5; j++) {
			decode_only(&p, 0.020);
			decode_only(&plain, 0.020);
		}
		for (int j = 0; j < 12; j++)
			ck_assert_uint_eq(paced(&p, 0.020, 0.0005), paced(&plain, 0.020, 0.0005));
	}
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
	tcase_add_test(tc, test_moe_rows_follow_the_experts_decoders_touch);
	tcase_add_test(tc, test_moe_shape_refused_stays_dense);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
