/* The sampler on real logits (stories260K's last-position logits from the
 * independent reference in shared/reference) and on small distributions
 * whose probabilities are known: greedy, seeds, frequencies, top-k, top-p,
 * min-p, penalties, logprobs, parameter errors. */
#include <check.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampler.h"
#include "util/errbuf.h"
#include "testutil.h"

struct ref_prompt {
	float logits[512];
	int n_vocab;
	int32_t greedy_first;
};

/* Reads prompt `index` of shared/reference/stories260K-logits.json. */
static void load_ref(int index, struct ref_prompt *rp)
{
	cJSON *root = tu_load_reference();
	cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "prompts"), index);
	cJSON *logits = cJSON_GetObjectItem(p, "last_logits");
	rp->n_vocab = cJSON_GetArraySize(logits);
	ck_assert_int_eq(rp->n_vocab, 512);
	for (int i = 0; i < rp->n_vocab; i++)
		rp->logits[i] = (float)cJSON_GetArrayItem(logits, i)->valuedouble;
	cJSON *greedy = cJSON_GetObjectItem(p, "greedy_continuation_ids");
	rp->greedy_first = (int32_t)cJSON_GetArrayItem(greedy, 0)->valueint;
	cJSON_Delete(root);
}

/* log-softmax of logits[id] in double, independent of the sampler. */
static double log_softmax(const float *logits, int n, int id)
{
	double mx = -INFINITY, sum = 0.0;
	for (int i = 0; i < n; i++)
		mx = fmax(mx, logits[i]);
	for (int i = 0; i < n; i++)
		sum += exp(logits[i] - mx);
	return logits[id] - mx - log(sum);
}

static struct sampler *make(const struct sampler_params *p, int n_vocab)
{
	struct sampler *s = NULL;
	char err[SINKD_ERR_LEN];
	int rc = sampler_new(p, n_vocab, &s, err, sizeof(err));
	ck_assert_msg(rc == 0, "sampler_new: %s", err);
	return s;
}

/* Samples once from a copy of logits (the sampler modifies them). */
static int32_t sample_copy(struct sampler *s, const float *logits, int n,
			   struct sampler_result *res)
{
	float tmp[512];
	static float big[200000];
	float *row = n <= 512 ? tmp : big;
	memcpy(row, logits, (size_t)n * sizeof(*row));
	ck_assert_int_eq(sampler_sample(s, row, res), 0);
	return res->token;
}

/* With p so narrow that one token is left, seeds 0..19 all sample the
 * reference's greedy token. */
static void expect_greedy_every_seed(struct sampler_params *p, const struct ref_prompt *rp)
{
	for (uint64_t seed = 0; seed < 20; seed++) {
		p->seed = seed;
		struct sampler *s = make(p, rp->n_vocab);
		struct sampler_result res;
		ck_assert_int_eq(sample_copy(s, rp->logits, rp->n_vocab, &res), rp->greedy_first);
		sampler_free(s);
	}
}

START_TEST(test_greedy_matches_reference)
{
	struct ref_prompt rp;
	load_ref(_i, &rp);
	struct sampler_params p;
	sampler_params_default(&p);
	p.temperature = 0.0f;
	p.n_top_logprobs = 5;
	struct sampler *s = make(&p, rp.n_vocab);
	struct sampler_result res;
	sample_copy(s, rp.logits, rp.n_vocab, &res);
	ck_assert_int_eq(res.token, rp.greedy_first);
	ck_assert_double_eq_tol(res.logprob, log_softmax(rp.logits, 512, res.token), 1e-5);
	ck_assert_int_eq(res.n_top, 5);
	ck_assert_int_eq(res.top[0].token, res.token);
	for (int i = 0; i < 5; i++) {
		ck_assert_double_eq_tol(res.top[i].logprob,
					log_softmax(rp.logits, 512, res.top[i].token), 1e-5);
		if (i > 0)
			ck_assert_float_le(res.top[i].logprob, res.top[i - 1].logprob);
	}
	sampler_free(s);
}
END_TEST

