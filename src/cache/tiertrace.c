/* The cache trace's memory between steps, over tier counts: shared by the
 * CPU cache and the CUDA backend (see tiertrace.h).  It does not read any
 * key or value; the caller hands it the weights attention gave each rank. */
#include "cache/tiertrace.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#include "util/errbuf.h"

struct tier_trace_layer {
	int n_last;
	int64_t *last_index;         /* (capacity) stream index of each rank at the last step */
	float *last_max, *last_mean; /* (capacity) over query heads */
	float *sink_ema;             /* (S) */
	float *win_ema;              /* (W) by stream index mod W */
	uint64_t observed_upto; /* tokens below this stream index were resident at the last step */
	/* the learned sink logit's weight at the last step, over query heads */
	float learned_max, learned_mean;
};

struct tier_trace {
	int n_layers, capacity, window;
	uint64_t steps;
	struct tier_trace_layer *layers;   /* (n_layers) */
};

void tier_trace_free(struct tier_trace *t)
{
	if (!t)
		return;
	for (int l = 0; t->layers && l < t->n_layers; l++) {
		struct tier_trace_layer *T = &t->layers[l];
		free(T->last_index);
		free(T->last_max);
		free(T->last_mean);
		free(T->sink_ema);
		free(T->win_ema);
	}
	free(t->layers);
	free(t);
}

struct tier_trace *tier_trace_new(const struct tier_caps *c, int n_layers)
{
	if (n_layers <= 0)
		return NULL;
	size_t cap = (size_t)(c->sink + c->anchor + c->window);
	cap = cap ? cap : 1;
	struct tier_trace *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->n_layers = n_layers;
	t->capacity = (int)cap;
	t->window = c->window;
	t->layers = calloc((size_t)n_layers, sizeof(*t->layers));
	if (!t->layers)
		goto oom;
	for (int l = 0; l < n_layers; l++) {
		struct tier_trace_layer *T = &t->layers[l];
		T->last_index = calloc(cap, sizeof(*T->last_index));
		T->last_max = calloc(cap, sizeof(float));
		T->last_mean = calloc(cap, sizeof(float));
		T->sink_ema = calloc((size_t)c->sink + 1, sizeof(float));
		T->win_ema = calloc((size_t)c->window + 1, sizeof(float));
		if (!T->last_index || !T->last_max || !T->last_mean || !T->sink_ema || !T->win_ema)
			goto oom;
	}
	return t;
oom:
	tier_trace_free(t);
	return NULL;
}

int tier_trace_switch(struct tier_trace **t, const struct tier_caps *c, int n_layers, bool on,
                      char *err, size_t err_len)
{
	if (!on) {
		tier_trace_free(*t);
		*t = NULL;
		return 0;
	}
	if (!*t && !(*t = tier_trace_new(c, n_layers)))
		return err_set(err, err_len, -ENOMEM, "out of memory for a cache trace of %d layers",
		               n_layers);
	return 0;
}

uint64_t tier_trace_steps(const struct tier_trace *t)
{
	return t ? t->steps : 0;
}

void tier_trace_clear(struct tier_trace *t)
{
	if (!t)
		return;
	t->steps = 0;
	for (int l = 0; l < t->n_layers; l++) {
		t->layers[l].n_last = 0;
		t->layers[l].observed_upto = 0;
		t->layers[l].learned_max = t->layers[l].learned_mean = 0.0f;
	}
}

void tier_trace_revised(struct tier_trace *t, int layer, uint64_t n_seen)
{
	if (!t || layer < 0 || layer >= t->n_layers)
		return;
	struct tier_trace_layer *T = &t->layers[layer];
	if (T->observed_upto > n_seen)
		T->observed_upto = n_seen;
	while (T->n_last > 0 && (uint64_t)T->last_index[T->n_last - 1] >= n_seen)
		T->n_last--;
}

/* Where the ranks of a layer's resident tokens come from, worked out once
 * per step so that the per-slot loops below do no calls.  Sinks and anchors
 * come before the window's first rank w0. */
