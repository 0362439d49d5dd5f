#include "cache/tierpolicy.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "util/errbuf.h"

void tier_caps_of(const struct cache_geometry *g, const struct cache_tiers *t,
                  struct tier_caps *out)
{
	*out = (struct tier_caps){.sink = t->sink,
	                          .window = t->window,
	                          .hot = t->hot,
	                          .group = t->group,
	                          .full = g->strategy == CACHE_STRATEGY_FULL,
	                          .anchor = g->strategy == CACHE_STRATEGY_FULL ? 0 : g->anchor_max,
	                          .anchor_promote = g->anchor_promote,
	                          .anchor_demote_steps = g->anchor_demote_steps};
}

int tier_window(const struct tier_caps *c, const struct tier_counts *n)
{
	return n->n_groups * c->group - n->grp_dropped + n->n_stage + n->n_hot;
}

int tier_resident(const struct tier_caps *c, const struct tier_counts *n)
{
	return n->n_sink + tier_window(c, n);
}

bool tier_next_is_sink(const struct tier_caps *c, const struct tier_counts *n)
{
	return n->n_sink < c->sink && n->n_seen == (uint64_t)n->n_sink;
}

bool tier_can_append(const struct tier_caps *c, const struct tier_counts *n, size_t n_tokens)
{
	if (!c->full)
		return true;
	return n_tokens <= (size_t)(c->sink + c->window) - (size_t)tier_resident(c, n);
}

/* The oldest window token leaves: from the oldest group, else staging, else hot. */
static enum tier_evict evict_oldest(const struct tier_caps *c, struct tier_counts *n)
{
	enum tier_evict e;
	if (n->n_groups > 0) {
		e = TIER_EVICT_GROUP_ROW;
		if (++n->grp_dropped == c->group) {
			n->n_groups--;
			n->grp_dropped = 0;
			e = TIER_EVICT_GROUP;
		}
	} else if (n->n_stage > 0) {
		n->n_stage--;
		e = TIER_EVICT_STAGED;
	} else {
		n->n_hot--;
		e = TIER_EVICT_HOT;
	}
	n->evicted++;
	return e;
}

/* The oldest hot token ages: into staging, or it completes a group. */
static enum tier_age age_hot(const struct tier_caps *c, struct tier_counts *n)
{
	enum tier_age a = TIER_AGE_STAGE;
	if (c->group > 0 && n->n_stage == c->group - 1) {
		n->n_groups++;
		n->n_stage = 0;
		a = TIER_AGE_FLUSH;
	} else {
		n->n_stage++;
	}
	n->n_hot--;
	n->moved++;
	return a;
}

void tier_step(const struct tier_caps *c, struct tier_counts *n, struct tier_step *out)
{
	memset(out, 0, sizeof(*out));
	out->key_pos = n->n_seen;
	if (tier_next_is_sink(c, n)) {
		out->to_sink = true;
		out->sink_slot = n->n_sink++;
	} else {
		if (tier_window(c, n) == c->window)
			out->evict = evict_oldest(c, n);
		if (n->n_hot == c->hot)
			out->age = age_hot(c, n);
		out->hot_index = n->n_hot++;
	}
	n->n_seen++;
}

int tier_revisable(const struct tier_counts *n)
{
	return n->n_hot + n->n_stage;
}

int tier_revise(const struct tier_caps *c, struct tier_counts *n, size_t k, char *err,
                size_t err_len)
{
	int most = tier_revisable(n);
	if (k > (size_t)most)
		return err_set(err, err_len, -ERANGE,
		               "sink cache: can revise at most %d tokens (asked %zu): %d sink "
		               "tokens are never revised, "
		               "%d older window tokens are quantized and %llu were evicted",
		               most, k, n->n_sink, tier_window(c, n) - most,
		               (unsigned long long)n->evicted);
	int from_hot = (int)k < n->n_hot ? (int)k : n->n_hot;
	n->n_hot -= from_hot;
	n->n_stage -= (int)k - from_hot;
	n->n_seen -= k;
	return 0;
}

uint64_t tier_sink_query_pos(const struct cache_geometry *g, const struct tier_caps *c,
                             const struct tier_counts *n, int n_anchor)
{
	uint64_t s = n->n_seen - 1;
	return g->rope_positions == ROPE_POSITIONS_CACHE
	           ? (uint64_t)tier_resident(c, n) + (uint64_t)n_anchor - 1
	           : s;
}

