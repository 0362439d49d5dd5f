/* The tiered attention-sink KV cache of one session (all layers):
 *   sink       the first sink_keep_count tokens of the stream, never evicted
 *   compressed older window tokens, int8/int4 (keys per channel in groups,
 *              values per token) when quantization is enabled
 *   hot        the newest full_precision_recent tokens, full precision
 * window_size = compressed + hot.  Resident tokens never exceed
 * sink_keep_count + window_size (or max_context_length for strategy full).
 *
 * The cache owns rotary positions: callers pass keys and queries BEFORE RoPE
 * and the cache applies it, so that a key's position is its rank in the cache
 * (StreamingLLM) or its stream index (rope_positions original, the ablation).
 * Angles are computed so that they stay exact after 10^6+ tokens.
 *
 * Per layer the protocol for each new token is: sinkcache_append() (serial per
 * session), then sinkcache_attend() for that token's query (read-only: may be
 * called concurrently for disjoint head ranges).  Layers advance
 * independently; after all layers saw the same tokens the cache is consistent. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum cache_strategy { CACHE_STRATEGY_SLIDING_WINDOW = 0, CACHE_STRATEGY_FULL };
enum rope_positions { ROPE_POSITIONS_CACHE = 0, ROPE_POSITIONS_ORIGINAL };
enum kv_dtype { KV_DTYPE_F32 = 0, KV_DTYPE_F16, KV_DTYPE_BF16 };

/* Largest anchor tier a layer may keep (cache_geometry.anchor_max). */
#define SINKCACHE_MAX_ANCHORS 4096

struct cache_geometry {
	int n_layers;
	int n_kv_heads;
	int head_dim;
	int rope_dim; /* rotated dims per head */
	double rope_theta;
	bool rope_neox; /* false: adjacent pairs (llama); true: halves (qwen2) */
	enum cache_strategy strategy;
	int sink_keep_count;    /* >= 0 */
	int window_size;        /* sliding_window: compressed + hot */
	int max_context_length; /* strategy full: the most tokens ever resident */
	bool quant_enabled;
	int quant_bits;            /* 8 or 4 */
	bool protect_sinks;        /* sink tier stays full precision */
	int full_precision_recent; /* hot tier size (<= window_size) */
	enum rope_positions rope_positions;
	enum kv_dtype dtype; /* storage of full-precision tiers */
	/* Anchor tier (sliding_window only): a window token that leaves with a
	 * moving average of received attention of at least anchor_promote (its
	 * largest over query heads, per layer) stays, in full precision, up to
	 * anchor_max per layer; an anchor that receives less than anchor_promote
	 * for anchor_demote_steps steps in a row leaves.  anchor_max 0: none. */
	int anchor_max;
	float anchor_promote;     /* (0, 1]: a softmax weight */
	int anchor_demote_steps;  /* >= 1 */
};

struct sinkcache_stats {
	uint64_t n_seen; /* tokens ever appended (minus revised) */
	int n_resident;
	int n_sink;
	int n_anchor; /* layer 0's anchors (each layer keeps its own) */
	int n_compressed;
	int n_hot;
	size_t bytes_resident;        /* bytes holding resident tokens' K/V and scales */
	size_t bytes_bound;           /* cache_geometry_bound_bytes() of the geometry */
	uint64_t evicted_compressed;  /* tokens dropped from the window */
	uint64_t moved_to_compressed; /* tokens quantized out of the hot tier */
	uint64_t anchors_promoted;    /* window tokens kept as anchors, all layers */
	uint64_t anchors_demoted;     /* anchors dropped again, all layers */
};

struct sinkcache;

/* The geometry of a stream that pins its first `pin` tokens (a system
 * prompt): they join the sink tier (sink_keep_count becomes at least pin),
 * which then stays full precision.  pin <= 0 changes nothing. */
void cache_geometry_pin(struct cache_geometry *g, int pin);
/* Checks a geometry; err says which field and the allowed values. */
int cache_geometry_check(const struct cache_geometry *g, char *err, size_t err_len);
/* The most bytes a cache of this geometry can ever hold; what the scheduler
 * reserves.  sinkcache_new() allocates exactly this (plus a few hundred bytes
 * of bookkeeping), never more, never again.  Per layer (kv = n_kv_heads,
 * D = head_dim, e = dtype bytes, Dc = D or D/2 code bytes, G = group size):
 *   sinks   S * 2*kv*D*e            (protected or unquantized)
 *           S * 2*kv*(Dc + 8)       (quantized per token: codes + fp32 scale,min)
 *   hot     H * 2*kv*D*e            (H = full_precision_recent >= 1, or the
 *                                    whole window without quantization)
 *   staging (G-1) * 2*kv*D*e
 *   groups  ceil(C/G) * kv*(2*G*Dc + 2*D*4 + G*2*4),  C = window - H
 *           (keys: codes + per-channel fp32 scale,min; values: codes +
 *            per-token fp32 scale,min; strategy full: floor(C/G) groups)
 * stats.bytes_resident counts the slots in use and reaches this bound once
 * the window is full whenever G divides C (G is chosen so when it can). */
size_t cache_geometry_bound_bytes(const struct cache_geometry *g);
/* What stats.bytes_resident counts of one layer's anchor tier holding
 * n_anchor tokens: its bookkeeping always, the rows in use. */
size_t cache_geometry_anchor_bytes(const struct cache_geometry *g, int n_anchor);

int sinkcache_new(const struct cache_geometry *g, struct sinkcache **out, char *err,
                  size_t err_len);