struct rank_map {
	int n_sink, w0, count;
	const uint64_t *anchor_pos;
	int64_t window_first; /* stream index of the window's first token */
};

/* The map of n's resident tokens, at most max_count of them. */
static struct rank_map rank_map_of(const struct tier_caps *c, const struct tier_counts *n,
                                   const struct tier_anchors *a, int max_count)
{
	int n_win = tier_window(c, n);
	struct rank_map m = {.n_sink = n->n_sink,
	                     .w0 = n->n_sink + (a ? a->n : 0),
	                     .anchor_pos = a ? a->pos : NULL,
	                     .window_first = (int64_t)(n->n_seen - (uint64_t)n_win)};
	m.count = m.w0 + n_win < max_count ? m.w0 + n_win : max_count;
	return m;
}

/* The stream index of the token at rank r. */
static inline int64_t rank_index(const struct rank_map *m, int r)
{
	if (r < m->n_sink)
		return r;
	if (r < m->w0)
		return (int64_t)m->anchor_pos[r - m->n_sink];
	return m->window_first + (r - m->w0);
}

/* Records rank r's masses of this step and folds its maximum into the
 * moving average of its tier (sinks by rank, the window by stream index). */
static inline void observe_slot(struct tier_trace *t, struct tier_trace_layer *T,
                                const struct rank_map *m, int r, float mx, float mean)
{
	int64_t idx = rank_index(m, r);
	T->last_index[r] = idx;
	T->last_max[r] = mx;
	T->last_mean[r] = mean;
	bool first = (uint64_t)idx >= T->observed_upto;
	if (r < m->n_sink) {
		T->sink_ema[r] = tier_anchor_score(T->sink_ema[r], mx, first);
	} else if (r >= m->w0 && t->window > 0) {
		float *e = &T->win_ema[(uint64_t)idx % (uint64_t)t->window];
		*e = tier_anchor_score(*e, mx, first);
	}
}

static void observe_done(struct tier_trace *t, struct tier_trace_layer *T, int layer,
                         const struct tier_counts *n, int count)
{
	T->n_last = count;
	T->observed_upto = n->n_seen;
	if (layer == 0)
		t->steps++;
}

void tier_trace_observe(struct tier_trace *t, const struct tier_caps *c, int layer,
                        const struct tier_counts *n, const struct tier_anchors *a,
                        const float *w_max, const float *w_mean)
{
	if (!t || !w_max || !w_mean || layer < 0 || layer >= t->n_layers)
		return;
	struct tier_trace_layer *T = &t->layers[layer];
	struct rank_map m = rank_map_of(c, n, a, t->capacity);
	for (int r = 0; r < m.count; r++)
		observe_slot(t, T, &m, r, w_max[r], w_mean[r]);
	observe_done(t, T, layer, n, m.count);
}

void tier_trace_observe_heads(struct tier_trace *t, const struct tier_caps *c, int layer,
                              const struct tier_counts *n, const struct tier_anchors *a,
                              const float *key_weight, int n_heads, size_t ld)
{
	if (!t || !key_weight || n_heads <= 0 || layer < 0 || layer >= t->n_layers)
		return;
	struct tier_trace_layer *T = &t->layers[layer];
	struct rank_map m = rank_map_of(c, n, a, t->capacity);
	for (int r = 0; r < m.count; r++) {
		float mx = 0.0f, sum = 0.0f;
		for (int h = 0; h < n_heads; h++) {
			float w = key_weight[(size_t)h * ld + (size_t)r];
			mx = w > mx ? w : mx;
			sum += w;
		}
		observe_slot(t, T, &m, r, mx, sum / (float)n_heads);
	}
	observe_done(t, T, layer, n, m.count);
}

