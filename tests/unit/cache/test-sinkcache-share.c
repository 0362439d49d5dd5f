/* Shared sink tiers of the CPU cache (cache/sinkcache.h: sinkcache_prefix_*,
 * sinkcache_new_shared): a cache reading its sinks from a prefix attends bit
 * for bit as the cache the prefix was copied from, over evictions, int8 and
 * int4 groups, revisions, anchors and strategy full; it exports the same
 * image, imports only images with the prefix's sink rows, never writes the
 * prefix, owns and counts only its window, and its trace shows its sinks as
 * "shared".  Ineligible geometries and caches are refused by name. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cachetrace.h"
#include "cache/kvimage.h"
#include "cache/sinkcache.h"
#include "util/errbuf.h"
#include "testutil.h"

enum { NL = 3, NKV = 2, NH = 4, D = 16 };

static struct cache_geometry geom(int sinks, int window, bool quant, int bits, int hot)
{
	return tu_geometry(NL, NKV, D, sinks, window, quant, bits, hot);
}

/* Attention of one random query in every layer into out (NL * NH * D),
 * observed (anchors, traces) as the forward pass does. */
static void attend_all(struct sinkcache *c, unsigned *seed, float *out)
{
	const struct cache_geometry *g = sinkcache_geometry(c);
	float q[NH * D];
	float *scratch = malloc(sinkcache_scratch_floats(g) * sizeof(float));
	float *kw = calloc((size_t)NH * cache_geometry_capacity_tokens(g), sizeof(float));
	bool track = sinkcache_tracks_attention(c);
	for (int l = 0; l < NL; l++) {
		for (int j = 0; j < NH * D; j++)
			q[j] = tu_frand(seed);
		sinkcache_attend(c, l, q, NH, 0, NH, out + (size_t)l * NH * D, scratch, NULL, NULL,
		                 track ? kw : NULL, true);
		if (track)
			sinkcache_observe(c, l, kw, NULL, NH);
	}
	free(kw);
	free(scratch);
}

static struct kv_image export_of(const struct sinkcache *c)
{
	struct kv_image im;
	char err[SINKD_ERR_LEN];
	ck_assert_msg(sinkcache_export(c, &im, err, sizeof(err)) == 0, "%s", err);
	return im;
}

static void images_equal(const struct kv_image *a, const struct kv_image *b)
{
	ck_assert_uint_eq(a->bytes, b->bytes);
	ck_assert_int_eq(memcmp(&a->n, &b->n, sizeof(a->n)), 0);
	ck_assert_int_eq(memcmp(a->data, b->data, a->bytes), 0);
}

/* A plain cache that appended the S prefix tokens (seed 3), its prefix. */
static struct sinkcache *prefix_source(const struct cache_geometry *g, struct sinkcache_prefix **p,
                                       size_t *bytes)
{
	char err[SINKD_ERR_LEN];
	struct sinkcache *a;
	unsigned seed = 3;
	ck_assert_msg(sinkcache_new(g, &a, err, sizeof(err)) == 0, "%s", err);
	for (int t = 0; t < g->sink_keep_count; t++)
		tu_cache_append_random(a, &seed);
	ck_assert_msg(sinkcache_prefix_new(a, p, bytes, err, sizeof(err)) == 0, "%s", err);
	return a;
}

/* A (plain, the prefix's source) and B (shared) see the same `more`
 * tokens: the same attention after each, the same revision results, the
 * same stats but for what B shares, the same image; the prefix unchanged. */