void sinkcache_free(struct sinkcache *c);
const struct cache_geometry *sinkcache_geometry(const struct sinkcache *c);

/* Whether n more tokens can be appended (strategy full refuses past
 * max_context_length; sliding window always can). */
bool sinkcache_can_append(const struct sinkcache *c, size_t n_tokens);

/* Prefetches, for writing, the rows the next sinkcache_append() to `layer`
 * stores (window tokens), so that a caller that knows which session comes
 * next can take those cache misses off the append. */
void sinkcache_prefetch_append(const struct sinkcache *c, int layer);

/* Appends one token's key and value (pre-RoPE) to `layer`.
 * k, v: (n_kv_heads, head_dim). */
int sinkcache_append(struct sinkcache *c, int layer, const float *k, const float *v, char *err,
                     size_t err_len);

/* Attention output of the newest token of `layer` for query heads
 * [head_begin, head_end): q is (n_heads, head_dim) pre-RoPE, out is
 * (n_heads, head_dim) and only the given heads are written.  scratch holds
 * sinkcache_scratch_floats() floats, one buffer per concurrent caller.
 * sink_mass (optional, (n_heads)): the softmax mass that each head gave to
 * the sink tier.  rows_cold: the layer's rows were not read just before
 * (true for a decode step, false for the later tokens of a prompt chunk);
 * it picks how they are fetched and never changes the result.
 * key_weight (optional, (n_heads, cache_geometry_capacity_tokens) floats): each
 * head's softmax weight of each resident token, in rank order (sinks,
 * anchors, window), for sinkcache_observe(). */
void sinkcache_attend(const struct sinkcache *c, int layer, const float *q, int n_heads,
                      int head_begin, int head_end, float *out, float *scratch, float *sink_mass,
                      float *key_weight, bool rows_cold);
size_t sinkcache_scratch_floats(const struct cache_geometry *g);

/* Whether the cache keeps anchors or is traced, so that its attention
 * weights matter. */
bool sinkcache_tracks_attention(const struct sinkcache *c);
/* Turns the collection of a cache trace (cache/cachetrace.h) on or off;
 * on costs a reduction over heads x resident tokens per layer and token,
 * and a few floats per slot.  -ENOMEM with a message. */
int sinkcache_trace_enable(struct sinkcache *c, bool on, char *err, size_t err_len);
bool sinkcache_tracing(const struct sinkcache *c);
/* After every head of the newest token of `layer` was attended with
 * key_weight: folds the weights into the layer's per-token moving averages
 * and anchor demotion counts, and into the trace (serial per session, as
 * append). */
void sinkcache_observe(struct sinkcache *c, int layer, const float *key_weight, int n_heads);

/* Drops the newest n tokens of every layer.  Exact: the remaining tokens
 * are bit-identical and the dropped ones leave no trace (they were full
 * precision: hot or staged, never part of a quantized group's scales).
 * Evicted tokens do not come back.  -ERANGE, with "can revise at most N
 * tokens" and why, when n exceeds the full-precision window tokens (all
 * window tokens without quantization); sinks are never revised. */
int sinkcache_revise(struct sinkcache *c, size_t n_tokens, char *err, size_t err_len);
/* Empties the cache (a session reused for a new stream). */
void sinkcache_reset(struct sinkcache *c);
/* Empties the cache and gives the pages of its quantized groups back to the
 * system; the pages its front (sinks, hot and staging rows of every layer)
 * made resident stay.  Returns their bytes: what a cache kept for reuse
 * holds (a huge-page front may hold up to 2 MiB more per 2 MiB touched). */
size_t sinkcache_reset_trim(struct sinkcache *c);
/* Whether two geometries describe the same cache. */
bool cache_geometry_equal(const struct cache_geometry *a,
                              const struct cache_geometry *b);

void sinkcache_get_stats(const struct sinkcache *c, struct sinkcache_stats *out);
/* Tokens resident now (sinks + window): sinkcache_stats.n_resident without
 * summing the bytes of every layer, for the forward's per-batch work
 * estimates. */
int sinkcache_resident_tokens(const struct sinkcache *c);

/* The most tokens resident at once: sink_keep_count + window_size, or
 * max_context_length for strategy full (0 for an invalid geometry). */
size_t cache_geometry_capacity_tokens(const struct cache_geometry *g);

/* The tier sizes a geometry gives (the one place they are decided):
 * sink slots, window tokens at most, hot slots, group size G (0: nothing is
 * quantized in the window), staging slots (G-1), group slots, whether sinks
 * are stored quantized, and the bytes of a full-precision row and of a row
 * of codes. */
struct cache_tiers {
	int sink, window, hot, group, stage, n_groups;
	bool sink_quant;
	size_t fp_row, code_row;
};
int cache_geometry_tiers_of(const struct cache_geometry *g, struct cache_tiers *t, char *err,
                       size_t err_len);

/* Tokens per quantization group of the compressed tier (keys share per-channel
 * scales over a group): 32, or a divisor of the compressed capacity in
 * [16, 32], or the capacity itself when below 32; 0 without quantization. */
int cache_geometry_quant_group_size(const struct cache_geometry *g);

/* TEST ONLY: makes the next appended token have stream index `index`, as if
 * the tokens in between had streamed through and been evicted.  Allowed when
 * every layer holds its full sink tier and an empty window.  Lets tests check
 * positions at stream index 10^7 without appending 10^7 tokens. */
int sinkcache_debug_set_stream_index(struct sinkcache *c, uint64_t index, char *err,
                                     size_t err_len);
