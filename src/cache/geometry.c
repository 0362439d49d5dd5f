/* Cache geometry: building one from the cache settings and a model's shape,
 * checking it (each layer's span included), and what follows from it: each
 * layer's tier sizes and bytes and the byte bound of a whole cache.  It
 * holds no cache; sinkcache.c and the CUDA plan carry the tiers out.  The
 * builder takes a plain settings struct, not the config, so that config/
 * can include this header without cache/ including config/. */
#include "cache/geometry.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "cache/rope.h"
#include "model/arch.h"
#include "model/model.h"
#include "util/errbuf.h"

#define SINKCACHE_MAX_TOKENS (1 << 24)

size_t kv_dtype_size(enum kv_dtype dt)
{
	return dt == KV_DTYPE_F32 ? 4 : 2;
}

void cache_geometry_build(const struct cache_settings *s, const struct model_hparams *hp,
                          struct cache_geometry *g)
{
	memset(g, 0, sizeof(*g));
	g->n_layers = hp->n_layers;
	g->n_kv_heads = hp->n_kv_heads;
	g->head_dim = hp->head_dim;
	g->rope_dim = hp->rope_dim;
	g->rope_theta = hp->rope_theta;
	g->rope_neox = model_arch_rope_neox(hp->arch);
	g->strategy = s->strategy;
	g->sink_keep_count = s->sink_keep_count;
	g->window_size = s->window_size;
	g->max_context_length = s->max_context_length;
	g->quant_enabled = s->quant_enabled;
	g->quant_bits = s->quant_bits;
	g->protect_sinks = s->protect_sinks;
	g->full_precision_recent = s->full_precision_recent;
	if (g->full_precision_recent > g->window_size)
		g->full_precision_recent = g->window_size;
	g->rope_positions = s->rope_positions;
	g->dtype = s->dtype;
	if (s->anchors_enabled && g->strategy == CACHE_STRATEGY_SLIDING_WINDOW) {
		g->anchor_max = s->anchor_max;
		g->anchor_promote = (float)s->anchor_promote;
		g->anchor_demote_steps = s->anchor_demote_steps;
	}
	cache_geometry_set_rope_scaling(g, hp); /* after max_context_length: longrope */
	cache_geometry_set_model_layers(g, hp);
}

/* Whether layer l of a model slides, and over how many tokens in g. */
static int model_layer_window(const struct cache_geometry *g, const struct model_hparams *hp, int l)
{
	if (!hp->layer_swa || hp->swa_window <= 0 || !hp->layer_swa[l])
		return 0;
	if (g->strategy == CACHE_STRATEGY_FULL && g->max_context_length > 0 &&
	    hp->swa_window > g->max_context_length)
		return g->max_context_length;
	return hp->swa_window;
}

void cache_geometry_set_model_layers(struct cache_geometry *g, const struct model_hparams *hp)
{
	g->rope_theta_swa = hp->rope_theta_swa;
	g->swa_rope_scaled = hp->swa_rope_scaled;
	for (int l = 0; l < g->n_layers && l < CACHE_GEOMETRY_MAX_LAYERS; l++) {
		int w = model_layer_window(g, hp, l);
		if (w > 0)
			cache_geometry_set_layer_swa(g, l, w);
		else
			g->layer[l] = (struct cache_layer_span){0};
	}
}

/* The model's per-pair factors for a cache reaching max_ctx tokens:
 * rope_freqs.weight, or longrope's long set beyond the original context and
 * its short set within it (either may be NULL: none). */
static const float *model_rope_factors(const struct model_hparams *hp, int max_ctx)
{
	if (hp->rope_factors)
		return hp->rope_factors;
	return max_ctx > hp->rope_ctx_orig ? hp->rope_factors_long : hp->rope_factors_short;
}

void cache_geometry_set_rope_scaling(struct cache_geometry *g, const struct model_hparams *hp)
{
	g->rope_freq_scale = hp->rope_freq_scale > 0.0 ? hp->rope_freq_scale : 1.0;
	g->n_rope_factors = 0;
	memset(g->rope_factors, 0, sizeof(g->rope_factors));
	int n = hp->rope_dim / 2;
	const float *factors = model_rope_factors(hp, g->max_context_length);
	if (factors && n > 0 && n <= SINKCACHE_MAX_HEAD_DIM / 2) {
		g->n_rope_factors = n;
		memcpy(g->rope_factors, factors, (size_t)n * sizeof(float));
	}
	g->rope_ext_factor = hp->rope_ext_factor;
	g->rope_ctx_orig = hp->rope_ext_factor != 0.0 ? hp->rope_ctx_orig : 0;
}

