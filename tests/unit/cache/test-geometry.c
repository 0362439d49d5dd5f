/* The cache geometry (cache/geometry.h): the check names the field (and the
 * layer) that is wrong, pinning widens the protected sinks, the byte bound
 * is the sum over layers of a hand-computed layout, a geometry built from
 * cache settings takes every value from them, and layers with spans of
 * their own are checked, counted and compared as they take effect. */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "cache/geometry.h"
#include "cache/sinkcache.h"
#include "model/arch.h"
#include "model/model.h"
#include "util/errbuf.h"
#include "testutil.h"

enum { NL = 2, NKV = 2, D = 8 };

/* 4 protected f32 sinks, a window of 40 with 8 hot tokens, int8 groups. */
static struct cache_geometry base(void)
{
	return tu_geometry(NL, NKV, D, 4, 40, true, 8, 8);
}

static void refused(const struct cache_geometry *g, const char *says)
{
	char err[SINKD_ERR_LEN] = "";
	ck_assert_int_eq(cache_geometry_check(g, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, says), "'%s' does not say '%s'", err, says);
	ck_assert_uint_eq(cache_geometry_bound_bytes(g), 0);
}

START_TEST(test_check)
{
	struct cache_geometry g = base();
	char err[SINKD_ERR_LEN];
	ck_assert_msg(cache_geometry_check(&g, err, sizeof(err)) == 0, "%s", err);
	g.window_size = 0;
	refused(&g, "window_size");
	g = base();
	g.sink_keep_count = 40;
	refused(&g, "sink_keep_count");
	g = base();
	g.quant_bits = 5;
	refused(&g, "quant_bits");
	g = base();
	g.n_layers = CACHE_GEOMETRY_MAX_LAYERS + 1;
	refused(&g, "n_layers");
	g = base();
	g.anchor_max = 4, g.anchor_promote = 0.1f, g.anchor_demote_steps = 2;
	ck_assert_int_eq(cache_geometry_check(&g, NULL, 0), 0);
	cache_geometry_set_layer(&g, 1, CACHE_STRATEGY_FULL, 0);
	refused(&g, "layer 1: max_context_length");
	g.max_context_length = 100;
	refused(&g, "layer 1: anchors");
	g = base();
	cache_geometry_set_layer(&g, 1, CACHE_STRATEGY_SLIDING_WINDOW, 4);
	refused(&g,
	        "cache geometry: layer 1: sink_keep_count: 4 must be smaller than window_size 4");
}
END_TEST

START_TEST(test_pin)
{
	struct cache_geometry g = base();
	g.protect_sinks = false;
	cache_geometry_pin(&g, 0);
	ck_assert_int_eq(g.sink_keep_count, 4);
	ck_assert(!g.protect_sinks);
	cache_geometry_pin(&g, 2); /* fewer than the sinks: only protects */
	ck_assert_int_eq(g.sink_keep_count, 4);
	ck_assert(g.protect_sinks);
	cache_geometry_pin(&g, 12);
	ck_assert_int_eq(g.sink_keep_count, 12);
}
END_TEST

/* One layer by hand (cache_geometry_bound_bytes' formula): f32 rows of D = 8 are
 * 32 bytes, a token of 2 kv heads K+V is 128 bytes; window W with 8 hot
 * tokens leaves C = W - 8 compressed tokens in groups of G = C (C <= 32),
 * staged in G - 1 slots; a group is kv * (2*G*D codes + 2*D*4 channel
 * scale,min + G*2*4 token scale,min) bytes. */
static size_t layer_bytes_by_hand(int window)
{
	size_t tok = 2 * NKV * D * 4;
	size_t c = (size_t)window - 8, gs = c;
	size_t group = NKV * (2 * gs * D + 2 * D * 4 + gs * 2 * 4);
	return 4 * tok + 8 * tok + (gs - 1) * tok + group;
}

