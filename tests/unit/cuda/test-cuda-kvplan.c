/* The CUDA backend's cache bookkeeping (cuda_kvplan.c) and its kernel twins
 * (twins.c), run on the host, against the production CPU cache
 * (sinkcache_append + sinkcache_attend): for several geometries (plain
 * window, int8 and int4 compressed tiers, quantized sinks, strategy full,
 * neox/partial RoPE, original positions), hundreds of tokens with
 * evictions, group quantization and revisions, every attention output and
 * every stat must agree.  Needs no GPU: it proves the device layout and job
 * plan that the kernels then follow (test-cuda-kernels compares kernels
 * with these twins on a GPU).  At the end of each run both caches export
 * the same canonical image bytes, and each imports into a fresh cache of
 * the other kind that then goes on exactly as the original. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/kvimage.h"
#include "cache/rope.h"
#include "cache/sinkcache.h"
#include "cuda_kernels.h"
#include "cuda_kvplan.h"
#include "util/errbuf.h"
#include "testutil.h"

#define N_LAYERS 2
#define N_HEADS 4

struct twin_cache {
	struct cuda_kv_shape sh;
	struct cuda_kv_state st;
	struct cuda_kv_anchors anc;
	unsigned char *sink, *win;
	struct cuda_kv_view view;
	double *hi, *lo;
};

static uint64_t rng = 12345;
static float frand(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((rng >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static void twin_cache_init(struct twin_cache *t, const struct cache_geometry *g)
{
	char err[SINKD_ERR_LEN];
	ck_assert_msg(cuda_kv_shape_init(g, &t->sh, err, sizeof(err)) == 0, "%s", err);
	cuda_kv_state_init(&t->st);
	ck_assert_msg(cuda_kv_anchors_init(&t->sh, &t->anc, err, sizeof(err)) == 0, "%s", err);
	t->sink = calloc(1, t->sh.sink_layer_bytes * g->n_layers + 1);
	t->win = calloc(1, t->sh.win_layer_bytes * g->n_layers + 1);
	t->view = t->sh.layout;
	t->view.sink_base = (uint64_t)(uintptr_t)t->sink;
	t->view.win_base = (uint64_t)(uintptr_t)t->win;
	int half = g->rope_dim / 2 > 0 ? g->rope_dim / 2 : 1;
	t->hi = calloc((size_t)half, sizeof(double));
	t->lo = calloc((size_t)half, sizeof(double));
	rope_freqs_init(g->rope_theta, g->rope_dim, NULL, 1.0, t->hi, t->lo);
}

static void twin_cache_free(struct twin_cache *t)
{
	free(t->sink);
	free(t->win);
	free(t->hi);
	free(t->lo);
	cuda_kv_anchors_free(&t->anc);
}

static void check_stats(struct sinkcache *c, struct twin_cache *t)
{
	struct sinkcache_stats a, b;
	sinkcache_get_stats(c, &a);
	cuda_kv_plan_stats(&t->sh, &t->st, &b);
	cuda_kv_anchors_stats(&t->sh, &t->anc, &b);
	ck_assert_int_eq(a.n_anchor, b.n_anchor);
	ck_assert_uint_eq(a.anchors_promoted, b.anchors_promoted);
	ck_assert_uint_eq(a.anchors_demoted, b.anchors_demoted);
	ck_assert_uint_eq(a.n_seen, b.n_seen);
	ck_assert_int_eq(a.n_resident, b.n_resident);
	ck_assert_int_eq(a.n_sink, b.n_sink);
	ck_assert_int_eq(a.n_compressed, b.n_compressed);
	ck_assert_int_eq(a.n_hot, b.n_hot);
	ck_assert_uint_eq(a.bytes_resident, b.bytes_resident);
	ck_assert_uint_eq(a.bytes_bound, b.bytes_bound);
	ck_assert_uint_eq(a.evicted_compressed, b.evicted_compressed);
	ck_assert_uint_eq(a.moved_to_compressed, b.moved_to_compressed);
}

#define MAX_LD 160 /* sinks + anchors + window of the geometries here */
#define MAX_ANCHOR_OPS (N_LAYERS * CUDA_KV_ANCHOR_OPS(16))