START_TEST(test_greedy_ties_lowest_id)
{
	struct sampler_params p;
	sampler_params_default(&p);
	p.temperature = 0.0f;
	struct sampler *s = make(&p, 5);
	float logits[5] = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
	struct sampler_result res;
	ck_assert_int_eq(sample_copy(s, logits, 5, &res), 1);
	sampler_free(s);
	p.temperature = 1e-39f; /* denormal: 1/T is inf, still greedy, no NaN */
	s = make(&p, 5);
	logits[3] = 3.5f;
	for (int i = 0; i < 10; i++)
		ck_assert_int_eq(sample_copy(s, logits, 5, &res), 3);
	sampler_free(s);
}
END_TEST

static void draws(uint64_t seed, const float *logits, int n, int32_t *out, int count)
{
	struct sampler_params p;
	sampler_params_default(&p);
	p.seed = seed;
	struct sampler *s = make(&p, n);
	struct sampler_result res;
	for (int i = 0; i < count; i++)
		out[i] = sample_copy(s, logits, n, &res);
	sampler_free(s);
}

START_TEST(test_seed_reproducible)
{
	struct ref_prompt rp;
	load_ref(1, &rp); /* the flatter distribution */
	int32_t a[200], b[200], c[200];
	draws(42, rp.logits, rp.n_vocab, a, 200);
	draws(42, rp.logits, rp.n_vocab, b, 200);
	draws(43, rp.logits, rp.n_vocab, c, 200);
	ck_assert_mem_eq(a, b, sizeof(a));
	ck_assert_int_ne(memcmp(a, c, sizeof(a)), 0);
	/* The same on every machine: xoshiro256** seeded by splitmix64. */
	const int32_t pinned[10] = {259, 270, 300, 432, 432, 352, 349, 400, 352, 282};
	for (int i = 0; i < 10; i++)
		ck_assert_int_eq(a[i], pinned[i]);
	/* sampler_reset restarts the sequence. */
	struct sampler_params p;
	sampler_params_default(&p);
	p.seed = 42;
	struct sampler *s = make(&p, rp.n_vocab);
	struct sampler_result res;
	for (int i = 0; i < 5; i++)
		sample_copy(s, rp.logits, rp.n_vocab, &res);
	sampler_reset(s);
	for (int i = 0; i < 10; i++)
		ck_assert_int_eq(sample_copy(s, rp.logits, rp.n_vocab, &res), a[i]);
	sampler_free(s);
}
END_TEST

/* Draws `count` tokens and returns the frequency of each of 4 ids. */
static void frequencies(const struct sampler_params *p, const float *logits, int count,
			double freq[4])
{
	struct sampler *s = make(p, 4);
	struct sampler_result res;
	int hits[4] = {0};
	for (int i = 0; i < count; i++)
		hits[sample_copy(s, logits, 4, &res)]++;
	for (int i = 0; i < 4; i++)
		freq[i] = (double)hits[i] / count;
	sampler_free(s);
}

START_TEST(test_distribution)
{
	const double prob[4] = {0.1, 0.2, 0.3, 0.4};
	float logits[4];
	for (int i = 0; i < 4; i++)
		logits[i] = (float)log(prob[i]) + 7.0f; /* any offset */
	struct sampler_params p;
	sampler_params_default(&p);
	p.seed = 7;
	double f[4];
	frequencies(&p, logits, 100000, f); /* sd ~0.0015 */
	for (int i = 0; i < 4; i++)
		ck_assert_double_eq_tol(f[i], prob[i], 0.008);
	/* Temperature 0.5 squares the probabilities: 1,4,9,16 over 30. */
	p.temperature = 0.5f;
	frequencies(&p, logits, 100000, f);
	for (int i = 0; i < 4; i++)
		ck_assert_double_eq_tol(f[i], (i + 1) * (i + 1) / 30.0, 0.008);
}
END_TEST

START_TEST(test_top_k)
{
	struct ref_prompt rp;
	load_ref(1, &rp);
	struct sampler_params p;
	sampler_params_default(&p);
	p.top_k = 1;
	p.temperature = 1.5f;
	expect_greedy_every_seed(&p, &rp);
	/* top_k 2 over {0.1,0.2,0.3,0.4}: only ids 2 and 3, renormalised 3:4. */
	float logits[4] = {logf(0.1f), logf(0.2f), logf(0.3f), logf(0.4f)};
	p.top_k = 2;
	p.temperature = 1.0f;
	double f[4];
	frequencies(&p, logits, 50000, f);
	ck_assert_double_eq(f[0] + f[1], 0.0);
	ck_assert_double_eq_tol(f[2], 3.0 / 7.0, 0.01);
}
END_TEST

