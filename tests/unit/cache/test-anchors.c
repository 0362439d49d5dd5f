/* Anchor tokens of the sink cache against a reference of the same policy
 * written here with plain lists: which window tokens become anchors when
 * they leave the window, which anchors leave again, and the attention over
 * sinks + anchors + window with every key at its rank (or stream) position,
 * in long double.  Also the bound over a long stream and the geometry
 * checks. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache/sinkcache.h"
#include "util/errbuf.h"
#include "testutil.h"
#include "util/sderr.h"

enum { NL = 2, NKV = 2, NH = 4, D = 8, MAXT = 400, MAXA = 8 };

static struct cache_geometry geom(int sinks, int window, int anchors, float promote,
                                      int demote)
{
	struct cache_geometry g = tu_geometry(NL, NKV, D, sinks, window, false, 0, window);
	g.anchor_max = anchors;
	g.anchor_promote = promote;
	g.anchor_demote_steps = demote;
	return g;
}

/* Deterministic data: most keys random, every 5th token of a layer (offset
 * by the layer) a key along a direction the queries share, so that some
 * tokens draw heavy attention long after they were new. */
static unsigned long long rng = 88172645463325252ULL;
static float frand(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float K[MAXT][NL][NKV * D], V[MAXT][NL][NKV * D], Q[MAXT][NL][NH * D];

static void make_data(int n)
{
	for (int t = 0; t < n; t++)
		for (int l = 0; l < NL; l++) {
			bool heavy = (t + l) % 5 == 0 && t % 3 != 0;
			for (int i = 0; i < NKV * D; i++) {
				K[t][l][i] = frand() + (heavy && i % D == 0 ? 3.0f : 0.0f);
				V[t][l][i] = frand();
			}
			for (int i = 0; i < NH * D; i++)
				Q[t][l][i] = frand() + (i % D == 0 ? 1.5f : 0.0f);
		}
}

/* ---- the reference ---------------------------------------------------- */

struct ref_layer {
	int n_anchor;
	int anchor[MAXA]; /* stream indices, in stream order */
	float a_score[MAXA];
	int a_below[MAXA];
	float w_score[MAXT];
	bool w_seen[MAXT];
};

struct ref {
	struct cache_geometry g;
	int T; /* tokens appended */
	struct ref_layer L[NL];
	long promoted, demoted;
};

static int ref_window_first(const struct ref *r)
{
	int S = r->g.sink_keep_count, W = r->g.window_size;
	int first = r->T - W;
	return first > S ? first : S;
}

/* Resident stream indices of layer l in rank order. */
static int ref_resident(const struct ref *r, int l, int *out)
{
	int n = 0, S = r->g.sink_keep_count;
	for (int t = 0; t < S && t < r->T; t++)
		out[n++] = t;
	for (int i = 0; i < r->L[l].n_anchor; i++)
		out[n++] = r->L[l].anchor[i];
	for (int t = ref_window_first(r); t < r->T; t++)
		out[n++] = t;
	return n;
}

static void ref_drop_anchor(struct ref_layer *L, int j)
{
	for (int i = j; i + 1 < L->n_anchor; i++) {
		L->anchor[i] = L->anchor[i + 1];
		L->a_score[i] = L->a_score[i + 1];
		L->a_below[i] = L->a_below[i + 1];
	}
	L->n_anchor--;
}

static void ref_append(struct ref *r)
{
	int S = r->g.sink_keep_count, W = r->g.window_size;
	if (r->T >= S + W) { /* the window is full: its oldest token leaves */
		int o = r->T - W;
		for (int l = 0; l < NL; l++) {
			struct ref_layer *L = &r->L[l];
			float sc = L->w_score[o];
			if (!L->w_seen[o] || !(sc >= r->g.anchor_promote))
				continue;
			if (L->n_anchor == r->g.anchor_max) {
				int weak = 0;
				for (int i = 1; i < L->n_anchor; i++)
					if (L->a_score[i] < L->a_score[weak])
						weak = i;
				if (!(L->a_score[weak] < sc))
					continue;
				ref_drop_anchor(L, weak);
				r->demoted++;
			}
			L->anchor[L->n_anchor] = o;
			L->a_score[L->n_anchor] = sc;
			L->a_below[L->n_anchor++] = 0;
			r->promoted++;
		}
	}
	for (int l = 0; l < NL; l++)
		r->L[l].w_seen[r->T] = false;
	r->T++;
}

static void ref_rotate(const float *x, long double pos, long double *y)
{
	for (int i = 0; i < D / 2; i++) {
		long double a = pos * powl(10000.0L, -2.0L * i / D);
		long double x0 = x[2 * i], x1 = x[2 * i + 1];
		y[2 * i] = x0 * cosl(a) - x1 * sinl(a);
		y[2 * i + 1] = x0 * sinl(a) + x1 * cosl(a);
	}
}

/* Attention of token T-1 on layer l: out (NH, D), w (NH, n) weights. */
static int ref_attend(const struct ref *r, int l, double *out, double w[NH][MAXT])
{
	int res[MAXT], n = ref_resident(r, l, res);
	bool cache = r->g.rope_positions == ROPE_POSITIONS_CACHE;
	long double qpos = cache ? (long double)(n - 1) : (long double)(r->T - 1);
	for (int h = 0; h < NH; h++) {
		int kh = h / (NH / NKV);
		long double q[D], sc[MAXT], mx = -INFINITY, sum = 0.0L, acc[D] = {0};
		ref_rotate(&Q[r->T - 1][l][h * D], qpos, q);
		for (int i = 0; i < n; i++) {
			long double k[D], dot = 0.0L;
			ref_rotate(&K[res[i]][l][kh * D], cache ? (long double)i : (long double)res[i], k);
			for (int j = 0; j < D; j++)
				dot += q[j] * k[j];
			sc[i] = dot / sqrtl((long double)D);
			mx = sc[i] > mx ? sc[i] : mx;
		}
		for (int i = 0; i < n; i++)
			sum += (sc[i] = expl(sc[i] - mx));
		for (int i = 0; i < n; i++) {
			w[h][i] = (double)(sc[i] / sum);
			for (int j = 0; j < D; j++)
				acc[j] += sc[i] / sum * V[res[i]][l][kh * D + j];
		}
		for (int j = 0; j < D; j++)
			out[h * D + j] = (double)acc[j];
	}
	return n;
}

/* The anchors' bookkeeping after the attention of token T-1 on layer l
 * (the window tokens' scores are kept by the caller). */
static void ref_observe(struct ref *r, int l, double w[NH][MAXT])
{
	struct ref_layer *L = &r->L[l];
	int S = r->T < r->g.sink_keep_count ? r->T : r->g.sink_keep_count;
	bool keep[MAXA];
	for (int i = 0; i < L->n_anchor; i++) {
		float m = 0.0f;
		for (int h = 0; h < NH; h++)
			m = fmaxf(m, (float)w[h][S + i]);
		L->a_score[i] = L->a_score[i] + 0.125f * (m - L->a_score[i]);
		L->a_below[i] = m < r->g.anchor_promote ? L->a_below[i] + 1 : 0;
		keep[i] = L->a_below[i] < r->g.anchor_demote_steps;
	}
	for (int i = L->n_anchor - 1; i >= 0; i--)
		if (!keep[i]) {
			ref_drop_anchor(L, i);
			r->demoted++;
		}
}

/* ---- the cache against the reference ------------------------------------ */

static void run_against_reference(enum rope_positions pos, int n_tok)
{
	struct cache_geometry g = geom(2, 10, 4, 0.12f, 6);
	g.rope_positions = pos;
	char err[SINKD_ERR_LEN];
	struct sinkcache *c = NULL;
	ck_assert_msg(sinkcache_new(&g, &c, err, sizeof(err)) == 0, "%s", err);
	ck_assert(sinkcache_tracks_attention(c));
	size_t cap = cache_geometry_capacity_tokens(&g);
	ck_assert_uint_eq(cap, 2 + 4 + 10);
	float *scratch = malloc(sinkcache_scratch_floats(&g) * sizeof(float));
	float *kw = malloc((size_t)NH * cap * sizeof(float));
	static struct ref r;
	memset(&r, 0, sizeof(r));
	r.g = g;
	make_data(n_tok);
	int anchored_steps = 0;
	for (int t = 0; t < n_tok; t++) {
		ref_append(&r);
		for (int l = 0; l < NL; l++) {
			ck_assert_msg(sinkcache_append(c, l, K[t][l], V[t][l], err, sizeof(err)) == 0,
			              "%s", err);
			float out[NH * D];
			double want[NH * D], w[NH][MAXT];
			sinkcache_attend(c, l, Q[t][l], NH, 0, NH, out, scratch, NULL, NULL, kw,
			                 true);
			int n = ref_attend(&r, l, want, w);
			for (int i = 0; i < NH * D; i++)
				ck_assert_msg(fabs(out[i] - want[i]) <= 2e-5 * (1.0 + fabs(want[i])),
				              "token %d layer %d out[%d] = %.7g, reference %.7g (%d anchors)",
				              t, l, i, out[i], want[i], r.L[l].n_anchor);
			for (int h = 0; h < NH; h++)
				for (int i = 0; i < n; i++)
					ck_assert_msg(fabs(kw[(size_t)h * cap + i] - w[h][i]) < 1e-5,
					              "token %d layer %d head %d weight %d: %g, reference %g",
					              t, l, h, i, kw[(size_t)h * cap + i], w[h][i]);
			/* the window tokens' scores, as the cache keeps them */
			struct ref_layer *L = &r.L[l];
			int S = t + 1 < g.sink_keep_count ? t + 1 : g.sink_keep_count;
			int w0 = S + L->n_anchor;
			for (int s = ref_window_first(&r); s < r.T; s++) {
				float m = 0.0f;
				for (int h = 0; h < NH; h++)
					m = fmaxf(m, (float)w[h][w0 + s - ref_window_first(&r)]);
				L->w_score[s] = L->w_seen[s] ? L->w_score[s] + 0.125f * (m - L->w_score[s]) : m;
				L->w_seen[s] = true;
			}
			ref_observe(&r, l, w);
			sinkcache_observe(c, l, kw, NULL, NH);
			anchored_steps += L->n_anchor > 0;
		}
		struct sinkcache_stats st;
		sinkcache_get_stats(c, &st);
		ck_assert_int_eq(st.n_anchor, r.L[0].n_anchor);
		ck_assert_uint_eq(st.anchors_promoted, (uint64_t)r.promoted);
		ck_assert_uint_eq(st.anchors_demoted, (uint64_t)r.demoted);
		ck_assert_int_le(st.n_resident, (int)cap);
		ck_assert_uint_le(st.bytes_resident, st.bytes_bound);
	}
	/* the case is only a test if the policy did its work */
	ck_assert_msg(r.promoted > 10 && r.demoted > 3 && anchored_steps > n_tok,
	              "promoted %ld, demoted %ld, steps with anchors %d", r.promoted, r.demoted,
	              anchored_steps);
	ck_assert_msg(r.L[0].n_anchor != r.L[1].n_anchor ||
	                  memcmp(r.L[0].anchor, r.L[1].anchor, sizeof(int) * (size_t)r.L[0].n_anchor),
	              "both layers ended with the same anchors: the layers are not independent");
	free(scratch);
	free(kw);
	sinkcache_free(c);
}

START_TEST(anchors_match_reference_at_rank_positions)
{
	run_against_reference(ROPE_POSITIONS_CACHE, 300);
}
END_TEST

START_TEST(anchors_match_reference_at_stream_positions)
{
	run_against_reference(ROPE_POSITIONS_ORIGINAL, 300);
}
END_TEST

/* Revising drops window tokens only; anchors stay, and the tokens that
 * come instead start their scores anew. */
START_TEST(revise_keeps_anchors)
{
	struct cache_geometry g = geom(2, 10, 4, 0.12f, 1000);
	char err[SINKD_ERR_LEN];
	struct sinkcache *c = NULL;
	ck_assert_msg(sinkcache_new(&g, &c, err, sizeof(err)) == 0, "%s", err);
	size_t cap = cache_geometry_capacity_tokens(&g);
	float *scratch = malloc(sinkcache_scratch_floats(&g) * sizeof(float));
	float *kw = malloc((size_t)NH * cap * sizeof(float)), out[NH * D];
	make_data(200);
	struct sinkcache_stats st;
	int t = 0;
	for (; t < 200; t++) {
		for (int l = 0; l < NL; l++) {
			ck_assert(sinkcache_append(c, l, K[t][l], V[t][l], err, sizeof(err)) == 0);
			sinkcache_attend(c, l, Q[t][l], NH, 0, NH, out, scratch, NULL, NULL, kw,
			                 true);
			sinkcache_observe(c, l, kw, NULL, NH);
		}
		sinkcache_get_stats(c, &st);
		if (st.n_anchor >= 2 && t > 40)
			break;
	}
	ck_assert_int_ge(st.n_anchor, 2);
	int before = st.n_anchor, res = st.n_resident;
	ck_assert_int_eq(sinkcache_revise(c, 5, err, sizeof(err)), 0);
	sinkcache_get_stats(c, &st);
	ck_assert_int_eq(st.n_anchor, before);
	ck_assert_int_eq(st.n_resident, res - 5);
	ck_assert_int_eq(sinkcache_revise(c, 6, err, sizeof(err)), SDERR_CONFLICT);
	sinkcache_reset(c);
	sinkcache_get_stats(c, &st);
	ck_assert_int_eq(st.n_anchor, 0);
	ck_assert_int_eq(st.n_resident, 0);
	free(scratch);
	free(kw);
	sinkcache_free(c);
}
END_TEST

/* 10^6 tokens through an int4 cache with anchors (the promoted rows come
 * out of quantized groups): never more resident than the bound, never more
 * anchors than the tier holds, and the anchors keep turning over. */
START_TEST(long_stream_stays_in_bound)
{
	struct cache_geometry g = geom(4, 40, 6, 0.08f, 30);
	g.n_layers = 1;
	g.quant_enabled = true;
	g.quant_bits = 4;
	g.full_precision_recent = 8;
	g.dtype = KV_DTYPE_BF16;
	char err[SINKD_ERR_LEN];
	struct sinkcache *c = NULL;
	ck_assert_msg(sinkcache_new(&g, &c, err, sizeof(err)) == 0, "%s", err);
	size_t cap = cache_geometry_capacity_tokens(&g), bound = cache_geometry_bound_bytes(&g);
	float *scratch = malloc(sinkcache_scratch_floats(&g) * sizeof(float));
	float *kw = malloc((size_t)NH * cap * sizeof(float)), out[NH * D];
	make_data(MAXT);
	struct sinkcache_stats st;
	size_t most = 0;
	for (long t = 0; t < 1000000; t++) {
		int i = (int)(t % MAXT);
		ck_assert(sinkcache_append(c, 0, K[i][0], V[i][0], err, sizeof(err)) == 0);
		sinkcache_attend(c, 0, Q[i][0], NH, 0, NH, out, scratch, NULL, NULL, kw, true);
		sinkcache_observe(c, 0, kw, NULL, NH);
		if (t % 997 == 0) {
			sinkcache_get_stats(c, &st);
			ck_assert_int_le(st.n_anchor, 6);
			ck_assert_int_le(st.n_resident, (int)cap);
			ck_assert_uint_le(st.bytes_resident, bound);
			most = st.bytes_resident > most ? st.bytes_resident : most;
			for (int j = 0; j < NH * D; j++)
				ck_assert(isfinite(out[j]));
		}
	}
	sinkcache_get_stats(c, &st);
	ck_assert_uint_eq(st.n_seen, 1000000);
	ck_assert_uint_eq(st.bytes_bound, bound);
	ck_assert_msg(st.anchors_promoted > 1000 && st.anchors_demoted > 1000,
	              "promoted %llu, demoted %llu", (unsigned long long)st.anchors_promoted,
	              (unsigned long long)st.anchors_demoted);
	ck_assert_uint_le(most, bound);
	free(scratch);
	free(kw);
	sinkcache_free(c);
}
END_TEST

START_TEST(geometry_checks_name_the_field)
{
	char err[SINKD_ERR_LEN];
	struct cache_geometry g = geom(2, 10, 4, 0.1f, 5);
	ck_assert_int_eq(cache_geometry_check(&g, err, sizeof(err)), 0);
	g.anchor_promote = 0.0f;
	ck_assert_int_eq(cache_geometry_check(&g, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "anchor_promote"));
	g.anchor_promote = 1.5f;
	ck_assert_int_eq(cache_geometry_check(&g, err, sizeof(err)), -EINVAL);
	g = geom(2, 10, 4, 0.1f, 0);
	ck_assert_int_eq(cache_geometry_check(&g, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "anchor_demote_steps"));
	g = geom(2, 10, 4, 0.1f, 5);
	g.strategy = CACHE_STRATEGY_FULL;
	g.max_context_length = 64;
	ck_assert_int_eq(cache_geometry_check(&g, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "sliding_window"));
	/* the anchor tier is part of the bound */
	struct cache_geometry a = geom(2, 10, 4, 0.1f, 5), b = geom(2, 10, 0, 0.1f, 5);
	ck_assert_uint_gt(cache_geometry_bound_bytes(&a), cache_geometry_bound_bytes(&b));
	ck_assert(!cache_geometry_equal(&a, &b));
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("anchors");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, anchors_match_reference_at_rank_positions);
	tcase_add_test(tc, anchors_match_reference_at_stream_positions);
	tcase_add_test(tc, revise_keeps_anchors);
	tcase_add_test(tc, long_stream_stays_in_bound);
	tcase_add_test(tc, geometry_checks_name_the_field);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(suite());
}