/* The global layers' scaling, factors and YaRN blend from base theta. */
static void scaled_freqs(const struct cache_geometry *g, double theta, double *hi, double *lo)
{
	struct rope_yarn y = {.ext_factor = g->rope_ext_factor,
	                      .ctx_orig = g->rope_ctx_orig,
	                      .beta_fast = ROPE_YARN_BETA_FAST,
	                      .beta_slow = ROPE_YARN_BETA_SLOW};
	rope_freqs_init_yarn(theta, g->rope_dim, cache_geometry_rope_factors(g),
	                     cache_geometry_rope_freq_scale(g), &y, hi, lo);
}

void cache_geometry_rope_freqs(const struct cache_geometry *g, double *hi, double *lo)
{
	scaled_freqs(g, g->rope_theta, hi, lo);
}

const float *cache_geometry_rope_factors(const struct cache_geometry *g)
{
	return g->n_rope_factors > 0 ? g->rope_factors : NULL;
}

double cache_geometry_rope_freq_scale(const struct cache_geometry *g)
{
	return g->rope_freq_scale > 0.0 ? g->rope_freq_scale : 1.0;
}

/* Whether two geometries turn their keys by the same frequencies (beyond
 * theta, rope_dim and style, which callers compare). */
static bool rope_scaling_equal(const struct cache_geometry *a, const struct cache_geometry *b)
{
	if (cache_geometry_rope_freq_scale(a) != cache_geometry_rope_freq_scale(b) ||
	    a->n_rope_factors != b->n_rope_factors || a->rope_ext_factor != b->rope_ext_factor ||
	    a->rope_ctx_orig != b->rope_ctx_orig)
		return false;
	int n = a->n_rope_factors > 0 && a->n_rope_factors <= SINKCACHE_MAX_HEAD_DIM / 2
	            ? a->n_rope_factors
	            : 0;
	return memcmp(a->rope_factors, b->rope_factors, (size_t)n * sizeof(float)) == 0;
}

/* A model sliding-window layer held as a global one (or the other way
 * round) would attend over other tokens than the model was trained with. */
static int fits_model_layers(const struct cache_geometry *g, const struct model_hparams *hp,
                             char *err, size_t err_len)
{
	if (g->rope_theta_swa != hp->rope_theta_swa)
		return err_set(err, err_len, -EINVAL,
		               "cache geometry: rope_theta_swa %g does not match the model's (%g)",
		               g->rope_theta_swa, hp->rope_theta_swa);
	if (g->swa_rope_scaled != hp->swa_rope_scaled)
		return err_set(err, err_len, -EINVAL,
		               "cache geometry: sliding layers turn %s, the model's %s",
		               g->swa_rope_scaled ? "scaled" : "unscaled",
		               hp->swa_rope_scaled ? "scaled" : "unscaled");
	for (int l = 0; l < g->n_layers; l++) {
		int want = model_layer_window(g, hp, l);
		struct cache_layer_span sp = cache_geometry_layer_span(g, l);
		int have = sp.swa ? sp.window_size : 0;
		/* (a full cache may keep the whole model window, beyond its context) */
		if (have != want && !(want > 0 && have == hp->swa_window))
			return err_set(err, err_len, -EINVAL,
			               "cache geometry: layer %d %s, the model's %s", l,
			               have ? "slides (model window)" : "is global",
			               want ? "slides" : "is global");
	}
	return 0;
}