START_TEST(test_bound_bytes_per_layer)
{
	struct cache_geometry g = base();
	ck_assert_uint_eq(layer_bytes_by_hand(40), 7168);
	ck_assert_uint_eq(cache_geometry_bound_bytes(&g), 2 * 7168);
	struct cache_tiers t;
	ck_assert_int_eq(cache_geometry_tiers_of(&g, &t, NULL, 0), 0);
	ck_assert_int_eq(t.group, 32);
	ck_assert_int_eq(t.stage, 31);
	ck_assert_int_eq(t.n_groups, 1);

	/* layer 1 slides over 24 tokens: groups of 16 */
	cache_geometry_set_layer(&g, 1, CACHE_STRATEGY_SLIDING_WINDOW, 24);
	ck_assert_uint_eq(layer_bytes_by_hand(24), 4352);
	ck_assert_uint_eq(cache_geometry_bound_bytes(&g), 7168 + 4352);
	struct cache_layout lo;
	cache_geometry_layer_layout(&g, 1, &lo);
	ck_assert_int_eq(lo.t.window, 24);
	ck_assert_int_eq(lo.t.group, 16);
	ck_assert_uint_eq(lo.layer_bytes, 4352);
	cache_geometry_layer_layout(&g, 0, &lo);
	ck_assert_int_eq(lo.t.window, 40);
	ck_assert_uint_eq(cache_geometry_capacity_tokens(&g), 4 + 40);

	/* one tier layout for all layers refuses it, by name; the CPU cache
	 * keeps each layer's own and reports their sum as its bound */
	char err[SINKD_ERR_LEN];
	ck_assert_int_eq(cache_geometry_tiers_of(&g, &t, err, sizeof(err)), -ENOTSUP);
	ck_assert_ptr_nonnull(strstr(err, "layer 1"));
	struct sinkcache *c = NULL;
	ck_assert_msg(sinkcache_new(&g, &c, err, sizeof(err)) == 0, "%s", err);
	struct sinkcache_stats st;
	sinkcache_get_stats(c, &st);
	ck_assert_uint_eq(st.bytes_bound, 7168 + 4352);
	sinkcache_free(c);
}
END_TEST

/* A Gemma-3-shaped model: 5 of 6 layers slide over 1,024 tokens. */
static struct model_hparams swa_model(uint8_t *layer_swa)
{
	struct model_hparams hp = {.n_layers = 6,
	                           .n_kv_heads = NKV,
	                           .head_dim = D,
	                           .rope_dim = D,
	                           .rope_theta = 1000000.0,
	                           .rope_freq_scale = 0.125,
	                           .swa_window = 1024,
	                           .layer_swa = layer_swa,
	                           .rope_theta_swa = 10000.0};
	hp.arch = model_arch_find("llama");
	for (int l = 0; l < 6; l++)
		layer_swa[l] = l % 6 != 5;
	return hp;
}

static const struct cache_settings swa_settings = {.strategy = CACHE_STRATEGY_SLIDING_WINDOW,
                                                   .sink_keep_count = 4,
                                                   .window_size = 252,
                                                   .max_context_length = 4096,
                                                   .quant_enabled = true,
                                                   .quant_bits = 8,
                                                   .protect_sinks = true,
                                                   .full_precision_recent = 64,
                                                   .dtype = KV_DTYPE_F32,
                                                   .anchors_enabled = true,
                                                   .anchor_max = 8,
                                                   .anchor_promote = 0.2,
                                                   .anchor_demote_steps = 4};

/* The sink rows' bytes by hand: 4 sinks of 2 kv heads x K+V, f32 rows of
 * D = 8 (128 bytes a token) in each of 2 layers; quantized sinks hold int8
 * codes plus a fp32 scale,min per row; a model sliding-window layer has
 * none, and an invalid geometry none at all. */
START_TEST(test_sink_bytes)
{
	struct cache_geometry g = base();
	size_t tok = 2 * NKV * D * 4, qtok = 2 * NKV * (D + 2 * 4);
	ck_assert_uint_eq(cache_geometry_sink_bytes(&g), NL * 4 * tok);
	cache_geometry_pin(&g, 12);
	ck_assert_uint_eq(cache_geometry_sink_bytes(&g), NL * 12 * tok);
	g = base();
	g.protect_sinks = false;
	ck_assert_uint_eq(cache_geometry_sink_bytes(&g), NL * 4 * qtok);
	g = base();
	cache_geometry_set_layer_swa(&g, 1, 16);
	ck_assert_uint_eq(cache_geometry_sink_bytes(&g), 4 * tok);
	g.window_size = 0;
	ck_assert_uint_eq(cache_geometry_sink_bytes(&g), 0);
}
END_TEST

/* Which geometries can share a pinned prefix's sinks, and what the refusal
 * names. */