static void shared_follows(const struct cache_geometry *g, int more)
{
	char err[SINKD_ERR_LEN];
	struct sinkcache_prefix *p;
	size_t bytes;
	struct sinkcache *a = prefix_source(g, &p, &bytes), *b;
	ck_assert_uint_eq(bytes, cache_geometry_sink_bytes(g));
	ck_assert_msg(sinkcache_new_shared(p, &b, err, sizeof(err)) == 0, "%s", err);
	ck_assert_ptr_eq(sinkcache_shared_prefix(b), p);
	ck_assert_ptr_null(sinkcache_shared_prefix(a));
	struct kv_image before, ia, ib;
	if (g->anchor_max == 0) { /* a snapshot carries no anchors */
		ia = export_of(a), ib = export_of(b);
		images_equal(&ia, &ib);
		kv_image_free(&ia);
		kv_image_free(&ib);
	}
	ck_assert_int_eq(sinkcache_prefix_image(p, g->sink_keep_count, &before, err, sizeof(err)),
	                 0);
	float oa[NL * NH * D], ob[NL * NH * D];
	unsigned sa = 5, sb = 5, qa = 9, qb = 9;
	for (int t = 0; t < more; t++) {
		tu_cache_append_random(a, &sa);
		tu_cache_append_random(b, &sb);
		attend_all(a, &qa, oa);
		attend_all(b, &qb, ob);
		ck_assert_msg(memcmp(oa, ob, sizeof(oa)) == 0, "outputs differ at token %d", t);
		if (t % 17 == 16) { /* the same revision limit and result */
			char ea[SINKD_ERR_LEN] = "", eb[SINKD_ERR_LEN] = "";
			int n = t % 34 == 33 ? 1000 : 2;
			ck_assert_int_eq(sinkcache_revise(a, (size_t)n, ea, sizeof(ea)),
			                 sinkcache_revise(b, (size_t)n, eb, sizeof(eb)));
			ck_assert_str_eq(ea, eb);
		}
	}
	struct sinkcache_stats st_a, st_b;
	sinkcache_get_stats(a, &st_a);
	sinkcache_get_stats(b, &st_b);
	ck_assert_int_eq(st_a.n_shared, 0);
	ck_assert_int_eq(st_b.n_shared, g->sink_keep_count);
	ck_assert_uint_eq(st_b.bytes_shared, bytes);
	ck_assert_uint_eq(st_b.bytes_bound, cache_geometry_bound_bytes(g) - bytes);
	ck_assert_uint_eq(st_b.bytes_resident + bytes, st_a.bytes_resident);
	st_b.n_shared = 0, st_b.bytes_shared = 0;
	st_b.bytes_bound += bytes, st_b.bytes_resident += bytes;
	ck_assert_int_eq(memcmp(&st_a, &st_b, sizeof(st_a)), 0);
	if (g->anchor_max == 0) {
		ia = export_of(a), ib = export_of(b);
		images_equal(&ia, &ib);
		kv_image_free(&ia);
		kv_image_free(&ib);
	}
	struct kv_image after;
	ck_assert_int_eq(sinkcache_prefix_image(p, g->sink_keep_count, &after, err, sizeof(err)),
	                 0);
	images_equal(&before, &after);
	kv_image_free(&before);
	kv_image_free(&after);
	sinkcache_free(b);
	sinkcache_free(a);
	sinkcache_prefix_free(p);
}

START_TEST(test_follows_float)
{
	struct cache_geometry g = geom(6, 24, false, 8, 0);
	shared_follows(&g, 90);
	g.dtype = KV_DTYPE_F16;
	shared_follows(&g, 60);
	g.sink_keep_count = 1;
	g.dtype = KV_DTYPE_BF16;
	shared_follows(&g, 60);
	g.rope_positions = ROPE_POSITIONS_ORIGINAL;
	shared_follows(&g, 40);
}
END_TEST

START_TEST(test_follows_quantized)
{
	struct cache_geometry g = geom(5, 72, true, 8, 8); /* protected sinks */
	shared_follows(&g, 200);
	g.quant_bits = 4;
	shared_follows(&g, 160);
	g.full_precision_recent = 0;
	shared_follows(&g, 100);
}
END_TEST

START_TEST(test_follows_anchors_and_full)
{
	struct cache_geometry g = geom(4, 40, true, 8, 8);
	g.anchor_max = 4, g.anchor_promote = 0.05f, g.anchor_demote_steps = 3;
	shared_follows(&g, 150);
	g = geom(4, 40, true, 8, 8);
	g.strategy = CACHE_STRATEGY_FULL;
	g.max_context_length = 80;
	shared_follows(&g, 70);
}
END_TEST

/* An image of B imports into a plain cache and into another shared one and
 * both go on as B; an image whose sinks differ by one byte, or that holds
 * fewer sinks, is refused by a shared cache (naming the layer); a shared
 * cache holding its own tokens is not empty; reset goes back to the shared
 * tokens. */