int cache_geometry_fits_model(const struct cache_geometry *g, const struct model_hparams *hp,
                              char *err, size_t err_len)
{
	if (g->n_layers != hp->n_layers || g->n_kv_heads != hp->n_kv_heads ||
	    g->head_dim != hp->head_dim)
		return err_set(
		    err, err_len, -EINVAL,
		    "cache geometry (%d layers, %d kv heads, head_dim %d) does not match "
		    "the model (%d, %d, %d)",
		    g->n_layers, g->n_kv_heads, g->head_dim, hp->n_layers, hp->n_kv_heads,
		    hp->head_dim);
	if (g->rope_dim != hp->rope_dim)
		return err_set(err, err_len, -EINVAL,
		               "cache geometry: rope_dim %d does not match the model (%d)",
		               g->rope_dim, hp->rope_dim);
	double scale = hp->rope_freq_scale > 0.0 ? hp->rope_freq_scale : 1.0;
	const float *factors = model_rope_factors(hp, g->max_context_length);
	int n = factors ? hp->rope_dim / 2 : 0;
	bool same =
	    cache_geometry_rope_freq_scale(g) == scale && g->n_rope_factors == n &&
	    (n == 0 || memcmp(g->rope_factors, factors, (size_t)n * sizeof(float)) == 0) &&
	    g->rope_ext_factor == hp->rope_ext_factor &&
	    (hp->rope_ext_factor == 0.0 || g->rope_ctx_orig == hp->rope_ctx_orig);
	if (!same)
		return err_set(err, err_len, -EINVAL,
		               "cache geometry: RoPE scaling (freq scale %g, %d frequency factors, "
		               "YaRN %g) does not match the model's (%g, %s, %g)",
		               cache_geometry_rope_freq_scale(g), g->n_rope_factors,
		               g->rope_ext_factor, scale, factors ? "frequency factors" : "none",
		               hp->rope_ext_factor);
	return fits_model_layers(g, hp, err, err_len);
}

struct cache_layer_span cache_geometry_layer_span(const struct cache_geometry *g, int l)
{
	if (g->layer[l].own)
		return g->layer[l];
	return (struct cache_layer_span){
	    .own = false, .strategy = (uint8_t)g->strategy, .window_size = g->window_size};
}

void cache_geometry_set_layer(struct cache_geometry *g, int l, enum cache_strategy strategy,
                              int window_size)
{
	g->layer[l] = (struct cache_layer_span){
	    .own = true, .strategy = (uint8_t)strategy, .window_size = window_size};
}

void cache_geometry_set_layer_swa(struct cache_geometry *g, int l, int window_size)
{
	g->layer[l] = (struct cache_layer_span){.own = true,
	                                        .strategy = CACHE_STRATEGY_SLIDING_WINDOW,
	                                        .swa = true,
	                                        .window_size = window_size};
}

bool cache_geometry_per_layer(const struct cache_geometry *g)
{
	int n = g->n_layers > 0 && g->n_layers <= CACHE_GEOMETRY_MAX_LAYERS ? g->n_layers : 0;
	for (int l = 0; l < n; l++)
		if (g->layer[l].own)
			return true;
	return false;
}

struct cache_layer_rope cache_geometry_layer_rope(const struct cache_geometry *g, int l)
{
	if (g->layer[l].own && g->layer[l].swa && g->swa_rope_scaled)
		return (struct cache_layer_rope){
		    .theta = g->rope_theta_swa > 0.0 ? g->rope_theta_swa : g->rope_theta,
		    .freq_scale = cache_geometry_rope_freq_scale(g),
		    .factors = cache_geometry_rope_factors(g)};
	if (g->layer[l].own && g->layer[l].swa)
		return (struct cache_layer_rope){
		    .theta = g->rope_theta_swa > 0.0 ? g->rope_theta_swa : g->rope_theta,
		    .freq_scale = 1.0};
	return (struct cache_layer_rope){.theta = g->rope_theta,
	                                 .freq_scale = cache_geometry_rope_freq_scale(g),
	                                 .factors = cache_geometry_rope_factors(g)};
}

void cache_geometry_layer_rope_freqs(const struct cache_geometry *g, int l, double *hi, double *lo)
{
	if (!(g->layer[l].own && g->layer[l].swa)) {
		cache_geometry_rope_freqs(g, hi, lo); /* the global layers' scaling, YaRN's too */
		return;
	}
	struct cache_layer_rope r = cache_geometry_layer_rope(g, l);
	if (g->swa_rope_scaled)
		scaled_freqs(g, r.theta, hi, lo); /* YaRN's blend too, from its own base */
	else
		rope_freqs_init(r.theta, g->rope_dim, r.factors, r.freq_scale, hi, lo);
}

