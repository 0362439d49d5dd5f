/* The canonical cache image: a cache exported and imported into a fresh one
 * behaves bit for bit as the original for every tier layout (evictions,
 * int8/int4 groups, quantized sinks, strategy full, revisions), and a
 * hostile image's counts are refused before anything is sized from them. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/kvimage.h"
#include "cache/sinkcache.h"
#include "util/errbuf.h"
#include "testutil.h"

enum { NL = 3, NKV = 2, NH = 4, D = 16 };

static struct cache_geometry geom(int sinks, int window, bool quant, int bits, int hot)
{
	return tu_geometry(NL, NKV, D, sinks, window, quant, bits, hot);
}

/* Attention of one random query in every layer, into out (NL * NH * D). */
static void attend_all(struct sinkcache *c, unsigned *seed, float *out)
{
	float q[NH * D];
	float *scratch = malloc(sinkcache_scratch_floats(sinkcache_geometry(c)) * sizeof(float));
	for (int l = 0; l < NL; l++) {
		for (int j = 0; j < NH * D; j++)
			q[j] = tu_frand(seed);
		sinkcache_attend(c, l, q, NH, 0, NH, out + (size_t)l * NH * D, scratch, NULL, NULL,
		                 NULL, true);
	}
	free(scratch);
}

/* n tokens into a cache of g, a revision of `revise` tokens, then a round
 * trip: the copy's image, stats, next attention outputs and revision limits
 * equal the original's over `more` further tokens. */
