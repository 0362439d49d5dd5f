/* The CPU forward pass on the real stories260K model against an independent
 * float64 reference: last-position logits of each prompt within 1e-4, and
 * the greedy continuation identical.  Also: batching is invisible (three
 * sessions interleaved in one batch give the logits each gives alone; a
 * chunked prefill equals one token at a time), and a batch that a session
 * cannot take is refused before any cache changes. */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "util/errbuf.h"

static struct model *model;
static struct backend *be;
static cJSON *ref;

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "cannot open %s", path);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *buf = malloc((size_t)n + 1);
	ck_assert_int_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = 0;
	fclose(f);
	return buf;
}

static void setup(void)
{
	const char *shared = getenv("SINKD_SHARED");
	ck_assert_msg(shared != NULL, "SINKD_SHARED is not set");
	char path[1024], err[SINKD_ERR_LEN];
	snprintf(path, sizeof(path), "%s/models/stories260K.gguf", shared);
	ck_assert_msg(model_load(path, NULL, &model, err, sizeof(err)) == 0, "%s", err);
	struct backend_options opt = {.n_threads = 2};
	ck_assert_msg(backend_cpu_new(model, &opt, &be, err, sizeof(err)) == 0, "%s", err);
	snprintf(path, sizeof(path), "%s/reference/stories260K-logits.json", shared);
	char *text = read_file(path);
	ref = cJSON_Parse(text);
	free(text);
	ck_assert_ptr_nonnull(ref);
}

static void teardown(void)
{
	backend_free(be);
	model_free(model);
	cJSON_Delete(ref);
}

/* Full-precision cache large enough that nothing is evicted: the reference's
 * plain causal attention. */
static struct sinkcache_geometry plain_geometry(enum cache_strategy strategy, int max_ctx)
{
	const struct model_hparams *hp = &model->hp;
	return (struct sinkcache_geometry){
		.n_layers = hp->n_layers, .n_kv_heads = hp->n_kv_heads, .head_dim = hp->head_dim,
		.rope_dim = hp->rope_dim, .rope_theta = hp->rope_theta,
		.rope_neox = hp->arch == MODEL_ARCH_QWEN2, .strategy = strategy,
		.sink_keep_count = 4, .window_size = 1024, .max_context_length = max_ctx,
		.quant_enabled = false, .quant_bits = 8, .protect_sinks = true,
		.full_precision_recent = 1024, .rope_positions = ROPE_POSITIONS_CACHE,
		.dtype = KV_DTYPE_F32};
}

static struct backend_session *new_session(void)
{
	struct sinkcache_geometry g = plain_geometry(CACHE_STRATEGY_SLIDING_WINDOW, 2048);
	struct backend_session *s = NULL;
	char err[SINKD_ERR_LEN];
	ck_assert_msg(be->ops->session_new(be, &g, &s, err, sizeof(err)) == 0, "%s", err);
	return s;
}

/* Runs ids through s in chunks of `chunk` tokens; logits of the last token. */
static void prefill(struct backend_session *s, const int32_t *ids, int n, int chunk, float *logits)
{
	struct backend_token *batch = calloc((size_t)chunk, sizeof(*batch));
	char err[SINKD_ERR_LEN];
	for (int i = 0; i < n; i += chunk) {
		int m = n - i < chunk ? n - i : chunk;
		for (int j = 0; j < m; j++)
			batch[j] = (struct backend_token){.session = s, .token = ids[i + j],
							  .want_logits = i + j == n - 1};
		ck_assert_msg(be->ops->forward(be, batch, (size_t)m, logits, err, sizeof(err)) == 0,
			      "%s", err);
	}
	free(batch);
}

static int argmax(const float *v, int n)
{
	int best = 0;
	for (int i = 1; i < n; i++)
		if (v[i] > v[best])
			best = i;
	return best;
}

static int32_t *json_ids(const cJSON *arr, int *n)
{
	*n = cJSON_GetArraySize(arr);
	int32_t *ids = malloc((size_t)*n * sizeof(int32_t));
	for (int i = 0; i < *n; i++)
		ids[i] = (int32_t)cJSON_GetArrayItem(arr, i)->valuedouble;
	return ids;
}

static double max_abs_diff(const float *a, const float *b, int n)
{
	double d = 0;
	for (int i = 0; i < n; i++)
		d = fmax(d, fabs((double)a[i] - b[i]));
	return d;
}