/* ---- tier sizes ----------------------------------------------------------- */

/* Group size: 32 tokens, or a divisor of the compressed capacity in [16,32]
 * so that a full cache reaches the bound exactly, or the whole compressed
 * tier when it is smaller than 32. */
static int kv_group_size(int compressed)
{
	if (compressed <= 0)
		return 0;
	if (compressed <= SINKCACHE_MAX_GROUP)
		return compressed;
	for (int gs = SINKCACHE_MAX_GROUP; gs >= 16; gs--)
		if (compressed % gs == 0)
			return gs;
	return SINKCACHE_MAX_GROUP;
}

/* A model sliding-window layer: its window, all of it hot. */
static void swa_tiers(const struct cache_geometry *g, const struct cache_layer_span *sp,
                      struct cache_tiers *t)
{
	memset(t, 0, sizeof(*t));
	t->window = t->hot = sp->window_size;
	t->fp_row = (size_t)g->head_dim * kv_dtype_size(g->dtype);
	t->code_row = kvq_code_bytes(g->head_dim, g->quant_enabled ? g->quant_bits : 8);
}

static void layer_tiers(const struct cache_geometry *g, const struct cache_layer_span *sp,
                        struct cache_tiers *t)
{
	bool full = sp->strategy == CACHE_STRATEGY_FULL;
	if (sp->swa) {
		swa_tiers(g, sp, t);
		return;
	}
	memset(t, 0, sizeof(*t));
	t->full = full;
	t->sink = full && g->sink_keep_count > g->max_context_length ? g->max_context_length
	                                                             : g->sink_keep_count;
	t->window = full ? g->max_context_length - t->sink : sp->window_size;
	/* the newest token stays full precision at least until the next one
	 * arrives, so full_precision_recent 0 behaves as 1; a layer's hot tier
	 * is never wider than its window */
	t->hot = g->quant_enabled ? g->full_precision_recent : t->window;
	if (t->hot > t->window)
		t->hot = t->window;
	if (t->hot < 1 && t->window > 0)
		t->hot = 1;
	t->group = g->quant_enabled ? kv_group_size(t->window - t->hot) : 0;
	t->stage = t->group > 0 ? t->group - 1 : 0;
	if (t->group > 0) {
		int comp = t->window - t->hot;
		t->n_groups = full ? comp / t->group : (comp + t->group - 1) / t->group;
	}
	t->anchor = full ? 0 : g->anchor_max;
	t->sink_quant = g->quant_enabled && !g->protect_sinks;
	t->fp_row = (size_t)g->head_dim * kv_dtype_size(g->dtype);
	t->code_row = kvq_code_bytes(g->head_dim, g->quant_enabled ? g->quant_bits : 8);
}

static void layout_of_span(const struct cache_geometry *g, const struct cache_layer_span *sp,
                           struct cache_layout *lo)
{
	size_t n_kv = (size_t)g->n_kv_heads, d = (size_t)g->head_dim;
	memset(lo, 0, sizeof(*lo));
	layer_tiers(g, sp, &lo->t);
	const struct cache_tiers *t = &lo->t;
	lo->fp_tok = 2 * n_kv * t->fp_row;
	lo->sink_tok = t->sink_quant ? 2 * n_kv * (t->code_row + 2 * sizeof(float)) : lo->fp_tok;
	lo->group_bytes = n_kv * (2 * (size_t)t->group * t->code_row + 2 * d * sizeof(float) +
	                          (size_t)t->group * 2 * sizeof(float));
	if (t->anchor > 0)
		lo->anchor_bytes =
		    (size_t)t->anchor * (sizeof(uint64_t) + sizeof(float) + sizeof(int32_t) +
		                         n_kv * d * sizeof(float) + lo->fp_tok) +
		    (size_t)t->window * sizeof(float);
	lo->front_bytes = (size_t)t->sink * lo->sink_tok +
	                  (size_t)(t->hot + t->stage) * lo->fp_tok + lo->anchor_bytes;
	lo->back_bytes = (size_t)t->n_groups * lo->group_bytes;
	lo->layer_bytes = lo->front_bytes + lo->back_bytes;
	lo->front_stride = (lo->front_bytes + 63) & ~(size_t)63;
}