START_TEST(test_share_check)
{
	char err[SINKD_ERR_LEN];
	struct cache_geometry g = base();
	ck_assert_int_eq(cache_geometry_share_check(&g, err, sizeof(err)), 0);
	g.quant_enabled = false, g.protect_sinks = false; /* unquantized: full precision */
	ck_assert_int_eq(cache_geometry_share_check(&g, err, sizeof(err)), 0);
	g = base();
	g.protect_sinks = false;
	ck_assert_int_eq(cache_geometry_share_check(&g, err, sizeof(err)), -ENOTSUP);
	ck_assert_ptr_nonnull(strstr(err, "full-precision sinks"));
	cache_geometry_pin(&g, 8); /* pinning protects them */
	ck_assert_int_eq(cache_geometry_share_check(&g, err, sizeof(err)), 0);
	g = base();
	g.sink_keep_count = 0;
	ck_assert_int_eq(cache_geometry_share_check(&g, err, sizeof(err)), -ENOTSUP);
	ck_assert_ptr_nonnull(strstr(err, "sink_keep_count >= 1"));
	g = base();
	cache_geometry_set_layer_swa(&g, 1, 16);
	ck_assert_int_eq(cache_geometry_share_check(&g, err, sizeof(err)), -ENOTSUP);
	ck_assert_ptr_nonnull(strstr(err, "every layer global"));
}
END_TEST

/* The bound is the sum over layers: 5 sliding layers of exactly 1,024 f32
 * tokens (no sinks, anchors or quantized tiers), one global layer as the
 * settings make it; not 6 of either. */
START_TEST(test_swa_layers_bound)
{
	uint8_t swa[6];
	struct model_hparams hp = swa_model(swa);
	struct cache_geometry g, u;
	cache_geometry_build(&swa_settings, &hp, &g);
	char err[SINKD_ERR_LEN];
	ck_assert_msg(cache_geometry_check(&g, err, sizeof(err)) == 0, "%s", err);
	struct model_hparams flat = hp;
	flat.layer_swa = NULL;
	cache_geometry_build(&swa_settings, &flat, &u);
	size_t tok = 2 * NKV * D * 4, global = cache_geometry_bound_bytes(&u) / 6;
	ck_assert_uint_gt(global, 0);
	ck_assert_uint_eq(cache_geometry_bound_bytes(&g), 5 * 1024 * tok + global);
	struct cache_layout lo;
	size_t sum = 0;
	for (int l = 0; l < 6; l++) {
		cache_geometry_layer_layout(&g, l, &lo);
		sum += lo.layer_bytes;
		struct cache_layer_span sp = cache_geometry_layer_span(&g, l);
		ck_assert(sp.swa == (l != 5));
		if (l == 5) {
			ck_assert_int_eq(lo.t.window, 252);
			ck_assert_int_eq(lo.t.sink, 4);
			ck_assert_int_eq(lo.t.anchor, 8);
			ck_assert_int_gt(lo.t.group, 0);
			continue;
		}
		ck_assert_int_eq(lo.t.window, 1024);
		ck_assert_int_eq(lo.t.hot, 1024);
		ck_assert_int_eq(lo.t.sink + lo.t.anchor + lo.t.group + lo.t.stage, 0);
		ck_assert_uint_eq(lo.layer_bytes, 1024 * tok);
	}
	ck_assert_uint_eq(sum, cache_geometry_bound_bytes(&g));
	ck_assert_uint_eq(cache_geometry_capacity_tokens(&g), 1024);
	ck_assert_uint_eq(cache_geometry_global_capacity_tokens(&g), 4 + 8 + 252);
	/* a pinned prompt widens the global layers' sinks only */
	cache_geometry_pin(&g, 40);
	cache_geometry_layer_layout(&g, 0, &lo);
	ck_assert_int_eq(lo.t.sink, 0);
	ck_assert_uint_eq(lo.layer_bytes, 1024 * tok);
	/* and the cache holds what the bound says */
	struct sinkcache *c = NULL;
	ck_assert_msg(sinkcache_new(&g, &c, err, sizeof(err)) == 0, "%s", err);
	struct sinkcache_stats st;
	sinkcache_get_stats(c, &st);
	ck_assert_uint_eq(st.bytes_bound, cache_geometry_bound_bytes(&g));
	sinkcache_free(c);
}
END_TEST

/* gpt-oss's sliding layers (swa_rope_scaled) turn as the global ones do,
 * YaRN's blend included, from their own base: with the same base their
 * frequencies are the global layers', which differ from the unscaled ones;
 * a geometry that turns them otherwise does not fit the model. */