/* One token through both caches, every layer; returns the largest error.
 * With anchors the twin runs the backend's order: each layer's upkeep ops
 * planned before the step, and the scores fed after it. */
static double step_both(struct sinkcache *c, struct twin_cache *t, float *scratch)
{
	const struct cache_geometry *g = &t->sh.g;
	int d = g->head_dim, n_kv = g->n_kv_heads, rd = g->rope_dim;
	float q[N_HEADS * 64], k[8 * 64], v[8 * 64], kr[8 * 64], qw[N_HEADS * 64], qs[N_HEADS * 64];
	float out_c[N_HEADS * 64], out_t[N_HEADS * 64], mass_c[N_HEADS], mass_t[N_HEADS];
	float learned_c[N_HEADS], learned_t[N_HEADS];
	/* learned sink logits (gpt-oss) on odd layers: one above every score,
	 * one below, the others among them */
	static const float sinks[N_HEADS] = {6.0f, -9.0f, 0.5f, 1.5f};
	static float kw_c[N_HEADS * MAX_LD], kw_t[N_HEADS * MAX_LD], kmax[N_LAYERS][MAX_LD];
	static struct cuda_kv_anchor_op ops[MAX_ANCHOR_OPS];
	static double angles[N_LAYERS * 16 * 64];
	int begin[N_LAYERS + 1] = {0};
	double cs_key[64], cs_sink[64], worst = 0.0;
	char err[SINKD_ERR_LEN];
	bool anchors = t->anc.cap > 0;
	size_t ld = (size_t)(t->sh.caps.sink + t->sh.caps.anchor + t->sh.caps.window);
	ck_assert(!anchors || ld <= MAX_LD);
	int n_angles = 0;
	if (anchors) {
		cuda_kv_anchors_begin(&t->anc);
		for (int l = 0; l < g->n_layers; l++) {
			int n_ops = 0, na = 0;
			cuda_kv_anchors_plan(&t->sh, &t->anc, l, &t->st, &t->view, t->hi, t->lo,
			                     ops + begin[l], &n_ops, angles + (size_t)n_angles * rd,
			                     n_angles, &na);
			begin[l + 1] = begin[l] + n_ops;
			n_angles += na;
		}
	}
	struct cuda_kv_step step;
	cuda_kv_plan_step(&t->sh, &t->st, &t->view, &step);
	rope_cos_sin(t->hi, t->lo, rd, step.key_pos, cs_key);
	float scale = 1.0f / sqrtf((float)d);
	for (int l = 0; l < g->n_layers; l++) {
		for (int i = 0; i < N_HEADS * d; i++)
			q[i] = 2.0f * frand();
		for (int i = 0; i < n_kv * d; i++) {
			k[i] = 2.0f * frand() + (i % 3 == 0 ? 0.5f : 0.0f);
			v[i] = frand();
		}
		ck_assert_msg(sinkcache_append(c, l, k, v, err, sizeof(err)) == 0, "%s", err);
		const float *learned = l % 2 ? sinks : NULL;
		ck_assert_int_eq(sinkcache_set_learned_sinks(c, l, learned, N_HEADS, NULL, 0), 0);
		sinkcache_attend(c, l, q, N_HEADS, 0, N_HEADS, out_c, scratch, mass_c, learned_c,
		                 anchors ? kw_c : NULL, true);
		if (anchors)
			sinkcache_observe(c, l, kw_c, learned_c, N_HEADS);
		struct cuda_kv_attn_job attn = step.attn;
		attn.n_anchor = anchors ? t->anc.plan[l].n : 0;
		rope_cos_sin(t->hi, t->lo, rd,
		             tier_sink_query_pos(g, &t->sh.caps, &t->st.t, attn.n_anchor), cs_sink);
		twin_rope(k, kr, 1, n_kv, d, rd, g->rope_neox, cs_key, 0, 1.0f);
		twin_rope(q, qw, 1, N_HEADS, d, rd, g->rope_neox, cs_key, 0, scale);
		twin_rope(q, qs, 1, N_HEADS, d, rd, g->rope_neox, cs_sink, 0, scale);
		if (anchors) {
			int32_t list[2] = {begin[l], begin[l + 1]};
			twin_kv_anchor_ops(ops, list, 1, n_kv, angles, rd, g->rope_neox);
		}
		if (step.has_flush)
			twin_kv_flush(&step.flush, 1, n_kv, l);
		step.append.token = 0;
		twin_kv_append(&step.append, 1, n_kv, l, kr, v);
		attn.token = 0;
		twin_attention_capped(&attn, 1, l, N_HEADS, qw, qs, out_t, mass_t,
		                      anchors ? kw_t : NULL, (int)ld, 0.0f, learned, learned_t);
		for (int i = 0; i < N_HEADS * d; i++) {
			double e =
			    fabs((double)out_c[i] - out_t[i]) / (1e-5 + 1e-4 * fabs(out_c[i]));
			worst = e > worst ? e : worst;
		}
		for (int h = 0; h < N_HEADS; h++) {
			double e = fabs((double)mass_c[h] - mass_t[h]) / 1e-5;
			worst = e > worst ? e : worst;
			e = fabs((double)learned_c[h] - learned_t[h]) / 1e-5;
			worst = e > worst ? e : worst;
		}
		if (!anchors)
			continue;
		int n_res = attn.n_sink + attn.n_anchor + attn.n_comp + attn.n_fp;
		for (int h = 0; h < N_HEADS; h++)
			for (int j = 0; j < n_res; j++) {
				double e = fabs((double)kw_c[h * ld + j] - kw_t[h * ld + j]) / 1e-5;
				worst = e > worst ? e : worst;
			}
		twin_key_weight_reduce(kw_t, 1, N_HEADS, (int)ld, n_res, kmax[l], NULL);
	}
	if (anchors) {
		cuda_kv_anchors_commit(&t->sh, &t->anc, &step);
		for (int l = 0; l < g->n_layers; l++)
			cuda_kv_anchors_observe(&t->sh, &t->anc, l, &t->st, kmax[l], ld);
	}
	return worst;
}