void cache_geometry_layer_layout(const struct cache_geometry *g, int l, struct cache_layout *lo)
{
	struct cache_layer_span sp = cache_geometry_layer_span(g, l);
	layout_of_span(g, &sp, lo);
}

/* The layout of a layer that takes the geometry's span. */
static void default_layout(const struct cache_geometry *g, struct cache_layout *lo)
{
	struct cache_layer_span sp = {.strategy = (uint8_t)g->strategy,
	                              .window_size = g->window_size};
	layout_of_span(g, &sp, lo);
}

/* ---- the check ------------------------------------------------------------ */

static int check_range(char *err, size_t err_len, const char *field, long long v, long long lo,
                       long long hi)
{
	if (v >= lo && v <= hi)
		return 0;
	return err_set(err, err_len, -EINVAL,
	               "cache geometry: %s: %lld is out of range (allowed %lld..%lld)", field, v,
	               lo, hi);
}

static int check_shape(const struct cache_geometry *g, char *err, size_t err_len)
{
	int rc;
	if ((rc = check_range(err, err_len, "n_layers", g->n_layers, 1,
	                      CACHE_GEOMETRY_MAX_LAYERS)) ||
	    (rc = check_range(err, err_len, "n_kv_heads", g->n_kv_heads, 1, 4096)) ||
	    (rc = check_range(err, err_len, "head_dim", g->head_dim, 2, SINKCACHE_MAX_HEAD_DIM)) ||
	    (rc = check_range(err, err_len, "rope_dim", g->rope_dim, 0, g->head_dim)))
		return rc;
	if (g->head_dim % 2)
		return err_set(err, err_len, -EINVAL,
		               "cache geometry: head_dim: %d is odd (allowed: even)", g->head_dim);
	if (g->rope_dim % 2)
		return err_set(err, err_len, -EINVAL,
		               "cache geometry: rope_dim: %d is odd (allowed: even, <= head_dim)",
		               g->rope_dim);
	if (!(g->rope_theta > 0.0) || !isfinite(g->rope_theta))
		return err_set(err, err_len, -EINVAL,
		               "cache geometry: rope_theta: %g (allowed: > 0)", g->rope_theta);
	if (!(g->rope_theta_swa >= 0.0) || !isfinite(g->rope_theta_swa))
		return err_set(err, err_len, -EINVAL,
		               "cache geometry: rope_theta_swa: %g (allowed: > 0, 0: rope_theta)",
		               g->rope_theta_swa);
	if (!(g->rope_freq_scale >= 0.0) || !isfinite(g->rope_freq_scale))
		return err_set(err, err_len, -EINVAL,
		               "cache geometry: rope_freq_scale: %g (allowed: > 0, 0: none)",
		               g->rope_freq_scale);
	if (!(g->rope_ext_factor >= 0.0 && g->rope_ext_factor <= 1.0) ||
	    (g->rope_ext_factor != 0.0 && g->rope_ctx_orig < 1))
		return err_set(err, err_len, -EINVAL,
		               "cache geometry: YaRN ext_factor %g over %d original positions "
		               "(allowed: 0, or 0..1 over >= 1)",
		               g->rope_ext_factor, g->rope_ctx_orig);
	if (g->n_rope_factors != 0 && (g->n_rope_factors != g->rope_dim / 2 ||
	                               g->n_rope_factors > SINKCACHE_MAX_HEAD_DIM / 2))
		return err_set(err, err_len, -EINVAL,
		               "cache geometry: n_rope_factors: %d (allowed: 0, rope_dim/2 = %d)",
		               g->n_rope_factors, g->rope_dim / 2);
	for (int i = 0; i < g->n_rope_factors; i++)
		if (!(g->rope_factors[i] > 0.0f) || !isfinite(g->rope_factors[i]))
			return err_set(err, err_len, -EINVAL,
			               "cache geometry: rope_factors[%d]: %g (allowed: > 0)", i,
			               (double)g->rope_factors[i]);
	if ((unsigned)g->dtype > KV_DTYPE_BF16)
		return err_set(err, err_len, -EINVAL,
		               "cache geometry: dtype: %d (allowed: f32, f16, bf16)",
		               (int)g->dtype);
	if ((unsigned)g->rope_positions > ROPE_POSITIONS_ORIGINAL)
		return err_set(err, err_len, -EINVAL,
		               "cache geometry: rope_positions: %d (allowed: cache, original)",
		               (int)g->rope_positions);
	return 0;
}