START_TEST(test_swa_layers_scaled_yarn)
{
	uint8_t swa[6];
	struct model_hparams hp = swa_model(swa);
	hp.rope_theta_swa = hp.rope_theta;
	hp.rope_ext_factor = 1.0;
	hp.rope_ctx_orig = 4096;
	hp.swa_rope_scaled = true;
	struct cache_geometry g;
	cache_geometry_build(&swa_settings, &hp, &g);
	double hi[D / 2], lo[D / 2], ghi[D / 2], glo[D / 2];
	cache_geometry_layer_rope_freqs(&g, 0, hi, lo);
	cache_geometry_layer_rope_freqs(&g, 5, ghi, glo);
	ck_assert(g.layer[0].swa && !g.layer[5].own);
	ck_assert_int_eq(memcmp(hi, ghi, sizeof(hi)), 0);
	ck_assert_int_eq(memcmp(lo, glo, sizeof(lo)), 0);
	struct cache_layer_rope r = cache_geometry_layer_rope(&g, 0);
	ck_assert(r.freq_scale == 0.125 && r.theta == hp.rope_theta);
	char err[SINKD_ERR_LEN];
	ck_assert_msg(cache_geometry_fits_model(&g, &hp, err, sizeof(err)) == 0, "%s", err);
	/* unscaled (gemma3's rule): the sliding layer turns otherwise */
	struct model_hparams plain = hp;
	plain.swa_rope_scaled = false;
	ck_assert_int_eq(cache_geometry_fits_model(&g, &plain, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "sliding layers turn scaled, the model's unscaled"));
	struct cache_geometry u;
	cache_geometry_build(&swa_settings, &plain, &u);
	ck_assert(!cache_geometry_equal(&g, &u));
	cache_geometry_layer_rope_freqs(&u, 0, hi, lo);
	ck_assert(hi[D / 2 - 1] != ghi[D / 2 - 1]);
}
END_TEST

/* Sliding layers turn with their own base, unscaled; the geometry fits only
 * the model whose layers slide as its spans say. */