void tier_trace_observe_learned(struct tier_trace *t, int layer, const float *weight, int n_heads)
{
	if (!t || layer < 0 || layer >= t->n_layers)
		return;
	float mx = 0.0f, sum = 0.0f;
	for (int h = 0; weight && h < n_heads; h++) {
		mx = weight[h] > mx ? weight[h] : mx;
		sum += weight[h];
	}
	t->layers[layer].learned_max = mx;
	t->layers[layer].learned_mean = weight && n_heads > 0 ? sum / (float)n_heads : 0.0f;
}

void tier_trace_fill_step(const struct tier_trace *t, const struct cache_geometry *g,
                          uint64_t n_seen, struct cache_trace_step *out)
{
	cache_trace_geometry_of(g, &out->geometry);
	out->step = tier_trace_steps(t);
	out->attention = out->step > 0;
	out->stream_pos = (int64_t)n_seen - 1;
}

/* Mass of stream index idx in the last step: the last step's ranks are in
 * stream order, so a cursor walks them once per layer. */
static void last_mass(const struct tier_trace_layer *T, int *cursor, int64_t idx, float *mx,
                      float *mean)
{
	while (*cursor < T->n_last && T->last_index[*cursor] < idx)
		(*cursor)++;
	bool hit = *cursor < T->n_last && T->last_index[*cursor] == idx;
	*mx = hit ? T->last_max[*cursor] : 0.0f;
	*mean = hit ? T->last_mean[*cursor] : 0.0f;
}

static void slot_masses(const struct tier_trace *t, const struct tier_trace_layer *T,
                        const struct tier_anchors *a, int sink_rank, int *cursor,
                        struct cache_trace_slot *s)
{
	last_mass(T, cursor, s->stream_index, &s->mass_max, &s->mass_mean);
	float ema;
	if (s->tier == CACHE_TIER_SINK || s->tier == CACHE_TIER_SHARED)
		ema = T->sink_ema[sink_rank];
	else if (s->tier == CACHE_TIER_ANCHOR)
		ema = a->score[sink_rank];
	else
		ema = t->window > 0 ? T->win_ema[(uint64_t)s->stream_index % (uint64_t)t->window]
		                    : 0.0f;
	/* a token not attended since tracing began has no average yet */
	s->mass_ema = (uint64_t)s->stream_index < T->observed_upto && ema > 0.0f ? ema : 0.0f;
}

void tier_trace_fill_layer(const struct tier_trace *t, const struct cache_geometry *g,
                           const struct tier_caps *c, int layer, const struct tier_counts *n,
                           const struct tier_anchors *a, int n_shared, bool attention,
                           struct cache_trace_layer *out)
{
	bool by_rank = g->rope_positions == ROPE_POSITIONS_CACHE;
	const struct tier_trace_layer *T =
	    t && attention && layer >= 0 && layer < t->n_layers ? &t->layers[layer] : NULL;
	struct rank_map m = rank_map_of(c, n, a, INT_MAX);
	int w0 = m.w0, count = m.count, n_comp = count - w0 - n->n_hot, cursor = 0;
	for (int r = 0; r < count; r++) {
		struct cache_trace_slot *s = &out->slots[r];
		s->stream_index = rank_index(&m, r);
		s->rope_pos = by_rank ? r : s->stream_index;
		if (r < n->n_sink)
			s->tier = r < n_shared ? CACHE_TIER_SHARED : CACHE_TIER_SINK;
		else if (r < w0)
			s->tier = CACHE_TIER_ANCHOR;
		else
			s->tier = r - w0 < n_comp ? CACHE_TIER_COMPRESSED : CACHE_TIER_HOT;
		s->mass_max = s->mass_mean = s->mass_ema = 0.0f;
		if (T)
			slot_masses(t, T, a, r < n->n_sink ? r : r - n->n_sink, &cursor, s);
	}
	out->n_slots = count;
	out->learned_sink_max = T ? T->learned_max : 0.0f;
	out->learned_sink_mean = T ? T->learned_mean : 0.0f;
	out->sliding_window =
	    g->layer[layer].own && g->layer[layer].swa ? g->layer[layer].window_size : 0;
}
