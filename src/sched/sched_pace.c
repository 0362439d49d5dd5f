/* Prefill pacing: while any session decodes, the prefill share of a batch is further
 * capped by the pacing's cap so that a batch carrying prefill takes at most
 * PACE_FACTOR times as long as a decode-only batch.  Both costs are
 * measured: the decode-only batch time as the median of the last few (while
 * prompts wait, every PACE_REMEASURE-th batch is decode-only to keep it
 * fresh as contexts grow), the cost of one prompt row from what the prefill
 * added to the last paced batches; the cap is the number of rows that fit
 * in the allowed extra time, at most twice the rows last measured plus one,
 * and never below (PACE_FACTOR - 1) / 4 rows per decode token, so that
 * prompts are taken in faster than streams finish even when noise makes
 * them look expensive.  Rows are granted in whole blocks of the backend's
 * batch_rows_granule (a block
 * costs about the same full or not): the free rows of the decoders' last
 * block, then the blocks the cap pays for, and one block when neither gives
 * a row, so a prompt always advances; but when the measured rows of a block
 * would add more than a decode-only batch (rows whose attention over a long
 * context outweighs their matmul, on a small model), the rows the measured
 * cap pays for, at least one, instead of that block.  A long prompt
 * thus streams in at a steady share of the machine while every stream keeps
 * receiving one token per batch, with inter-token latency at most
 * ~PACE_FACTOR times its decode-only value (or one block more).  With no
 * session decoding, prefill uses the whole max_batch_tokens.
 *
 * The numbers come from the engine (sched_tick.c): the shape of each batch
 * and the time its forward pass took.  This file keeps no clock, takes no
 * lock and calls no backend. */
#include "sched/sched_pace.h"

#include <stdlib.h>
#include <string.h>

#include "util/tuning.h"

/* the constants and why they are what they are: util/tuning.h */
#define PACE_FACTOR TUNING_PACE_FACTOR
#define PACE_MIN_CAP TUNING_PACE_MIN_CAP
#define PACE_START_CAP TUNING_PACE_START_CAP
#define PACE_DECODE_SHARE ((PACE_FACTOR - 1) / 4)
#define PACE_REMEASURE TUNING_PACE_REMEASURE
#define PACE_BLOCK_EXTRA_MAX TUNING_PACE_BLOCK_EXTRA_MAX
#define PACE_TOKEN_FLOOR TUNING_PACE_TOKEN_FLOOR

void sched_pace_init(struct sched_pace *p, size_t granule)
{
	*p = (struct sched_pace){.granule = granule > 1 ? granule : 1, .cap = PACE_START_CAP};
}

size_t sched_pace_share(size_t n)
{
	return (size_t)(PACE_DECODE_SHARE * (double)n);
}

bool sched_pace_wants_decode_only(const struct sched_pace *p)
{
	return p->decode_s == 0 || p->since_measure >= PACE_REMEASURE;
}

/* Prompt tokens a batch with n_decode decode tokens may carry: the measured
 * cap, but never below PACE_DECODE_SHARE of the decode tokens, so that
 * prompts keep being taken in when noise on a shared machine makes prompt
 * tokens look expensive.  A prompt token costs about a decode token's matmul
 * rows, plus attention over its context: an eighth of the decode tokens
 * keeps such a batch under ~2x a decode-only one even deep into a 20k-token
 * prompt with a full (unwindowed) cache. */
static size_t pace_cap_now(const struct sched_pace *p, size_t n_decode)
{
	size_t floor = (size_t)sched_pace_share(n_decode);
	size_t cap = (size_t)p->cap;
	return cap > floor ? cap : floor;
}

/* n rounded up to whole blocks of batch rows. */
static size_t round_block(const struct sched_pace *p, size_t n)
{
	size_t g = p->granule;
	return (n + g - 1) / g * g;
}

/* Whether one more block of prompt rows would add more than
 * PACE_BLOCK_EXTRA_MAX of a decode-only batch, by the measured row cost. */
static bool pace_block_too_dear(const struct sched_pace *p)
{
	return p->decode_s > 0 &&
	       p->row_s * (double)p->granule > PACE_BLOCK_EXTRA_MAX * p->decode_s;
}