START_TEST(test_top_p)
{
	struct ref_prompt rp;
	load_ref(1, &rp);
	struct sampler_params p;
	sampler_params_default(&p);
	p.top_p = 1e-6f;
	expect_greedy_every_seed(&p, &rp);
	/* {0.1,0.2,0.3,0.4} with top_p 0.6: 0.4 < 0.6 <= 0.7, keeps ids 3, 2. */
	float logits[4] = {logf(0.1f), logf(0.2f), logf(0.3f), logf(0.4f)};
	p.top_p = 0.6f;
	double f[4];
	frequencies(&p, logits, 50000, f);
	ck_assert_double_eq(f[0] + f[1], 0.0);
	ck_assert_double_eq_tol(f[3], 4.0 / 7.0, 0.01);
	/* The same with top_k 3 first (top-p renormalised over the k). */
	p.top_k = 3; /* {0.2,0.3,0.4}/0.9: 0.444 < 0.6 <= 0.778 */
	frequencies(&p, logits, 50000, f);
	ck_assert_double_eq(f[0] + f[1], 0.0);
}
END_TEST

/* A flat 150k vocabulary: the nucleus is 90% of it, far below any early
 * threshold, so the bounded search has to fall back to the full set. */
START_TEST(test_top_p_flat_large_vocab)
{
	enum { V = 150000 };
	static float logits[V];
	for (int i = 0; i < V; i++)
		logits[i] = 0.25f;
	struct sampler_params p;
	sampler_params_default(&p);
	p.top_p = 0.9f;
	p.seed = 3;
	p.logprobs = true;
	struct sampler *s = make(&p, V);
	struct sampler_result res;
	int32_t hi = 0;
	for (int i = 0; i < 300; i++) {
		int32_t t = sample_copy(s, logits, V, &res);
		ck_assert_int_lt(t, 135000); /* ties sort by id: ids 0..134999 */
		hi = t > hi ? t : hi;
	}
	ck_assert_int_gt(hi, 100000);
	ck_assert_double_eq_tol(res.logprob, -log((double)V), 1e-4);
	sampler_free(s);
}
END_TEST

static const float *ref_logits;

static int ref_cmp(const void *pa, const void *pb)
{
	int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
	if (ref_logits[a] != ref_logits[b])
		return ref_logits[a] > ref_logits[b] ? -1 : 1;
	return a < b ? -1 : 1;
}

/* Independent nucleus: full sort, smallest best-first prefix with mass >=
 * top_p (of the renormalised set of the k best, k <= 0: all). */
static size_t ref_nucleus(const float *logits, int n, int k, float top_p, int32_t *ids,
			  double *probs)
{
	for (int i = 0; i < n; i++)
		ids[i] = i;
	ref_logits = logits;
	qsort(ids, (size_t)n, sizeof(*ids), ref_cmp);
	size_t m = k > 0 && k < n ? (size_t)k : (size_t)n;
	double total = 0.0, acc = 0.0;
	for (size_t i = 0; i < m; i++)
		total += exp(logits[ids[i]] - logits[ids[0]]);
	for (size_t i = 0; i < m; i++) {
		probs[i] = exp(logits[ids[i]] - logits[ids[0]]) / total;
		acc += probs[i];
		if (acc >= top_p)
			return i + 1;
	}
	return m;
}

/* Random rows big enough for the weighted quickselect to partition: the
 * drawable set is exactly the reference nucleus, with its frequencies. */
