/* The geometry of a session's KV cache: the model's shape as the cache sees
 * it (layers, kv heads, head width, RoPE), the cache settings (strategy,
 * sinks, window, quantization, anchors) and, per layer, its attention span.
 * From it follow the tier sizes of each layer and the byte bound that the
 * scheduler reserves; both backends, the config, snapshots and the scheduler
 * read them here.  A geometry is a plain value (copied by value). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct model_hparams;

enum cache_strategy { CACHE_STRATEGY_SLIDING_WINDOW = 0, CACHE_STRATEGY_FULL };
enum rope_positions { ROPE_POSITIONS_CACHE = 0, ROPE_POSITIONS_ORIGINAL };
enum kv_dtype { KV_DTYPE_F32 = 0, KV_DTYPE_F16, KV_DTYPE_BF16 };

/* Largest anchor tier a layer may keep (cache_geometry.anchor_max). */
#define SINKCACHE_MAX_ANCHORS 4096
/* Widest head the cache stores (its rows are staged on the stack). */
#define SINKCACHE_MAX_HEAD_DIM 512
/* Largest quantization group (tokens). */
#define SINKCACHE_MAX_GROUP 32
/* Most layers a geometry describes: the model loader's layer limit
 * (MODEL_MAX_LAYERS in model/model.c), so every model it loads fits. */
#define CACHE_GEOMETRY_MAX_LAYERS 4096

/* One layer's attention span.  own false (a zero entry): the layer takes the
 * geometry's strategy and window_size, so a geometry written as a literal,
 * read from a snapshot or narrowed by a session's window_size stays uniform;
 * own true: the layer's own strategy and window (a sliding-window layer
 * beside global ones).  swa (with own): a model sliding-window layer
 * (model_hparams.layer_swa): it keeps exactly its last window_size tokens,
 * as the model was trained: no sinks, anchors or pinned prefix, nothing
 * quantized, RoPE base rope_theta_swa without frequency scaling (llama.cpp
 * scales only global layers where rope_freq_scale_train_swa is 1), or with
 * the global layers' scaling and YaRN where swa_rope_scaled (gemma2,
 * gpt-oss). */
struct cache_layer_span {
	bool own;
	uint8_t strategy;    /* enum cache_strategy, when own */
	bool swa;            /* a model sliding-window layer, when own */
	int32_t window_size; /* sliding_window: compressed + hot, when own */
};

/* The RoPE a layer turns its keys and queries with. */
struct cache_layer_rope {
	double theta;
	double freq_scale;    /* 1: none */
	const float *factors; /* (rope_dim/2) or NULL: none */
};

struct cache_geometry {
	int n_layers;
	int n_kv_heads;
	int head_dim;
	int rope_dim; /* rotated dims per head */
	double rope_theta;
	bool rope_neox; /* false: adjacent pairs (llama); true: halves (qwen2) */
	/* Pair i turns at freq_scale * theta^(-2i/rope_dim) / rope_factors[i]:
	 * linear RoPE scaling (0 reads as 1: none) and llama3's per-pair
	 * factors (rope_freqs.weight; n_rope_factors 0: none, else rope_dim/2).
	 * Both come from the model file, whose SHA-256 a snapshot carries, so
	 * snapshots do not store them: a restore takes the model's. */
	double rope_freq_scale;
	/* RoPE base of model sliding-window layers (0: rope_theta), and whether
	 * they turn with the global layers' scale, factors and YaRN blend
	 * (model_hparams.swa_rope_scaled) rather than unscaled; from the model
	 * file, so snapshots do not store them either */
	double rope_theta_swa;
	bool swa_rope_scaled;
	int n_rope_factors;
	float rope_factors[SINKCACHE_MAX_HEAD_DIM / 2]; /* (n_rope_factors) */
	/* YaRN (rope.scaling.type yarn): ext_factor 0: none; else the blend of
	 * rope_freqs_init_yarn over the original context rope_ctx_orig */
	double rope_ext_factor;
	int rope_ctx_orig;
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
	float anchor_promote;                                     /* (0, 1]: a softmax weight */
	int anchor_demote_steps;                                  /* >= 1 */
	struct cache_layer_span layer[CACHE_GEOMETRY_MAX_LAYERS]; /* (n_layers) used */
};

/* The cache settings of a config (inference.cache, .quantization,
 * .attention and max_context_length), what a geometry is built from beside
 * the model's shape. */
struct cache_settings {
	enum cache_strategy strategy;
	int sink_keep_count;
	int window_size;
	int max_context_length;
	bool quant_enabled;
	int quant_bits;
	bool protect_sinks;
	int full_precision_recent;
	enum rope_positions rope_positions;
	enum kv_dtype dtype;
	bool anchors_enabled;
	int anchor_max;
	double anchor_promote;
	int anchor_demote_steps;
};

