/* Helpers for cache traces (cache/cachetrace.h): tier names, the titles'
 * geometry, the per-layer slot bound and the one validity check that every
 * consumer (renderer, API) runs before trusting a trace that another part
 * of the program filled.  Collecting the trace is the engine's job. */
#include "cache/cachetrace.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	case CACHE_TIER_SHARED:
		return "shared";
	default:
		return "?";
	}
}

void cache_trace_geometry_of(const struct cache_geometry *g, struct cache_trace_geometry *out)
{
	*out = (struct cache_trace_geometry){
	    .sink_keep_count = g->sink_keep_count,
	    .window_size = g->window_size,
	    .quant_bits = g->quant_enabled ? g->quant_bits : 0,
	    .full_precision_recent = g->full_precision_recent,
	    .anchor_max = g->strategy == CACHE_STRATEGY_SLIDING_WINDOW ? g->anchor_max : 0,
	};
}

size_t cache_trace_slots_per_layer(const struct cache_geometry *g)
{
	/* the capacity counts the anchor slots too (kv_layout_of in sinkcache.c) */
	return cache_geometry_capacity_tokens(g);
}

void cache_trace_step_free(struct cache_trace_step *t)
{
	if (!t)
		return;
	for (int l = 0; t->layers && l < t->n_layers; l++)
		free(t->layers[l].slots);
	free(t->layers);
	free(t);
}

struct cache_trace_step *cache_trace_step_new(const struct cache_geometry *g)
{
	size_t slots = cache_trace_slots_per_layer(g);
	if (g->n_layers <= 0)
		return NULL;
	struct cache_trace_step *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->n_layers = g->n_layers;
	t->layers = calloc((size_t)g->n_layers, sizeof(*t->layers));
	for (int l = 0; t->layers && l < g->n_layers; l++) {
		t->layers[l].slots = calloc(slots ? slots : 1, sizeof(*t->layers[l].slots));
		if (!t->layers[l].slots) {
			cache_trace_step_free(t);
			return NULL;
		}
	}
	if (!t->layers) {
		free(t);
		return NULL;
	}
	return t;
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
		if (!(ly->learned_sink_max >= 0.0f) || !(ly->learned_sink_mean >= 0.0f) ||
		    isinf(ly->learned_sink_max) || isinf(ly->learned_sink_mean))
			return err_set(err, err_len, -EINVAL,
			               "layer %d: learned sink mass must be finite and >= 0", l);
		for (int i = 0; i < ly->n_slots; i++) {
			int rc = check_slot(&ly->slots[i], i ? &ly->slots[i - 1] : NULL, l, i, err,
			                    err_len);
			if (rc)
				return rc;
		}
	}
	return 0;
}

/* 6 significant digits: the masses' precision that a picture or a test
 * needs, without cJSON's 17. */
static double digits6(float x)
{
	char b[32];
	snprintf(b, sizeof(b), "%.6g", (double)x);
	return strtod(b, NULL);
}

static cJSON *slot_array(const struct cache_trace_layer *ly, int field)
{
	cJSON *a = cJSON_CreateArray();
	for (int i = 0; a && i < ly->n_slots; i++) {
		const struct cache_trace_slot *s = &ly->slots[i];
		double v = 0.0;
		switch (field) {
		case 0:
			v = (double)s->stream_index;
			break;
		case 1:
			v = (double)s->tier;
			break;
		case 2:
			v = (double)s->rope_pos;
			break;
		case 3:
			v = digits6(s->mass_max);
			break;
		case 4:
			v = digits6(s->mass_mean);
			break;
		default:
			v = digits6(s->mass_ema);
			break;
		}
		cJSON *n = cJSON_CreateNumber(v);
		if (!n || !cJSON_AddItemToArray(a, n)) {
			cJSON_Delete(n);
			cJSON_Delete(a);
			return NULL;
		}
	}
	return a;
}

static bool add_field(cJSON *o, const char *name, cJSON *v)
{
	if (!v)
		return false;
	if (!cJSON_AddItemToObject(o, name, v)) {
		cJSON_Delete(v);
		return false;
	}
	return true;
}