START_TEST(test_import)
{
	struct cache_geometry g = geom(4, 40, true, 4, 8);
	char err[SINKD_ERR_LEN];
	struct sinkcache_prefix *p;
	size_t bytes;
	struct sinkcache *a = prefix_source(&g, &p, &bytes), *b, *c, *d;
	ck_assert_int_eq(sinkcache_new_shared(p, &b, err, sizeof(err)), 0);
	ck_assert_int_eq(sinkcache_new_shared(p, &c, err, sizeof(err)), 0);
	ck_assert_int_eq(sinkcache_new(&g, &d, err, sizeof(err)), 0);
	unsigned seed = 5;
	for (int t = 0; t < 70; t++)
		tu_cache_append_random(b, &seed);
	struct kv_image im = export_of(b);
	ck_assert_int_eq(sinkcache_import(b, &im, err, sizeof(err)), -EBUSY);
	ck_assert_msg(sinkcache_import(c, &im, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(sinkcache_import(d, &im, err, sizeof(err)) == 0, "%s", err);
	float ob[NL * NH * D], oc[NL * NH * D], od[NL * NH * D];
	for (int t = 0; t < 50; t++) {
		unsigned sb = seed + t, sc = sb, sd = sb, qb = 77u + t, qc = qb, qd = qb;
		tu_cache_append_random(b, &sb), tu_cache_append_random(c, &sc), tu_cache_append_random(d, &sd);
		attend_all(b, &qb, ob), attend_all(c, &qc, oc), attend_all(d, &qd, od);
		ck_assert_int_eq(memcmp(ob, oc, sizeof(ob)), 0);
		ck_assert_int_eq(memcmp(ob, od, sizeof(ob)), 0);
	}
	sinkcache_reset(c);
	struct sinkcache_stats st;
	sinkcache_get_stats(c, &st);
	ck_assert_uint_eq(st.n_seen, 4);
	ck_assert_int_eq(st.n_sink, 4);
	ck_assert_int_eq(st.n_shared, 4);
	ck_assert_int_eq(st.n_resident, 4);
	/* one byte of layer 2's sink values differs */
	struct kv_image_plan plan;
	ck_assert_int_eq(kv_image_plan_of(&g, &im.n, &im.n_swa, &plan, err, sizeof(err)), 0);
	size_t at;
	const struct kv_image_layout *lo = kv_image_plan_layer(&plan, &g, 2, &at);
	im.data[at + lo->off_sink_v + 5] ^= 1;
	ck_assert_int_eq(sinkcache_import(c, &im, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "layer 2"), "%s", err);
	im.data[at + lo->off_sink_v + 5] ^= 1;
	struct kv_image few;
	ck_assert_int_eq(sinkcache_prefix_image(p, 3, &few, err, sizeof(err)), 0);
	ck_assert_int_eq(sinkcache_import(c, &few, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "3 sink tokens"), "%s", err);
	ck_assert_msg(sinkcache_import(c, &im, err, sizeof(err)) == 0, "%s", err);
	kv_image_free(&few);
	kv_image_free(&im);
	sinkcache_free(b);
	sinkcache_free(c);
	sinkcache_free(d);
	sinkcache_free(a);
	sinkcache_prefix_free(p);
}
END_TEST

/* prefix_image(n) is the export of a cache that appended the first n
 * tokens, and imports into a plain cache that then goes on as that one. */
START_TEST(test_prefix_image)
{
	struct cache_geometry g = geom(6, 40, true, 8, 8);
	char err[SINKD_ERR_LEN];
	struct sinkcache_prefix *p;
	size_t bytes;
	struct sinkcache *a = prefix_source(&g, &p, &bytes);
	int ns[] = {1, 5, 6};
	for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		struct sinkcache *ref, *imp;
		unsigned seed = 3;
		ck_assert_int_eq(sinkcache_new(&g, &ref, err, sizeof(err)), 0);
		ck_assert_int_eq(sinkcache_new(&g, &imp, err, sizeof(err)), 0);
		for (int t = 0; t < ns[i]; t++)
			tu_cache_append_random(ref, &seed);
		struct kv_image pi, ri = export_of(ref);
		ck_assert_msg(sinkcache_prefix_image(p, ns[i], &pi, err, sizeof(err)) == 0, "%s",
		              err);
		images_equal(&pi, &ri);
		ck_assert_msg(sinkcache_import(imp, &pi, err, sizeof(err)) == 0, "%s", err);
		float o1[NL * NH * D], o2[NL * NH * D];
		for (int t = 0; t < 40; t++) {
			unsigned s1 = 40u + t, s2 = s1, q1 = 90u + t, q2 = q1;
			tu_cache_append_random(ref, &s1), tu_cache_append_random(imp, &s2);
			attend_all(ref, &q1, o1), attend_all(imp, &q2, o2);
			ck_assert_int_eq(memcmp(o1, o2, sizeof(o1)), 0);
		}
		kv_image_free(&pi);
		kv_image_free(&ri);
		sinkcache_free(ref);
		sinkcache_free(imp);
	}
	struct kv_image none;
	ck_assert_int_eq(sinkcache_prefix_image(p, 0, &none, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "allowed 1..6"), "%s", err);
	ck_assert_int_eq(sinkcache_prefix_image(p, 7, &none, err, sizeof(err)), -EINVAL);
	sinkcache_free(a);
	sinkcache_prefix_free(p);
}
END_TEST

static void refused(const struct cache_geometry *g, int n_tokens, int rc, const char *says)
{
	char err[SINKD_ERR_LEN] = "";
	struct sinkcache *a;
	struct sinkcache_prefix *p = NULL;
	size_t bytes = 0;
	unsigned seed = 1;
	ck_assert_int_eq(sinkcache_new(g, &a, err, sizeof(err)), 0);
	for (int t = 0; t < n_tokens; t++)
		tu_cache_append_random(a, &seed);
	ck_assert_int_eq(sinkcache_prefix_new(a, &p, &bytes, err, sizeof(err)), rc);
	ck_assert_ptr_null(p);
	ck_assert_msg(strstr(err, says), "'%s' does not say '%s'", err, says);
	sinkcache_free(a);
}

START_TEST(test_refused)
{
	struct cache_geometry g = geom(4, 40, true, 8, 8);
	refused(&g, 3, -EINVAL, "exactly its 4 sinks");
	refused(&g, 5, -EINVAL, "1 window");
	g.protect_sinks = false;
	refused(&g, 4, -ENOTSUP, "full-precision sinks");
	g = geom(4, 40, true, 8, 8);
	cache_geometry_set_layer(&g, 1, CACHE_STRATEGY_SLIDING_WINDOW, 24);
	refused(&g, 4, -ENOTSUP, "every layer global");
	g = geom(0, 40, false, 8, 0);
	refused(&g, 0, -ENOTSUP, "sink_keep_count >= 1");
}
END_TEST

/* The trace of a shared cache shows its sinks as "shared", its window as
 * a plain one's; a plain cache's sinks stay "sink". */
START_TEST(test_trace)
{
	struct cache_geometry g = geom(4, 40, true, 8, 8);
	char err[SINKD_ERR_LEN];
	struct sinkcache_prefix *p;
	size_t bytes;
	struct sinkcache *a = prefix_source(&g, &p, &bytes), *b;
	ck_assert_int_eq(sinkcache_new_shared(p, &b, err, sizeof(err)), 0);
	ck_assert_int_eq(sinkcache_trace_enable(a, true, err, sizeof(err)), 0);
	ck_assert_int_eq(sinkcache_trace_enable(b, true, err, sizeof(err)), 0);
	float o[NL * NH * D];
	unsigned sa = 5, sb = 5, qa = 9, qb = 9;
	for (int t = 0; t < 50; t++) {
		tu_cache_append_random(a, &sa), tu_cache_append_random(b, &sb);
		attend_all(a, &qa, o), attend_all(b, &qb, o);
	}
	struct cache_trace_step *ta = cache_trace_step_new(&g), *tb = cache_trace_step_new(&g);
	ck_assert_int_eq(sinkcache_trace_fill(a, ta, err, sizeof(err)), 0);
	ck_assert_int_eq(sinkcache_trace_fill(b, tb, err, sizeof(err)), 0);
	ck_assert_msg(cache_trace_step_check(tb, err, sizeof(err)) == 0, "%s", err);
	for (int l = 0; l < NL; l++) {
		ck_assert_int_eq(ta->layers[l].n_slots, tb->layers[l].n_slots);
		for (int i = 0; i < tb->layers[l].n_slots; i++) {
			const struct cache_trace_slot *x = &ta->layers[l].slots[i];
			const struct cache_trace_slot *y = &tb->layers[l].slots[i];
			ck_assert_int_eq(y->tier, i < 4 ? CACHE_TIER_SHARED : x->tier);
			ck_assert_int_eq(x->tier == CACHE_TIER_SINK, i < 4);
			ck_assert(x->stream_index == y->stream_index && x->rope_pos == y->rope_pos);
			ck_assert(x->mass_max == y->mass_max && x->mass_ema == y->mass_ema);
		}
	}
	ck_assert_str_eq(cache_tier_name(CACHE_TIER_SHARED), "shared");
	cache_trace_step_free(ta);
	cache_trace_step_free(tb);
	sinkcache_free(b);
	sinkcache_free(a);
	sinkcache_prefix_free(p);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sinkcache-share");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_follows_float);
	tcase_add_test(tc, test_follows_quantized);
	tcase_add_test(tc, test_follows_anchors_and_full);
	tcase_add_test(tc, test_import);
	tcase_add_test(tc, test_prefix_image);
	tcase_add_test(tc, test_refused);
	tcase_add_test(tc, test_trace);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