/* The tier sizes a geometry gives a layer (the one place they are decided):
 * sink slots, window tokens at most, hot slots, group size G (0: nothing is
 * quantized in the window), staging slots (G-1), group slots, anchor slots,
 * whether the layer keeps everything (strategy full), whether sinks are
 * stored quantized, and the bytes of a full-precision row and of a row of
 * codes. */
struct cache_tiers {
	int sink, window, hot, group, stage, n_groups, anchor;
	bool full;
	bool sink_quant;
	size_t fp_row, code_row;
};

/* One layer's tiers with their bytes, as the CPU cache lays them out
 * (sinkcache_impl.h): what the byte bound counts. */
struct cache_layout {
	struct cache_tiers t;
	size_t sink_tok, fp_tok, group_bytes; /* bytes per token / group, all kv heads, K+V */
	size_t layer_bytes;                   /* front_bytes + back_bytes: the bound of the layer */
	size_t front_bytes;                   /* sinks, hot, staging and anchors */
	size_t anchor_bytes;                  /* anchors: rows and bookkeeping */
	size_t back_bytes;                    /* quantized groups */
	size_t front_stride; /* front_bytes rounded up to 64: layer fronts' spacing */
};

/* What a cache of a geometry holds now, as both backends report it. */
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
	/* The figures above (n_seen .. n_hot, evicted, moved) are the global
	 * layers' (all alike; layer 0's when every layer slides); the model
	 * sliding-window layers (all alike) hold this many (0: none slides). */
	int n_resident_swa;
	/* Of the sink tier, tokens whose rows the cache reads from a shared
	 * prefix (backend.h: session_new_shared) and do not count in
	 * bytes_resident or bytes_bound; bytes_shared: those rows' bytes. */
	int n_shared;
	size_t bytes_shared;
};

/* Bytes of one element of a full-precision tier. */
size_t kv_dtype_size(enum kv_dtype dt);

/* Bytes of n codes of `bits` (8 or 4). */
static inline size_t kvq_code_bytes(int n, int bits)
{
	return bits == 4 ? (size_t)n / 2 : (size_t)n;
}

/* The geometry of a model under cache settings s: global layers get the
 * settings' strategy and window (window_size applies to them), the model's
 * sliding-window layers (model_hparams.layer_swa) their own window (see
 * cache_geometry_set_model_layers). */
void cache_geometry_build(const struct cache_settings *s, const struct model_hparams *hp,
                          struct cache_geometry *g);
/* Gives each model sliding-window layer of hp its span (window swa_window;
 * under strategy full at most max_context_length, since the global layers
 * refuse more tokens anyway) and g the model's rope_theta_swa; the other
 * layers take the geometry's.  What a snapshot's geometry gets on restore. */
void cache_geometry_set_model_layers(struct cache_geometry *g, const struct model_hparams *hp);
/* Whether a geometry is the shape of a model (layers, kv heads, head_dim,
 * rope_dim, RoPE scale and factors, which layers slide and how far);
 * -EINVAL with both shapes in err. */
int cache_geometry_fits_model(const struct cache_geometry *g, const struct model_hparams *hp,
                              char *err, size_t err_len);

/* The model's RoPE frequency scale, per-pair factors and YaRN blend into g
 * (what cache_geometry_build copies; a snapshot's geometry gets them on
 * restore).  A longrope model (phi3: rope_factors_long / _short) gets the
 * long factors when g->max_context_length exceeds the model's original
 * context (rope.scaling.original_context_length), else the short ones: the
 * choice llama.cpp makes from its context size, here made from the most
 * tokens the configuration lets a stream reach. */
void cache_geometry_set_rope_scaling(struct cache_geometry *g, const struct model_hparams *hp);
/* The factors for rope_freqs_init (NULL: none) and the scale (1: none). */
const float *cache_geometry_rope_factors(const struct cache_geometry *g);
double cache_geometry_rope_freq_scale(const struct cache_geometry *g);
/* The pair frequencies of g's RoPE (rope_freqs_init_yarn with its theta,
 * rope_dim, factors, scale and YaRN blend); hi, lo: (rope_dim/2). */
void cache_geometry_rope_freqs(const struct cache_geometry *g, double *hi, double *lo);

/* Layer l's span with the geometry's values filled in where it has none of
 * its own; set_layer gives layer l its own span. */
struct cache_layer_span cache_geometry_layer_span(const struct cache_geometry *g, int l);
void cache_geometry_set_layer(struct cache_geometry *g, int l, enum cache_strategy strategy,
                              int window_size);
/* Makes layer l a model sliding-window layer of window window_size. */
void cache_geometry_set_layer_swa(struct cache_geometry *g, int l, int window_size);
/* Whether any layer has a span of its own (a cache whose layers differ). */
bool cache_geometry_per_layer(const struct cache_geometry *g);
/* Layer l's RoPE: the geometry's, or for a model sliding-window layer
 * rope_theta_swa (0: rope_theta) unscaled (scaled as the global layers
 * where swa_rope_scaled). */