/* Tokens from..to-1 through both caches, revising now and then. */
static void run_tokens(struct sinkcache *c, struct twin_cache *t, float *scratch, int from, int to)
{
	char err[SINKD_ERR_LEN], err2[SINKD_ERR_LEN];
	for (int i = from; i < to; i++) {
		if (!sinkcache_can_append(c, 1)) {
			ck_assert(!cuda_kv_can_append(&t->sh, &t->st, 1));
			return;
		}
		ck_assert(cuda_kv_can_append(&t->sh, &t->st, 1));
		double worst = step_both(c, t, scratch);
		ck_assert_msg(worst <= 1.0,
		              "token %d: twin differs from the CPU cache (%.2f x tol)", i, worst);
		check_stats(c, t);
		if (i % 37 == 36) { /* revise a few, sometimes more than allowed */
			size_t n = (size_t)(i % 5) + (i % 3 == 0 ? 400 : 1);
			int rc1 = sinkcache_revise(c, n, err, sizeof(err));
			int rc2 = cuda_kv_plan_revise(&t->sh, &t->st, n, err2, sizeof(err2));
			ck_assert_int_eq(rc1, rc2);
			if (rc1)
				ck_assert_str_eq(err, err2);
			check_stats(c, t);
		}
	}
}

/* ---- canonical image: the twin's rings unrolled as the backend does */

static void twin_export(const struct twin_cache *t, struct kv_image *im)
{
	struct kv_image_layout lo;
	char err[SINKD_ERR_LEN];
	cuda_kv_image_counts(&t->st, &im->n);
	ck_assert_msg(cuda_kv_image_layout(&t->sh, &im->n, &lo, err, sizeof(err)) == 0, "%s", err);
	im->data = malloc(lo.total_bytes + 1);
	im->bytes = lo.total_bytes;
	for (int l = 0; l < t->sh.g.n_layers; l++)
		cuda_kv_image_layer_out(&t->sh, &t->st, &lo, t->sink + l * t->sh.sink_layer_bytes,
		                        t->win + l * t->sh.win_layer_bytes,
		                        im->data + l * lo.layer_bytes);
}