/* A span's window (what the hot tier may fill), or -1 with err set. */
static int check_span(const struct cache_geometry *g, enum cache_strategy strategy, int window_size,
                      char *err, size_t err_len)
{
	int rc;
	if (strategy == CACHE_STRATEGY_SLIDING_WINDOW) {
		if ((rc = check_range(err, err_len, "window_size", window_size, 1,
		                      SINKCACHE_MAX_TOKENS)) ||
		    (rc = check_range(err, err_len, "sink_keep_count", g->sink_keep_count, 0,
		                      SINKCACHE_MAX_TOKENS)))
			return rc;
		if (g->sink_keep_count >= window_size)
			return err_set(err, err_len, -EINVAL,
			               "cache geometry: sink_keep_count: %d must be smaller than "
			               "window_size %d (allowed 0..%d)",
			               g->sink_keep_count, window_size, window_size - 1);
		return 0;
	}
	if (strategy == CACHE_STRATEGY_FULL)
		return (rc = check_range(err, err_len, "max_context_length", g->max_context_length,
		                         1, SINKCACHE_MAX_TOKENS))
		           ? rc
		           : check_range(err, err_len, "sink_keep_count", g->sink_keep_count, 0,
		                         g->max_context_length);
	return err_set(err, err_len, -EINVAL,
	               "cache geometry: strategy: %d (allowed: sliding_window, full)",
	               (int)strategy);
}

/* A model sliding-window layer: a window, no sinks to fit in it. */
static int check_swa_span(const struct cache_layer_span *sp, char *err, size_t err_len)
{
	if (sp->strategy != CACHE_STRATEGY_SLIDING_WINDOW)
		return err_set(err, err_len, -EINVAL,
		               "cache geometry: strategy: %d (allowed for a model sliding-window "
		               "layer: sliding_window)",
		               (int)sp->strategy);
	return check_range(err, err_len, "window_size", sp->window_size, 1, SINKCACHE_MAX_TOKENS);
}

/* Layers with spans of their own: each checked as the geometry's own is. */
static int check_layers(const struct cache_geometry *g, char *err, size_t err_len)
{
	for (int l = 0; l < g->n_layers; l++) {
		const struct cache_layer_span *sp = &g->layer[l];
		if (!sp->own)
			continue;
		char why[SINKD_ERR_LEN];
		int rc = sp->swa ? check_swa_span(sp, why, sizeof(why))
		                 : check_span(g, (enum cache_strategy)sp->strategy, sp->window_size,
		                              why, sizeof(why));
		const char *pre = "cache geometry: ";
		if (rc)
			return err_set(err, err_len, rc, "%slayer %d: %s", pre, l,
			               strncmp(why, pre, strlen(pre)) ? why : why + strlen(pre));
		if (sp->strategy == CACHE_STRATEGY_FULL && g->anchor_max != 0 && !sp->swa)
			return err_set(
			    err, err_len, -EINVAL,
			    "cache geometry: layer %d: anchors need strategy "
			    "sliding_window in every layer (a full cache evicts nothing)",
			    l);
	}
	return 0;
}