struct cache_layer_rope cache_geometry_layer_rope(const struct cache_geometry *g, int l);
/* Layer l's pair frequencies: a sliding layer's from its own base (with
 * the global scaling, factors and YaRN where swa_rope_scaled), a global
 * layer's as cache_geometry_rope_freqs (scaling, factors, YaRN). */
void cache_geometry_layer_rope_freqs(const struct cache_geometry *g, int l, double *hi, double *lo);

/* The geometry of a stream that pins its first `pin` tokens (a system
 * prompt): they join the sink tier (sink_keep_count becomes at least pin),
 * which then stays full precision.  pin <= 0 changes nothing. */
void cache_geometry_pin(struct cache_geometry *g, int pin);
/* Checks a geometry, each layer's span included; err says which field and
 * the allowed values. */
int cache_geometry_check(const struct cache_geometry *g, char *err, size_t err_len);
/* Whether two geometries describe the same cache (layer spans compared as
 * they take effect). */
bool cache_geometry_equal(const struct cache_geometry *a, const struct cache_geometry *b);

/* The most bytes a cache of this geometry can ever hold; what the scheduler
 * reserves.  sinkcache_new() allocates exactly this (plus a few hundred bytes
 * of bookkeeping), never more, never again.  The sum over layers of (kv =
 * n_kv_heads, D = head_dim, e = dtype bytes, Dc = D or D/2 code bytes, G =
 * group size, the window the layer's):
 *   sinks   S * 2*kv*D*e            (protected or unquantized)
 *           S * 2*kv*(Dc + 8)       (quantized per token: codes + fp32 scale,min)
 *   hot     H * 2*kv*D*e            (H = full_precision_recent >= 1, or the
 *                                    whole window without quantization)
 *   staging (G-1) * 2*kv*D*e
 *   groups  ceil(C/G) * kv*(2*G*Dc + 2*D*4 + G*2*4),  C = window - H
 *           (keys: codes + per-channel fp32 scale,min; values: codes +
 *            per-token fp32 scale,min; strategy full: floor(C/G) groups)
 *   anchors A * (8 + 4 + 4 + kv*D*4 + 2*kv*D*e) + window*4
 * stats.bytes_resident counts the slots in use and reaches this bound once
 * the window is full whenever G divides C (G is chosen so when it can).
 * 0 for an invalid geometry. */
size_t cache_geometry_bound_bytes(const struct cache_geometry *g);
/* The sink rows' share of cache_geometry_bound_bytes: per layer sink slots x
 * bytes of a sink token (cache_layout.sink_tok).  What a cache reading its
 * sinks from a shared prefix (backend.h: session_new_shared) does not own.
 * 0 for an invalid geometry. */
size_t cache_geometry_sink_bytes(const struct cache_geometry *g);
/* Whether caches of g can share one read-only sink tier (a pinned prefix,
 * backend.h: prefix_new): every layer global (no model sliding-window
 * layer), sinks in full precision (protect_sinks or no quantization), at
 * least one sink.  -ENOTSUP saying which is missing; the checks of a valid
 * geometry only (cache_geometry_check first). */
int cache_geometry_share_check(const struct cache_geometry *g, char *err, size_t err_len);
/* What stats.bytes_resident counts of layer l's anchor tier holding
 * n_anchor tokens: its bookkeeping always, the rows in use. */
size_t cache_geometry_anchor_bytes(const struct cache_geometry *g, int l, int n_anchor);

/* Layer l's tiers and bytes; g must be valid (cache_geometry_check). */
void cache_geometry_layer_layout(const struct cache_geometry *g, int l, struct cache_layout *lo);
/* The tiers of every layer of a geometry, which must be the same for all:
 * -EINVAL for an invalid geometry, -ENOTSUP when layers' spans give
 * different tiers (a cache with one tier layout cannot hold it). */
int cache_geometry_tiers_of(const struct cache_geometry *g, struct cache_tiers *t, char *err,
                            size_t err_len);

/* Tokens per quantization group of the compressed tier (keys share per-channel
 * scales over a group): 32, or a divisor of the compressed capacity in
 * [16, 32], or the capacity itself when below 32; 0 without quantization.
 * The global layers' (the geometry's own span; a model sliding-window layer
 * quantizes nothing). */
int cache_geometry_quant_group_size(const struct cache_geometry *g);

/* The most tokens resident at once in any layer: sink_keep_count + anchors
 * + window_size, or max_context_length for strategy full, or a sliding
 * layer's window where that is more (0 for an invalid geometry). */
size_t cache_geometry_capacity_tokens(const struct cache_geometry *g);
/* The same of the global layers (the geometry's own span): the stream
 * tokens before the cache first evicts one of its own choosing (a model
 * sliding-window layer drops tokens as the model was trained to). */
size_t cache_geometry_global_capacity_tokens(const struct cache_geometry *g);