/* The learned sink's masses of a layer that has one, beside its slots'. */
static bool add_learned_sink(cJSON *lo, const struct cache_trace_layer *ly, bool attention)
{
	if (!attention)
		return cJSON_AddNullToObject(lo, "learned_sink_mass_max") &&
		       cJSON_AddNullToObject(lo, "learned_sink_mass_mean");
	return cJSON_AddNumberToObject(lo, "learned_sink_mass_max",
	                               digits6(ly->learned_sink_max)) &&
	       cJSON_AddNumberToObject(lo, "learned_sink_mass_mean",
	                               digits6(ly->learned_sink_mean));
}

cJSON *cache_trace_json(const struct cache_trace_step *t, const bool *layer_wanted)
{
	static const char *const fields[] = {"stream_index", "tier",      "rope_position",
	                                     "mass_max",     "mass_mean", "mass_ema"};
	cJSON *o = cJSON_CreateObject();
	if (!o)
		return NULL;
	bool ok = cJSON_AddNumberToObject(o, "step", (double)t->step) &&
	          cJSON_AddNumberToObject(o, "stream_position", (double)t->stream_pos) &&
	          cJSON_AddBoolToObject(o, "tracing", t->attention);
	cJSON *g = ok ? cJSON_AddObjectToObject(o, "geometry") : NULL;
	ok = g && cJSON_AddNumberToObject(g, "sink_keep_count", t->geometry.sink_keep_count) &&
	     cJSON_AddNumberToObject(g, "window_size", t->geometry.window_size) &&
	     cJSON_AddNumberToObject(g, "quant_bits", t->geometry.quant_bits) &&
	     cJSON_AddNumberToObject(g, "full_precision_recent",
	                             t->geometry.full_precision_recent) &&
	     cJSON_AddNumberToObject(g, "anchor_max", t->geometry.anchor_max);
	const char *names[CACHE_TIER_COUNT];
	for (int i = 0; i < CACHE_TIER_COUNT; i++)
		names[i] = cache_tier_name((enum cache_tier)i);
	ok = ok && add_field(o, "tier_names", cJSON_CreateStringArray(names, CACHE_TIER_COUNT));
	cJSON *layers = ok ? cJSON_AddArrayToObject(o, "layers") : NULL;
	ok = layers != NULL;
	for (int l = 0; ok && l < t->n_layers; l++) {
		if (layer_wanted && !layer_wanted[l])
			continue;
		const struct cache_trace_layer *ly = &t->layers[l];
		cJSON *lo = cJSON_CreateObject();
		ok = lo && cJSON_AddItemToArray(layers, lo);
		if (!ok) {
			cJSON_Delete(lo);
			break;
		}
		ok = cJSON_AddNumberToObject(lo, "layer", l) &&
		     cJSON_AddNumberToObject(lo, "n_slots", ly->n_slots) &&
		     (ly->sliding_window == 0 ||
		      cJSON_AddNumberToObject(lo, "sliding_window", ly->sliding_window));
		for (int f = 0; ok && f < 6; f++)
			ok = f >= 3 && !t->attention ? cJSON_AddNullToObject(lo, fields[f]) != NULL
			                             : add_field(lo, fields[f], slot_array(ly, f));
		if (ok && ly->learned_sink)
			ok = add_learned_sink(lo, ly, t->attention);
	}
	if (!ok) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

int cache_trace_parse_layers(const char *spec, int n_layers, bool *wanted, char *err,
                             size_t err_len)
{
	for (int l = 0; l < n_layers; l++)
		wanted[l] = false;
	const char *p = spec;
	do {
		char *end;
		long a = strtol(p, &end, 10), b = a;
		bool ok = end != p && *p >= '0' && *p <= '9';
		if (ok && *end == '-') {
			const char *q = end + 1;
			b = strtol(q, &end, 10);
			ok = end != q && *q >= '0' && *q <= '9' && b >= a;
		}
		ok = ok && (*end == ',' || *end == '\0');
		if (!ok || b >= n_layers)
			return err_set(err, err_len, -EINVAL,
			               "layers: bad part \"%.*s\": want a list of layers and ranges "
			               "such as 0,2-3, each in 0..%d",
			               (int)strcspn(p, ","), p, n_layers - 1);
		for (long l = a; l <= b; l++)
			wanted[l] = true;
		p = *end == ',' ? end + 1 : end;
	} while (*p);
	return 0;
}