START_TEST(test_reference_logits_and_greedy)
{
	int n_vocab = model->hp.n_vocab;
	const cJSON *prompts = cJSON_GetObjectItem(ref, "prompts");
	ck_assert_int_ge(cJSON_GetArraySize(prompts), 1);
	float *logits = malloc((size_t)n_vocab * sizeof(float));
	const cJSON *p;
	cJSON_ArrayForEach(p, prompts)
	{
		int n_prompt, n_cont;
		int32_t *ids = json_ids(cJSON_GetObjectItem(p, "prompt_ids"), &n_prompt);
		int32_t *cont = json_ids(cJSON_GetObjectItem(p, "greedy_continuation_ids"), &n_cont);
		const cJSON *want = cJSON_GetObjectItem(p, "last_logits");
		ck_assert_int_eq(cJSON_GetArraySize(want), n_vocab);
		struct backend_session *s = new_session();
		prefill(s, ids, n_prompt, n_prompt, logits);
		double worst = 0;
		for (int i = 0; i < n_vocab; i++)
			worst = fmax(worst, fabs(logits[i] - cJSON_GetArrayItem(want, i)->valuedouble));
		printf("prompt %d tokens: max abs logit error %.3g\n", n_prompt, worst);
		ck_assert_msg(worst <= 1e-4, "prompt '%s': max abs logit error %g",
			      cJSON_GetObjectItem(p, "text")->valuestring, worst);
		for (int i = 0; i < n_cont; i++) {
			int32_t next = argmax(logits, n_vocab);
			ck_assert_msg(next == cont[i], "continuation token %d: got %d, want %d", i,
				      next, cont[i]);
			prefill(s, &next, 1, 1, logits);
		}
		be->ops->session_free(be, s);
		free(ids);
		free(cont);
	}
	free(logits);
}
END_TEST

/* One prompt through chunks of 1, 3 and all at once: same logits. */
START_TEST(test_chunked_prefill)
{
	int n_vocab = model->hp.n_vocab, n;
	const cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "prompts"), 1);
	int32_t *ids = json_ids(cJSON_GetObjectItem(p, "prompt_ids"), &n);
	float *whole = malloc((size_t)n_vocab * 4), *part = malloc((size_t)n_vocab * 4);
	struct backend_session *s = new_session();
	prefill(s, ids, n, n, whole);
	be->ops->session_free(be, s);
	int chunks[] = {1, 3, 5};
	for (int c = 0; c < 3; c++) {
		s = new_session();
		prefill(s, ids, n, chunks[c], part);
		ck_assert_msg(max_abs_diff(whole, part, n_vocab) < 1e-5, "chunk %d differs by %g",
			      chunks[c], max_abs_diff(whole, part, n_vocab));
		struct sinkcache_stats st;
		be->ops->session_stats(be, s, &st);
		ck_assert_int_eq((int)st.n_seen, n);
		be->ops->session_free(be, s);
	}
	free(ids);
	free(whole);
	free(part);
}
END_TEST

/* Three sessions interleaved token by token in one prefill batch, then
 * batched decode steps: the same logits as each session alone. */
START_TEST(test_interleaved_sessions)
{
	int n_vocab = model->hp.n_vocab, lens[3];
	const cJSON *prompts = cJSON_GetObjectItem(ref, "prompts");
	int32_t *ids[3];
	ids[0] = json_ids(cJSON_GetObjectItem(cJSON_GetArrayItem(prompts, 0), "prompt_ids"), &lens[0]);
	ids[1] = json_ids(cJSON_GetObjectItem(cJSON_GetArrayItem(prompts, 1), "prompt_ids"), &lens[1]);
	ids[2] = json_ids(cJSON_GetObjectItem(cJSON_GetArrayItem(prompts, 1), "prompt_ids"), &lens[2]);
	lens[2] = 9; /* a shorter prefix of the second prompt */
	enum { STEPS = 4 };
	float *alone = malloc((size_t)3 * (STEPS + 1) * n_vocab * 4);
	int32_t next[3][STEPS];
	for (int j = 0; j < 3; j++) {
		struct backend_session *s = new_session();
		float *l = alone + (size_t)j * (STEPS + 1) * n_vocab;
		prefill(s, ids[j], lens[j], lens[j], l);
		for (int t = 0; t < STEPS; t++) {
			next[j][t] = argmax(l + (size_t)t * n_vocab, n_vocab);
			prefill(s, &next[j][t], 1, 1, l + (size_t)(t + 1) * n_vocab);
		}
		be->ops->session_free(be, s);
	}
	struct backend_session *ss[3] = {new_session(), new_session(), new_session()};
	struct backend_token batch[64];
	size_t n = 0;
	for (int i = 0; i < 17; i++)
		for (int j = 0; j < 3; j++)
			if (i < lens[j])
				batch[n++] = (struct backend_token){.session = ss[j], .token = ids[j][i],
								    .want_logits = i == lens[j] - 1};
	float *got = malloc((size_t)3 * n_vocab * 4);
	char err[SINKD_ERR_LEN];
	ck_assert_msg(be->ops->forward(be, batch, n, got, err, sizeof(err)) == 0, "%s", err);
	/* Logit rows come in batch order: session 0 ends first (i=4), then 2 (i=8), then 1. */
	int row_of[3] = {0, 2, 1};
	for (int j = 0; j < 3; j++)
		ck_assert_msg(max_abs_diff(got + (size_t)row_of[j] * n_vocab,
					   alone + (size_t)j * (STEPS + 1) * n_vocab, n_vocab) < 1e-5,
			      "session %d prefill differs", j);
	for (int t = 0; t < STEPS; t++) {
		for (int j = 0; j < 3; j++)
			batch[j] = (struct backend_token){.session = ss[j], .token = next[j][t],
							  .want_logits = true};
		ck_assert_msg(be->ops->forward(be, batch, 3, got, err, sizeof(err)) == 0, "%s", err);
		for (int j = 0; j < 3; j++)
			ck_assert_msg(max_abs_diff(got + (size_t)j * n_vocab,
						   alone + ((size_t)j * (STEPS + 1) + t + 1) * n_vocab,
						   n_vocab) < 1e-5,
				      "session %d decode step %d differs", j, t);
	}
	for (int j = 0; j < 3; j++) {
		be->ops->session_free(be, ss[j]);
		free(ids[j]);
	}
	free(alone);
	free(got);
}
END_TEST

