/* The sched tests' shared fixture (sched_fixture.h). */
#include "sched_fixture.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/backend.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"
#ifdef SINKD_CUDA_EMU
#include "backend_cuda.h"
#endif

struct sched_fixture fx;

/* Fixture problems happen outside any test: report and stop (test code). */
static void fixture_fail(const char *fmt, ...) SINKD_PRINTF(1, 2);
static void fixture_fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("fixture: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(EXIT_FAILURE);
}

static void load_ids(const cJSON *arr, int32_t *out, size_t *n, size_t cap)
{
	const cJSON *it;
	*n = 0;
	cJSON_ArrayForEach(it, arr) if (*n < cap) out[(*n)++] = (int32_t)it->valueint;
}

static void load_reference(const char *shared)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s/reference/stories260K-logits.json", shared);
	FILE *f = fopen(path, "rb");
	if (!f)
		fixture_fail("cannot open %s", path);
	fseek(f, 0, SEEK_END);
	long len = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *buf = malloc((size_t)len + 1);
	if ((long)fread(buf, 1, (size_t)len, f) != len)
		fixture_fail("short read of %s", path);
	buf[len] = 0;
	fclose(f);
	cJSON *root = cJSON_Parse(buf);
	const cJSON *p;
	cJSON_ArrayForEach(p, cJSON_GetObjectItem(root, "prompts"))
	{
		struct ref_prompt *r = &fx.ref[fx.n_ref++];
		load_ids(cJSON_GetObjectItem(p, "prompt_ids"), r->ids, &r->n, 64);
		load_ids(cJSON_GetObjectItem(p, "greedy_continuation_ids"), r->cont, &r->n_cont,
		         64);
		if (fx.n_ref == 4)
			break;
	}
	cJSON_Delete(root);
	free(buf);
}

void fixture_load(void)
{
	char err[SINKD_ERR_LEN], path[1024];
	const char *shared = getenv("SINKD_SHARED");
	if (!shared)
		fixture_fail("SINKD_SHARED is not set");
	snprintf(fx.model_path, sizeof(fx.model_path), "%s/models/stories260K.gguf", shared);
	snprintf(path, sizeof(path), "%s", fx.model_path);
	if (model_load(path, NULL, &fx.model, err, sizeof(err)) != 0)
		fixture_fail("%s", err);
	if (tokenizer_new_from_gguf(fx.model->file, &fx.tok, err, sizeof(err)) != 0)
		fixture_fail("%s", err);
	load_reference(shared);
	if (fx.n_ref < 2)
		fixture_fail("reference file has %zu prompts", fx.n_ref);
}

/* A scheduler over the fixture with config overrides ("key=value"). */
struct scheduler *sched_make(struct sinkd_config *cfg, const char *const *ov, size_t n_ov)
{
	struct config_errors errs = {0};
	char err[SINKD_ERR_LEN];
	struct scheduler *s = NULL;
	int rc = config_load(cfg, NULL, ov, n_ov, &errs);
	if (rc)
		config_errors_print(&errs, stderr);
	ck_assert_int_eq(rc, 0);
	config_errors_deinit(&errs);
	/* The backend's thread pool is made here, in the test's own process
	 * (Check forks each test; threads do not survive a fork). */
	if (!fx.be) {
#ifdef SINKD_CUDA_EMU
		/* the CUDA backend on the host emulation (float32 caches) */
		struct backend_cuda_options co = {.dtype = KV_DTYPE_F32,
		                                  .cache_bytes = (size_t)256 << 20};
		ck_assert_msg(backend_cuda_new(fx.model, NULL, &co, &fx.be, err, sizeof(err)) == 0,
		              "%s", err);
#else
		/* every forward on both threads (the default runs stories260K's
		 * small steps on one): the batched paths are what is tested */
		struct backend_options bo = {.n_threads = 2, .parallel_min_macs = 1};
		ck_assert_msg(backend_cpu_new(fx.model, &bo, &fx.be, err, sizeof(err)) == 0, "%s",
		              err);
#endif
	}
	ck_assert_msg(scheduler_new(cfg, fx.be, fx.tok, NULL, &s, err, sizeof(err)) == 0, "%s",
	              err);
	scheduler_set_model_file(s, fx.model_path); /* as main does: snapshots name it */
	return s;
}

/* ---- event collection -------------------------------------------------- */

struct coll *coll_new(struct scheduler *s)
{
	struct coll *c = calloc(1, sizeof(*c));
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	c->s = s;
	return c;
}

void coll_free(struct coll *c)
{
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv);
	free(c);
}

static void on_event(void *user, const struct gen_event *ev)
{
	struct coll *c = user;
	bool cancel = false;
	struct scheduler_stats st = {0};
	if (c->ticks && ev->kind == GEN_EVENT_TOKEN)
		scheduler_get_stats(c->s, &st); /* the tick that produced this token counted */
	pthread_mutex_lock(&c->mu);
	if (ev->kind == GEN_EVENT_PROMPT_DONE) {
		c->n_prompt_done++;
		c->n_cached = ev->n_cached_tokens;
		if (c->watch) {
			pthread_mutex_lock(&c->watch->mu);
			c->watch_at_prompt_done = c->watch->n_tokens;
			pthread_mutex_unlock(&c->watch->mu);
		}
	} else if (ev->kind == GEN_EVENT_TOKEN) {
		if (c->n_tokens < 4096) {
			c->logprobs[c->n_tokens] = ev->logprobs ? ev->logprobs->logprob : 0.0f;
			c->tokens[c->n_tokens++] = ev->token;
		}
		if (c->n_tokens - c->taken > c->most_unsent)
			c->most_unsent = c->n_tokens - c->taken;
		c->text_len += ev->text_len;
		cancel = c->cancel_after > 0 && c->n_tokens == c->cancel_after;
		if (c->ticks) {
			if (c->n_tokens == 1)
				c->tick_first = st.ticks;
			else if (c->tick_gap_from && c->tick_last >= c->tick_gap_from &&
			         st.ticks - c->tick_last > c->max_tick_gap)
				c->max_tick_gap = st.ticks - c->tick_last;
			c->tick_last = st.ticks;
		}
	} else {
		c->n_done++;
		c->finish = ev->finish;
		c->error_rc = ev->error_rc;
		c->error_field = ev->error_field;
		c->retry_after_s = ev->retry_after_s;
		c->done_generated = ev->n_generated_tokens;
		if (ev->error)
			snprintf(c->error, sizeof(c->error), "%s", ev->error);
		pthread_cond_broadcast(&c->cv);
	}
	pthread_mutex_unlock(&c->mu);
	if (cancel)
		scheduler_cancel(c->s, c->handle); /* from the engine thread: must not deadlock */
}

