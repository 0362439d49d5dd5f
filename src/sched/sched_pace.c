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
 * A mixture-of-experts model (sched_pace_set_moe) reads each expert that a
 * batch's rows touch once, so a batch costs its dense weights plus its
 * expected distinct experts (moe_expected_active), not a fixed read plus a
 * price per row: a decode-only batch is measured per one-token step's bytes
 * and scaled to the decoders at hand, and prompt rows cost their measured
 * row price plus the experts they touch beyond the decoders' (each at its
 * share of a step, the step taken as all bytes: decode is memory-bound, and
 * erring there grants fewer rows, not slower streams).  Rows beside a few
 * decoders thus pay for experts nobody else reads, rows beside many find
 * most of them read already; the cap is the rows whose cost fits, found
 * for the decoders of each batch, and rows are granted one by one, not in
 * blocks.
 *
 * The numbers come from the engine (sched_tick.c): the shape of each batch
 * and the time its forward pass took.  This file keeps no clock, takes no
 * lock and calls no backend. */
#include "sched/sched_pace.h"

#include <stdlib.h>
#include <string.h>

#include "engine/moe.h"
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

void sched_pace_set_moe(struct sched_pace *p, int n_experts, int k, double share)
{
	bool ok = n_experts > 0 && k > 0 && k <= n_experts && share > 0 && share <= 1;
	if (!ok)
		return;
	p->moe_experts = n_experts;
	p->moe_used = k;
	p->moe_share = share;
	/* Rows are priced one by one: each expert's products run over its own
	 * tokens, so the free rows of the decoders' last block touch experts
	 * (and cost them) like any other. */
	p->granule = 1;
}

/* A batch of n tokens' weight bytes in one-token steps: the dense part
 * once, each expert it is expected to touch at its share (1 when dense). */
static double pace_step_bytes(const struct sched_pace *p, size_t n)
{
	if (!p->moe_experts)
		return 1;
	double k = p->moe_used, s = p->moe_share;
	return (1 - s) + s * moe_expected_active(p->moe_experts, p->moe_used, (double)n) / k;
}

/* The decode-only reference for a batch of n_decode decoders. */
static double pace_decode_s(const struct sched_pace *p, size_t n_decode)
{
	return p->decode_s * pace_step_bytes(p, n_decode);
}

/* What the experts that `rows` prompt rows touch beyond those of n_decode
 * decoders add to a batch (0 when dense). */
static double pace_expert_s(const struct sched_pace *p, size_t n_decode, size_t rows)
{
	if (!p->moe_experts || !rows)
		return 0;
	int n_exp = p->moe_experts, k = p->moe_used;
	double fresh = moe_expected_active(n_exp, k, (double)(n_decode + rows)) -
	               moe_expected_active(n_exp, k, (double)n_decode);
	return p->decode_s * p->moe_share / k * fresh;
}

/* The most prompt rows beside n_decode MoE decoders whose row price and
 * fresh experts fit in the time a paced batch may add, at most cap_max and
 * at least PACE_MIN_CAP (the cost grows with the rows: a bisection). */
static double pace_moe_cap(const struct sched_pace *p, size_t n_decode)
{
	double allow = (PACE_FACTOR - 1) * pace_decode_s(p, n_decode);
	size_t lo = 0, hi = (size_t)p->cap_max;
	while (lo < hi) {
		size_t mid = lo + (hi - lo + 1) / 2;
		if (p->row_s * (double)mid + pace_expert_s(p, n_decode, mid) <= allow)
			lo = mid;
		else
			hi = mid - 1;
	}
	return (double)lo < PACE_MIN_CAP ? PACE_MIN_CAP : (double)lo;
}

/* The cap for a batch of n_decode decoders: the measured one, or for an
 * MoE model once a row's price is known, the rows that fit beside them. */
static double pace_cap_rows(const struct sched_pace *p, size_t n_decode)
{
	if (!p->moe_experts || p->row_s == 0 || p->decode_s == 0)
		return p->cap;
	return pace_moe_cap(p, n_decode);
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
	size_t cap = (size_t)pace_cap_rows(p, n_decode);
	return cap > floor ? cap : floor;
}

/* n rounded up to whole blocks of batch rows. */
static size_t round_block(const struct sched_pace *p, size_t n)
{
	size_t g = p->granule;
	return (n + g - 1) / g * g;
}

/* Whether one more block of prompt rows beside n_decode decoders would add
 * more than PACE_BLOCK_EXTRA_MAX of a decode-only batch, by the measured
 * row cost (and the experts the block touches). */
static bool pace_block_too_dear(const struct sched_pace *p, size_t n_decode)
{
	return p->decode_s > 0 &&
	       p->row_s * (double)p->granule + pace_expert_s(p, n_decode, p->granule) >
	           PACE_BLOCK_EXTRA_MAX * pace_decode_s(p, n_decode);
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
	if (limit == n && pace_block_too_dear(p, n)) {
		/* the measured cap alone: the floor is for whole blocks */
		double rows = pace_cap_rows(p, n);
		limit = n + (size_t)(rows < PACE_MIN_CAP ? PACE_MIN_CAP : rows);
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
		pace_observe_decode(p, seconds / pace_step_bytes(p, b->n_decode));
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
	double decode_s = pace_decode_s(p, b->n_decode);
	double extra = seconds - decode_s - pace_expert_s(p, b->n_decode, b->n_prefill);
	if (p->paid_rows == 0) {
		p->extra_s = extra;
		p->paid_rows = (double)paid;
	} else {
		p->extra_s = 0.7 * p->extra_s + 0.3 * extra;
		p->paid_rows = 0.7 * p->paid_rows + 0.3 * (double)paid;
	}
	double floor_s = PACE_TOKEN_FLOOR * decode_s;
	p->row_s = p->extra_s / p->paid_rows;
	if (p->row_s < floor_s)
		p->row_s = floor_s;
	/* Extrapolate at most twofold from the chunk measured: costs are not
	 * linear forever (a few rows more can look free to the matmul's tiles,
	 * many more are not). */
	double most = 2 * (double)paid + 1;
	p->cap_max = most < (double)max_tokens ? most : (double)max_tokens;
	double cap =
	    p->moe_experts ? pace_moe_cap(p, b->n_decode) : (PACE_FACTOR - 1) * decode_s / p->row_s;
	if (cap > most)
		cap = most;
	p->cap = cap < PACE_MIN_CAP         ? PACE_MIN_CAP
	         : cap > (double)max_tokens ? (double)max_tokens
	                                    : cap;
}
