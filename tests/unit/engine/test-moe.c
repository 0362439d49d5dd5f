/* engine/moe: routing against a reference written here (a full sort of
 * each token's logits, weights in double) for both gatings, with and
 * without renormalised weights, every k from 1 to the expert count, tied
 * logits (the lower index first); the grouping by expert; the activations
 * against their formulas; the expected active experts against a count over
 * random batches. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/moe.h"
#include "testutil.h"

struct ref_pick {
	float logit;
	int expert;
};

static int ref_cmp(const void *pa, const void *pb)
{
	const struct ref_pick *a = pa, *b = pb;
	if (a->logit != b->logit)
		return a->logit > b->logit ? -1 : 1;
	return a->expert - b->expert;
}

/* One token's experts and weights the way the design states them. */
static void ref_route(const float *l, int ne, int k, enum model_gating g, bool norm, int *sel,
                      double *w)
{
	struct ref_pick p[64];
	for (int e = 0; e < ne; e++)
		p[e] = (struct ref_pick){l[e], e};
	qsort(p, (size_t)ne, sizeof(p[0]), ref_cmp);
	for (int j = 0; j < k; j++)
		sel[j] = p[j].expert;
	double sum = 0.0;
	int over = g == MODEL_GATING_SOFTMAX ? ne : k;
	for (int j = 0; j < over; j++)
		sum += exp((double)p[j].logit);
	double chosen = 0.0;
	for (int j = 0; j < k; j++) {
		w[j] = exp((double)p[j].logit) / sum;
		chosen += w[j];
	}
	if (g == MODEL_GATING_SOFTMAX && norm)
		for (int j = 0; j < k; j++)
			w[j] /= chosen;
}

/* Logits with ties: values from a few levels so that equal logits are common. */
static void fill_logits(float *l, size_t n, unsigned *seed, bool ties)
{
	for (size_t i = 0; i < n; i++)
		l[i] = ties ? (float)(rand_r(seed) % 4) * 0.5f : 3.0f * tu_frand(seed);
}

/* Every entry of expert e is in order[start[e] .. start[e+1]) by increasing
 * entry, each entry once, active lists exactly the experts with entries. */
static void check_groups(const struct moe_route *r)
{
	int n_entries = r->n_tokens * r->k;
	ck_assert_int_eq(r->start[0], 0);
	ck_assert_int_eq(r->start[r->n_experts], n_entries);
	int n_active = 0;
	for (int e = 0; e < r->n_experts; e++) {
		int cnt = 0;
		for (int i = 0; i < n_entries; i++)
			if (r->expert[i] == e)
				ck_assert_int_eq(r->order[r->start[e] + cnt++], i);
		ck_assert_int_eq(r->start[e + 1] - r->start[e], cnt);
		if (cnt > 0) {
			ck_assert_int_lt(n_active, r->n_active);
			ck_assert_int_eq(r->active[n_active++], e);
		}
	}
	ck_assert_int_eq(n_active, r->n_active);
}

static void check_route(enum model_gating g, bool norm, bool ties)
{
	const int n_experts[] = {1, 4, 8, 32};
	const int n_tokens[] = {1, 3, 17};
	unsigned seed = 7;
	struct moe_route r = {0};
	char err[256];
	for (size_t a = 0; a < sizeof(n_experts) / sizeof(n_experts[0]); a++)
		for (int k = 1; k <= n_experts[a]; k++)
			for (size_t b = 0; b < sizeof(n_tokens) / sizeof(n_tokens[0]); b++) {
				int ne = n_experts[a], nt = n_tokens[b];
				float *l = malloc((size_t)nt * ne * sizeof(float));
				fill_logits(l, (size_t)nt * ne, &seed, ties);
				ck_assert_int_eq(moe_route_reserve(&r, nt, k, ne, err, sizeof(err)),
				                 0);
				moe_route_compute(&r, l, nt, g, norm);
				for (int t = 0; t < nt; t++) {
					int sel[64];
					double w[64];
					ref_route(l + (size_t)t * ne, ne, k, g, norm, sel, w);
					for (int j = 0; j < k; j++) {
						ck_assert_int_eq(r.expert[t * k + j], sel[j]);
						ck_assert_double_eq_tol(r.weight[t * k + j], w[j],
						                        1e-6 + 1e-6 * w[j]);
					}
				}
				check_groups(&r);
				free(l);
			}
	moe_route_free(&r);
}

START_TEST(test_softmax_gating)
{
	check_route(MODEL_GATING_SOFTMAX, false, false);
	check_route(MODEL_GATING_SOFTMAX, false, true);
}
END_TEST

START_TEST(test_softmax_gating_renormalised)
{
	check_route(MODEL_GATING_SOFTMAX, true, false);
	check_route(MODEL_GATING_SOFTMAX, true, true);
}
END_TEST