static void twin_import(struct twin_cache *t, const struct kv_image *im)
{
	struct kv_image_layout lo;
	char err[SINKD_ERR_LEN];
	ck_assert_msg(cuda_kv_image_layout(&t->sh, &im->n, &lo, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(im->bytes, lo.total_bytes);
	cuda_kv_image_state(&im->n, &t->st);
	for (int l = 0; l < t->sh.g.n_layers; l++)
		cuda_kv_image_layer_in(&t->sh, &t->st, &lo, t->sink + l * t->sh.sink_layer_bytes,
		                       t->win + l * t->sh.win_layer_bytes,
		                       im->data + l * lo.layer_bytes);
}

static void assert_images_equal(const struct kv_image *a, const struct kv_image *b,
                                const char *what)
{
	ck_assert_uint_eq(a->n.n_seen, b->n.n_seen);
	ck_assert_uint_eq(a->n.evicted, b->n.evicted);
	ck_assert_uint_eq(a->n.moved, b->n.moved);
	ck_assert_int_eq(a->n.n_sink, b->n.n_sink);
	ck_assert_int_eq(a->n.n_groups, b->n.n_groups);
	ck_assert_int_eq(a->n.grp_dropped, b->n.grp_dropped);
	ck_assert_int_eq(a->n.n_stage, b->n.n_stage);
	ck_assert_int_eq(a->n.n_hot, b->n.n_hot);
	ck_assert_uint_eq(a->bytes, b->bytes);
	ck_assert_msg(memcmp(a->data, b->data, a->bytes) == 0, "%s: image bytes differ", what);
}

/* Both caches' images are the same bytes; each imports into a fresh cache
 * of the other kind, and the four go on alike to the same images. */
static void image_round_trip(struct sinkcache *c, struct twin_cache *t, float *scratch, int from,
                             int to)
{
	const struct cache_geometry *g = &t->sh.g;
	struct kv_image ic, it, ic2, it2;
	struct sinkcache *c2;
	struct twin_cache t2;
	char err[SINKD_ERR_LEN];
	ck_assert_msg(sinkcache_export(c, &ic, err, sizeof(err)) == 0, "%s", err);
	twin_export(t, &it);
	assert_images_equal(&ic, &it, "cpu vs twin");
	ck_assert_msg(sinkcache_new(g, &c2, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(sinkcache_import(c2, &it, err, sizeof(err)) == 0, "%s", err);
	twin_cache_init(&t2, g);
	twin_import(&t2, &ic);
	check_stats(c2, &t2);
	check_stats(c, &t2);
	kv_image_free(&ic), kv_image_free(&it);
	uint64_t seed = rng;
	run_tokens(c, t, scratch, from, to);
	rng = seed;
	run_tokens(c2, &t2, scratch, from, to);
	ck_assert_msg(sinkcache_export(c, &ic, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(sinkcache_export(c2, &ic2, err, sizeof(err)) == 0, "%s", err);
	twin_export(t, &it);
	twin_export(&t2, &it2);
	assert_images_equal(&ic, &ic2, "cpu vs imported cpu");
	assert_images_equal(&it, &it2, "twin vs imported twin");
	assert_images_equal(&ic, &it2, "cpu vs imported twin");
	kv_image_free(&ic), kv_image_free(&it), kv_image_free(&ic2), kv_image_free(&it2);
	twin_cache_free(&t2);
	sinkcache_free(c2);
}

static void run_geometry(const struct cache_geometry *g, int n_tokens)
{
	struct sinkcache *c;
	struct twin_cache t;
	char err[SINKD_ERR_LEN];
	ck_assert_msg(sinkcache_new(g, &c, err, sizeof(err)) == 0, "%s", err);
	twin_cache_init(&t, g);
	float *scratch = malloc(sinkcache_scratch_floats(g) * sizeof(float));
	run_tokens(c, &t, scratch, 0, n_tokens);
	if (g->anchor_max == 0) { /* snapshots do not carry anchors */
		image_round_trip(c, &t, scratch, n_tokens, n_tokens + 80);
	} else { /* the run went through both moves */
		struct sinkcache_stats st;
		sinkcache_get_stats(c, &st);
		ck_assert_uint_gt(st.anchors_promoted, 10);
		ck_assert_uint_gt(st.anchors_demoted, 5);
		printf("anchors: %llu promoted, %llu demoted, %d resident\n",
		       (unsigned long long)st.anchors_promoted,
		       (unsigned long long)st.anchors_demoted, st.n_anchor);
	}
	free(scratch);
	twin_cache_free(&t);
	sinkcache_free(c);
}

static struct cache_geometry base_geometry(void)
{
	return tu_geometry(N_LAYERS, 2, 16, 4, 40, false, 8, 16);
}

START_TEST(test_plain_window)
{
	struct cache_geometry g = base_geometry();
	run_geometry(&g, 200);
	g.dtype = KV_DTYPE_BF16;
	g.sink_keep_count = 0;
	run_geometry(&g, 120);
}
END_TEST

START_TEST(test_int8_window)
{
	struct cache_geometry g = base_geometry();
	g.quant_enabled = true;
	g.window_size = 70; /* 54 compressed: groups of 27 */
	g.dtype = KV_DTYPE_BF16;
	run_geometry(&g, 300);
	g.window_size = 47; /* 37 compressed, prime: groups of 32, a partial ring */
	g.full_precision_recent = 10;
	run_geometry(&g, 300);
}
END_TEST

START_TEST(test_int4_quantized_sinks_neox)
{
	struct cache_geometry g = base_geometry();
	g.quant_enabled = true;
	g.quant_bits = 4;
	g.protect_sinks = false;
	g.sink_keep_count = 3;
	g.window_size = 64;
	g.full_precision_recent = 8;
	g.dtype = KV_DTYPE_F16;
	g.rope_neox = true;
	g.rope_dim = 8;
	run_geometry(&g, 300);
}
END_TEST

START_TEST(test_strategy_full_and_original_positions)
{
	struct cache_geometry g = base_geometry();
	g.strategy = CACHE_STRATEGY_FULL;
	g.max_context_length = 200;
	g.quant_enabled = true;
	g.full_precision_recent = 20; /* 176 compressed: groups of 22 */
	run_geometry(&g, 260);        /* runs into the end of the context */
	g = base_geometry();
	g.rope_positions = ROPE_POSITIONS_ORIGINAL;
	g.quant_enabled = true;
	g.full_precision_recent = 1;
	g.window_size = 33;
	run_geometry(&g, 150);
}
END_TEST

/* Anchors: every layer promotes and demotes on its own; the twin's tiers,
 * rows and rotations follow the CPU cache's step for step. */
START_TEST(test_anchors)
{
	struct cache_geometry g = base_geometry();
	g.anchor_max = 6;
	g.anchor_promote = 0.05f;
	g.anchor_demote_steps = 12;
	run_geometry(&g, 400);
	g.quant_enabled = true; /* promotions out of quantized groups */
	g.quant_bits = 4;
	g.window_size = 64;
	g.full_precision_recent = 8;
	g.dtype = KV_DTYPE_BF16;
	g.anchor_max = 16;
	g.anchor_promote = 0.04f;
	g.anchor_demote_steps = 5;
	run_geometry(&g, 400);
	g.rope_positions = ROPE_POSITIONS_ORIGINAL;
	g.rope_neox = true;
	g.rope_dim = 8;
	run_geometry(&g, 200);
}
END_TEST

START_TEST(test_shape_bytes_cover_bound)
{
	/* The device layout is the CPU bound plus alignment, never less. */
	struct cache_geometry g = base_geometry();
	struct cuda_kv_shape sh;
	g.quant_enabled = true;
	g.window_size = 1024;
	g.full_precision_recent = 128;
	ck_assert_int_eq(cuda_kv_shape_init(&g, &sh, NULL, 0), 0);
	size_t bound = cache_geometry_bound_bytes(&g);
	ck_assert_uint_ge(cuda_kv_session_bytes(&sh), bound);
	ck_assert_uint_le(cuda_kv_session_bytes(&sh), bound + 20 * 256 * (size_t)g.n_layers);
	g.window_size = 0;
	ck_assert_int_ne(cuda_kv_shape_init(&g, &sh, NULL, 0), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cuda-kvplan");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_plain_window);
	tcase_add_test(tc, test_int8_window);
	tcase_add_test(tc, test_int4_quantized_sinks_neox);
	tcase_add_test(tc, test_strategy_full_and_original_positions);
	tcase_add_test(tc, test_anchors);
	tcase_add_test(tc, test_shape_bytes_cover_bound);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