static int check_tiers(const struct cache_geometry *g, char *err, size_t err_len)
{
	int rc = check_span(g, g->strategy, g->window_size, err, err_len);
	if (rc || (rc = check_layers(g, err, err_len)))
		return rc;
	int window = g->strategy == CACHE_STRATEGY_FULL ? g->max_context_length - g->sink_keep_count
	                                                : g->window_size;
	if (g->anchor_max != 0) {
		if (g->strategy != CACHE_STRATEGY_SLIDING_WINDOW)
			return err_set(
			    err, err_len, -EINVAL,
			    "cache geometry: anchors need strategy sliding_window (a full "
			    "cache evicts nothing)");
		if ((rc = check_range(err, err_len, "anchor_max", g->anchor_max, 0,
		                      SINKCACHE_MAX_ANCHORS)) ||
		    (rc = check_range(err, err_len, "anchor_demote_steps", g->anchor_demote_steps,
		                      1, SINKCACHE_MAX_TOKENS)))
			return rc;
		if (!(g->anchor_promote > 0.0f && g->anchor_promote <= 1.0f))
			return err_set(
			    err, err_len, -EINVAL,
			    "cache geometry: anchor_promote: %g is out of range (allowed: "
			    "> 0 and <= 1, a softmax weight)",
			    (double)g->anchor_promote);
	}
	if (!g->quant_enabled)
		return 0;
	if (g->quant_bits != 8 && g->quant_bits != 4)
		return err_set(err, err_len, -EINVAL,
		               "cache geometry: quant_bits: %d (allowed: 8, 4)", g->quant_bits);
	return check_range(err, err_len, "full_precision_recent", g->full_precision_recent, 0,
	                   window);
}

void cache_geometry_pin(struct cache_geometry *g, int pin)
{
	if (pin <= 0)
		return;
	if (pin > g->sink_keep_count)
		g->sink_keep_count = pin;
	g->protect_sinks = true;
}

int cache_geometry_check(const struct cache_geometry *g, char *err, size_t err_len)
{
	int rc = check_shape(g, err, err_len);
	return rc ? rc : check_tiers(g, err, err_len);
}

bool cache_geometry_equal(const struct cache_geometry *a, const struct cache_geometry *b)
{
	bool same = a->n_layers == b->n_layers && a->n_kv_heads == b->n_kv_heads &&
	            a->head_dim == b->head_dim && a->rope_dim == b->rope_dim &&
	            a->rope_theta == b->rope_theta && a->rope_neox == b->rope_neox &&
	            a->rope_theta_swa == b->rope_theta_swa &&
	            a->swa_rope_scaled == b->swa_rope_scaled && rope_scaling_equal(a, b) &&
	            a->strategy == b->strategy && a->sink_keep_count == b->sink_keep_count &&
	            a->window_size == b->window_size &&
	            a->max_context_length == b->max_context_length &&
	            a->quant_enabled == b->quant_enabled && a->quant_bits == b->quant_bits &&
	            a->protect_sinks == b->protect_sinks &&
	            a->full_precision_recent == b->full_precision_recent &&
	            a->rope_positions == b->rope_positions && a->dtype == b->dtype &&
	            a->anchor_max == b->anchor_max && a->anchor_promote == b->anchor_promote &&
	            a->anchor_demote_steps == b->anchor_demote_steps;
	int n = a->n_layers > 0 && a->n_layers <= CACHE_GEOMETRY_MAX_LAYERS ? a->n_layers : 0;
	for (int l = 0; same && l < n; l++) {
		struct cache_layer_span x = cache_geometry_layer_span(a, l);
		struct cache_layer_span y = cache_geometry_layer_span(b, l);
		same = x.strategy == y.strategy && x.window_size == y.window_size && x.swa == y.swa;
	}
	return same;
}

/* ---- bytes and tokens ------------------------------------------------------ */

/* Layer l's layout: the geometry's own (dflt, computed once by the caller)
 * for a layer without a span of its own, so that a uniform geometry costs
 * one layout whatever its depth. */
static const struct cache_layout *layout_at(const struct cache_geometry *g, int l,
                                            const struct cache_layout *dflt,
                                            struct cache_layout *own)
{
	if (!g->layer[l].own)
		return dflt;
	cache_geometry_layer_layout(g, l, own);
	return own;
}

/* Over the layers of a geometry: the sum of their bytes and the most tokens
 * one holds; both 0 for an invalid geometry. */
static void layer_totals(const struct cache_geometry *g, size_t *bytes, size_t *most)
{
	struct cache_layout dflt, own;
	*bytes = *most = 0;
	if (cache_geometry_check(g, NULL, 0))
		return;
	default_layout(g, &dflt);
	for (int l = 0; l < g->n_layers; l++) {
		const struct cache_layout *lo = layout_at(g, l, &dflt, &own);
		size_t n = (size_t)(lo->t.sink + lo->t.anchor + lo->t.window);
		*bytes += lo->layer_bytes;
		*most = n > *most ? n : *most;
	}
}