START_TEST(test_topk_softmax_gating)
{
	check_route(MODEL_GATING_TOPK_SOFTMAX, false, false);
	check_route(MODEL_GATING_TOPK_SOFTMAX, false, true);
}
END_TEST

/* All-equal logits pick experts 0..k-1 with equal weights. */
START_TEST(test_all_tied)
{
	struct moe_route r = {0};
	char err[256];
	float l[8] = {0};
	ck_assert_int_eq(moe_route_reserve(&r, 1, 3, 8, err, sizeof(err)), 0);
	moe_route_compute(&r, l, 1, MODEL_GATING_TOPK_SOFTMAX, false);
	for (int j = 0; j < 3; j++) {
		ck_assert_int_eq(r.expert[j], j);
		ck_assert_float_eq_tol(r.weight[j], 1.0f / 3.0f, 1e-6f);
	}
	moe_route_free(&r);
}
END_TEST

START_TEST(test_reserve_refuses_bad_k)
{
	struct moe_route r = {0};
	char err[256] = "";
	ck_assert_int_eq(moe_route_reserve(&r, 4, 0, 8, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "experts used"));
	ck_assert_int_eq(moe_route_reserve(&r, 4, 9, 8, err, sizeof(err)), -EINVAL);
	/* growing keeps working after a smaller reserve */
	ck_assert_int_eq(moe_route_reserve(&r, 2, 2, 4, err, sizeof(err)), 0);
	ck_assert_int_eq(moe_route_reserve(&r, 64, 4, 16, err, sizeof(err)), 0);
	ck_assert_uint_ge(r.cap_entries, 256);
	ck_assert_uint_ge(r.cap_experts, 16);
	moe_route_free(&r);
}
END_TEST

START_TEST(test_act)
{
	enum { N = 200 };
	float g[N], u[N], out[N];
	unsigned seed = 3;
	for (int i = 0; i < N; i++) {
		g[i] = 12.0f * tu_frand(&seed); /* past the clamp both ways */
		u[i] = 12.0f * tu_frand(&seed);
	}
	for (int i = 0; i < N; i++)
		out[i] = g[i];
	moe_expert_act(out, u, N, MODEL_EXPERT_SWIGLU, 0.0f, 0.0f);
	for (int i = 0; i < N; i++) {
		double x = g[i], ref = x / (1.0 + exp(-x)) * u[i];
		ck_assert_double_eq_tol(out[i], ref, 1e-5 + 1e-5 * fabs(ref));
	}
	for (int i = 0; i < N; i++)
		out[i] = g[i];
	moe_expert_act(out, u, N, MODEL_EXPERT_SWIGLU_OAI, 1.702f, 7.0f);
	for (int i = 0; i < N; i++) {
		double x = g[i] < 7.0 ? g[i] : 7.0;
		double y = u[i] < -7.0 ? -7.0 : u[i] > 7.0 ? 7.0 : u[i];
		double ref = x / (1.0 + exp(-1.702 * x)) * (y + 1.0);
		ck_assert_double_eq_tol(out[i], ref, 1e-5 + 1e-5 * fabs(ref));
	}
}
END_TEST

/* The formula against the mean count of distinct experts over random
 * batches where each token picks k distinct experts uniformly. */
START_TEST(test_expected_active)
{
	ck_assert_double_eq(moe_expected_active(32, 4, 0.0), 0.0);
	ck_assert_double_eq_tol(moe_expected_active(32, 4, 1.0), 4.0, 1e-9);
	ck_assert_double_eq_tol(moe_expected_active(8, 8, 5.0), 8.0, 1e-9);
	const int cases[][3] = {{32, 4, 8}, {128, 4, 16}, {8, 2, 3}};
	unsigned seed = 11;
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		int ne = cases[c][0], k = cases[c][1], n = cases[c][2];
		double total = 0.0;
		const int trials = 4000;
		for (int tr = 0; tr < trials; tr++) {
			bool touched[128] = {false};
			for (int t = 0; t < n; t++) {
				bool mine[128] = {false};
				for (int j = 0; j < k; j++) {
					int e;
					do
						e = rand_r(&seed) % ne;
					while (mine[e]);
					mine[e] = touched[e] = true;
				}
			}
			for (int e = 0; e < ne; e++)
				total += touched[e];
		}
		double mean = total / trials, want = moe_expected_active(ne, k, n);
		ck_assert_double_eq_tol(mean, want, 0.02 * want);
		/* more tokens never touch fewer experts */
		ck_assert_double_ge(moe_expected_active(ne, k, n + 1), want);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("moe");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_softmax_gating);
	tcase_add_test(tc, test_softmax_gating_renormalised);
	tcase_add_test(tc, test_topk_softmax_gating);
	tcase_add_test(tc, test_all_tied);
	tcase_add_test(tc, test_reserve_refuses_bad_k);
	tcase_add_test(tc, test_act);
	tcase_add_test(tc, test_expected_active);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
