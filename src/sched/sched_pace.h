/* Prefill pacing: how many prompt rows a batch may carry while sessions
 * decode, from the measured time of decode-only batches and what prompt
 * rows added to paced ones (the policy is described at the top of
 * sched_pace.c).  A plain value with no I/O and no clock of its own: the
 * engine hands it each batch's shape and time.
 *
 * Locking: none.  The scheduler embeds one (struct scheduler.pace) that only
 * the engine thread touches. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define SCHED_PACE_SAMPLES 5 /* decode-only batch times the pacing reference is the median of */

struct sched_pace {
	size_t granule;  /* the backend's batch_rows_granule, at least 1 */
	double decode_s; /* median of recent decode-only batch times; 0 unknown */
	double decode_samples[SCHED_PACE_SAMPLES]; /* ring of the last decode-only times */
	size_t decode_n;                           /* samples ever taken */
	double cap;                                /* prompt rows per batch while sessions decode */
	unsigned since_measure;                    /* batches since the last decode-only one */
	double row_s;     /* what one paid prompt row adds (extra_s / paid_rows) */
	double extra_s;   /* moving average: paced batch time beyond a decode-only one */
	double paid_rows; /* moving average: rows those batches paid for beyond the decoders' */
	double cap_max;   /* rows the cap may reach: twice those last paid, plus one */
	/* Mixture of experts (sched_pace_set_moe; moe_experts 0: a dense
	 * model, and none of these is used): a batch reads each expert its
	 * rows touch once, so its cost grows with the distinct experts, and
	 * decode_s and decode_samples are per one-token step's bytes. */
	int moe_experts;  /* experts per MoE layer */
	int moe_used;     /* the k each token picks */
	double moe_share; /* the k experts' share of the bytes one token's step reads */
};

/* What a batch carried, for sched_pace_update(). */
struct sched_pace_batch {
	size_t n_decode;  /* decode tokens */
	size_t n_prefill; /* prefill tokens */
	bool part_block;  /* prompt rows granted by the row, not the block */
	bool crowded;     /* decoders left prompts too few rows (sched_tick.c) */
};

/* Nothing measured yet; rows are granted in blocks of granule (0 taken as 1). */
void sched_pace_init(struct sched_pace *p, size_t granule);
/* Gives the pacing an MoE model's shape: n_experts per layer, k picked
 * per token, and those k experts' share of the bytes one token's step reads
 * (0 < share <= 1; anything else, or n_experts 0, leaves it dense).  Rows
 * are then granted one by one, not in blocks of granule. */
void sched_pace_set_moe(struct sched_pace *p, int n_experts, int k, double share);
/* Whether the next batch with decoders and waiting prompts should be
 * decode-only: the reference is unknown or due for a re-measure. */
bool sched_pace_wants_decode_only(const struct sched_pace *p);
/* The rows a batch with n_decode decode tokens may fill, at most
 * max_tokens; *part_block tells prompt rows granted by the row rather than
 * by the block. */
size_t sched_pace_limit(const struct sched_pace *p, size_t n_decode, size_t max_tokens,
                        bool *part_block);
/* The share of n rows that prompts keep whatever the measurements say (the
 * floor of the cap per decode token, and the crowding share of a batch). */
size_t sched_pace_share(size_t n);
/* Learns from a batch of that shape that took `seconds`. */
void sched_pace_update(struct sched_pace *p, const struct sched_pace_batch *b, double seconds,
                       size_t max_tokens);
