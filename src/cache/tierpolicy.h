/* The tier policy of the attention-sink cache: which tier each new token
 * enters, when the window evicts, when a hot token ages into staging and
 * when a full staging completes a quantized group, what a revision may drop
 * and at which rank a query sees the sinks.  One pure state machine over
 * token counts, written once: the CPU cache (sinkcache.c) carries its steps
 * out on host rings, the CUDA backend (cuda/cuda_kvplan.c) turns them into
 * kernel jobs on device rings, so both hold the same tokens in the same
 * tiers.  It owns no storage. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/sinkcache.h"

/* Tier capacities of a geometry (cache_geometry_tiers_of decides them). */
struct tier_caps {
	int sink;   /* S: the first S tokens of the stream */
	int window; /* W: window tokens resident at most (compressed + hot) */
	int hot;    /* H >= 1: newest window tokens in full precision */
	int group;  /* G: tokens per quantized group; 0 when nothing is quantized */
	bool full;  /* strategy full: a full window refuses tokens instead of evicting */
	int anchor; /* anchor slots per layer; 0: no anchors */
	float anchor_promote;
	int anchor_demote_steps;
};

/* Where one cache (every layer alike between forward passes) stands; also
 * what a cache image records (cache/kvimage.h). */
struct tier_counts {
	uint64_t n_seen;  /* stream index of the next token */
	uint64_t evicted; /* window tokens ever dropped */
	uint64_t moved;   /* tokens ever aged out of the hot tier */
	int32_t n_sink;
	int32_t n_groups;    /* quantized groups resident */
	int32_t grp_dropped; /* evicted rows at the front of the oldest group */
	int32_t n_stage;     /* full-precision tokens waiting to complete a group */
	int32_t n_hot;       /* newest full-precision tokens */
};

enum tier_evict {
	TIER_EVICT_NONE = 0,
	TIER_EVICT_GROUP_ROW, /* the oldest group's front row (the group stays) */
	TIER_EVICT_GROUP,     /* the oldest group's last row: the group slot is free */
	TIER_EVICT_STAGED,    /* the oldest staged token */
	TIER_EVICT_HOT,       /* the oldest hot token */
};

enum tier_age {
	TIER_AGE_NONE = 0,
	TIER_AGE_STAGE, /* the oldest hot token moves to the end of staging */
	TIER_AGE_FLUSH, /* the G-1 staged tokens and the oldest hot one become a group */
};

/* What appending one token does, in this order: evict, age, store. */
struct tier_step {
	bool to_sink; /* the token is stored in sink slot sink_slot */
	int sink_slot;
	enum tier_evict evict;
	enum tier_age age;
	int hot_index;    /* else: its index in the hot tier, oldest first */
	uint64_t key_pos; /* its stream index (keys rotate by it) */
};

void tier_caps_of(const struct cache_geometry *g, const struct cache_tiers *t,
                  struct tier_caps *out);

/* Window tokens (compressed + hot) and all resident tokens. */
int tier_window(const struct tier_caps *c, const struct tier_counts *n);
int tier_resident(const struct tier_caps *c, const struct tier_counts *n);
/* Whether the next token goes to the sink tier. */
bool tier_next_is_sink(const struct tier_caps *c, const struct tier_counts *n);
/* Whether n_tokens more can be appended (only strategy full ever refuses). */
bool tier_can_append(const struct tier_caps *c, const struct tier_counts *n, size_t n_tokens);

/* Decides the next token's moves and advances n past it.  The caller checks
 * tier_can_append first. */
void tier_step(const struct tier_caps *c, struct tier_counts *n, struct tier_step *out);

/* Tokens a revision can drop exactly: the full-precision window tokens
 * (quantized groups were built with tokens that stay; sinks never go). */
int tier_revisable(const struct tier_counts *n);
/* Drops the newest k tokens (hot first, then staged); -ERANGE with the
 * reason when k > tier_revisable(). */
int tier_revise(const struct tier_caps *c, struct tier_counts *n, size_t k, char *err,
                size_t err_len);

/* Stream position that rotates the newest token's query for sink and
 * anchor keys: its rank in the cache with n_anchor anchors between sinks
 * and window (rope_positions cache) or its stream index. */
uint64_t tier_sink_query_pos(const struct cache_geometry *g, const struct tier_caps *c,
                             const struct tier_counts *n, int n_anchor);

/* ---- anchors: which leaving window tokens stay, and for how long ----------
 * A token's score is the exponential moving average of the weight it
 * received per step (largest over query heads), over the steps it was in
 * the window; it starts at its first step's weight. */
#define TIER_ANCHOR_EMA 0.125f /* about the last 15 steps weigh in */

float tier_anchor_score(float score, float weight, bool first);
/* Where a window token of score `score` leaving the window goes, among n
 * anchors of scores anchor_score: n (a free slot), the slot of the weakest
 * anchor it replaces (weaker than it), or -1 (it is dropped: below the
 * threshold, or weaker than every anchor of a full tier). */
int tier_anchor_admit(const struct tier_caps *c, const float *anchor_score, int n, float score);
/* One step of an anchor that received `weight`: counts the steps in a row
 * below the threshold in *below; false when it must leave now. */
bool tier_anchor_keep(const struct tier_caps *c, int *below, float weight);

/* One layer's anchor tier as the policy sees it (each layer keeps its
 * own).  The caller owns the arrays and keeps the anchors' rows in slots
 * [0, n), in stream order, moving them as the calls below say. */
struct tier_anchors {
	int n;
	uint64_t *pos;  /* (anchor) stream index */
	float *score;   /* (anchor) moving average of received weight */
	int32_t *below; /* (anchor) steps in a row below the threshold */
	float *w_score; /* (window) window tokens' scores by stream index mod
	                 * window; < 0: not attended yet */
	uint64_t promoted, demoted;
};

void tier_anchors_reset(const struct tier_caps *c, struct tier_anchors *a);

/* How the slots changed in a call: new slot i in [first, a->n) holds what
 * slot src[i] held before (src[i] >= i), or, where src[i] < 0, the window
 * token that was leaving; the ranks of those slots changed, so their keys
 * must be rotated again.  Slots below first are untouched; first == a->n:
 * nothing changed.  src has room for c->anchor entries. */

/* Before appending a token to counts n: when it makes the oldest window
 * token leave, keeps that token if the policy admits it (replacing the
 * weakest anchor of a full tier).  Returns first. */
int tier_anchors_leaving(const struct tier_caps *c, const struct tier_counts *n,
                         struct tier_anchors *a, int *src);
/* After tier_step() placed a token (st): a window token starts unscored. */
void tier_anchors_entered(const struct tier_caps *c, struct tier_anchors *a,
                          const struct tier_step *st);
/* Folds one step's key weights (n_heads rows of ld floats in rank order:
 * sinks, anchors, window, as attention saw them at counts n) into the
 * scores and drops the anchors that stayed below the threshold for
 * anchor_demote_steps steps.  Returns first. */
int tier_anchors_observe(const struct tier_caps *c, const struct tier_counts *n,
                         struct tier_anchors *a, const float *key_weight, int n_heads, size_t ld,
                         int *src);