size_t sched_pace_limit(const struct sched_pace *p, size_t n_decode, size_t max_tokens,
                        bool *part_block)
{
	size_t n = n_decode, limit = max_tokens, cap = pace_cap_now(p, n);
	*part_block = false;
	if (n == 0 || n + cap >= limit)
		return limit;
	/* Whole blocks of batch rows: the free rows of the decoders' last
	 * block, then the blocks the cap pays for; with neither, one block
	 * (prompts always advance; a part block costs what a whole one does),
	 * or, when a block's rows are too dear for that, the rows the cap pays
	 * for.  Paying a block the cap does not cover only when no row is free
	 * keeps such batches rare while streams come and go. */
	limit = round_block(p, n) + cap / p->granule * p->granule;
	if (limit == n && pace_block_too_dear(p)) {
		/* the measured cap alone: the floor is for whole blocks */
		limit = n + (size_t)(p->cap < PACE_MIN_CAP ? PACE_MIN_CAP : p->cap);
		*part_block = true;
	} else if (limit == n) {
		limit = round_block(p, n + cap);
	}
	return limit < max_tokens ? limit : max_tokens;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* A decode-only batch time joins the reference: the median of the last
 * SCHED_PACE_SAMPLES, so that one slow tick (preemption on a shared machine,
 * page faults) neither licenses slower paced batches nor starves prompts,
 * while a lasting change (longer contexts, a busier machine) is followed
 * within a few samples. */
static void pace_observe_decode(struct sched_pace *p, double seconds)
{
	double v[SCHED_PACE_SAMPLES];
	size_t n = p->decode_n < SCHED_PACE_SAMPLES ? p->decode_n : SCHED_PACE_SAMPLES;
	p->since_measure = 0;
	p->decode_samples[p->decode_n++ % SCHED_PACE_SAMPLES] = seconds;
	n = n < SCHED_PACE_SAMPLES ? n + 1 : n;
	memcpy(v, p->decode_samples, n * sizeof(double));
	qsort(v, n, sizeof(double), cmp_double);
	p->decode_s = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Adapts the cap from the time the last batch took (the top of this file). */
void sched_pace_update(struct sched_pace *p, const struct sched_pace_batch *b, double seconds,
                       size_t max_tokens)
{
	if (b->n_decode && !b->n_prefill) {
		pace_observe_decode(p, seconds);
		return;
	}
	p->since_measure++;
	/* A crowded batch is full either way: it says nothing of a row's cost. */
	if (b->crowded)
		return;
	/* the rows the prompt tokens added beyond the decoders' last block: the
	 * ones that cost time (whole blocks; the prompt rows themselves when
	 * they were granted by the row, after a whole number of blocks) */
	size_t paid = b->part_block ? b->n_prefill
	                            : round_block(p, b->n_decode + b->n_prefill) -
	                                  round_block(p, b->n_decode);
	if (!b->n_decode || !b->n_prefill || !paid || p->decode_s == 0)
		return;
	/* What one paid row adds: the time the last paced batches took beyond
	 * the decode-only one over the rows they paid for (a ratio of averages,
	 * so that one slow batch does not make a row look expensive); then as
	 * many rows as fit in the time allowed beyond the decode-only batch. */
	double extra = seconds - p->decode_s;
	if (p->paid_rows == 0) {
		p->extra_s = extra;
		p->paid_rows = (double)paid;
	} else {
		p->extra_s = 0.7 * p->extra_s + 0.3 * extra;
		p->paid_rows = 0.7 * p->paid_rows + 0.3 * (double)paid;
	}
	double floor_s = PACE_TOKEN_FLOOR * p->decode_s;
	p->row_s = p->extra_s / p->paid_rows;
	if (p->row_s < floor_s)
		p->row_s = floor_s;
	double cap = (PACE_FACTOR - 1) * p->decode_s / p->row_s;
	/* Extrapolate at most twofold from the chunk measured: costs are not
	 * linear forever (a few rows more can look free to the matmul's tiles,
	 * many more are not). */
	if (cap > 2 * (double)paid + 1)
		cap = 2 * (double)paid + 1;
	p->cap = cap < PACE_MIN_CAP         ? PACE_MIN_CAP
	         : cap > (double)max_tokens ? (double)max_tokens
	                                    : cap;
}