static void round_trip(const struct cache_geometry *g, int n, int revise, int more)
{
	char err[SINKD_ERR_LEN];
	struct sinkcache *a, *b;
	ck_assert_msg(sinkcache_new(g, &a, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(sinkcache_new(g, &b, err, sizeof(err)) == 0, "%s", err);
	unsigned seed = 7;
	for (int t = 0; t < n; t++)
		tu_cache_append_random(a, &seed);
	if (revise)
		ck_assert_msg(sinkcache_revise(a, (size_t)revise, err, sizeof(err)) == 0, "%s", err);
	struct kv_image ia, ib;
	ck_assert_msg(sinkcache_export(a, &ia, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(sinkcache_import(b, &ia, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(sinkcache_export(b, &ib, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(ia.bytes, ib.bytes);
	ck_assert_int_eq(memcmp(&ia.n, &ib.n, sizeof(ia.n)), 0);
	ck_assert_int_eq(memcmp(ia.data, ib.data, ia.bytes), 0);
	ck_assert_uint_le(ia.bytes, kv_image_max_bytes(g));
	struct sinkcache_stats sa, sb;
	sinkcache_get_stats(a, &sa);
	sinkcache_get_stats(b, &sb);
	ck_assert_int_eq(memcmp(&sa, &sb, sizeof(sa)), 0);
	/* the newest token's query angles came across too */
	float oa[NL * NH * D], ob[NL * NH * D];
	unsigned qa = 11, qb = 11;
	attend_all(a, &qa, oa);
	attend_all(b, &qb, ob);
	ck_assert_int_eq(memcmp(oa, ob, sizeof(oa)), 0);
	unsigned sa_seed = seed, sb_seed = seed;
	for (int t = 0; t < more; t++) {
		tu_cache_append_random(a, &sa_seed);
		tu_cache_append_random(b, &sb_seed);
		attend_all(a, &qa, oa);
		attend_all(b, &qb, ob);
		ck_assert_msg(memcmp(oa, ob, sizeof(oa)) == 0, "outputs differ %d tokens after import",
		              t + 1);
		if (t == more / 2) { /* the same revision limit and the same result */
			char ea[SINKD_ERR_LEN] = "", eb[SINKD_ERR_LEN] = "";
			int ra = sinkcache_revise(a, 2, ea, sizeof(ea));
			int rb = sinkcache_revise(b, 2, eb, sizeof(eb));
			ck_assert_int_eq(ra, rb);
			ck_assert_str_eq(ea, eb);
		}
	}
	kv_image_free(&ia);
	kv_image_free(&ib);
	sinkcache_free(a);
	sinkcache_free(b);
}

START_TEST(test_round_trip_float)
{
	struct cache_geometry g = geom(4, 24, false, 8, 0);
	round_trip(&g, 2, 0, 10);  /* sinks only, not even full */
	round_trip(&g, 20, 3, 40); /* window filling */
	round_trip(&g, 90, 5, 40); /* evicting */
	g.dtype = KV_DTYPE_F16;
	round_trip(&g, 90, 0, 30);
	g.dtype = KV_DTYPE_BF16;
	g.sink_keep_count = 0;
	round_trip(&g, 60, 2, 30);
}
END_TEST

START_TEST(test_round_trip_quantized)
{
	/* window 72, hot 8: compressed 64 in groups of 32 (two group slots) */
	struct cache_geometry g = geom(4, 72, true, 8, 8);
	round_trip(&g, 30, 0, 40);  /* staged tokens, one group */
	round_trip(&g, 101, 4, 60); /* groups evicting row by row (grp_dropped > 0) */
	round_trip(&g, 150, 0, 80);
	g.quant_bits = 4;
	round_trip(&g, 101, 0, 60);
	g.protect_sinks = false; /* sinks stored as codes */
	round_trip(&g, 77, 3, 60);
	g.full_precision_recent = 0; /* hot tier of one */
	round_trip(&g, 77, 0, 40);
	g.dtype = KV_DTYPE_F16;
	round_trip(&g, 150, 1, 30);
}
END_TEST

START_TEST(test_round_trip_full_strategy)
{
	struct cache_geometry g = geom(4, 0, true, 8, 8);
	g.strategy = CACHE_STRATEGY_FULL;
	g.max_context_length = 120;
	round_trip(&g, 60, 2, 40);
	g.quant_enabled = false;
	round_trip(&g, 50, 0, 50);
}
END_TEST

/* Each count one past what the geometry allows is refused by name. */
START_TEST(test_hostile_counts)
{
	struct cache_geometry g = geom(4, 72, true, 8, 8); /* G 32, 2 group slots */
	struct tier_counts ok = {.n_seen = 1000, .evicted = 924, .moved = 2000, .n_sink = 4,
	                             .n_groups = 2, .grp_dropped = 3, .n_stage = 5, .n_hot = 6};
	struct kv_image_layout lo;
	char err[SINKD_ERR_LEN];
	ck_assert_msg(kv_image_layout_of(&g, &ok, &lo, err, sizeof(err)) == 0, "%s", err);
	struct {
		struct tier_counts n;
		const char *says;
	} bad[] = {
	    {ok, "n_sink"}, {ok, "n_groups"}, {ok, "grp_dropped"}, {ok, "n_stage"},
	    {ok, "n_hot"},  {ok, "window"},   {ok, "sink slots"},  {ok, "stream index"},
	    {ok, "n_sink"}, {ok, "evicted"},
	};
	bad[0].n.n_sink = 5;
	bad[1].n.n_groups = 3;
	bad[2].n.grp_dropped = 32;
	bad[3].n.n_stage = 32;
	bad[4].n.n_hot = 9;
	bad[5].n.n_stage = 15, bad[5].n.n_hot = 8, bad[5].n.grp_dropped = 0; /* 87 > 72 */
	bad[6].n.n_sink = 3;
	bad[7].n.n_seen = 10;
	bad[8].n.n_sink = -1;
	bad[9].n.evicted = 925;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = 0;
		ck_assert_int_eq(kv_image_layout_of(&g, &bad[i].n, &lo, err, sizeof(err)), -EINVAL);
		ck_assert_msg(strstr(err, bad[i].says), "case %zu: '%s' lacks '%s'", i, err,
		              bad[i].says);
	}
	/* no group slots at all without quantization */
	struct cache_geometry f = geom(4, 40, false, 8, 0);
	struct tier_counts one = {.n_seen = 10, .n_sink = 4, .n_groups = 1};
	ck_assert_int_eq(kv_image_layout_of(&f, &one, &lo, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "n_groups"));
}
END_TEST

/* An import checks the image against its cache: size, emptiness. */
START_TEST(test_import_refusals)
{
	struct cache_geometry g = geom(4, 24, false, 8, 0);
	struct sinkcache *a, *b;
	char err[SINKD_ERR_LEN];
	ck_assert_int_eq(sinkcache_new(&g, &a, NULL, 0), 0);
	ck_assert_int_eq(sinkcache_new(&g, &b, NULL, 0), 0);
	unsigned seed = 3;
	for (int t = 0; t < 10; t++)
		tu_cache_append_random(a, &seed);
	struct kv_image im;
	ck_assert_int_eq(sinkcache_export(a, &im, err, sizeof(err)), 0);
	im.bytes--;
	ck_assert_int_eq(sinkcache_import(b, &im, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "bytes"));
	im.bytes++;
	ck_assert_int_eq(sinkcache_import(a, &im, err, sizeof(err)), -EBUSY);
	ck_assert_ptr_nonnull(strstr(err, "empty cache"));
	ck_assert_int_eq(sinkcache_import(b, &im, err, sizeof(err)), 0);
	kv_image_free(&im);
	sinkcache_free(a);
	sinkcache_free(b);
}
END_TEST

static Suite *kvimage_suite(void)
{
	Suite *s = suite_create("kvimage");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_round_trip_float);
	tcase_add_test(tc, test_round_trip_quantized);
	tcase_add_test(tc, test_round_trip_full_strategy);
	tcase_add_test(tc, test_hostile_counts);
	tcase_add_test(tc, test_import_refusals);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(kvimage_suite());
}