size_t cache_geometry_bound_bytes(const struct cache_geometry *g)
{
	size_t bytes, most;
	layer_totals(g, &bytes, &most);
	return bytes;
}

size_t cache_geometry_sink_bytes(const struct cache_geometry *g)
{
	struct cache_layout dflt, own;
	size_t bytes = 0;
	if (cache_geometry_check(g, NULL, 0))
		return 0;
	default_layout(g, &dflt);
	for (int l = 0; l < g->n_layers; l++) {
		const struct cache_layout *lo = layout_at(g, l, &dflt, &own);
		bytes += (size_t)lo->t.sink * lo->sink_tok;
	}
	return bytes;
}

int cache_geometry_share_check(const struct cache_geometry *g, char *err, size_t err_len)
{
	if (cache_geometry_per_layer(g))
		return err_set(err, err_len, -ENOTSUP,
		               "cache geometry: a shared prefix needs every layer global (this "
		               "geometry has layers with spans of their own, e.g. model "
		               "sliding-window layers)");
	if (g->quant_enabled && !g->protect_sinks)
		return err_set(err, err_len, -ENOTSUP,
		               "cache geometry: a shared prefix needs full-precision sinks "
		               "(protect_sinks or quantization off; a pinned prefix has them)");
	if (g->sink_keep_count < 1 ||
	    (g->strategy == CACHE_STRATEGY_FULL && g->max_context_length < 1))
		return err_set(err, err_len, -ENOTSUP,
		               "cache geometry: a shared prefix needs sink_keep_count >= 1 (it is "
		               "%d)",
		               g->sink_keep_count);
	return 0;
}

size_t cache_geometry_anchor_bytes(const struct cache_geometry *g, int l, int n_anchor)
{
	struct cache_layout lo;
	cache_geometry_layer_layout(g, l, &lo);
	if (lo.t.anchor <= 0)
		return 0;
	size_t row = lo.fp_tok + (size_t)g->n_kv_heads * (size_t)g->head_dim * sizeof(float);
	return lo.anchor_bytes - (size_t)(lo.t.anchor - n_anchor) * row;
}

static bool tiers_equal(const struct cache_tiers *a, const struct cache_tiers *b)
{
	return a->sink == b->sink && a->window == b->window && a->hot == b->hot &&
	       a->group == b->group && a->stage == b->stage && a->n_groups == b->n_groups &&
	       a->anchor == b->anchor && a->full == b->full && a->sink_quant == b->sink_quant &&
	       a->fp_row == b->fp_row && a->code_row == b->code_row;
}

int cache_geometry_tiers_of(const struct cache_geometry *g, struct cache_tiers *t, char *err,
                            size_t err_len)
{
	struct cache_layout l0, dflt, own;
	int rc = cache_geometry_check(g, err, err_len);
	memset(t, 0, sizeof(*t));
	if (rc)
		return rc;
	default_layout(g, &dflt);
	cache_geometry_layer_layout(g, 0, &l0);
	for (int l = 1; l < g->n_layers; l++) {
		const struct cache_layout *ll = layout_at(g, l, &dflt, &own);
		if (!tiers_equal(&ll->t, &l0.t))
			return err_set(
			    err, err_len, -ENOTSUP,
			    "cache geometry: layer %d's span (window %d) gives other tiers "
			    "than layer 0's (window %d); this cache keeps one tier layout "
			    "for all layers",
			    l, ll->t.window, l0.t.window);
	}
	*t = l0.t;
	return 0;
}

int cache_geometry_quant_group_size(const struct cache_geometry *g)
{
	struct cache_layout lo;
	if (cache_geometry_check(g, NULL, 0))
		return 0;
	default_layout(g, &lo);
	return lo.t.group;
}

size_t cache_geometry_global_capacity_tokens(const struct cache_geometry *g)
{
	struct cache_layout lo;
	if (cache_geometry_check(g, NULL, 0))
		return 0;
	default_layout(g, &lo);
	return (size_t)(lo.t.sink + lo.t.anchor + lo.t.window);
}

size_t cache_geometry_capacity_tokens(const struct cache_geometry *g)
{
	size_t bytes, most;
	layer_totals(g, &bytes, &most);
	return most;
}