static void coll_started(void *user)
{
	struct coll *c = user;
	pthread_mutex_lock(&c->mu);
	c->n_started++;
	pthread_mutex_unlock(&c->mu);
}

static size_t coll_unsent(void *user)
{
	struct coll *c = user;
	pthread_mutex_lock(&c->mu);
	size_t n = (size_t)(c->n_tokens - c->taken);
	pthread_mutex_unlock(&c->mu);
	return n;
}

int coll_tokens(struct coll *c)
{
	pthread_mutex_lock(&c->mu);
	int n = c->n_tokens;
	pthread_mutex_unlock(&c->mu);
	return n;
}

void coll_wait(struct coll *c)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	/* SINKD_TEST_TIME_SCALE: sanitizer builds run many times slower */
	const char *scale = getenv("SINKD_TEST_TIME_SCALE");
	ts.tv_sec += 30 * (scale && atoi(scale) > 1 ? atoi(scale) : 1);
	pthread_mutex_lock(&c->mu);
	while (c->n_done == 0)
		ck_assert_int_eq(pthread_cond_timedwait(&c->cv, &c->mu, &ts), 0);
	pthread_mutex_unlock(&c->mu);
}

/* Submits ids (copied) with greedy sampling; returns submit's code. */
int submit(struct scheduler *s, struct coll *c, const int32_t *ids, size_t n, int max_tokens,
           const char *session_id, size_t revise)
{
	char err[SINKD_ERR_LEN];
	struct gen_request q = {0};
	q.prompt_ids = malloc((n + 1) * sizeof(int32_t));
	if (n)
		memcpy(q.prompt_ids, ids, n * sizeof(int32_t));
	q.n_prompt = n;
	sampler_params_default(&q.sampling);
	q.sampling.temperature = c->temperature;
	q.sampling.seed = c->seed;
	if (c->grammar)
		q.grammar = grammar_ref(c->grammar);
	if (c->n_bias) {
		q.logit_bias = malloc(c->n_bias * sizeof(*q.logit_bias));
		memcpy(q.logit_bias, c->bias, c->n_bias * sizeof(*q.logit_bias));
		q.n_logit_bias = c->n_bias;
	}
	q.max_tokens = max_tokens;
	q.ignore_eos = true;
	q.session_id = session_id;
	q.revise_last_tokens = revise;
	q.pin_prefix_tokens = c->pin;
	q.want_logprobs = q.sampling.logprobs = c->want_logprobs;
	q.on_event = on_event;
	q.user = c;
	q.unsent_tokens = c->flow ? coll_unsent : NULL;
	q.on_start = coll_started;
	c->max_tokens = max_tokens;
	int rc = scheduler_submit(s, &q, &c->handle, err, sizeof(err));
	if (rc) {
		c->error_field = q.err_field; /* no events come: DONE cannot write it meanwhile */
		ck_assert_ptr_nonnull(q.prompt_ids); /* still ours */
		ck_assert_int_gt((int)strlen(err), 0);
		free(q.prompt_ids);
		free(q.logit_bias);
		grammar_unref(q.grammar);
	} else {
		ck_assert_ptr_null(q.prompt_ids);
		ck_assert_ptr_null(q.grammar);
		ck_assert_ptr_null(q.logit_bias);
	}
	return rc;
}

/* Runs one request to the end and copies its tokens. */
int run_one(struct scheduler *s, const int32_t *ids, size_t n, int max_tokens, const char *sid,
            size_t revise, int32_t *out)
{
	struct coll *c = coll_new(s);
	ck_assert_int_eq(submit(s, c, ids, n, max_tokens, sid, revise), 0);
	coll_wait(c);
	ck_assert_msg(c->finish != GEN_FINISH_ERROR, "error %d: %s", c->error_rc, c->error);
	int k = c->n_tokens;
	if (out)
		memcpy(out, c->tokens, (size_t)k * sizeof(int32_t));
	ck_assert_int_eq(c->done_generated, k);
	coll_free(c);
	return k;
}

void wait_idle(struct scheduler *s)
{
	struct scheduler_stats st;
	for (int i = 0; i < 300; i++) {
		scheduler_get_stats(s, &st);
		if (st.running == 0 && st.queue_depth == 0 && st.kv_bytes_reserved == 0)
			break;
		usleep(10000);
	}
	scheduler_get_stats(s, &st);
	ck_assert_uint_eq(st.running, 0);
	ck_assert_uint_eq(st.queue_depth, 0);
	ck_assert_uint_eq(st.kv_bytes_reserved, 0);
	ck_assert_uint_eq(st.kv_bytes_resident, 0);
}

void fixture_free(void)
{
	backend_free(fx.be);
	tokenizer_free(fx.tok);
	model_free(fx.model);
}
