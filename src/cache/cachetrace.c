/* Helpers for cache traces (cache/cachetrace.h): tier names, the titles'
 * geometry, the per-layer slot bound and the one validity check that every
 * consumer (renderer, API) runs before trusting a trace that another part
 * of the program filled.  Collecting the trace is the engine's job. */
#include "cache/cachetrace.h"

#include <errno.h>
#include <math.h>

#include "util/errbuf.h"

const char *cache_tier_name(enum cache_tier tier)
{
	switch (tier) {
	case CACHE_TIER_SINK:
		return "sink";
	case CACHE_TIER_ANCHOR:
		return "anchor";
	case CACHE_TIER_COMPRESSED:
		return "compressed";
	case CACHE_TIER_HOT:
		return "hot";
	default:
		return "?";
	}
}

void cache_trace_geometry_of(const struct sinkcache_geometry *g, struct cache_trace_geometry *out)
{
	*out = (struct cache_trace_geometry){
	    .sink_keep_count = g->sink_keep_count,
	    .window_size = g->window_size,
	    .quant_bits = g->quant_enabled ? g->quant_bits : 0,
	    .full_precision_recent = g->full_precision_recent,
	    .anchor_max = g->strategy == CACHE_STRATEGY_SLIDING_WINDOW ? g->anchor_max : 0,
	};
}

size_t cache_trace_slots_per_layer(const struct sinkcache_geometry *g)
{
	/* the capacity counts the anchor slots too (kv_layout_of in sinkcache.c) */
	return sinkcache_capacity_tokens(g);
}

static int check_slot(const struct cache_trace_slot *s, const struct cache_trace_slot *prev,
                      int layer, int i, char *err, size_t err_len)
{
	if (s->stream_index < 0)
		return err_set(err, err_len, -EINVAL,
		               "layer %d slot %d: negative stream index %lld", layer, i,
		               (long long)s->stream_index);
	if (prev && s->stream_index <= prev->stream_index)
		return err_set(err, err_len, -EINVAL,
		               "layer %d slot %d: stream index %lld after %lld (must increase)",
		               layer, i, (long long)s->stream_index, (long long)prev->stream_index);
	if ((unsigned)s->tier >= CACHE_TIER_COUNT)
		return err_set(err, err_len, -EINVAL, "layer %d slot %d: unknown tier %d", layer, i,
		               (int)s->tier);
	/* !(x >= 0) also catches NaN */
	if (!(s->mass_max >= 0.0f) || !(s->mass_mean >= 0.0f) || !(s->mass_ema >= 0.0f) ||
	    isinf(s->mass_max) || isinf(s->mass_mean) || isinf(s->mass_ema))
		return err_set(err, err_len, -EINVAL,
		               "layer %d slot %d: attention mass must be finite and >= 0", layer,
		               i);
	return 0;
}

int cache_trace_step_check(const struct cache_trace_step *t, char *err, size_t err_len)
{
	if (!t)
		return err_set(err, err_len, -EINVAL, "no cache trace");
	if (t->n_layers <= 0 || !t->layers)
		return err_set(err, err_len, -EINVAL, "cache trace has no layers (n_layers %d)",
		               t->n_layers);
	for (int l = 0; l < t->n_layers; l++) {
		const struct cache_trace_layer *ly = &t->layers[l];
		if (ly->n_slots < 0 || (ly->n_slots > 0 && !ly->slots))
			return err_set(err, err_len, -EINVAL,
			               "layer %d: %d slots but no slot array", l, ly->n_slots);
		for (int i = 0; i < ly->n_slots; i++) {
			int rc = check_slot(&ly->slots[i], i ? &ly->slots[i - 1] : NULL, l, i, err,
			                    err_len);
			if (rc)
				return rc;
		}
	}
	return 0;
}