START_TEST(test_top_p_matches_full_sort)
{
	enum { V = 3000, DRAWS = 8000 };
	static float logits[V];
	static int32_t ids[V];
	static double probs[V];
	static int hits[V];
	const struct {
		int k;
		float top_p;
	} cases[] = {{0, 0.7f}, {0, 0.95f}, {600, 0.8f}, {40, 0.9f}};
	uint64_t x = 99;
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		for (int i = 0; i < V; i++) {
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
			logits[i] = (float)((x >> 33) % 100000) / 100000.0f * 9.0f;
		}
		size_t n = ref_nucleus(logits, V, cases[c].k, cases[c].top_p, ids, probs);
		ck_assert_uint_gt(n, 20); /* the test must exercise partitioning */
		struct sampler_params p;
		sampler_params_default(&p);
		p.top_k = cases[c].k;
		p.top_p = cases[c].top_p;
		p.seed = c;
		struct sampler *s = make(&p, V);
		struct sampler_result res;
		memset(hits, 0, sizeof(hits));
		for (int d = 0; d < DRAWS; d++)
			hits[sample_copy(s, logits, V, &res)]++;
		sampler_free(s);
		double in = 0.0, mass = 0.0;
		for (size_t i = 0; i < n; i++) {
			in += hits[ids[i]];
			mass += probs[i];
		}
		ck_assert_double_eq(in, DRAWS); /* nothing outside the nucleus */
		for (size_t i = 0; i < 3; i++) /* the likeliest, renormalised */
			ck_assert_double_eq_tol((double)hits[ids[i]] / DRAWS, probs[i] / mass,
						0.012);
		ck_assert_int_gt(hits[ids[n - 1]] + hits[ids[n - 2]], 0);
	}
}
END_TEST

