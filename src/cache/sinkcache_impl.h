/* Internal layout of the tiered sink cache, shared by sinkcache.c (state,
 * eviction, revision) and attend.c (attention).  Not for other modules.
 *
 * Per layer, exactly the layer's share of cache_geometry_bound_bytes() in two
 * parts (D = head_dim, Dc = code bytes of D, S = sink slots, H = hot slots,
 * St = staging slots, Ng = group slots, G = group size, fp = dtype element).
 * The fronts of all layers lie in one block per cache (front; each layer's
 * 64-byte aligned; on huge pages when sinkcache.c says so); the back is a
 * block per layer (mem):
 *   front:
 *   sink    fp: k, v (n_kv, S, D) fp       quantized: k, v (n_kv, S, Dc) codes
 *                                          + kp, vp (n_kv, S, 2) fp32 scale,min
 *   hot     k, v (n_kv, H, D) fp           ring of tokens
 *   staging k, v (n_kv, St, D) fp          ring; St = G - 1
 *   anchors (A slots, stream order, cache_geometry.anchor_max):
 *           a_pos (A) u64 stream index, a_score (A) f32, a_below (A) i32,
 *           w_score (W) f32 window tokens' scores by stream index mod W,
 *           a_ko (n_kv, A, D) f32 keys rotated by their stream index,
 *           a_k, a_v (n_kv, A, D) fp   keys rotated by their rank (their
 *           stream index in rope_positions=original)
 *   back:
 *   groups  gk (Ng, n_kv, G, Dc) codes, gkp (Ng, n_kv, 2, D) fp32 per-channel
 *           scale (row 0) and min (row 1); gv (Ng, n_kv, G, Dc) codes,
 *           gvp (Ng, n_kv, G, 2) fp32 per-token scale,min.  Ring of groups.
 * Keys are stored rotated by their stream index (see sinkcache.c). */
#pragma once

#include <stdint.h>

#include "cache/sinkcache.h"
#include "cache/tierpolicy.h"
#include "cache/tiertrace.h"

/* Where a tier's tokens are stored: a ring of slots (how many it holds is
 * the tier policy's count). */
struct kv_ring {
	int head; /* slot of the oldest token */
	int cap;  /* slots */
};

/* The filled slots of a ring: n tokens from head. */
struct kv_run {
	int head, n, cap;
};

/* Which POPULATE_CHUNK-sized chunks of a mapped block were made resident. */
struct populate_map {
	unsigned char *base;
	size_t bytes;
	uint64_t *done; /* one bit per chunk */
};

struct kv_layer {
	/* S, W (window slots: sliding, or max_context_length - S for full),
	 * H (full_precision_recent, or the whole window unquantized) and G (0
	 * when nothing is ever quantized in the window): the policy's caps of
	 * this layer's span (a model sliding-window layer: W = H, no sinks) */
	struct tier_caps caps;
	bool sink_quant;                      /* sinks stored quantized per token */
	size_t back_bytes;                    /* of mem */
	size_t sink_tok, fp_tok, group_bytes; /* bytes a token / group holds (cache_layout) */
	int rope;              /* which of the cache's RoPE tables: 0 global, 1 sliding layers' */
	struct tier_counts t;  /* what each tier holds (tierpolicy.h) */
	struct kv_ring hot, stage;
	struct kv_ring groups; /* ring of group slots */
	double *cs_win;     /* (rope_dim) cos,sin of the newest token for window keys */
	double *cs_sink;    /* (rope_dim) same for sink keys */
	unsigned char *front; /* the layer's sinks, hot and staging (in the cache's front) */
	unsigned char *mem;   /* the layer's groups; NULL without quantized groups */
	struct populate_map mem_pop;
	unsigned char *sink_k, *sink_v, *hot_k, *hot_v, *st_k, *st_v, *gk, *gv;
	float *sink_kp, *sink_vp, *gkp, *gvp;
	struct tier_anchors anc; /* anchors resident: slots [0, anc.n) in stream order */
	float *a_ko;
	unsigned char *a_k, *a_v;
	/* (n_heads) the model's learned sink logit of each query head, in the
	 * cache's sink_logits (sinkcache_set_learned_sinks); NULL: none */
	const float *sink_logits;
};

