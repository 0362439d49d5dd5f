/* What a traced cache remembers between steps, over the tier policy's
 * counts (cache/tierpolicy.h): per layer, the last observed step's weights
 * by rank with the stream index each rank held then (ranks shift when
 * anchors come and go, stream indices do not), and each resident token's
 * moving average of the weight it received (tier_anchor_score), sinks by
 * slot, window tokens by stream index mod W, anchors by the anchor tier's
 * own scores.  Written once and used by the CPU cache (sinkcache_trace.c)
 * and the CUDA backend, so both give the same trace of the same stream.
 * It owns its arrays but no cache storage. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/cachetrace.h"
#include "cache/tierpolicy.h"

struct tier_trace;

/* A trace of n_layers layers of a cache of caps c; NULL when out of
 * memory.  tier_trace_free(NULL) is a no-op. */
struct tier_trace *tier_trace_new(const struct tier_caps *c, int n_layers);
void tier_trace_free(struct tier_trace *t);
/* Turns a cache's trace *t on (made if NULL) or off (freed, NULL): what
 * both backends' session_trace_enable do.  -ENOMEM with a message. */
int tier_trace_switch(struct tier_trace **t, const struct tier_caps *c, int n_layers, bool on,
                      char *err, size_t err_len);

/* Steps layer 0 observed since tracing began (or the last clear). */
uint64_t tier_trace_steps(const struct tier_trace *t);
/* Forgets everything observed (the cache was emptied). */
void tier_trace_clear(struct tier_trace *t);
/* A revision left layer `layer` at n_seen tokens: what was observed of the
 * dropped tokens is forgotten (their indices will be new tokens). */
void tier_trace_revised(struct tier_trace *t, int layer, uint64_t n_seen);

/* One step of layer `layer` at counts n with anchors a (NULL: none), before
 * the anchors move: w_max and w_mean hold each resident key's weight in
 * rank order (sinks, anchors, window), the largest and the mean over query
 * heads. */
void tier_trace_observe(struct tier_trace *t, const struct tier_caps *c, int layer,
                        const struct tier_counts *n, const struct tier_anchors *a,
                        const float *w_max, const float *w_mean);
/* The same from every head's weights: key_weight (n_heads, ld) in rank order. */
void tier_trace_observe_heads(struct tier_trace *t, const struct tier_caps *c, int layer,
                              const struct tier_counts *n, const struct tier_anchors *a,
                              const float *key_weight, int n_heads, size_t ld);

/* The learned sink's weight of each query head, weight (n_heads; NULL:
 * zeros), in the step layer `layer` observes (cache/sinkcache.h:
 * sinkcache_set_learned_sinks); its largest and its mean over heads are
 * what the layer's trace reports. */
void tier_trace_observe_learned(struct tier_trace *t, int layer, const float *weight, int n_heads);

/* The step fields of out (geometry, step, stream_pos, attention) for a cache
 * of geometry g that has seen n_seen tokens; t NULL: not traced. */
void tier_trace_fill_step(const struct tier_trace *t, const struct cache_geometry *g,
                          uint64_t n_seen, struct cache_trace_step *out);
/* Layer `layer` of out at counts n with anchors a (NULL: none): every
 * resident slot in stream order with its tier and RoPE position, and the
 * masses when out->attention (tier_trace_fill_step first), and the
 * learned sink's masses (whether the layer has one, learned_sink, is the
 * caller's to set).  The first
 * n_shared sinks are read from a shared prefix (backend.h:
 * session_new_shared): their tier is CACHE_TIER_SHARED; 0: none.
 * out->slots has room for tier_resident() + anchors. */
void tier_trace_fill_layer(const struct tier_trace *t, const struct cache_geometry *g,
                           const struct tier_caps *c, int layer, const struct tier_counts *n,
                           const struct tier_anchors *a, int n_shared, bool attention,
                           struct cache_trace_layer *out);