START_TEST(test_min_p)
{
	/* p = {0.5,0.3,0.15,0.05}, min_p 0.2: cut at 0.1 drops id 3 only. */
	float logits[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
	struct sampler_params p;
	sampler_params_default(&p);
	p.min_p = 0.2f;
	double f[4];
	frequencies(&p, logits, 50000, f);
	ck_assert_double_eq(f[3], 0.0);
	ck_assert_double_eq_tol(f[0], 0.5 / 0.95, 0.01);
	ck_assert_double_eq_tol(f[2], 0.15 / 0.95, 0.01);
	p.min_p = 0.5f; /* cut 0.25: ids 0 and 1 */
	frequencies(&p, logits, 50000, f);
	ck_assert_double_eq(f[2] + f[3], 0.0);
	ck_assert_double_eq_tol(f[0], 0.5 / 0.8, 0.01);
	p.min_p = 1.0f; /* only the max */
	frequencies(&p, logits, 1000, f);
	ck_assert_double_eq(f[0], 1.0);
}
END_TEST

static void penalised(const struct sampler_params *p, const int32_t *hist, int n_hist,
		      float out[8])
{
	const float base[8] = {1.0f, 2.0f, -1.0f, 0.5f, 3.0f, 4.0f, -2.0f, -1.0f};
	struct sampler *s = make(p, 8);
	for (int i = 0; i < n_hist; i++)
		sampler_accept(s, hist[i]);
	struct sampler_result res;
	memcpy(out, base, sizeof(base));
	ck_assert_int_eq(sampler_sample(s, out, &res), 0);
	sampler_free(s);
}

START_TEST(test_penalties)
{
	const int32_t hist[] = {5, 5, 7, 2, 5};
	struct sampler_params p;
	sampler_params_default(&p);
	p.temperature = 0.0f;
	p.repeat_penalty = 2.0f;
	p.repeat_last_n = -1;
	float l[8];
	penalised(&p, hist, 5, l);
	ck_assert_float_eq(l[5], 2.0f);	 /* positive: divided */
	ck_assert_float_eq(l[7], -2.0f); /* negative: multiplied */
	ck_assert_float_eq(l[2], -2.0f);
	ck_assert_float_eq(l[4], 3.0f); /* not seen */
	/* OpenAI: presence 0.5 once, frequency 0.25 per occurrence. */
	p.repeat_penalty = 1.0f;
	p.presence_penalty = 0.5f;
	p.frequency_penalty = 0.25f;
	penalised(&p, hist, 5, l);
	ck_assert_float_eq_tol(l[5], 4.0f - 0.5f - 0.75f, 1e-6);
	ck_assert_float_eq_tol(l[7], -1.0f - 0.5f - 0.25f, 1e-6);
	ck_assert_float_eq(l[0], 1.0f);
	/* Window of 2: only {2, 5} count, once each. */
	p.repeat_last_n = 2;
	penalised(&p, hist, 5, l);
	ck_assert_float_eq_tol(l[5], 4.0f - 0.75f, 1e-6);
	ck_assert_float_eq_tol(l[2], -1.0f - 0.75f, 1e-6);
	ck_assert_float_eq(l[7], -1.0f);
	/* Window 0: penalties off. */
	p.repeat_last_n = 0;
	penalised(&p, hist, 5, l);
	ck_assert_float_eq(l[5], 4.0f);
	/* Both kinds: repetition first, then presence/frequency. */
	p.repeat_last_n = 64;
	p.repeat_penalty = 2.0f;
	penalised(&p, hist, 5, l);
	ck_assert_float_eq_tol(l[5], 2.0f - 0.5f - 0.75f, 1e-6);
}
END_TEST

START_TEST(test_penalty_changes_choice)
{
	struct ref_prompt rp;
	load_ref(0, &rp);
	struct sampler_params p;
	sampler_params_default(&p);
	p.temperature = 0.0f;
	p.frequency_penalty = 2.0f;
	p.n_top_logprobs = 2;
	struct sampler *s = make(&p, rp.n_vocab);
	struct sampler_result res;
	for (int i = 0; i < 3; i++)
		sampler_accept(s, rp.greedy_first); /* 17.8 - 6 < runner-up 14.3 */
	sample_copy(s, rp.logits, rp.n_vocab, &res);
	ck_assert_int_ne(res.token, rp.greedy_first);
	ck_assert_int_eq(res.top[1].token, rp.greedy_first);
	sampler_free(s);
}
END_TEST

START_TEST(test_logprobs_full_distribution)
{
	enum { V = 20 };
	float logits[V];
	uint64_t x = 12345;
	for (int i = 0; i < V; i++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		logits[i] = (float)((x >> 40) % 1000) / 100.0f - 5.0f;
	}
	struct sampler_params p;
	sampler_params_default(&p);
	p.n_top_logprobs = SAMPLER_MAX_TOP_LOGPROBS;
	p.temperature = 0.7f;
	p.top_k = 5;
	struct sampler *s = make(&p, V);
	struct sampler_result res;
	for (int round = 0; round < 20; round++) {
		sample_copy(s, logits, V, &res);
		ck_assert_int_eq(res.n_top, V);
		double sum = 0.0;
		bool found = false;
		for (int i = 0; i < V; i++) {
			sum += exp(res.top[i].logprob);
			found |= res.top[i].token == res.token;
			ck_assert_double_eq_tol(res.top[i].logprob,
						log_softmax(logits, V, res.top[i].token), 1e-5);
		}
		ck_assert_double_eq_tol(sum, 1.0, 1e-5);
		ck_assert(found);
		ck_assert_double_eq_tol(res.logprob, log_softmax(logits, V, res.token), 1e-5);
	}
	sampler_free(s);
}
END_TEST

static void expect_invalid(const struct sampler_params *p, int n_vocab, const char *field)
{
	struct sampler *s = (struct sampler *)1;
	char err[SINKD_ERR_LEN] = "";
	ck_assert_int_eq(sampler_new(p, n_vocab, &s, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_null(s);
	ck_assert_msg(strstr(err, field) != NULL, "'%s' does not name %s", err, field);
}

START_TEST(test_invalid_params)
{
	struct sampler_params d, p;
	sampler_params_default(&d);
	p = d, p.temperature = -0.1f, expect_invalid(&p, 10, "temperature");
	p = d, p.temperature = NAN, expect_invalid(&p, 10, "temperature");
	p = d, p.top_p = 0.0f, expect_invalid(&p, 10, "top_p");
	p = d, p.top_p = 1.01f, expect_invalid(&p, 10, "top_p");
	p = d, p.min_p = -0.5f, expect_invalid(&p, 10, "min_p");
	p = d, p.min_p = 1.5f, expect_invalid(&p, 10, "min_p");
	p = d, p.repeat_penalty = 0.0f, expect_invalid(&p, 10, "repeat_penalty");
	p = d, p.repeat_last_n = -2, expect_invalid(&p, 10, "repeat_last_n");
	p = d, p.presence_penalty = 2.5f, expect_invalid(&p, 10, "presence_penalty");
	p = d, p.frequency_penalty = -3.0f, expect_invalid(&p, 10, "frequency_penalty");
	p = d, p.n_top_logprobs = 21, expect_invalid(&p, 10, "n_top_logprobs");
	p = d, p.n_top_logprobs = -1, expect_invalid(&p, 10, "n_top_logprobs");
	expect_invalid(&d, 0, "n_vocab");
	ck_assert_int_eq(sampler_params_validate(&d, NULL, 0), 0);
}
END_TEST

START_TEST(test_bad_logits)
{
	struct sampler_params p;
	sampler_params_default(&p);
	p.logprobs = true;
	struct sampler *s = make(&p, 3);
	struct sampler_result res;
	float nan_row[3] = {0.0f, NAN, 1.0f};
	ck_assert_int_eq(sampler_sample(s, nan_row, &res), -EINVAL);
	float masked[3] = {-INFINITY, -INFINITY, -INFINITY};
	ck_assert_int_eq(sampler_sample(s, masked, &res), -EINVAL);
	float one[3] = {-INFINITY, 2.0f, -INFINITY}; /* masked tokens are never drawn */
	for (int i = 0; i < 100; i++)
		ck_assert_int_eq(sample_copy(s, one, 3, &res), 1);
	ck_assert_float_eq(res.logprob, 0.0f);
	sampler_free(s);
}
END_TEST

/* Over a real vocabulary's width (the max and NaN checks work 16 logits at
 * a time, the greedy pick 64): a NaN anywhere is refused, and greedy takes
 * the lowest id of the max wherever it lies, ties included. */
START_TEST(test_wide_rows)
{
	enum { V = 32003 };
	struct sampler_params p;
	sampler_params_default(&p);
	p.temperature = 0.0f;
	struct sampler *s = make(&p, V);
	struct sampler_result res;
	float *row = malloc(V * sizeof(float));
	const int at[] = {0, 15, 16, 63, 64, 1000, 20011, V - 4, V - 1};
	for (size_t k = 0; k < sizeof(at) / sizeof(at[0]); k++) {
		for (int i = 0; i < V; i++)
			row[i] = (float)((i * 7919) % 1000) / 1000.0f;
		row[at[k]] = 2.0f;
		ck_assert_int_eq(sample_copy(s, row, V, &res), at[k]);
		if (at[k] + 5 < V) { /* a tie further on: still the first */
			row[at[k] + 5] = 2.0f;
			ck_assert_int_eq(sample_copy(s, row, V, &res), at[k]);
		}
		row[at[k]] = NAN;
		ck_assert_int_eq(sampler_sample(s, row, &res), -EINVAL);
	}
	free(row);
	sampler_free(s);
}
END_TEST

/* The log-softmax of the chosen token is computed only when asked for. */
START_TEST(test_logprob_only_when_asked)
{
	struct sampler_params p;
	sampler_params_default(&p);
	p.temperature = 0.0f;
	float row[4] = {0.5f, 3.0f, 1.0f, -2.0f};
	struct sampler_result res;
	for (int ask = 0; ask < 2; ask++) {
		p.logprobs = ask;
		struct sampler *s = make(&p, 4);
		ck_assert_int_eq(sample_copy(s, row, 4, &res), 1);
		double want = ask ? 3.0 - log(exp(0.5) + exp(3.0) + exp(1.0) + exp(-2.0)) : 0.0;
		ck_assert_double_eq_tol(res.logprob, want, 1e-6);
		sampler_free(s);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sampler");
	TCase *tc = tcase_create("core");
	tcase_add_loop_test(tc, test_greedy_matches_reference, 0, 2);
	tcase_add_test(tc, test_greedy_ties_lowest_id);
	tcase_add_test(tc, test_seed_reproducible);
	tcase_add_test(tc, test_distribution);
	tcase_add_test(tc, test_top_k);
	tcase_add_test(tc, test_top_p);
	tcase_add_test(tc, test_top_p_flat_large_vocab);
	tcase_add_test(tc, test_top_p_matches_full_sort);
	tcase_add_test(tc, test_min_p);
	tcase_add_test(tc, test_penalties);
	tcase_add_test(tc, test_penalty_changes_choice);
	tcase_add_test(tc, test_logprobs_full_distribution);
	tcase_add_test(tc, test_logprob_only_when_asked);
	tcase_add_test(tc, test_invalid_params);
	tcase_add_test(tc, test_bad_logits);
	tcase_add_test(tc, test_wide_rows);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
