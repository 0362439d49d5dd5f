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

#include "cache/geometry.h"

struct sinkcache;
/* A read-only sink tier that caches of one geometry share (below). */
struct sinkcache_prefix;
struct kv_image;

int sinkcache_new(const struct cache_geometry *g, struct sinkcache **out, char *err,
                  size_t err_len);
void sinkcache_free(struct sinkcache *c);
const struct cache_geometry *sinkcache_geometry(const struct sinkcache *c);

/* ---- shared sink tiers ---------------------------------------------------
 * A pinned prefix's K/V rows depend only on its S tokens and the geometry
 * (sinks are computed over full-precision sinks alone and keyed by rank), so
 * caches of one geometry that start with the same S tokens can read one
 * read-only copy of them.  Eligible geometries: every layer global
 * (!cache_geometry_per_layer), sinks full precision (protect_sinks or no
 * quantization), S = sink_keep_count >= 1 (cache_geometry_share_check). */

/* Copies the sink tier of c into a new prefix: c must hold exactly its S
 * sinks (n_seen == n_sink == S in every layer, no window or anchor tokens),
 * else -EINVAL; -ENOTSUP for a geometry that cannot share (above).  *bytes:
 * what the prefix holds, cache_geometry_sink_bytes(). */
int sinkcache_prefix_new(const struct sinkcache *c, struct sinkcache_prefix **out, size_t *bytes,
                         char *err, size_t err_len);
/* Every cache sharing p must have been freed first.  NULL: a no-op. */
void sinkcache_prefix_free(struct sinkcache_prefix *p);
const struct cache_geometry *sinkcache_prefix_geometry(const struct sinkcache_prefix *p);
/* A cache of p's geometry whose sink tier is p's rows, read in place: it
 * holds the S tokens (n_seen == n_sink == S) exactly as the cache p was
 * made from held them, owns no sink rows (its front is smaller by them)
 * and never writes p.  Its stats: n_shared = S, bytes_shared = p's bytes,
 * bytes_bound = the geometry's bound less them, bytes_resident what it
 * owns.  sinkcache_export carries the sinks (a self-contained image);
 * sinkcache_import needs the cache at its S shared tokens and an image
 * whose sink rows are byte-equal to p's (-EINVAL naming the first layer
 * that differs); sinkcache_reset returns it to holding the S shared tokens
 * (never empty), so a shared cache is not for reuse by another stream. */
int sinkcache_new_shared(const struct sinkcache_prefix *p, struct sinkcache **out, char *err,
                         size_t err_len);
/* The shared prefix c reads its sinks from; NULL: it owns them. */
const struct sinkcache_prefix *sinkcache_shared_prefix(const struct sinkcache *c);
/* The canonical image (cache/kvimage.h, allocating out->data) of a cache of
 * p's geometry that appended only p's first n tokens, 1 <= n <= S (-EINVAL
 * otherwise): it imports into a plain cache exactly. */
int sinkcache_prefix_image(const struct sinkcache_prefix *p, int n, struct kv_image *out,
                           char *err, size_t err_len);

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
 * the sink tier; learned_mass (optional, (n_heads)): the mass each head gave
 * to its learned sink logit (sinkcache_set_learned_sinks; 0 without one).
 * rows_cold: the layer's rows were not read just before
 * (true for a decode step, false for the later tokens of a prompt chunk);
 * it picks how they are fetched and never changes the result.
 * key_weight (optional, (n_heads, cache_geometry_capacity_tokens) floats): each
 * head's softmax weight of each resident token, in rank order (sinks,
 * anchors, window), for sinkcache_observe(); with a learned sink the
 * weights sum to 1 less its mass. */
void sinkcache_attend(const struct sinkcache *c, int layer, const float *q, int n_heads,
                      int head_begin, int head_end, float *out, float *scratch, float *sink_mass,
                      float *learned_mass, float *key_weight, bool rows_cold);
size_t sinkcache_scratch_floats(const struct cache_geometry *g);
/* Soft-caps the attention scores of every layer: each q.k/sqrt(head_dim)
 * becomes cap * tanh(score / cap) before the softmax (gemma2's
 * attn_logit_softcapping, a fact of the model the backend sets on each
 * cache); cap 0: none, the default. */
void sinkcache_set_softcap(struct sinkcache *c, float cap);
/* Learned sink logits of layer `layer` (gpt-oss's attn_sinks, a fact of the
 * model the backend sets on each cache): logits (n_heads), one per query
 * head, join each head's softmax denominator as a key of score logits[h]
 * and value zero (the soft-cap does not apply to them); copied.  NULL: the
 * layer has none, the default.  n_heads must be a multiple of n_kv_heads,
 * the same for every layer, and the n_heads sinkcache_attend is given.
 * -EINVAL / -ENOMEM with a message. */
int sinkcache_set_learned_sinks(struct sinkcache *c, int layer, const float *logits, int n_heads,
                                char *err, size_t err_len);
bool sinkcache_has_learned_sinks(const struct sinkcache *c, int layer);

/* Whether the cache keeps anchors or is traced, so that its attention
 * weights matter. */
bool sinkcache_tracks_attention(const struct sinkcache *c);
/* Turns the collection of a cache trace (cache/cachetrace.h) on or off;
 * on costs a reduction over heads x resident tokens per layer and token,
 * and a few floats per slot.  -ENOMEM with a message. */
int sinkcache_trace_enable(struct sinkcache *c, bool on, char *err, size_t err_len);
bool sinkcache_tracing(const struct sinkcache *c);
/* After every head of the newest token of `layer` was attended with
 * key_weight (and learned_mass, learned_weight here; NULL: not kept):
 * folds the weights into the layer's per-token moving averages and anchor
 * demotion counts, and into the trace (serial per session, as append). */
void sinkcache_observe(struct sinkcache *c, int layer, const float *key_weight,
                       const float *learned_weight, int n_heads);

/* Drops the newest n tokens of every layer.  Exact: the remaining tokens
 * are bit-identical and the dropped ones leave no trace (they were full
 * precision: hot or staged, never part of a quantized group's scales).
 * Evicted tokens do not come back.  SDERR_CONFLICT, with "can revise at most N
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
void sinkcache_get_stats(const struct sinkcache *c, struct sinkcache_stats *out);
/* Tokens resident now (sinks + window): sinkcache_stats.n_resident without
 * summing the bytes of every layer, for the forward's per-batch work
 * estimates. */
int sinkcache_resident_tokens(const struct sinkcache *c);

/* TEST ONLY: makes the next appended token have stream index `index`, as if
 * the tokens in between had streamed through and been evicted.  Allowed when
 * every layer holds its full sink tier and an empty window.  Lets tests check
 * positions at stream index 10^7 without appending 10^7 tokens. */
int sinkcache_debug_set_stream_index(struct sinkcache *c, uint64_t index, char *err,
                                     size_t err_len);
