/* The CPU forward pass on the real stories260K model against an independent
 * float64 reference: last-position logits of each prompt within 1e-4, and
 * the greedy continuation identical.  Also: batching is invisible (three
 * sessions interleaved in one batch give the logits each gives alone; a
 * chunked prefill equals one token at a time), and a batch that a session
 * cannot take is refused before any cache changes. */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"
#include "testutil.h"

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
	/* every forward on both threads, small or not (test_small_forward_serial
	 * tests the default) */
	struct backend_options opt = {.n_threads = 2, .parallel_min_macs = 1};
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
static struct cache_geometry plain_geometry(enum cache_strategy strategy, int max_ctx)
{
	struct cache_geometry g = tu_model_geometry(&model->hp, 1024);
	g.strategy = strategy;
	g.max_context_length = max_ctx;
	return g;
}

static struct backend_session *new_session(void)
{
	struct cache_geometry g = plain_geometry(CACHE_STRATEGY_SLIDING_WINDOW, 2048);
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
			batch[j] = (struct backend_token){
			    .session = s, .token = ids[i + j], .want_logits = i + j == n - 1};
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
		int32_t *cont =
		    json_ids(cJSON_GetObjectItem(p, "greedy_continuation_ids"), &n_cont);
		const cJSON *want = cJSON_GetObjectItem(p, "last_logits");
		ck_assert_int_eq(cJSON_GetArraySize(want), n_vocab);
		struct backend_session *s = new_session();
		prefill(s, ids, n_prompt, n_prompt, logits);
		double worst = 0;
		for (int i = 0; i < n_vocab; i++)
			worst =
			    fmax(worst, fabs(logits[i] - cJSON_GetArrayItem(want, i)->valuedouble));
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
	ids[0] =
	    json_ids(cJSON_GetObjectItem(cJSON_GetArrayItem(prompts, 0), "prompt_ids"), &lens[0]);
	ids[1] =
	    json_ids(cJSON_GetObjectItem(cJSON_GetArrayItem(prompts, 1), "prompt_ids"), &lens[1]);
	ids[2] =
	    json_ids(cJSON_GetObjectItem(cJSON_GetArrayItem(prompts, 1), "prompt_ids"), &lens[2]);
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
				batch[n++] =
				    (struct backend_token){.session = ss[j],
				                           .token = ids[j][i],
				                           .want_logits = i == lens[j] - 1};
	float *got = malloc((size_t)3 * n_vocab * 4);
	char err[SINKD_ERR_LEN];
	ck_assert_msg(be->ops->forward(be, batch, n, got, err, sizeof(err)) == 0, "%s", err);
	/* Logit rows come in batch order: session 0 ends first (i=4), then 2 (i=8), then 1. */
	int row_of[3] = {0, 2, 1};
	for (int j = 0; j < 3; j++)
		ck_assert_msg(max_abs_diff(got + (size_t)row_of[j] * n_vocab,
		                           alone + (size_t)j * (STEPS + 1) * n_vocab,
		                           n_vocab) < 1e-5,
		              "session %d prefill differs", j);
	/* Decode of 3 tokens runs the small-batch kernels and a single token the
	 * decode kernel: the same products summed in another order, so they
	 * agree to float rounding (each is within 5e-6 of the reference), not
	 * bit for bit; a token attended in the wrong session would be off by
	 * whole units. */
	for (int t = 0; t < STEPS; t++) {
		for (int j = 0; j < 3; j++)
			batch[j] = (struct backend_token){
			    .session = ss[j], .token = next[j][t], .want_logits = true};
		ck_assert_msg(be->ops->forward(be, batch, 3, got, err, sizeof(err)) == 0, "%s",
		              err);
		for (int j = 0; j < 3; j++)
			ck_assert_msg(
			    max_abs_diff(got + (size_t)j * n_vocab,
			                 alone + ((size_t)j * (STEPS + 1) + t + 1) * n_vocab,
			                 n_vocab) < 5e-5,
			    "session %d decode step %d differs by %g", j, t,
			    max_abs_diff(got + (size_t)j * n_vocab,
			                 alone + ((size_t)j * (STEPS + 1) + t + 1) * n_vocab, n_vocab));
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
	struct cache_geometry g = plain_geometry(CACHE_STRATEGY_FULL, 8);
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
/* A freed session's cache is emptied and kept for the next session of the
 * same geometry: that session (after one of another geometry) gives the
 * same logits, bit for bit, as the first, over enough tokens for quantized
 * groups, ageing and eviction; it starts empty. */
START_TEST(test_reused_cache_is_clean)
{
	int n_vocab = model->hp.n_vocab;
	struct cache_geometry q = plain_geometry(CACHE_STRATEGY_SLIDING_WINDOW, 2048);
	q.window_size = 64;
	q.full_precision_recent = 8;
	q.quant_enabled = true;
	q.dtype = KV_DTYPE_BF16;
	enum { N = 150 };
	int32_t ids[N];
	for (int i = 0; i < N; i++)
		ids[i] = 1 + (int32_t)((i * 7919u + 13u) % (unsigned)(n_vocab - 1));
	float *a = malloc((size_t)n_vocab * 4), *b = malloc((size_t)n_vocab * 4);
	char err[SINKD_ERR_LEN];
	struct backend_session *s = NULL;
	ck_assert_msg(be->ops->session_new(be, &q, &s, err, sizeof(err)) == 0, "%s", err);
	prefill(s, ids, N, 16, a);
	be->ops->session_free(be, s);
	struct backend_session *other = new_session();
	prefill(other, ids, 20, 20, b);
	be->ops->session_free(be, other);
	ck_assert_msg(be->ops->session_new(be, &q, &s, err, sizeof(err)) == 0, "%s", err);
	struct sinkcache_stats st;
	be->ops->session_stats(be, s, &st);
	ck_assert_uint_eq(st.n_seen, 0);
	ck_assert_uint_eq(st.bytes_resident, 0);
	prefill(s, ids, N, 16, b);
	ck_assert_msg(memcmp(a, b, (size_t)n_vocab * 4) == 0, "logits differ after reuse (%g)",
	              max_abs_diff(a, b, n_vocab));
	be->ops->session_free(be, s);
	free(a);
	free(b);
}
END_TEST

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

/* The share of attention each head gives to the sink tier is reported per
 * layer and head for tokens that ask for it: a probability, and 1 while every
 * resident token is a sink. */
START_TEST(test_sink_mass)
{
	int n = model->hp.n_layers * model->hp.n_heads;
	float *mass = calloc((size_t)n, sizeof(float));
	float *logits = malloc((size_t)model->hp.n_vocab * 4);
	struct backend_session *s = new_session();
	int32_t ids[10] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376};
	char err[SINKD_ERR_LEN];
	struct backend_token t = {
	    .session = s, .token = ids[0], .want_logits = true, .sink_mass = mass};
	ck_assert_int_eq(be->ops->forward(be, &t, 1, logits, err, sizeof(err)), 0);
	for (int i = 0; i < n; i++)
		ck_assert_float_eq_tol(mass[i], 1.0f, 1e-5f);
	prefill(s, ids + 1, 8, 8, logits);
	memset(mass, 0, (size_t)n * sizeof(float));
	t.token = ids[9];
	ck_assert_int_eq(be->ops->forward(be, &t, 1, logits, err, sizeof(err)), 0);
	double total = 0;
	for (int i = 0; i < n; i++) {
		ck_assert(mass[i] > 0.0f && mass[i] < 1.0f);
		total += mass[i];
	}
	printf("mean sink mass after 10 tokens: %.3f\n", total / n);
	be->ops->session_free(be, s);
	free(mass);
	free(logits);
}
END_TEST

/* Learned sink logits (gpt-oss's attn_sinks) given to every layer of the
 * model: the first token's only key is a kept sink, so per head its mass
 * and the learned logit's sum to 1; the logits change; sessions made
 * without them are as before. */
START_TEST(test_learned_sink_mass)
{
	const struct model_hparams *hp = &model->hp;
	int n = hp->n_layers * hp->n_heads;
	float *sinks = malloc((size_t)n * sizeof(float)), *mass = calloc(2 * (size_t)n, 4);
	float *plain = malloc((size_t)hp->n_vocab * 4), *with = malloc((size_t)hp->n_vocab * 4);
	char err[SINKD_ERR_LEN];
	for (int i = 0; i < n; i++)
		sinks[i] = (float)(i % 5) - 1.5f;
	struct backend_session *s0 = new_session();
	for (int l = 0; l < hp->n_layers; l++)
		model->layers[l].attn_sinks = sinks + (size_t)l * hp->n_heads;
	struct backend_session *s1 = new_session();
	struct backend_token t[2] = {
	    {.session = s0, .token = 1, .want_logits = true},
	    {.session = s1, .token = 1, .want_logits = true, .sink_mass = mass,
	     .learned_sink_mass = mass + n}};
	ck_assert_int_eq(be->ops->forward(be, &t[0], 1, plain, err, sizeof(err)), 0);
	ck_assert_int_eq(be->ops->forward(be, &t[1], 1, with, err, sizeof(err)), 0);
	for (int i = 0; i < n; i++) {
		ck_assert(mass[n + i] > 0.0f && mass[n + i] < 1.0f);
		ck_assert_float_eq_tol(mass[i] + mass[n + i], 1.0f, 1e-5f);
	}
	ck_assert(max_abs_diff(plain, with, hp->n_vocab) > 1e-4);
	for (int l = 0; l < hp->n_layers; l++)
		model->layers[l].attn_sinks = NULL;
	be->ops->session_free(be, s0);
	be->ops->session_free(be, s1);
	free(sinks), free(mass), free(plain), free(with);
}
END_TEST

/* ---------------------------------------------------------------------------
 * A synthetic qwen2-style model (GQA, q/k/v biases) built in memory, to run
 * the weight types, the threaded matmuls and the head-parallel attention that
 * stories260K is too small to reach. */

struct synth_model {
	struct model m;
	struct model_layer layers[2];
	void *bufs[64];
	int n_bufs;
};

static uint64_t synth_rng = 0x9e3779b97f4a7c15ull;

static float synth_rand(void)
{
	synth_rng ^= synth_rng << 13;
	synth_rng ^= synth_rng >> 7;
	synth_rng ^= synth_rng << 17;
	return (float)((double)(synth_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void *synth_alloc(struct synth_model *s, size_t n)
{
	void *p = calloc(1, n);
	s->bufs[s->n_bufs++] = p;
	return p;
}

/* Fills w in `type` from values; the values are replaced by what the type
 * holds exactly, so that an F32 model built from them is the same model. */
static void synth_encode(struct synth_model *s, struct weight_matrix *w, enum ggml_type type,
                         float *vals, int rows, int cols)
{
	size_t rb = type == GGML_TYPE_F32    ? (size_t)cols * 4
	            : type == GGML_TYPE_Q8_0 ? (size_t)cols / 32 * 34
	                                     : (size_t)cols * 2;
	uint8_t *d = synth_alloc(s, rb * rows);
	*w = (struct weight_matrix){
	    .type = type, .rows = rows, .cols = cols, .data = d, .row_bytes = rb};
	for (int r = 0; r < rows; r++) {
		float *v = vals + (size_t)r * cols;
		uint8_t *row = d + (size_t)r * rb;
		for (int c = 0; c < cols && type != GGML_TYPE_Q8_0; c++) {
			if (type == GGML_TYPE_F32) {
				memcpy(row + 4 * c, &v[c], 4);
			} else if (type == GGML_TYPE_F16) {
				_Float16 h = (_Float16)v[c];
				v[c] = (float)h;
				memcpy(row + 2 * c, &h, 2);
			} else {
				uint32_t bits;
				memcpy(&bits, &v[c], 4);
				bits &= 0xffff0000u;
				memcpy(&v[c], &bits, 4);
				uint16_t hi = (uint16_t)(bits >> 16);
				memcpy(row + 2 * c, &hi, 2);
			}
		}
		for (int b = 0; b < cols / 32 && type == GGML_TYPE_Q8_0; b++) {
			float amax = 0;
			for (int i = 0; i < 32; i++)
				amax = fmaxf(amax, fabsf(v[b * 32 + i]));
			_Float16 dh = (_Float16)(amax / 127.0f);
			memcpy(row + 34 * b, &dh, 2);
			for (int i = 0; i < 32; i++) {
				int q = (int)lrintf(v[b * 32 + i] / (float)dh);
				q = q > 127 ? 127 : q < -127 ? -127 : q;
				row[34 * b + 2 + i] = (uint8_t)(int8_t)q;
				v[b * 32 + i] = (float)dh * (float)q;
			}
		}
	}
}

/* The same random model twice: weights in `type` and in F32. */
static void synth_build(struct synth_model *typed, struct synth_model *f32, enum ggml_type type)
{
	struct model_hparams hp = {.arch = model_arch_find("qwen2"),
	                           .n_vocab = 300,
	                           .dim = 256,
	                           .n_layers = 2,
	                           .n_heads = 8,
	                           .n_kv_heads = 4,
	                           .head_dim = 32,
	                           .ffn_dim = 512,
	                           .rope_dim = 32,
	                           .rope_theta = 10000.0,
	                           .norm_eps = 1e-6f,
	                           .context_length = 4096,
	                           .has_qkv_bias = true};
	struct synth_model *both[2] = {typed, f32};
	synth_rng = 0x9e3779b97f4a7c15ull;
	for (int k = 0; k < 2; k++) {
		memset(both[k], 0, sizeof(*both[k]));
		both[k]->m.hp = hp;
		both[k]->m.layers = both[k]->layers;
	}
	float *vals = malloc(512 * 300 * sizeof(float));
#define SYNTH_MATRIX(field, rows, cols)                                                            \
	do {                                                                                       \
		for (int i = 0; i < (rows) * (cols); i++)                                          \
			vals[i] = synth_rand() * 0.15f;                                            \
		synth_encode(typed, &typed->field, type, vals, rows, cols);                        \
		synth_encode(f32, &f32->field, GGML_TYPE_F32, vals, rows, cols);                   \
	} while (0)
#define SYNTH_VECTOR(field, n, base)                                                               \
	do {                                                                                       \
		float *v = synth_alloc(typed, (n) * sizeof(float));                                \
		for (int i = 0; i < (n); i++)                                                      \
			v[i] = (base) + 0.1f * synth_rand();                                       \
		typed->field = f32->field = v;                                                     \
	} while (0)
	SYNTH_MATRIX(m.token_embd, 300, 256);
	SYNTH_MATRIX(m.output, 300, 256);
	SYNTH_VECTOR(m.output_norm, 256, 1.0f);
	for (int l = 0; l < 2; l++) {
		SYNTH_VECTOR(layers[l].attn_norm, 256, 1.0f);
		SYNTH_VECTOR(layers[l].ffn_norm, 256, 1.0f);
		SYNTH_VECTOR(layers[l].bq, 256, 0.0f);
		SYNTH_VECTOR(layers[l].bk, 128, 0.0f);
		SYNTH_VECTOR(layers[l].bv, 128, 0.0f);
		SYNTH_MATRIX(layers[l].wq, 256, 256);
		SYNTH_MATRIX(layers[l].wk, 128, 256);
		SYNTH_MATRIX(layers[l].wv, 128, 256);
		SYNTH_MATRIX(layers[l].wo, 256, 256);
		SYNTH_MATRIX(layers[l].w_gate, 512, 256);
		SYNTH_MATRIX(layers[l].w_up, 512, 256);
		SYNTH_MATRIX(layers[l].w_down, 256, 512);
	}
#undef SYNTH_MATRIX
#undef SYNTH_VECTOR
	free(vals);
}

static void synth_free(struct synth_model *s)
{
	for (int i = 0; i < s->n_bufs; i++)
		free(s->bufs[i]);
}

/* Logits of the last of n tokens, fed in chunks of `chunk`, on a backend
 * with n_threads threads. */
static void synth_logits(const struct model *m, int n_threads, const int32_t *ids, int n, int chunk,
                         float *logits)
{
	struct backend *b = NULL;
	struct backend_options opt = {.n_threads = n_threads, .parallel_min_macs = 1};
	char err[SINKD_ERR_LEN];
	ck_assert_msg(backend_cpu_new(m, &opt, &b, err, sizeof(err)) == 0, "%s", err);
	struct backend *saved_be = be;
	const struct model *saved_model = model;
	be = b;
	model = (struct model *)m;
	struct backend_session *s = new_session();
	prefill(s, ids, n, chunk, logits);
	be->ops->session_free(be, s);
	backend_free(b);
	be = saved_be;
	model = (struct model *)saved_model;
}

static double max_abs(const float *v, int n)
{
	double m = 0;
	for (int i = 0; i < n; i++)
		m = fmax(m, fabs(v[i]));
	return m;
}

/* F16, BF16 and Q8_0 weights give the logits of the F32 model holding the
 * same values, through every matrix of the forward pass.  Q8_0 products of
 * decode-sized batches (here the output head) quantize the activations to Q8
 * as llama.cpp does, which costs about 1% of the logit scale. */
START_TEST(test_weight_types)
{
	enum ggml_type types[3] = {GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0};
	int32_t ids[24];
	for (int i = 0; i < 24; i++)
		ids[i] = (int32_t)((i * 37 + 5) % 300);
	float a[300], b[300];
	for (int t = 0; t < 3; t++) {
		struct synth_model typed, f32;
		synth_build(&typed, &f32, types[t]);
		synth_logits(&typed.m, 2, ids, 24, 24, a);
		synth_logits(&f32.m, 2, ids, 24, 24, b);
		double d = max_abs_diff(a, b, 300), scale = max_abs(b, 300);
		ck_assert_msg(scale > 0.1, "degenerate logits");
		double tol = types[t] == GGML_TYPE_Q8_0 ? 2e-2 : 1e-4;
		ck_assert_msg(d < tol * scale + 1e-5, "type %d: logits differ by %g (scale %g)",
		              (int)types[t], d, scale);
		synth_free(&typed);
		synth_free(&f32);
	}
}
END_TEST

/* A 150-token chunk on 2 threads (threaded matmuls, head-parallel attention)
 * equals one token at a time on 1 thread. */
START_TEST(test_threaded_prefill)
{
	struct synth_model typed, f32;
	synth_build(&typed, &f32, GGML_TYPE_F16);
	int32_t ids[150];
	for (int i = 0; i < 150; i++)
		ids[i] = (int32_t)((i * 91 + 7) % 300);
	float a[300], b[300];
	synth_logits(&typed.m, 2, ids, 150, 150, a);
	synth_logits(&typed.m, 1, ids, 150, 1, b);
	double d = max_abs_diff(a, b, 300);
	ck_assert_msg(d < 1e-4 * max_abs(b, 300), "threaded chunk differs by %g", d);
	synth_free(&typed);
	synth_free(&f32);
}
END_TEST

/* Prompts of three sessions in one batch, then decode steps of all three:
 * every logit row, on backend b. */
static void three_session_logits(struct backend *b, float *out)
{
	int n_vocab = model->hp.n_vocab;
	struct backend *saved = be;
	be = b;
	struct backend_session *ss[3] = {new_session(), new_session(), new_session()};
	struct backend_token batch[48];
	size_t n = 0;
	for (int i = 0; i < 12; i++)
		for (int j = 0; j < 3; j++)
			batch[n++] = (struct backend_token){
			    .session = ss[j],
			    .token = (int32_t)((i * 31 + j * 7 + 3) % n_vocab),
			    .want_logits = i == 11};
	char err[SINKD_ERR_LEN];
	ck_assert_msg(be->ops->forward(be, batch, n, out, err, sizeof(err)) == 0, "%s", err);
	for (int t = 0; t < 6; t++) {
		out += (size_t)3 * n_vocab;
		for (int j = 0; j < 3; j++)
			batch[j] = (struct backend_token){
			    .session = ss[j],
			    .token = argmax(out - (size_t)(3 - j) * n_vocab, n_vocab),
			    .want_logits = true};
		ck_assert_msg(be->ops->forward(be, batch, 3, out, err, sizeof(err)) == 0, "%s",
		              err);
	}
	for (int j = 0; j < 3; j++)
		be->ops->session_free(be, ss[j]);
	be = saved;
}

/* With the default options a 2-thread backend runs stories260K's small
 * forwards (a few tokens: well under the parallel threshold) on the
 * calling thread: the same logits, bit for bit, as every forward spread
 * over both threads (each output row and each session's attention is
 * computed by one thread either way). */
START_TEST(test_small_forward_serial)
{
	int n_vocab = model->hp.n_vocab;
	size_t rows = (size_t)3 * 7 * n_vocab;
	float *parallel = calloc(rows, sizeof(float)), *serial = calloc(rows, sizeof(float));
	struct backend *def = NULL;
	struct backend_options opt = {.n_threads = 2};
	char err[SINKD_ERR_LEN];
	ck_assert_msg(backend_cpu_new(model, &opt, &def, err, sizeof(err)) == 0, "%s", err);
	three_session_logits(be, parallel);
	three_session_logits(def, serial);
	ck_assert(max_abs(parallel, (int)rows) > 0.1);
	ck_assert_msg(memcmp(parallel, serial, rows * sizeof(float)) == 0,
	              "serial logits differ by %g", max_abs_diff(parallel, serial, (int)rows));
	backend_free(def);
	free(parallel);
	free(serial);
}
END_TEST

/* ---- model sliding-window layers ------------------------------------------
 * stories260K with layers 0, 1 and 3 marked as the model's sliding-window
 * layers (model_hparams.layer_swa) of SWA_W tokens. */
enum { SWA_W = 32 };
static const uint8_t swa_layers[5] = {1, 1, 0, 1, 0};

/* Logits of every position of ids, one token at a time: (n, n_vocab). */
static float *logits_per_position(const struct cache_geometry *g, const int32_t *ids, int n,
                                  struct sinkcache_stats *st)
{
	int n_vocab = model->hp.n_vocab;
	float *all = malloc((size_t)n * (size_t)n_vocab * sizeof(float));
	struct backend_session *s = NULL;
	char err[SINKD_ERR_LEN];
	ck_assert_msg(be->ops->session_new(be, g, &s, err, sizeof(err)) == 0, "%s", err);
	for (int i = 0; i < n; i++)
		prefill(s, ids + i, 1, 1, all + (size_t)i * n_vocab);
	if (st)
		be->ops->session_stats(be, s, st);
	be->ops->session_free(be, s);
	return all;
}

/* Largest |a - b| of position i over the largest |logit| of b there. */
static double rel_diff_at(const float *a, const float *b, int i)
{
	int n_vocab = model->hp.n_vocab;
	const float *x = a + (size_t)i * n_vocab, *y = b + (size_t)i * n_vocab;
	double top = 0;
	for (int j = 0; j < n_vocab; j++)
		top = fmax(top, fabs((double)y[j]));
	return max_abs_diff(x, y, n_vocab) / top;
}

/* Mean negative log-likelihood of ids[1..n) from the logits of every
 * position (n, n_vocab). */
static double mean_nll(const float *all, const int32_t *ids, int n)
{
	int n_vocab = model->hp.n_vocab;
	double sum = 0;
	for (int i = 0; i + 1 < n; i++) {
		const float *x = all + (size_t)i * n_vocab;
		double mx = x[0], z = 0;
		for (int j = 1; j < n_vocab; j++)
			mx = fmax(mx, x[j]);
		for (int j = 0; j < n_vocab; j++)
			z += exp(x[j] - mx);
		sum += log(z) + mx - x[ids[i + 1]];
	}
	return sum / (n - 1);
}

static struct cache_settings swa_settings(enum cache_strategy strategy)
{
	return (struct cache_settings){.strategy = strategy,
	                               .sink_keep_count = 4,
	                               .window_size = 252,
	                               .max_context_length = 512,
	                               .rope_positions = ROPE_POSITIONS_CACHE,
	                               .dtype = KV_DTYPE_F32};
}

static void ids_of(int32_t *ids, int n)
{
	for (int i = 0; i < n; i++)
		ids[i] = 1 + (int32_t)((i * 7919u + 13u) % (unsigned)(model->hp.n_vocab - 1));
}

/* strategy full with sliding layers is exact: each sliding layer attends
 * over its last SWA_W positions only, as a brute-force mask does (here a
 * full cache whose layers 0, 1 and 3 are plain sliding windows of SWA_W
 * without sinks, a span of their own built by hand); before SWA_W tokens the
 * mask changes nothing, after it the logits differ from unmasked ones. */
START_TEST(test_sliding_layers_full_is_masked)
{
	enum { N = 100 };
	int32_t ids[N];
	ids_of(ids, N);
	struct cache_settings full = swa_settings(CACHE_STRATEGY_FULL);
	struct cache_geometry plain, masked, g;
	cache_geometry_build(&full, &model->hp, &plain);
	masked = plain;
	masked.sink_keep_count = 0;
	for (int l = 0; l < 5; l++)
		if (swa_layers[l])
			cache_geometry_set_layer(&masked, l, CACHE_STRATEGY_SLIDING_WINDOW, SWA_W);
	float *want = logits_per_position(&masked, ids, N, NULL);
	float *unmasked = logits_per_position(&plain, ids, N, NULL);
	struct model_hparams *hp = (struct model_hparams *)&model->hp;
	hp->swa_window = SWA_W;
	hp->layer_swa = swa_layers;
	cache_geometry_build(&full, hp, &g);
	float *have = logits_per_position(&g, ids, N, NULL);
	double worst = 0, apart = 0;
	for (int i = 0; i < N; i++) {
		worst = fmax(worst, rel_diff_at(have, want, i));
		if (i < SWA_W)
			ck_assert_msg(rel_diff_at(have, unmasked, i) < 1e-5, "position %d", i);
		else
			apart = fmax(apart, rel_diff_at(have, unmasked, i));
	}
	printf("sliding layers, strategy full: %.3g from the mask, %.3g from no mask\n", worst,
	       apart);
	ck_assert_msg(worst < 1e-5, "sliding layers in strategy full: %g from the mask", worst);
	ck_assert_msg(apart > 1e-3, "the mask changed nothing (%g)", apart);
	hp->layer_swa = NULL;
	free(want);
	free(unmasked);
	free(have);
}
END_TEST

/* Streaming with a 4+252 global cache and the sliding layers gives the
 * logits of strategy full for every token before the global layers evict
 * anything; then every layer is full and the bytes resident are the
 * per-layer bound (3 sliding layers of SWA_W tokens, 2 of 256). */
START_TEST(test_sliding_layers_stream_equals_full)
{
	enum { N = 256 };
	int32_t ids[N];
	ids_of(ids, N);
	struct model_hparams *hp = (struct model_hparams *)&model->hp;
	hp->swa_window = SWA_W;
	hp->layer_swa = swa_layers;
	struct cache_settings full = swa_settings(CACHE_STRATEGY_FULL);
	struct cache_settings slide = swa_settings(CACHE_STRATEGY_SLIDING_WINDOW);
	struct cache_geometry gf, gs;
	cache_geometry_build(&full, hp, &gf);
	cache_geometry_build(&slide, hp, &gs);
	struct sinkcache_stats st;
	float *want = logits_per_position(&gf, ids, N, NULL);
	float *have = logits_per_position(&gs, ids, N, &st);
	double worst = 0;
	for (int i = 0; i < N; i++)
		worst = fmax(worst, rel_diff_at(have, want, i));
	printf("sliding layers, 4+252 stream vs strategy full over %d tokens: %.3g\n", N, worst);
	ck_assert_msg(worst < 1e-5, "streaming vs strategy full: %g", worst);
	size_t tok = 2 * (size_t)hp->n_kv_heads * (size_t)hp->head_dim * sizeof(float);
	ck_assert_uint_eq(st.bytes_bound, (3 * SWA_W + 2 * 256) * tok);
	ck_assert_uint_eq(st.bytes_bound, cache_geometry_bound_bytes(&gs));
	ck_assert_uint_eq(st.bytes_resident, st.bytes_bound);
	ck_assert_int_eq(st.n_resident, 256);
	ck_assert_int_eq(st.n_resident_swa, SWA_W);
	hp->layer_swa = NULL;
	free(want);
	free(have);
}
END_TEST

/* n tokens of tinystories-dev.txt (the eval text, read again from its
 * start when it runs out). */
static void story_ids(int32_t *ids, int n)
{
	char path[1024], err[SINKD_ERR_LEN];
	snprintf(path, sizeof(path), "%s/data/tinystories-dev.txt", getenv("SINKD_SHARED"));
	char *text = read_file(path);
	struct tokenizer *tok = NULL;
	int32_t *all = NULL;
	size_t n_all = 0;
	ck_assert_msg(tokenizer_new_from_gguf(model->file, &tok, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(tokenizer_encode(tok, text, strlen(text), true, false, &all, &n_all, err,
	                               sizeof(err)) == 0,
	              "%s", err);
	ck_assert_uint_gt(n_all, 1000);
	for (int i = 0; i < n; i++)
		ids[i] = all[(size_t)i % n_all];
	free(all);
	free(text);
	tokenizer_free(tok);
}

/* Gemma-3-shaped: 4 of 5 layers slide over 1,024 tokens beside a 4+252
 * global cache.  20,000 tokens of the eval text stream through; the bytes resident are then
 * the per-layer bound (4 x 1,024 + 256 tokens, not 5 x 1,024 or 5 x 256),
 * and the first 256 tokens, before the global layer evicts anything, score
 * the perplexity of strategy full. */
START_TEST(test_gemma_shaped_stream)
{
	enum { N = 20000, EARLY = 256 };
	static const uint8_t gemma_layers[5] = {1, 1, 1, 1, 0};
	struct model_hparams *hp = (struct model_hparams *)&model->hp;
	hp->swa_window = 1024;
	hp->layer_swa = gemma_layers;
	int32_t *ids = malloc(N * sizeof(int32_t));
	story_ids(ids, N);
	struct cache_settings full = swa_settings(CACHE_STRATEGY_FULL);
	struct cache_settings slide = swa_settings(CACHE_STRATEGY_SLIDING_WINDOW);
	struct cache_geometry gf, gs;
	cache_geometry_build(&full, hp, &gf);
	cache_geometry_build(&slide, hp, &gs);
	float *want = logits_per_position(&gf, ids, EARLY, NULL);
	float *have = logits_per_position(&gs, ids, EARLY, NULL);
	double ppl_full = exp(mean_nll(want, ids, EARLY)), ppl = exp(mean_nll(have, ids, EARLY));
	char err[SINKD_ERR_LEN];
	struct backend_session *s = NULL;
	ck_assert_msg(be->ops->session_new(be, &gs, &s, err, sizeof(err)) == 0, "%s", err);
	float *last = malloc((size_t)model->hp.n_vocab * sizeof(float));
	prefill(s, ids, N, 64, last);
	struct sinkcache_stats st;
	be->ops->session_stats(be, s, &st);
	be->ops->session_free(be, s);
	size_t tok = 2 * (size_t)hp->n_kv_heads * (size_t)hp->head_dim * sizeof(float);
	printf("gemma-shaped: %zu bytes resident of a %zu-byte bound after %d tokens; first %d "
	       "tokens: perplexity %.6f, strategy full %.6f\n",
	       st.bytes_resident, st.bytes_bound, N, EARLY, ppl, ppl_full);
	ck_assert_uint_eq(st.bytes_bound, (4 * 1024 + 256) * tok);
	ck_assert_uint_eq(st.bytes_resident, st.bytes_bound);
	ck_assert_uint_eq(st.n_seen, N);
	ck_assert_int_eq(st.n_resident, 256);
	ck_assert_int_eq(st.n_resident_swa, 1024);
	ck_assert_msg(fabs(ppl - ppl_full) <= 1e-9 * ppl_full, "%.9f vs %.9f", ppl, ppl_full);
	hp->layer_swa = NULL;
	free(ids);
	free(want);
	free(have);
	free(last);
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
	tcase_add_test(tc, test_reused_cache_is_clean);
	tcase_add_test(tc, test_refuses_full_session);
	tcase_add_test(tc, test_revise_then_refeed);
	tcase_add_test(tc, test_sink_mass);
	tcase_add_test(tc, test_learned_sink_mass);
	tcase_add_test(tc, test_weight_types);
	tcase_add_test(tc, test_threaded_prefill);
	tcase_add_test(tc, test_small_forward_serial);
	tcase_add_test(tc, test_sliding_layers_full_is_masked);
	tcase_add_test(tc, test_sliding_layers_stream_equals_full);
	tcase_add_test(tc, test_gemma_shaped_stream);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
