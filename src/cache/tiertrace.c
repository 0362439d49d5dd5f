/* The cache trace's memory between steps, over tier counts: shared by the
 * CPU cache and the CUDA backend (see tiertrace.h).  It does not read any
 * key or value; the caller hands it the weights attention gave each rank. */
#include "cache/tiertrace.h"

#include <errno.h>
#include <stdlib.h>

#include "util/errbuf.h"

struct tier_trace_layer {
	int n_last;
	int64_t *last_index;         /* (capacity) stream index of each rank at the last step */
	float *last_max, *last_mean; /* (capacity) over query heads */
	float *sink_ema;             /* (S) */
	float *win_ema;              /* (W) by stream index mod W */
	uint64_t observed_upto; /* tokens below this stream index were resident at the last step */
};

struct tier_trace {
	int n_layers, capacity, window;
	uint64_t steps;
	float *scratch_max, *scratch_mean; /* (capacity) observe_heads' reductions */
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
	free(t->scratch_max);
	free(t->scratch_mean);
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
	t->scratch_max = calloc(cap, sizeof(float));
	t->scratch_mean = calloc(cap, sizeof(float));
	if (!t->layers || !t->scratch_max || !t->scratch_mean)
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

/* Rank of the first window token: sinks and anchors come before it. */
static int window_rank(const struct tier_counts *n, const struct tier_anchors *a)
{
	return n->n_sink + (a ? a->n : 0);
}

/* The stream index of the token at rank r. */
static int64_t rank_index(const struct tier_caps *c, const struct tier_counts *n,
                          const struct tier_anchors *a, int r)
{
	if (r < n->n_sink)
		return r;
	int w0 = window_rank(n, a);
	if (r < w0)
		return (int64_t)a->pos[r - n->n_sink];
	return (int64_t)(n->n_seen - (uint64_t)tier_window(c, n)) + (r - w0);
}

void tier_trace_observe(struct tier_trace *t, const struct tier_caps *c, int layer,
                        const struct tier_counts *n, const struct tier_anchors *a,
                        const float *w_max, const float *w_mean)
{
	if (!t || !w_max || !w_mean || layer < 0 || layer >= t->n_layers)
		return;
	struct tier_trace_layer *T = &t->layers[layer];
	int w0 = window_rank(n, a), count = w0 + tier_window(c, n);
	if (count > t->capacity)
		count = t->capacity;
	for (int r = 0; r < count; r++) {
		int64_t idx = rank_index(c, n, a, r);
		T->last_index[r] = idx;
		T->last_max[r] = w_max[r];
		T->last_mean[r] = w_mean[r];
		bool first = (uint64_t)idx >= T->observed_upto;
		if (r < n->n_sink) {
			T->sink_ema[r] = tier_anchor_score(T->sink_ema[r], w_max[r], first);
		} else if (r >= w0 && t->window > 0) {
			float *e = &T->win_ema[(uint64_t)idx % (uint64_t)t->window];
			*e = tier_anchor_score(*e, w_max[r], first);
		}
	}
	T->n_last = count;
	T->observed_upto = n->n_seen;
	if (layer == 0)
		t->steps++;
}

void tier_trace_observe_heads(struct tier_trace *t, const struct tier_caps *c, int layer,
                              const struct tier_counts *n, const struct tier_anchors *a,
                              const float *key_weight, int n_heads, size_t ld)
{
	if (!t || !key_weight || n_heads <= 0)
		return;
	int count = window_rank(n, a) + tier_window(c, n);
	if (count > t->capacity)
		count = t->capacity;
	for (int r = 0; r < count; r++) {
		float mx = 0.0f, sum = 0.0f;
		for (int h = 0; h < n_heads; h++) {
			float w = key_weight[(size_t)h * ld + (size_t)r];
			mx = w > mx ? w : mx;
			sum += w;
		}
		t->scratch_max[r] = mx;
		t->scratch_mean[r] = sum / (float)n_heads;
	}
	tier_trace_observe(t, c, layer, n, a, t->scratch_max, t->scratch_mean);
}

void tier_trace_fill_step(const struct tier_trace *t, const struct sinkcache_geometry *g,
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
	if (s->tier == CACHE_TIER_SINK)
		ema = T->sink_ema[sink_rank];
	else if (s->tier == CACHE_TIER_ANCHOR)
		ema = a->score[sink_rank];
	else
		ema = t->window > 0 ? T->win_ema[(uint64_t)s->stream_index % (uint64_t)t->window]
		                    : 0.0f;
	/* a token not attended since tracing began has no average yet */
	s->mass_ema = (uint64_t)s->stream_index < T->observed_upto && ema > 0.0f ? ema : 0.0f;
}

void tier_trace_fill_layer(const struct tier_trace *t, const struct sinkcache_geometry *g,
                           const struct tier_caps *c, int layer, const struct tier_counts *n,
                           const struct tier_anchors *a, bool attention,
                           struct cache_trace_layer *out)
{
	bool by_rank = g->rope_positions == ROPE_POSITIONS_CACHE;
	const struct tier_trace_layer *T =
	    t && attention && layer >= 0 && layer < t->n_layers ? &t->layers[layer] : NULL;
	int w0 = window_rank(n, a), n_win = tier_window(c, n);
	int count = w0 + n_win, n_comp = n_win - n->n_hot, cursor = 0;
	for (int r = 0; r < count; r++) {
		struct cache_trace_slot *s = &out->slots[r];
		s->stream_index = rank_index(c, n, a, r);
		s->rope_pos = by_rank ? r : s->stream_index;
		if (r < n->n_sink)
			s->tier = CACHE_TIER_SINK;
		else if (r < w0)
			s->tier = CACHE_TIER_ANCHOR;
		else
			s->tier = r - w0 < n_comp ? CACHE_TIER_COMPRESSED : CACHE_TIER_HOT;
		s->mass_max = s->mass_mean = s->mass_ema = 0.0f;
		if (T)
			slot_masses(t, T, a, r < n->n_sink ? r : r - n->n_sink, &cursor, s);
	}
	out->n_slots = count;
}