struct sinkcache {
	struct cache_geometry g;
	/* each tier's largest capacity over the layers: what a trace sizes */
	struct tier_caps caps_max;
	int ref_layer;      /* whose counts stats report: the first global layer (or 0) */
	size_t bound_bytes; /* cache_geometry_bound_bytes */
	size_t fp_row;   /* bytes of one head row in dtype */
	size_t code_row; /* bytes of one head row of codes */
	size_t load_ahead_max;     /* attention loads a query's rows ahead up to this (bytes) */
	unsigned char *front;      /* every layer's front, layers front_stride apart */
	size_t front_bytes;        /* of front */
	struct populate_map front_pop;
	double *freq_hi[2], *freq_lo[2]; /* (rope_dim/2) global layers', sliding layers' */
	struct kv_layer *layers;   /* (n_layers) */
	float *flush_rows;         /* (G, head_dim) keys of a group being quantized; append is
	                            * serial per session, so one per cache */
	/* The last two positions' rope_cos_sin per RoPE table: every layer of a
	 * token asks for the same two (its stream index and its rank). */
	uint64_t cs_memo_pos[2][2];
	bool cs_memo_valid[2][2];
	int cs_memo_next[2];      /* slot the next new position replaces */
	double *cs_memo[2][2];    /* (rope_dim) each */
	struct tier_trace *trace; /* NULL unless tracing (sinkcache_trace_enable, tiertrace.h) */
	float softcap;            /* of the attention scores (sinkcache_set_softcap); 0: none */
	float *sink_logits;       /* (n_layers, sink_logit_heads) learned sink logits; NULL: none */
	int sink_logit_heads;
	/* The shared prefix whose rows every layer's sink_k/sink_v point into
	 * (sinkcache_new_shared): the cache holds its S sinks and never writes
	 * them; NULL: the sinks are the cache's own, in its front. */
	const struct sinkcache_prefix *prefix;
};

/* A shared sink tier (sinkcache_prefix.c): per layer the sink keys, then
 * the sink values, each (n_kv, S, D) full-precision rows as a cache's own
 * sink tier lays them out, layers layer_bytes apart in one block. */
struct sinkcache_prefix {
	struct cache_geometry g;
	int n_sink;         /* S */
	size_t layer_bytes; /* keys and values of one layer */
	size_t bytes;       /* of mem: layer_bytes * n_layers */
	unsigned char *mem;
};

/* Layer l's sink keys and values in p. */
static inline unsigned char *kv_prefix_keys(const struct sinkcache_prefix *p, int l)
{
	return p->mem + (size_t)l * p->layer_bytes;
}

static inline unsigned char *kv_prefix_values(const struct sinkcache_prefix *p, int l)
{
	return kv_prefix_keys(p, l) + p->layer_bytes / 2;
}

static inline int kv_ring_slot(const struct kv_ring *r, int i)
{
	int s = r->head + i;
	return s >= r->cap ? s - r->cap : s;
}

static inline struct kv_run kv_ring_run(const struct kv_ring *r, int n)
{
	return (struct kv_run){r->head, n, r->cap};
}

/* Tokens of a run from its head to the end of its slots: its filled slots
 * are [head, head + first) and then [0, n - first). */
static inline int kv_run_first(const struct kv_run *r)
{
	return r->cap - r->head < r->n ? r->cap - r->head : r->n;
}

/* Tokens of the window tier of a layer (compressed + hot). */
static inline int kv_layer_window(const struct sinkcache *c, const struct kv_layer *L)
{
	return tier_window(&L->caps, &L->t);
}

/* Rank of the first window token: sinks and anchors come before it. */
static inline int kv_layer_window_rank(const struct kv_layer *L)
{
	return L->t.n_sink + L->anc.n;
}

/* sinkcache.c, for sinkcache_image.c: makes the pages of [p, p + n) of m's
 * block resident before they are written; sets the angles for attending
 * with the newest token of a layer. */
void kv_populate_range(struct populate_map *m, const void *p, size_t n);
/* sinkcache_trace.c, for sinkcache.c: folds a step's key weights (rank
 * order, before anchors move) into the trace; forgets what was observed
 * (a reset) or the tokens a revision dropped. */
void kv_trace_observe(struct sinkcache *c, int layer, const float *key_weight,
                      const float *learned_weight, int n_heads);
void kv_trace_clear(struct sinkcache *c);
void kv_trace_revised(struct sinkcache *c);
void kv_layer_set_query_pos(struct sinkcache *c, struct kv_layer *L);
