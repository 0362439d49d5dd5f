/* Cache traces of the CPU sink cache: what every layer holds, in stream
 * order, with the attention each resident token received in the last step
 * and its moving average.  Collected only while a session asks for it: the
 * attention then writes every head's key weights (as it does for anchors)
 * and observing them costs a pass over heads x resident tokens per layer
 * and token. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cachetrace.h"
#include "cache/sinkcache_impl.h"
#include "util/errbuf.h"

void kv_trace_free(struct kv_trace *t, int n_layers)
{
	if (!t)
		return;
	for (int l = 0; t->layers && l < n_layers; l++) {
		struct kv_trace_layer *T = &t->layers[l];
		free(T->last_index);
		free(T->last_max);
		free(T->last_mean);
		free(T->sink_ema);
		free(T->win_ema);
	}
	free(t->layers);
	free(t);
}

static struct kv_trace *trace_new(const struct sinkcache *c)
{
	size_t cap = (size_t)(c->caps.sink + c->caps.anchor + c->caps.window);
	struct kv_trace *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->layers = calloc((size_t)c->g.n_layers, sizeof(*t->layers));
	if (!t->layers)
		goto oom;
	for (int l = 0; l < c->g.n_layers; l++) {
		struct kv_trace_layer *T = &t->layers[l];
		T->last_index = calloc(cap ? cap : 1, sizeof(*T->last_index));
		T->last_max = calloc(cap ? cap : 1, sizeof(float));
		T->last_mean = calloc(cap ? cap : 1, sizeof(float));
		T->sink_ema = calloc((size_t)c->caps.sink + 1, sizeof(float));
		T->win_ema = calloc((size_t)c->caps.window + 1, sizeof(float));
		if (!T->last_index || !T->last_max || !T->last_mean || !T->sink_ema || !T->win_ema)
			goto oom;
	}
	return t;
oom:
	kv_trace_free(t, c->g.n_layers);
	return NULL;
}

int sinkcache_trace_enable(struct sinkcache *c, bool on, char *err, size_t err_len)
{
	if (!on) {
		kv_trace_free(c->trace, c->g.n_layers);
		c->trace = NULL;
		return 0;
	}
	if (c->trace)
		return 0;
	c->trace = trace_new(c);
	if (!c->trace)
		return err_set(err, err_len, -ENOMEM, "sink cache: out of memory for a cache trace");
	return 0;
}

bool sinkcache_tracing(const struct sinkcache *c)
{
	return c->trace != NULL;
}

void kv_trace_clear(struct sinkcache *c)
{
	if (!c->trace)
		return;
	c->trace->steps = 0;
	for (int l = 0; l < c->g.n_layers; l++) {
		struct kv_trace_layer *T = &c->trace->layers[l];
		T->n_last = 0;
		T->observed_upto = 0;
	}
}

void kv_trace_revised(struct sinkcache *c)
{
	if (!c->trace)
		return;
	for (int l = 0; l < c->g.n_layers; l++) {
		struct kv_trace_layer *T = &c->trace->layers[l];
		uint64_t seen = c->layers[l].t.n_seen;
		/* the indices past the revision will be new tokens */
		if (T->observed_upto > seen)
			T->observed_upto = seen;
		while (T->n_last > 0 && (uint64_t)T->last_index[T->n_last - 1] >= seen)
			T->n_last--;
	}
}

/* The stream index of the token at rank r of layer L. */
static int64_t rank_index(const struct kv_layer *L, int n_win, int r)
{
	if (r < L->t.n_sink)
		return r;
	if (r < L->t.n_sink + L->anc.n)
		return (int64_t)L->anc.pos[r - L->t.n_sink];
	return (int64_t)(L->t.n_seen - (uint64_t)n_win) + (r - kv_layer_window_rank(L));
}