/* A session that cannot take its tokens makes the whole batch fail before
 * any cache changes: the other session of the batch is untouched. */
START_TEST(test_refuses_full_session)
{
	struct sinkcache_geometry g = plain_geometry(CACHE_STRATEGY_FULL, 8);
	struct backend_session *full = NULL, *other = new_session();
	char err[SINKD_ERR_LEN];
	ck_assert_msg(be->ops->session_new(be, &g, &full, err, sizeof(err)) == 0, "%s", err);
	int32_t ids[6] = {1, 403, 407, 261, 378, 432};
	float *logits = malloc((size_t)model->hp.n_vocab * 4);
	prefill(full, ids, 6, 6, logits);
	ck_assert(be->ops->session_can_append(be, full, 2));
	ck_assert(!be->ops->session_can_append(be, full, 3));
	struct backend_token batch[4] = {{.session = other, .token = 1},
					 {.session = full, .token = 383},
					 {.session = full, .token = 286},
					 {.session = full, .token = 261, .want_logits = true}};
	err[0] = 0;
	ck_assert_int_lt(be->ops->forward(be, batch, 4, logits, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(strstr(err, "cannot take 3"));
	struct sinkcache_stats st;
	be->ops->session_stats(be, other, &st);
	ck_assert_int_eq((int)st.n_seen, 0);
	be->ops->session_stats(be, full, &st);
	ck_assert_int_eq((int)st.n_seen, 6);
	ck_assert_int_eq(be->ops->forward(be, batch, 3, logits, err, sizeof(err)), 0);
	be->ops->session_stats(be, full, &st);
	ck_assert_int_eq((int)st.n_seen, 8);
	/* A token outside the vocabulary and a wrong geometry are refused too. */
	batch[0].token = model->hp.n_vocab;
	ck_assert_int_lt(be->ops->forward(be, batch, 1, logits, err, sizeof(err)), 0);
	g.n_layers++;
	struct backend_session *bad = NULL;
	ck_assert_int_lt(be->ops->session_new(be, &g, &bad, err, sizeof(err)), 0);
	ck_assert_ptr_null(bad);
	be->ops->session_free(be, full);
	be->ops->session_free(be, other);
	free(logits);
}
END_TEST

/* Revising the last tokens and feeding them again gives the same logits. */
START_TEST(test_revise_then_refeed)
{
	int n_vocab = model->hp.n_vocab;
	int32_t ids[8] = {1, 403, 407, 261, 378, 432, 383, 286};
	float *a = malloc((size_t)n_vocab * 4), *b = malloc((size_t)n_vocab * 4);
	struct backend_session *s = new_session();
	prefill(s, ids, 8, 8, a);
	char err[SINKD_ERR_LEN];
	ck_assert_msg(be->ops->session_revise(be, s, 3, err, sizeof(err)) == 0, "%s", err);
	prefill(s, ids + 5, 3, 3, b);
	ck_assert(max_abs_diff(a, b, n_vocab) < 1e-5);
	be->ops->session_free(be, s);
	free(a);
	free(b);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("forward");
	TCase *tc = tcase_create("stories260K");
	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_reference_logits_and_greedy);
	tcase_add_test(tc, test_chunked_prefill);
	tcase_add_test(tc, test_interleaved_sessions);
	tcase_add_test(tc, test_refuses_full_session);
	tcase_add_test(tc, test_revise_then_refeed);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
