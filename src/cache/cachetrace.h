/* The trace of one step of one session's KV cache: per layer, every
 * resident slot with its stream index, tier, RoPE position and the attention
 * it received in that step.  What `sinkd eval --heatmap` renders
 * (cli/heatmap.h) and what the API will return.
 *
 * Plain structs over caller-owned arrays: the engine allocates, once per
 * session, cache_trace_slots_per_layer() slots for each layer and refills
 * them every step; nothing here allocates.  Per-layer slot counts may
 * differ, because each layer keeps its own anchors. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/geometry.h"

struct sinkcache;

enum cache_tier {
	CACHE_TIER_SINK = 0,   /* the first sink_keep_count tokens, never evicted */
	CACHE_TIER_ANCHOR,     /* a window token kept for the attention it received */
	CACHE_TIER_COMPRESSED, /* older window tokens, quantized */
	CACHE_TIER_HOT,        /* the newest window tokens, full precision */
	CACHE_TIER_SHARED,     /* sink tokens read from a shared prefix (not the session's own) */
	CACHE_TIER_COUNT
};

/* "sink", "anchor", "compressed", "hot", "shared"; "?" for anything else. */
const char *cache_tier_name(enum cache_tier tier);

struct cache_trace_slot {
	int64_t stream_index; /* the token's index in the session's stream, >= 0 */
	enum cache_tier tier;
	int64_t rope_pos; /* the position its key was rotated by: cache rank or stream index */
	/* Softmax weight this token received from the step's query, in [0, 1]: */
	float mass_max;  /* the largest over query heads */
	float mass_mean; /* the mean over query heads */
	/* Moving average of mass_max over the steps the token was resident
	 * (tier_anchor_score: weight TIER_ANCHOR_EMA on the newest step). */
	float mass_ema;
};

struct cache_trace_layer {
	int n_slots;                    /* resident slots of this layer */
	int sliding_window;             /* a model sliding-window layer's window (it keeps only
	                                 * its last that many tokens); 0: a global layer */
	struct cache_trace_slot *slots; /* (n_slots), strictly increasing stream_index */
	/* The model's learned sink logit (gpt-oss: a softmax term with a zero
	 * value, no slot): whether the layer has one, and the weight it got
	 * in the step, the largest and the mean over query heads. */
	bool learned_sink;
	float learned_sink_max, learned_sink_mean;
};

/* What the titles print about the session's cache. */
struct cache_trace_geometry {
	int sink_keep_count;
	int window_size;
	int quant_bits; /* 8 or 4; 0: the window is not quantized */
	int full_precision_recent;
	int anchor_max; /* anchor slots per layer; 0: none */
};

struct cache_trace_step {
	uint64_t step;      /* steps (tokens) observed since tracing began */
	int64_t stream_pos; /* stream index of the token whose query this is */
	bool attention;     /* the masses are a step's; false: nothing observed yet (zeros) */
	struct cache_trace_geometry geometry;
	int n_layers;
	struct cache_trace_layer *layers; /* (n_layers), caller-owned */
};

/* The titles' geometry of a cache geometry. */
void cache_trace_geometry_of(const struct cache_geometry *g, struct cache_trace_geometry *out);
/* Slots a layer can hold at most (sinks + anchors + window, or
 * max_context_length): what the engine allocates per layer once.  0 for an
 * invalid geometry. */
size_t cache_trace_slots_per_layer(const struct cache_geometry *g);
/* A step with the slot arrays for a cache of geometry g (every field
 * zero); NULL when out of memory.  cache_trace_step_free(NULL) is a no-op. */
struct cache_trace_step *cache_trace_step_new(const struct cache_geometry *g);
void cache_trace_step_free(struct cache_trace_step *t);
/* Checks a trace before use: at least one layer, slot arrays present,
 * stream indices non-negative and strictly increasing per layer, tiers
 * known, masses finite and non-negative; err names the layer and slot. */
int cache_trace_step_check(const struct cache_trace_step *t, char *err, size_t err_len);

/* A trace as the API and `sinkd eval --trace` write it: {"step",
 * "stream_position", "tracing", "geometry", "tier_names", "layers": [{"layer",
 * "n_slots", "stream_index", "tier" (indices into tier_names),
 * "rope_position", "mass_max", "mass_mean", "mass_ema" (null without
 * masses), and for a layer with a learned sink logit "learned_sink_mass_max",
 * "learned_sink_mass_mean" (its weight; null without masses)}]}, masses to
 * 6 significant digits.  layer_wanted (n_layers flags) or NULL for all.
 * NULL when out of memory. */
struct cJSON;
struct cJSON *cache_trace_json(const struct cache_trace_step *t, const bool *layer_wanted);
/* Parses a layer list as "0,2-3" into wanted (n_layers flags): -EINVAL
 * naming the part at fault and the layers that exist. */
int cache_trace_parse_layers(const char *spec, int n_layers, bool *wanted, char *err,
                             size_t err_len);

/* The trace of a CPU sink cache now (sinkcache_trace.c): out->n_layers and
 * every layer's slot array (cache_trace_slots_per_layer()) are the
 * caller's; masses are those of the last step observed while tracing
 * (sinkcache_trace_enable), of the tokens still resident.  Between forward
 * passes, on the thread that runs them. */
int sinkcache_trace_fill(const struct sinkcache *c, struct cache_trace_step *out, char *err,
                         size_t err_len);