float tier_anchor_score(float score, float weight, bool first)
{
	return first ? weight : score + TIER_ANCHOR_EMA * (weight - score);
}

int tier_anchor_admit(const struct tier_caps *c, const float *anchor_score, int n, float score)
{
	if (c->anchor <= 0 || !(score >= c->anchor_promote))
		return -1;
	if (n < c->anchor)
		return n;
	int weakest = 0;
	for (int i = 1; i < n; i++)
		if (anchor_score[i] < anchor_score[weakest])
			weakest = i;
	return anchor_score[weakest] < score ? weakest : -1;
}

bool tier_anchor_keep(const struct tier_caps *c, int *below, float weight)
{
	*below = weight < c->anchor_promote ? *below + 1 : 0;
	return *below < c->anchor_demote_steps;
}

void tier_anchors_reset(const struct tier_caps *c, struct tier_anchors *a)
{
	(void)c; /* window scores start at each token's entry */
	a->n = 0;
	a->promoted = a->demoted = 0;
}

/* Removes slot j from the bookkeeping (later slots move down one). */
static void anchors_remove(struct tier_anchors *a, int j, int *src)
{
	int rest = a->n - j - 1;
	if (rest > 0) {
		memmove(&a->pos[j], &a->pos[j + 1], (size_t)rest * sizeof(*a->pos));
		memmove(&a->score[j], &a->score[j + 1], (size_t)rest * sizeof(*a->score));
		memmove(&a->below[j], &a->below[j + 1], (size_t)rest * sizeof(*a->below));
		memmove(&src[j], &src[j + 1], (size_t)rest * sizeof(*src));
	}
	a->n--;
	a->demoted++;
}

int tier_anchors_leaving(const struct tier_caps *c, const struct tier_counts *n,
                         struct tier_anchors *a, int *src)
{
	if (c->anchor <= 0 || tier_next_is_sink(c, n) || tier_window(c, n) != c->window)
		return a->n;
	uint64_t pos = n->n_seen - (uint64_t)c->window;
	float score = a->w_score[pos % (uint64_t)c->window];
	if (score < 0.0f) /* never attended */
		return a->n;
	int j = tier_anchor_admit(c, a->score, a->n, score);
	if (j < 0)
		return a->n;
	for (int i = 0; i < a->n; i++)
		src[i] = i;
	int first = j;
	if (j < a->n)
		anchors_remove(a, j, src);
	j = a->n++;
	a->pos[j] = pos;
	a->score[j] = score;
	a->below[j] = 0;
	src[j] = -1;
	a->promoted++;
	return first;
}

void tier_anchors_entered(const struct tier_caps *c, struct tier_anchors *a,
                          const struct tier_step *st)
{
	if (c->anchor > 0 && !st->to_sink)
		a->w_score[st->key_pos % (uint64_t)c->window] = -1.0f;
}

/* Largest weight over the heads of key column col. */
static float column_max(const float *key_weight, int n_heads, size_t ld, int col)
{
	float w = 0.0f;
	for (int h = 0; h < n_heads; h++)
		w = fmaxf(w, key_weight[(size_t)h * ld + (size_t)col]);
	return w;
}

int tier_anchors_observe(const struct tier_caps *c, const struct tier_counts *n,
                         struct tier_anchors *a, const float *key_weight, int n_heads, size_t ld,
                         int *src)
{
	if (c->anchor <= 0 || !key_weight)
		return a->n;
	int n_win = tier_window(c, n), w0 = n->n_sink + a->n, first = a->n;
	uint64_t oldest = n->n_seen - (uint64_t)n_win;
	for (int i = 0; i < a->n; i++)
		src[i] = i;
	/* from the end, so that the columns of the slots still to visit stay */
	for (int i = a->n - 1; i >= 0; i--) {
		float w = column_max(key_weight, n_heads, ld, n->n_sink + i);
		a->score[i] = tier_anchor_score(a->score[i], w, false);
		if (!tier_anchor_keep(c, &a->below[i], w)) {
			anchors_remove(a, i, src);
			first = i;
		}
	}
	for (int k = 0; k < n_win; k++) {
		float w = column_max(key_weight, n_heads, ld, w0 + k);
		float *sc = &a->w_score[(oldest + (uint64_t)k) % (uint64_t)c->window];
		*sc = tier_anchor_score(*sc, w, *sc < 0.0f);
	}
	return first > a->n ? a->n : first;
}