void kv_trace_observe(struct sinkcache *c, int layer, const float *key_weight, int n_heads)
{
	if (!c->trace || !key_weight || layer < 0 || layer >= c->g.n_layers || n_heads <= 0)
		return;
	struct kv_layer *L = &c->layers[layer];
	struct kv_trace_layer *T = &c->trace->layers[layer];
	int ld = c->caps.sink + c->caps.anchor + c->caps.window;
	int n_win = kv_layer_window(c, L), n = kv_layer_window_rank(L) + n_win;
	for (int r = 0; r < n; r++) {
		float mx = 0.0f, sum = 0.0f;
		for (int h = 0; h < n_heads; h++) {
			float w = key_weight[(size_t)h * (size_t)ld + (size_t)r];
			mx = w > mx ? w : mx;
			sum += w;
		}
		int64_t idx = rank_index(L, n_win, r);
		T->last_index[r] = idx;
		T->last_max[r] = mx;
		T->last_mean[r] = sum / (float)n_heads;
		bool first = (uint64_t)idx >= T->observed_upto;
		if (r < L->t.n_sink) {
			T->sink_ema[r] = tier_anchor_score(T->sink_ema[r], mx, first);
		} else if (r >= kv_layer_window_rank(L)) {
			float *e = &T->win_ema[(uint64_t)idx % (uint64_t)c->caps.window];
			*e = tier_anchor_score(*e, mx, first);
		}
	}
	T->n_last = n;
	T->observed_upto = L->t.n_seen;
	if (layer == 0)
		c->trace->steps++;
}

/* Mass of stream index idx in the last step: the last step's ranks are in
 * stream order, so a cursor walks them once per layer. */
static void last_mass(const struct kv_trace_layer *T, int *cursor, int64_t idx, float *mx,
                      float *mean)
{
	while (*cursor < T->n_last && T->last_index[*cursor] < idx)
		(*cursor)++;
	bool hit = *cursor < T->n_last && T->last_index[*cursor] == idx;
	*mx = hit ? T->last_max[*cursor] : 0.0f;
	*mean = hit ? T->last_mean[*cursor] : 0.0f;
}

int sinkcache_trace_fill(const struct sinkcache *c, struct cache_trace_step *out, char *err,
                         size_t err_len)
{
	if (out->n_layers != c->g.n_layers || !out->layers)
		return err_set(err, err_len, -EINVAL,
		               "cache trace: %d layers given for a cache of %d", out->n_layers,
		               c->g.n_layers);
	bool by_rank = c->g.rope_positions == ROPE_POSITIONS_CACHE;
	const struct kv_trace *tr = c->trace;
	cache_trace_geometry_of(&c->g, &out->geometry);
	out->step = tr ? tr->steps : 0;
	out->attention = tr && tr->steps > 0;
	out->stream_pos = (int64_t)c->layers[0].t.n_seen - 1;
	for (int l = 0; l < c->g.n_layers; l++) {
		const struct kv_layer *L = &c->layers[l];
		const struct kv_trace_layer *T = tr ? &tr->layers[l] : NULL;
		struct cache_trace_layer *ly = &out->layers[l];
		int n_win = kv_layer_window(c, L), w0 = kv_layer_window_rank(L);
		int n = w0 + n_win, n_comp = n_win - L->t.n_hot, cursor = 0;
		for (int r = 0; r < n; r++) {
			struct cache_trace_slot *s = &ly->slots[r];
			s->stream_index = rank_index(L, n_win, r);
			s->rope_pos = by_rank ? r : s->stream_index;
			if (r < L->t.n_sink)
				s->tier = CACHE_TIER_SINK;
			else if (r < w0)
				s->tier = CACHE_TIER_ANCHOR;
			else
				s->tier = r - w0 < n_comp ? CACHE_TIER_COMPRESSED : CACHE_TIER_HOT;
			s->mass_max = s->mass_mean = s->mass_ema = 0.0f;
			if (!T || !out->attention)
				continue;
			last_mass(T, &cursor, s->stream_index, &s->mass_max, &s->mass_mean);
			float ema;
			if (s->tier == CACHE_TIER_SINK)
				ema = T->sink_ema[r];
			else if (s->tier == CACHE_TIER_ANCHOR)
				ema = L->anc.score[r - L->t.n_sink];
			else
				ema = T->win_ema[(uint64_t)s->stream_index % (uint64_t)c->caps.window];
			/* a token not attended since tracing began has no average yet */
			s->mass_ema = (uint64_t)s->stream_index < T->observed_upto && ema > 0.0f ? ema : 0.0f;
		}
		ly->n_slots = n;
	}
	return 0;
}