START_TEST(test_swa_layers_model)
{
	uint8_t swa[6];
	struct model_hparams hp = swa_model(swa);
	struct cache_geometry g;
	cache_geometry_build(&swa_settings, &hp, &g);
	struct cache_layer_rope r = cache_geometry_layer_rope(&g, 0);
	ck_assert(r.theta == 10000.0 && r.freq_scale == 1.0 && !r.factors);
	r = cache_geometry_layer_rope(&g, 5);
	ck_assert(r.theta == 1000000.0 && r.freq_scale == 0.125);
	char err[SINKD_ERR_LEN];
	ck_assert_msg(cache_geometry_fits_model(&g, &hp, err, sizeof(err)) == 0, "%s", err);
	ck_assert(cache_geometry_per_layer(&g));
	struct model_hparams flat = hp;
	flat.layer_swa = NULL;
	ck_assert_int_eq(cache_geometry_fits_model(&g, &flat, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "layer 0"));
	struct cache_geometry u;
	cache_geometry_build(&swa_settings, &flat, &u);
	ck_assert(!cache_geometry_per_layer(&u));
	ck_assert(!cache_geometry_equal(&g, &u));
	/* a restore's uniform geometry takes the model's layers */
	cache_geometry_set_model_layers(&u, &hp);
	ck_assert(cache_geometry_equal(&g, &u));
	/* strategy full: a sliding layer never holds more than the context */
	struct cache_settings full = swa_settings;
	full.strategy = CACHE_STRATEGY_FULL;
	full.max_context_length = 600;
	cache_geometry_build(&full, &hp, &g);
	ck_assert_msg(cache_geometry_check(&g, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(cache_geometry_layer_span(&g, 0).window_size, 600);
	ck_assert_int_eq(cache_geometry_layer_span(&g, 0).strategy, CACHE_STRATEGY_SLIDING_WINDOW);
	ck_assert_int_eq(cache_geometry_fits_model(&g, &hp, err, sizeof(err)), 0);
	cache_geometry_set_layer_swa(&g, 0, 1024); /* the whole model window: exact too */
	ck_assert_int_eq(cache_geometry_fits_model(&g, &hp, err, sizeof(err)), 0);
	cache_geometry_set_layer_swa(&g, 0, 500); /* neither: not the model's window */
	ck_assert_int_eq(cache_geometry_fits_model(&g, &hp, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(cache_geometry_layer_span(&g, 5).strategy, CACHE_STRATEGY_FULL);
	full.max_context_length = 4096;
	cache_geometry_build(&full, &hp, &g);
	ck_assert_int_eq(cache_geometry_layer_span(&g, 0).window_size, 1024);
	ck_assert_uint_eq(cache_geometry_capacity_tokens(&g), 4096);
}
END_TEST

START_TEST(test_layer_spans)
{
	struct cache_geometry a = base(), b = base();
	struct cache_layer_span sp = cache_geometry_layer_span(&a, 1);
	ck_assert(!sp.own);
	ck_assert_int_eq(sp.strategy, CACHE_STRATEGY_SLIDING_WINDOW);
	ck_assert_int_eq(sp.window_size, 40);
	/* a span of its own equal to the geometry's is the same cache */
	cache_geometry_set_layer(&b, 1, CACHE_STRATEGY_SLIDING_WINDOW, 40);
	ck_assert(cache_geometry_equal(&a, &b));
	ck_assert_uint_eq(cache_geometry_bound_bytes(&a), cache_geometry_bound_bytes(&b));
	cache_geometry_set_layer(&b, 1, CACHE_STRATEGY_SLIDING_WINDOW, 24);
	ck_assert(!cache_geometry_equal(&a, &b));
	/* a layer without a span follows the geometry's window (a session's
	 * narrower window) */
	a.window_size = 30;
	ck_assert_int_eq(cache_geometry_layer_span(&a, 0).window_size, 30);
	ck_assert_int_eq(cache_geometry_layer_span(&b, 1).window_size, 24);
	/* strategy full in one layer: it keeps max_context_length tokens */
	struct cache_geometry f = base();
	f.max_context_length = 100;
	cache_geometry_set_layer(&f, 0, CACHE_STRATEGY_FULL, 0);
	ck_assert_int_eq(cache_geometry_check(&f, NULL, 0), 0);
	struct cache_layout lo;
	cache_geometry_layer_layout(&f, 0, &lo);
	ck_assert(lo.t.full);
	ck_assert_int_eq(lo.t.window, 96);
	ck_assert_uint_eq(cache_geometry_capacity_tokens(&f), 100);
}
END_TEST

START_TEST(test_build_from_settings)
{
	struct model_hparams hp = {
	    .n_layers = 5, .n_kv_heads = 3, .head_dim = 16, .rope_dim = 8, .rope_theta = 500000.0};
	hp.arch = model_arch_find("llama");
	struct cache_settings s = {.strategy = CACHE_STRATEGY_SLIDING_WINDOW,
	                           .sink_keep_count = 4,
	                           .window_size = 64,
	                           .max_context_length = 4096,
	                           .quant_enabled = true,
	                           .quant_bits = 4,
	                           .protect_sinks = true,
	                           .full_precision_recent = 100, /* above the window */
	                           .rope_positions = ROPE_POSITIONS_ORIGINAL,
	                           .dtype = KV_DTYPE_BF16,
	                           .anchors_enabled = true,
	                           .anchor_max = 6,
	                           .anchor_promote = 0.25,
	                           .anchor_demote_steps = 3};
	struct cache_geometry g;
	cache_geometry_build(&s, &hp, &g);
	ck_assert_int_eq(g.n_layers, 5);
	ck_assert_int_eq(g.n_kv_heads, 3);
	ck_assert_int_eq(g.head_dim, 16);
	ck_assert_int_eq(g.rope_dim, 8);
	ck_assert(g.rope_theta == 500000.0);
	ck_assert(!g.rope_neox);
	ck_assert_int_eq(g.window_size, 64);
	ck_assert_int_eq(g.full_precision_recent, 64); /* clamped to the window */
	ck_assert_int_eq(g.quant_bits, 4);
	ck_assert_int_eq(g.rope_positions, ROPE_POSITIONS_ORIGINAL);
	ck_assert_int_eq(g.dtype, KV_DTYPE_BF16);
	ck_assert_int_eq(g.anchor_max, 6);
	ck_assert(g.anchor_promote == 0.25f);
	ck_assert_int_eq(g.anchor_demote_steps, 3);
	for (int l = 0; l < g.n_layers; l++) {
		struct cache_layer_span sp = cache_geometry_layer_span(&g, l);
		ck_assert_int_eq(sp.strategy, CACHE_STRATEGY_SLIDING_WINDOW);
		ck_assert_int_eq(sp.window_size, 64);
	}
	char err[SINKD_ERR_LEN];
	ck_assert_msg(cache_geometry_check(&g, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(cache_geometry_fits_model(&g, &hp, err, sizeof(err)), 0);
	hp.n_kv_heads = 4;
	ck_assert_int_eq(cache_geometry_fits_model(&g, &hp, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "3 kv heads"));

	/* anchors only slide: strategy full builds none */
	s.strategy = CACHE_STRATEGY_FULL;
	cache_geometry_build(&s, &hp, &g);
	ck_assert_int_eq(g.anchor_max, 0);
	ck_assert_int_eq(g.max_context_length, 4096);
}
END_TEST

/* RoPE scaling the cache takes from a model: longrope's long factors for a
 * configuration whose streams reach beyond the original context, the short
 * ones within it (as llama.cpp chooses by its context size); YaRN's blend
 * with its original context; a model of other factors does not fit. */
START_TEST(test_rope_scaling_from_model)
{
	static const float lng[4] = {1.0f, 2.0f, 4.0f, 8.0f}, shrt[4] = {1.0f, 1.0f, 1.5f, 2.0f};
	struct model_hparams hp = {.n_layers = 2,
	                           .n_kv_heads = 1,
	                           .head_dim = 16,
	                           .rope_dim = 8,
	                           .rope_theta = 10000.0,
	                           .rope_factors_long = lng,
	                           .rope_factors_short = shrt,
	                           .rope_ctx_orig = 4096};
	hp.arch = model_arch_find("phi3");
	struct cache_settings s = {.strategy = CACHE_STRATEGY_FULL,
	                           .window_size = 64,
	                           .max_context_length = 4096,
	                           .dtype = KV_DTYPE_F32};
	struct cache_geometry g;
	char err[SINKD_ERR_LEN];
	cache_geometry_build(&s, &hp, &g);
	ck_assert(g.rope_neox);
	ck_assert_int_eq(g.n_rope_factors, 4);
	ck_assert_int_eq(memcmp(g.rope_factors, shrt, sizeof(shrt)), 0);
	ck_assert_int_eq(cache_geometry_fits_model(&g, &hp, err, sizeof(err)), 0);
	s.max_context_length = 4097;
	struct cache_geometry g2;
	cache_geometry_build(&s, &hp, &g2);
	ck_assert_int_eq(memcmp(g2.rope_factors, lng, sizeof(lng)), 0);
	ck_assert_msg(cache_geometry_check(&g2, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(cache_geometry_fits_model(&g2, &hp, err, sizeof(err)), 0);
	ck_assert(!cache_geometry_equal(&g, &g2));
	/* the short-context geometry does not fit a model asked for more */
	g.max_context_length = 4097;
	ck_assert_int_eq(cache_geometry_fits_model(&g, &hp, err, sizeof(err)), -EINVAL);

	/* YaRN: the blend and its original context go into the geometry */
	hp.arch = model_arch_find("llama");
	hp.rope_factors_long = hp.rope_factors_short = NULL;
	hp.rope_freq_scale = 0.25;
	hp.rope_ext_factor = 1.0;
	hp.rope_ctx_orig = 256;
	cache_geometry_build(&s, &hp, &g);
	ck_assert_int_eq(g.n_rope_factors, 0);
	ck_assert(g.rope_ext_factor == 1.0);
	ck_assert_int_eq(g.rope_ctx_orig, 256);
	ck_assert_msg(cache_geometry_check(&g, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(cache_geometry_fits_model(&g, &hp, err, sizeof(err)), 0);
	hp.rope_ctx_orig = 512;
	ck_assert_int_eq(cache_geometry_fits_model(&g, &hp, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "YaRN"));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("geometry");
	TCase *tc = tcase_create("geometry");
	tcase_add_test(tc, test_check);
	tcase_add_test(tc, test_pin);
	tcase_add_test(tc, test_bound_bytes_per_layer);
	tcase_add_test(tc, test_layer_spans);
	tcase_add_test(tc, test_build_from_settings);
	tcase_add_test(tc, test_rope_scaling_from_model);
	tcase_add_test(tc, test_sink_bytes);
	tcase_add_test(tc, test_share_check);
	tcase_add_test(tc, test_swa_layers_bound);
	tcase_add_test(tc, test_swa_layers_model);
	tcase_add_test(tc, test_swa_layers_scaled_yarn);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
