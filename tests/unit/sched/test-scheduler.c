/* The scheduler on the real stories260K model and the CPU backend: batched
 * greedy generation equals each request run alone (and the independent
 * reference continuation), persistent sessions continue and revise exactly,
 * admission under a tiny KV budget (queue full, queue timeout with
 * Retry-After, over-budget), the prefill pacing's batch sizes, and a seeded
 * random walk of a few hundred operations that checks the budget invariants
 * after every step. */
#include <check.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "engine/backend.h"
#include "grammar/grammar.h"
#include "model/model.h"
#include "sched/sched_internal.h"
#include "sched/scheduler.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"
#include "testutil.h"

/* ---- fixture: the model, backend and tokenizer, loaded once ----------- */

struct ref_prompt {
	int32_t ids[64];
	size_t n;
	int32_t cont[64]; /* greedy continuation from the reference implementation */
	size_t n_cont;
};

static struct {
	struct model *model;
	struct backend *be;
	struct tokenizer *tok;
	struct ref_prompt ref[4];
	size_t n_ref;
} fx;

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

static void fixture_load(void)
{
	char err[SINKD_ERR_LEN], path[1024];
	const char *shared = getenv("SINKD_SHARED");
	if (!shared)
		fixture_fail("SINKD_SHARED is not set");
	snprintf(path, sizeof(path), "%s/models/stories260K.gguf", shared);
	if (model_load(path, NULL, &fx.model, err, sizeof(err)) != 0)
		fixture_fail("%s", err);
	if (tokenizer_new_from_gguf(fx.model->file, &fx.tok, err, sizeof(err)) != 0)
		fixture_fail("%s", err);
	load_reference(shared);
	if (fx.n_ref < 2)
		fixture_fail("reference file has %zu prompts", fx.n_ref);
}

/* A scheduler over the fixture with config overrides ("key=value"). */
static struct scheduler *sched_make(struct sinkd_config *cfg, const char *const *ov, size_t n_ov)
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
		/* every forward on both threads (the default runs stories260K's
		 * small steps on one): the batched paths are what is tested */
		struct backend_options bo = {.n_threads = 2, .parallel_min_macs = 1};
		ck_assert_msg(backend_cpu_new(fx.model, &bo, &fx.be, err, sizeof(err)) == 0, "%s",
		              err);
	}
	ck_assert_msg(scheduler_new(cfg, fx.be, fx.tok, NULL, &s, err, sizeof(err)) == 0, "%s",
	              err);
	return s;
}

/* ---- event collection -------------------------------------------------- */

struct coll {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct scheduler *s;
	uint64_t handle;
	int cancel_after; /* > 0: cancel from the callback after this many tokens */
	int32_t tokens[4096];
	float logprobs[4096]; /* when the request asked for them */
	int n_tokens;
	size_t text_len;
	int n_prompt_done, n_done;
	enum gen_finish finish;
	int error_rc, retry_after_s, done_generated;
	const char *error_param; /* DONE's, or submit's on an error */
	char error[256];
	int max_tokens;
	bool expect_cancel;
	struct coll *watch;       /* another request to observe */
	int watch_at_prompt_done; /* its token count when this prompt was in */
	bool flow;                /* reports unsent tokens: n_tokens - taken */
	int taken;                /* tokens the "client" took */
	int most_unsent;          /* largest n_tokens - taken seen */
	bool ticks;               /* note the engine tick of each token: */
	uint64_t tick_submit;     /* ticks before the submit */
	uint64_t tick_first;      /* the tick of the first token */
	uint64_t tick_last;       /* of the latest token */
	uint64_t tick_gap_from;   /* gaps count only between tokens after this tick */
	uint64_t max_tick_gap;    /* largest tick distance of consecutive tokens */
	int n_started;            /* on_start calls */
	int pin;                  /* the request's pin_prefix_tokens */
	bool want_logprobs;       /* fill logprobs[] */
	/* the next submit only: a grammar (reference taken), logit_bias, seed */
	struct grammar *grammar;
	struct sampler_bias bias[4];
	size_t n_bias;
	float temperature;
	uint64_t seed;
};

static struct coll *coll_new(struct scheduler *s)
{
	struct coll *c = calloc(1, sizeof(*c));
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	c->s = s;
	return c;
}

static void coll_free(struct coll *c)
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
		c->error_param = ev->error_param;
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

static int coll_tokens(struct coll *c)
{
	pthread_mutex_lock(&c->mu);
	int n = c->n_tokens;
	pthread_mutex_unlock(&c->mu);
	return n;
}

static void coll_wait(struct coll *c)
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
static int submit(struct scheduler *s, struct coll *c, const int32_t *ids, size_t n, int max_tokens,
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
		c->error_param = q.err_param; /* no events come: DONE cannot write it meanwhile */
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
static int run_one(struct scheduler *s, const int32_t *ids, size_t n, int max_tokens,
                   const char *sid, size_t revise, int32_t *out)
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

static void wait_idle(struct scheduler *s)
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

/* ---- tests ------------------------------------------------------------- */

#define N_PROMPTS 6
#define GEN 32

/* Prompts of different lengths: the reference ones and extensions of them. */
static size_t make_prompts(int32_t p[N_PROMPTS][96], size_t len[N_PROMPTS])
{
	for (int i = 0; i < N_PROMPTS; i++) {
		const struct ref_prompt *r = &fx.ref[i % 2];
		memcpy(p[i], r->ids, r->n * sizeof(int32_t));
		len[i] = r->n;
		size_t extra = (size_t)(i / 2) * 7; /* 0, 7, 14 tokens of the continuation */
		memcpy(p[i] + len[i], r->cont, extra * sizeof(int32_t));
		len[i] += extra;
	}
	return N_PROMPTS;
}

START_TEST(test_batched_equals_alone)
{
	/* max_batch_tokens 3: prompts are prefilled in tiny chunks interleaved
	 * with the decode steps of the others. */
	const char *ov[][2] = {
	    {"inference.attention.dtype=float32", "scheduler.max_batch_tokens=512"},
	    {"inference.attention.dtype=float32", "scheduler.max_batch_tokens=3"}};
	struct sinkd_config cfg;
	int32_t p[N_PROMPTS][96], alone[N_PROMPTS][GEN];
	size_t len[N_PROMPTS];
	make_prompts(p, len);
	struct scheduler *s = sched_make(&cfg, ov[_i], 2);
	for (int i = 0; i < N_PROMPTS; i++)
		ck_assert_int_eq(run_one(s, p[i], len[i], GEN, NULL, 0, alone[i]), GEN);
	/* The reference implementation's greedy continuation (first 2 prompts). */
	for (int i = 0; i < 2; i++)
		for (int k = 0; k < GEN && k < (int)fx.ref[i].n_cont; k++)
			ck_assert_int_eq(alone[i][k], fx.ref[i].cont[k]);
	struct coll *c[N_PROMPTS];
	for (int i = 0; i < N_PROMPTS; i++) {
		c[i] = coll_new(s);
		ck_assert_int_eq(submit(s, c[i], p[i], len[i], GEN, NULL, 0), 0);
	}
	for (int i = 0; i < N_PROMPTS; i++) {
		coll_wait(c[i]);
		ck_assert_int_eq(c[i]->finish, GEN_FINISH_LENGTH);
		ck_assert_int_eq(c[i]->n_prompt_done, 1);
		ck_assert_int_eq(c[i]->n_started, 1);
		ck_assert_int_eq(c[i]->n_tokens, GEN);
		for (int k = 0; k < GEN; k++)
			ck_assert_msg(c[i]->tokens[k] == alone[i][k],
			              "prompt %d token %d: %d != %d", i, k, c[i]->tokens[k],
			              alone[i][k]);
		coll_free(c[i]);
	}
	struct scheduler_stats st;
	scheduler_get_stats(s, &st);
	ck_assert_uint_eq(st.tokens_out, 2 * N_PROMPTS * GEN);
	ck_assert_uint_eq(st.admitted, 2 * N_PROMPTS);
	wait_idle(s);
	scheduler_free(s);
	config_deinit(&cfg);
}
END_TEST

/* A long prompt is prefilled in chunks between the decode steps of a
 * running stream: the stream keeps receiving tokens meanwhile. */
START_TEST(test_long_prefill_does_not_stall)
{
	const char *ov[] = {"scheduler.max_batch_tokens=256"};
	struct sinkd_config cfg;
	struct scheduler *s = sched_make(&cfg, ov, 1);
	enum { LONG = 3000 };
	int32_t *ids = malloc(LONG * sizeof(int32_t));
	for (int i = 0; i < LONG; i++)
		ids[i] = fx.ref[1].ids[1 + i % (fx.ref[1].n - 1)];
	struct coll *a = coll_new(s), *b = coll_new(s);
	ck_assert_int_eq(submit(s, a, fx.ref[0].ids, fx.ref[0].n, 2000, NULL, 0), 0);
	for (int i = 0; i < 2000; i++) { /* until a decodes */
		pthread_mutex_lock(&a->mu);
		int k = a->n_tokens;
		pthread_mutex_unlock(&a->mu);
		if (k >= 3)
			break;
		usleep(1000);
	}
	pthread_mutex_lock(&a->mu);
	int before = a->n_tokens;
	pthread_mutex_unlock(&a->mu);
	b->watch = a;
	ck_assert_int_eq(submit(s, b, ids, LONG, 1, NULL, 0), 0);
	coll_wait(b);
	ck_assert_int_eq(b->finish, GEN_FINISH_LENGTH);
	/* At most 255 prompt tokens ride along each decode step. */
	ck_assert_int_ge(b->watch_at_prompt_done - before, LONG / 255);
	scheduler_cancel(s, a->handle);
	coll_wait(a);
	coll_free(a);
	coll_free(b);
	free(ids);
	wait_idle(s);
	scheduler_free(s);
	config_deinit(&cfg);
}
END_TEST

/* The first token of each stream in c[from..to): asserts it came within
 * `bound` ticks of the submit; returns the latest tick of one. */
static uint64_t first_tokens_within(struct coll **c, int from, int to, uint64_t bound,
                                    uint64_t *most_waited)
{
	uint64_t last = 0;
	for (int i = from; i < to; i++) {
		for (int k = 0; k < 3000 && coll_tokens(c[i]) == 0; k++)
			usleep(10000);
		ck_assert_msg(coll_tokens(c[i]) > 0, "stream %d has no token", i);
		pthread_mutex_lock(&c[i]->mu);
		uint64_t waited = c[i]->tick_first - c[i]->tick_submit;
		if (c[i]->tick_first > last)
			last = c[i]->tick_first;
		pthread_mutex_unlock(&c[i]->mu);
		ck_assert_msg(waited <= bound,
		              "stream %d: first token after %llu ticks (bound %llu)", i,
		              (unsigned long long)waited, (unsigned long long)bound);
		if (waited > *most_waited)
			*most_waited = waited;
	}
	return last;
}

static void submit_ticked(struct scheduler *s, struct coll *c, const struct ref_prompt *p, int gen)
{
	struct scheduler_stats st;
	c->ticks = true;
	scheduler_get_stats(s, &st);
	c->tick_submit = st.ticks;
	ck_assert_int_eq(submit(s, c, p->ids, p->n, gen, NULL, 0), 0);
}

/* More streams than a batch has rows (40 over max_batch_tokens 32, each
 * generating far longer than the test waits).  The defect: once as many
 * streams decode as the batch has rows, a new request got no prompt row
 * until a stream finished (GEN_LONG ticks here).  Now the 6 requests sent
 * while 34 streams decode get their first token within the bound of the
 * crowding rule, every stream's within a bounded number of ticks, and once
 * all 40 decode each gets a token at least every other tick. */
START_TEST(test_oversubscribed_streams_all_start)
{
	const char *ov[] = {"scheduler.max_batch_tokens=32", "scheduler.max_unsent_tokens=0"};
	enum { N = 40, LATE = 6, GEN_LONG = 3000, ROWS = 32, KEEP = ROWS / 8 };
	struct sinkd_config cfg;
	struct scheduler_stats st;
	struct scheduler *s = sched_make(&cfg, ov, 2);
	const struct ref_prompt *p = &fx.ref[1]; /* the longer reference prompt */
	struct coll *c[N];
	uint64_t most_early = 0, most_late = 0;
	for (int i = 0; i < N; i++)
		c[i] = coll_new(s);
	/* However the pacing measures, a batch takes at least one prompt row
	 * and rows go to the oldest prompts first: a prompt waits at most for
	 * the N - 1 before it, one row a tick. */
	uint64_t loose = (uint64_t)(p->n + 1) * N + N;
	for (int i = 0; i < N - LATE; i++)
		submit_ticked(s, c[i], p, GEN_LONG);
	first_tokens_within(c, 0, N - LATE, loose, &most_early);
	/* 34 decode: crowded.  KEEP rows a tick go to the LATE prompts, one
	 * each to the oldest, so each is read within ceil(LATE / KEEP) prompts'
	 * time; one tick in PACE_REMEASURE + 1 is decode-only. */
	uint64_t bound = ((uint64_t)(p->n + 1) * ((LATE + KEEP - 1) / KEEP) * 9 + 7) / 8 + 4;
	ck_assert_uint_lt(bound, GEN_LONG / 10);
	for (int i = N - LATE; i < N; i++)
		submit_ticked(s, c[i], p, GEN_LONG);
	uint64_t last_first = first_tokens_within(c, N - LATE, N, bound, &most_late);
	/* All decode: gaps between consecutive tokens from here on. */
	for (int i = 0; i < N; i++) {
		pthread_mutex_lock(&c[i]->mu);
		c[i]->tick_gap_from = last_first + 1;
		pthread_mutex_unlock(&c[i]->mu);
	}
	scheduler_get_stats(s, &st);
	uint64_t until = st.ticks + 40;
	for (int k = 0; k < 3000 && st.ticks < until; k++) {
		usleep(5000);
		scheduler_get_stats(s, &st);
	}
	ck_assert_uint_ge(st.ticks, until);
	fprintf(stderr,
	        "oversubscribed: %d streams over %d rows: first token within %llu ticks (bound "
	        "%llu), of the %d sent while %d decode within %llu (bound %llu)\n",
	        N - LATE, ROWS, (unsigned long long)most_early, (unsigned long long)loose, LATE,
	        N - LATE, (unsigned long long)most_late, (unsigned long long)bound);
	for (int i = 0; i < N; i++) {
		pthread_mutex_lock(&c[i]->mu);
		uint64_t gap = c[i]->max_tick_gap;
		int n = c[i]->n_tokens;
		pthread_mutex_unlock(&c[i]->mu);
		ck_assert_msg(gap >= 1 && gap <= 2, "stream %d: %llu ticks between two tokens", i,
		              (unsigned long long)gap);
		ck_assert_int_lt(n, GEN_LONG);
		scheduler_cancel(s, c[i]->handle);
	}
	for (int i = 0; i < N; i++) {
		coll_wait(c[i]);
		ck_assert_int_eq(c[i]->finish, GEN_FINISH_CANCELLED);
		coll_free(c[i]);
	}
	wait_idle(s);
	scheduler_free(s);
	config_deinit(&cfg);
}
END_TEST

/* The pacing's batch sizes from given measurements (no model involved):
 * 16 decoders fill two blocks of 8, a decode-only batch takes 20 ms. */
static size_t pace_limit(double cap, double row_s, size_t n_decode, size_t max_tokens, bool *part)
{
	struct sched_pace p;
	sched_pace_init(&p, 8);
	p.cap = cap;
	p.row_s = row_s;
	p.decode_s = 0.020;
	return sched_pace_limit(&p, n_decode, max_tokens, part);
}

START_TEST(test_pace_limit)
{
	bool part = true;
	/* cheap rows (a block adds 8 ms): one whole block beyond the cap */
	ck_assert_uint_eq(pace_limit(3, 0.001, 16, 512, &part), 24);
	ck_assert(!part);
	/* rows whose block would add 40 ms: the cap's rows, not a block */
	ck_assert_uint_eq(pace_limit(3, 0.005, 16, 512, &part), 19);
	ck_assert(part);
	/* a cap under one row still advances the prompt by one */
	ck_assert_uint_eq(pace_limit(0.4, 0.05, 16, 512, &part), 17);
	ck_assert(part);
	/* free rows of the decoders' last block come first, dear or not */
	ck_assert_uint_eq(pace_limit(1, 0.005, 13, 512, &part), 16);
	ck_assert(!part);
	/* a cap that pays for whole blocks gets them */
	ck_assert_uint_eq(pace_limit(17, 0.005, 16, 512, &part), 32);
	ck_assert(!part);
	/* never past max_batch_tokens; no decoders: all of it */
	ck_assert_uint_eq(pace_limit(40, 0.001, 16, 20, &part), 20);
	ck_assert_uint_eq(pace_limit(3, 0.001, 0, 512, &part), 512);
	/* nothing measured yet: blocks, as before any batch was timed */
	ck_assert_uint_eq(pace_limit(3, 0, 16, 512, &part), 24);
	ck_assert(!part);
}
END_TEST

START_TEST(test_session_continue_and_revise)
{
	const char *ov[] = {"inference.attention.dtype=float32"};
	struct sinkd_config cfg;
	char id[SCHED_SESSION_ID_LEN], err[SINKD_ERR_LEN];
	struct sched_session_info info;
	struct scheduler *s = sched_make(&cfg, ov, 1);
	const struct ref_prompt *a = &fx.ref[0];
	int32_t g[8], h[8], b[5] = {300, 301, 302, 303, 304}, cids[4] = {265, 282, 295, 433};

	ck_assert_int_eq(scheduler_session_create(s, NULL, id, NULL, err, sizeof(err)), 0);
	ck_assert_int_eq((int)strlen(id), 32);
	/* Append only, then generate from the session's end. */
	ck_assert_int_eq(run_one(s, a->ids, a->n, 0, id, 0, NULL), 0);
	ck_assert_int_eq(scheduler_session_info(s, id, &info), 0);
	ck_assert_uint_eq(info.n_seen, a->n);
	ck_assert(!info.busy);
	ck_assert_int_eq(run_one(s, NULL, 0, 8, id, 0, g), 8);
	for (int k = 0; k < 8; k++)
		ck_assert_int_eq(g[k], a->cont[k]);
	/* Append B, take it back, append C and generate: as if B never was. */
	ck_assert_int_eq(run_one(s, b, 5, 0, id, 0, NULL), 0);
	ck_assert_int_eq(run_one(s, cids, 4, 8, id, 5, h), 8);
	int32_t whole[64];
	size_t n = 0;
	memcpy(whole, a->ids, a->n * sizeof(int32_t));
	n = a->n;
	memcpy(whole + n, g, sizeof(g));
	n += 8;
	memcpy(whole + n, cids, sizeof(cids));
	n += 4;
	int32_t expect[8];
	run_one(s, whole, n, 8, NULL, 0, expect);
	for (int k = 0; k < 8; k++)
		ck_assert_int_eq(h[k], expect[k]);
	ck_assert_int_eq(scheduler_session_info(s, id, &info), 0);
	ck_assert_uint_eq(info.n_seen, n + 8);
	ck_assert_uint_gt(info.bytes_resident, 0);
	ck_assert_uint_ge(info.bytes_reserved, info.bytes_resident);

	/* Revise the generated tail itself, then regenerate: same tokens. */
	int32_t h2[8];
	ck_assert_int_eq(run_one(s, NULL, 0, 8, id, 8, h2), 8);
	ck_assert_int_eq(memcmp(h, h2, sizeof(h)), 0);

	/* Racing requests: the second one is refused, never interleaved. */
	struct coll *c1 = coll_new(s), *c2 = coll_new(s);
	ck_assert_int_eq(submit(s, c1, b, 5, 2000, id, 0), 0);
	ck_assert_int_eq(submit(s, c2, b, 5, 5, id, 0), -EBUSY);
	ck_assert_str_eq(c2->error_param, "session_id");
	scheduler_cancel(s, c1->handle);
	coll_wait(c1);
	ck_assert(c1->finish == GEN_FINISH_CANCELLED || c1->finish == GEN_FINISH_LENGTH);
	coll_free(c1);
	coll_free(c2);

	c2 = coll_new(s);
	ck_assert_int_eq(submit(s, c2, b, 5, 5, "00000000000000000000000000000000", 0), -ENOENT);
	ck_assert_str_eq(c2->error_param, "session_id");
	coll_free(c2);
	ck_assert_int_eq(scheduler_session_delete(s, id), 0);
	ck_assert_int_eq(scheduler_session_info(s, id, &info), -ENOENT);
	ck_assert_int_eq(scheduler_session_delete(s, id), -ENOENT);
	wait_idle(s);
	scheduler_free(s);
	config_deinit(&cfg);
}
END_TEST

/* A generation cancelled mid-stream leaves the session's stream exactly as
 * far as the client saw it: continuing gives the same tokens as a one-shot
 * request over the prompt plus everything received. */
START_TEST(test_session_cancel_keeps_stream)
{
	const char *ov[] = {"inference.attention.dtype=float32"};
	struct sinkd_config cfg;
	char id[SCHED_SESSION_ID_LEN], err[SINKD_ERR_LEN];
	struct sched_session_info info;
	struct scheduler *s = sched_make(&cfg, ov, 1);
	const struct ref_prompt *a = &fx.ref[1];
	ck_assert_int_eq(scheduler_session_create(s, NULL, id, NULL, err, sizeof(err)), 0);
	struct coll *c = coll_new(s);
	c->cancel_after = 3;
	ck_assert_int_eq(submit(s, c, a->ids, a->n, 500, id, 0), 0);
	coll_wait(c);
	ck_assert_int_eq(c->finish, GEN_FINISH_CANCELLED);
	ck_assert_int_ge(c->n_tokens, 3);
	ck_assert_int_lt(c->n_tokens, 500);
	ck_assert_int_eq(scheduler_session_info(s, id, &info), 0);
	ck_assert_uint_eq(info.n_seen, a->n + (size_t)c->n_tokens);
	int32_t whole[600], next[5], expect[5];
	memcpy(whole, a->ids, a->n * sizeof(int32_t));
	memcpy(whole + a->n, c->tokens, (size_t)c->n_tokens * sizeof(int32_t));
	ck_assert_int_eq(run_one(s, NULL, 0, 5, id, 0, next), 5);
	ck_assert_int_eq(run_one(s, whole, a->n + (size_t)c->n_tokens, 5, NULL, 0, expect), 5);
	ck_assert_int_eq(memcmp(next, expect, sizeof(next)), 0);
	coll_free(c);
	scheduler_free(s);
	config_deinit(&cfg);
}
END_TEST

START_TEST(test_session_revise_window)
{
	const char *ov[] = {"inference.attention.dtype=float32"};
	struct sinkd_config cfg;
	char id[SCHED_SESSION_ID_LEN], err[SINKD_ERR_LEN];
	struct sched_session_info info;
	struct scheduler *s = sched_make(&cfg, ov, 1);
	struct session_settings bad = {.window_size = 1 << 30, .sink_keep_count = -1};
	const char *param = NULL;
	ck_assert_int_eq(scheduler_session_create(s, &bad, id, &param, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(param, "window_size");
	bad = (struct session_settings){.window_size = 0, .sink_keep_count = 1 << 30};
	ck_assert_int_eq(scheduler_session_create(s, &bad, id, &param, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(param, "sink_keep_count");
	struct session_settings opt = {.window_size = 8, .sink_keep_count = 2};
	ck_assert_int_eq(scheduler_session_create(s, &opt, id, NULL, err, sizeof(err)), 0);
	int32_t ids[30];
	for (int i = 0; i < 30; i++)
		ids[i] = fx.ref[1].ids[i % fx.ref[1].n];
	ck_assert_int_eq(run_one(s, ids, 30, 0, id, 0, NULL), 0);
	ck_assert_int_eq(run_one(s, NULL, 0, 0, id, 9, NULL), 0); /* revise only */
	ck_assert_int_eq(scheduler_session_info(s, id, &info), 0);
	ck_assert_uint_eq(info.n_seen, 21);
	ck_assert_int_eq(run_one(s, ids, 9, 0, id, 0, NULL), 0);
	ck_assert_int_eq(scheduler_session_info(s, id, &info), 0);
	ck_assert_uint_eq(info.n_seen, 30);
	ck_assert_int_eq(info.n_sink, 2);
	ck_assert_int_le(info.n_resident, 2 + 8);
	ck_assert_int_eq(info.window_size, 8);
	/* 8 window tokens + the pending one can be revised, not 10. */
	struct coll *c = coll_new(s);
	ck_assert_int_eq(submit(s, c, ids, 3, 4, id, 10), -ERANGE);
	ck_assert_str_eq(c->error_param, "revise_last_tokens");
	ck_assert_int_eq(run_one(s, ids, 3, 4, id, 9, NULL), 4);
	ck_assert_int_eq(scheduler_session_info(s, id, &info), 0);
	ck_assert_uint_eq(info.n_seen, 30 - 9 + 3 + 4);
	coll_free(c);
	scheduler_free(s); /* with a live session: frees it */
	config_deinit(&cfg);
}
END_TEST

START_TEST(test_admission_budget)
{
	/* f32, window 600 + 4 sinks: 604 * 1280 bytes = 773 KB per session, so
	 * one fits in 1 MiB. */
	const char *ov[] = {"inference.attention.dtype=float32", "inference.cache.window_size=600",
	                    "inference.cache.global_cache_limit=1MiB", "scheduler.max_queue=1",
	                    "scheduler.max_queue_wait_s=1"};
	struct sinkd_config cfg;
	char id[SCHED_SESSION_ID_LEN], id2[SCHED_SESSION_ID_LEN], err[SINKD_ERR_LEN];
	struct scheduler_stats st;
	struct scheduler *s = sched_make(&cfg, ov, 5);
	const struct ref_prompt *a = &fx.ref[0];

	ck_assert_int_eq(scheduler_session_create(s, NULL, id, NULL, err, sizeof(err)), 0);
	scheduler_get_stats(s, &st);
	ck_assert_uint_eq(st.kv_bytes_budget, 1 << 20);
	ck_assert_uint_gt(st.kv_bytes_reserved, (1 << 20) / 2);
	ck_assert_int_eq(scheduler_session_create(s, NULL, id2, NULL, err, sizeof(err)), -EAGAIN);
	/* The session holds the budget: a one-shot request waits, then 503. */
	struct coll *waiting = coll_new(s), *extra = coll_new(s);
	ck_assert_int_eq(submit(s, waiting, a->ids, a->n, 4, NULL, 0), 0);
	ck_assert_int_eq(submit(s, extra, a->ids, a->n, 4, NULL, 0), -EAGAIN); /* queue full */
	/* The session itself still runs: it needs no new reservation. */
	ck_assert_int_eq(run_one(s, a->ids, a->n, 4, id, 0, NULL), 4);
	coll_wait(waiting);
	ck_assert_int_eq(waiting->finish, GEN_FINISH_ERROR);
	ck_assert_int_eq(waiting->error_rc,
	                 -EAGAIN); /* as a full queue: respond.h makes it a 503 */
	ck_assert_ptr_null(waiting->error_param);
	ck_assert_int_ge(waiting->retry_after_s, 1);
	ck_assert_int_eq(waiting->n_tokens, 0);
	ck_assert_int_eq(waiting->n_started, 0); /* left the queue without starting */
	scheduler_get_stats(s, &st);
	ck_assert_uint_eq(st.rejected_timeout, 1);
	ck_assert_uint_eq(st.rejected_queue_full, 2);
	ck_assert_int_eq(scheduler_retry_after_s(s), 1);
	/* Deleting the session frees the budget for one-shot requests. */
	ck_assert_int_eq(scheduler_session_delete(s, id), 0);
	ck_assert_int_eq(run_one(s, a->ids, a->n, 4, NULL, 0, NULL), 4);
	wait_idle(s);
	coll_free(waiting);
	coll_free(extra);
	scheduler_free(s);
	config_deinit(&cfg);

	/* A bound larger than the whole budget can never be admitted. */
	const char *ov2[] = {"inference.attention.dtype=float32",
	                     "inference.cache.window_size=1000",
	                     "inference.cache.global_cache_limit=1MiB"};
	s = sched_make(&cfg, ov2, 3);
	struct coll *c = coll_new(s);
	ck_assert_int_eq(submit(s, c, a->ids, a->n, 4, NULL, 0), -ENOSPC);
	ck_assert_int_eq(scheduler_session_create(s, NULL, id, NULL, err, sizeof(err)), -ENOSPC);
	coll_free(c);
	scheduler_free(s);
	config_deinit(&cfg);
}
END_TEST

#define N_PIN_GEN 40

static int submit_pinned(struct scheduler *s, struct coll *c, const int32_t *ids, size_t n,
                         int max_tokens, const char *sid, int pin)
{
	c->pin = pin;
	c->want_logprobs = true;
	return submit(s, c, ids, n, max_tokens, sid, 0);
}

/* Greedy tokens with their logprobs (lp: N_PIN_GEN). */
static int pinned_run(struct scheduler *s, const int32_t *ids, size_t n, const char *sid, int pin,
                      float *lp)
{
	struct coll *c = coll_new(s);
	int rc = submit_pinned(s, c, ids, n, N_PIN_GEN, sid, pin);
	if (!rc) {
		coll_wait(c);
		ck_assert_int_eq(c->n_tokens, N_PIN_GEN);
		memcpy(lp, c->logprobs, N_PIN_GEN * sizeof(float));
	}
	coll_free(c);
	return rc;
}

/* A pinned prefix is a sink tier of its length (full precision): with 2
 * configured sinks and 6 pinned tokens a stream generates what 6 configured
 * sinks give, on a one-shot request and on a session's first request, whose
 * reservation grows to the pinned bound; it stays pinned after the window
 * moved past it.  Out of range pins are -EDOM (400). */
START_TEST(test_pinned_prefix)
{
	const char *ov6[] = {"inference.attention.dtype=float32", "inference.cache.window_size=16",
	                     "inference.cache.sink_keep_count=6"};
	const char *ov2[] = {"inference.attention.dtype=float32", "inference.cache.window_size=16",
	                     "inference.cache.sink_keep_count=2",
	                     "inference.cache.max_pinned_tokens=8"};
	struct sinkd_config cfg;
	char id[SCHED_SESSION_ID_LEN], err[SINKD_ERR_LEN];
	struct sched_session_info info;
	const struct ref_prompt *a = &fx.ref[0];
	int32_t pr[12]; /* the reference prompts one after another */
	size_t n_pr = 0;
	for (size_t r = 0; n_pr < 12; r = (r + 1) % fx.n_ref)
		for (size_t k = 0; k < fx.ref[r].n && n_pr < 12; k++)
			pr[n_pr++] = fx.ref[r].ids[k];
	float want[N_PIN_GEN];

	struct scheduler *s = sched_make(&cfg, ov6, 3);
	ck_assert_int_eq(pinned_run(s, pr, n_pr, NULL, 0, want), 0);
	ck_assert_int_eq(scheduler_session_create(s, NULL, id, NULL, err, sizeof(err)), 0);
	ck_assert_int_eq(scheduler_session_info(s, id, &info), 0);
	size_t bound6 = info.bytes_reserved;
	ck_assert_int_eq(scheduler_session_delete(s, id), 0);
	wait_idle(s);
	scheduler_free(s);
	config_deinit(&cfg);

	s = sched_make(&cfg, ov2, 4);
	/* without the pin the 2 sinks score otherwise: the pin matters */
	float got[N_PIN_GEN];
	ck_assert_int_eq(pinned_run(s, pr, n_pr, NULL, 0, got), 0);
	ck_assert_int_ne(memcmp(got, want, sizeof(want)), 0);
	ck_assert_int_eq(pinned_run(s, pr, n_pr, NULL, 6, got), 0);
	ck_assert_int_eq(memcmp(got, want, sizeof(want)), 0);

	ck_assert_int_eq(scheduler_session_create(s, NULL, id, NULL, err, sizeof(err)), 0);
	ck_assert_int_eq(scheduler_session_info(s, id, &info), 0);
	ck_assert_int_eq(info.pinned_tokens, 0);
	ck_assert_int_eq(info.sink_keep_count, 2);
	ck_assert_uint_lt(info.bytes_reserved, bound6);
	ck_assert_int_eq(pinned_run(s, pr, n_pr, id, 6, got), 0);
	ck_assert_int_eq(memcmp(got, want, sizeof(want)), 0);
	struct coll *c;
	ck_assert_int_eq(scheduler_session_info(s, id, &info), 0);
	ck_assert_int_eq(info.pinned_tokens, 6);
	ck_assert_int_eq(info.sink_keep_count, 6);
	ck_assert_int_eq(info.n_sink, 6);
	ck_assert_uint_eq(info.bytes_reserved, bound6);
	ck_assert_uint_gt(info.n_seen, 6 + 16); /* the window moved past the prefix */
	struct scheduler_stats st;
	scheduler_get_stats(s, &st);
	ck_assert_uint_eq(st.kv_bytes_reserved, bound6);
	/* a session pins with its first request only */
	c = coll_new(s);
	ck_assert_int_eq(submit_pinned(s, c, pr, n_pr, 1, id, 4), -EDOM);
	ck_assert_str_eq(c->error_param, "pin_prefix_tokens");
	coll_free(c);
	/* over max_pinned_tokens, over the prompt */
	c = coll_new(s);
	ck_assert_int_eq(submit_pinned(s, c, pr, n_pr, 1, NULL, 9), -EDOM);
	ck_assert_int_eq(submit_pinned(s, c, pr, 3, 1, NULL, 4), -EDOM);
	coll_free(c);
	/* a session with a smaller window than the pin */
	char small[SCHED_SESSION_ID_LEN];
	struct session_settings set = {.window_size = 4, .sink_keep_count = -1};
	ck_assert_int_eq(scheduler_session_create(s, &set, small, NULL, err, sizeof(err)), 0);
	c = coll_new(s);
	ck_assert_int_eq(submit_pinned(s, c, pr, n_pr, 1, small, 6), -EDOM);
	coll_free(c);
	ck_assert_int_eq(scheduler_session_delete(s, small), 0);
	ck_assert_int_eq(scheduler_session_delete(s, id), 0);
	wait_idle(s);
	scheduler_free(s);
	config_deinit(&cfg);

	/* The grown reservation is checked against the budget: f32, 1280 bytes
	 * a token, window 600 + 4 sinks in 1 MiB (819 tokens) with 100 pinned
	 * fits, with 300 it never can. */
	const char *ovb[] = {"inference.attention.dtype=float32", "inference.cache.window_size=600",
	                     "inference.cache.global_cache_limit=1MiB"};
	s = sched_make(&cfg, ovb, 3);
	ck_assert_int_eq(scheduler_session_create(s, NULL, id, NULL, err, sizeof(err)), 0);
	int32_t longp[300];
	for (int i = 0; i < 300; i++)
		longp[i] = a->ids[i % a->n];
	c = coll_new(s);
	ck_assert_int_eq(submit_pinned(s, c, longp, 300, 1, id, 300), -ENOSPC);
	ck_assert_int_eq(submit_pinned(s, c, longp, 300, 1, id, 100), 0);
	coll_wait(c);
	coll_free(c);
	ck_assert_int_eq(scheduler_session_info(s, id, &info), 0);
	ck_assert_int_eq(info.pinned_tokens, 100);
	ck_assert_int_eq(info.n_sink, 100);
	ck_assert_int_eq(scheduler_session_delete(s, id), 0);
	wait_idle(s);
	scheduler_free(s);
	config_deinit(&cfg);
}
END_TEST

/* Sessions are bounded in total (limits.max_sessions: -EMFILE, 503) and per
 * owner (owner_max: -EDQUOT, 429, another owner unaffected), and a session
 * no request ran on gives its reservation back after
 * scheduler.session_empty_ttl_s while a used one stays (defect: empty
 * creates held the whole KV budget for session_ttl_s). */
START_TEST(test_session_limits_and_empty_expiry)
{
	const char *ov[] = {"limits.max_sessions=3", "scheduler.session_empty_ttl_s=1",
	                    "scheduler.session_ttl_s=600", "inference.cache.window_size=64"};
	struct sinkd_config cfg;
	struct scheduler_stats st;
	struct sched_session_info info;
	char a1[SCHED_SESSION_ID_LEN], a2[SCHED_SESSION_ID_LEN], b1[SCHED_SESSION_ID_LEN];
	char x[SCHED_SESSION_ID_LEN], err[SINKD_ERR_LEN];
	struct scheduler *s = sched_make(&cfg, ov, 4);
	struct session_settings a = {.sink_keep_count = -1, .owner = "key:a", .owner_max = 2};
	struct session_settings b = {.sink_keep_count = -1, .owner = "key:b", .owner_max = 2};
	ck_assert_int_eq(scheduler_session_create(s, &a, a1, NULL, err, sizeof(err)), 0);
	ck_assert_int_eq(scheduler_session_create(s, &a, a2, NULL, err, sizeof(err)), 0);
	ck_assert_int_eq(scheduler_session_create(s, &a, x, NULL, err, sizeof(err)), -EDQUOT);
	ck_assert_ptr_nonnull(strstr(err, "limits.per_key.max_sessions"));
	ck_assert_int_eq(scheduler_session_create(s, &b, b1, NULL, err, sizeof(err)), 0);
	ck_assert_int_eq(scheduler_session_create(s, &b, x, NULL, err, sizeof(err)), -EMFILE);
	ck_assert_ptr_nonnull(strstr(err, "limits.max_sessions"));
	/* The empty sessions expire within the second: that is the hint. */
	ck_assert_int_eq(scheduler_session_retry_after_s(s, "key:a"), 1);
	ck_assert_int_eq(scheduler_session_retry_after_s(s, NULL), 1);
	scheduler_get_stats(s, &st);
	ck_assert_uint_eq(st.rejected_owner_sessions, 1);
	ck_assert_uint_eq(st.rejected_sessions, 1);
	size_t bound = st.kv_bytes_reserved / 3;
	/* a1 gets an append (used); a2 and b1 stay empty. */
	ck_assert_int_eq(run_one(s, fx.ref[0].ids, fx.ref[0].n, 0, a1, 0, NULL), 0);
	for (int i = 0; i < 300; i++) {
		scheduler_get_stats(s, &st);
		if (st.sessions == 1)
			break;
		usleep(10000);
	}
	ck_assert_uint_eq(st.sessions, 1);
	ck_assert_uint_eq(st.sessions_expired_empty, 2);
	ck_assert_uint_eq(st.kv_bytes_reserved, bound);
	ck_assert_int_eq(scheduler_session_info(s, a1, &info), 0);
	ck_assert_int_eq(scheduler_session_info(s, a2, &info), -ENOENT);
	ck_assert_int_eq(scheduler_session_info(s, b1, &info), -ENOENT);
	/* Room again, for either owner; a used session does not expire early. */
	ck_assert_int_eq(scheduler_session_create(s, &b, b1, NULL, err, sizeof(err)), 0);
	ck_assert_int_eq(scheduler_session_create(s, &a, a2, NULL, err, sizeof(err)), 0);
	usleep(1200 * 1000);
	ck_assert_int_eq(scheduler_session_info(s, a1, &info), 0);
	ck_assert_int_eq(scheduler_session_delete(s, a1), 0);
	/* Without an owner only the total counts. */
	ck_assert_int_eq(scheduler_session_create(s, NULL, x, NULL, err, sizeof(err)), 0);
	ck_assert_int_eq(scheduler_session_delete(s, x), 0);
	wait_idle(s);
	scheduler_free(s);
	config_deinit(&cfg);
}
END_TEST

/* Reload: new limits apply at once, new sessions get the new geometry,
 * existing sessions keep theirs. */
START_TEST(test_reconfigure)
{
	const char *ov1[] = {"inference.cache.global_cache_limit=1MiB",
	                     "inference.cache.window_size=64"};
	const char *ov2[] = {"inference.cache.global_cache_limit=2MiB",
	                     "inference.cache.window_size=32"};
	struct sinkd_config cfg, cfg2;
	struct config_errors errs = {0};
	struct scheduler_stats st;
	struct sched_session_info info;
	char old_id[SCHED_SESSION_ID_LEN], new_id[SCHED_SESSION_ID_LEN], err[SINKD_ERR_LEN];
	struct scheduler *s = sched_make(&cfg, ov1, 2);
	ck_assert_int_eq(scheduler_session_create(s, NULL, old_id, NULL, err, sizeof(err)), 0);
	ck_assert_int_eq(config_load(&cfg2, NULL, ov2, 2, &errs), 0);
	struct sched_prepared *p = NULL;
	ck_assert_int_eq(scheduler_prepare(s, &cfg2, &p, err, sizeof(err)), 0);
	scheduler_get_stats(s, &st);
	ck_assert_uint_eq(st.kv_bytes_budget, 1 << 20); /* prepared, not yet applied */
	scheduler_commit(s, p);
	scheduler_get_stats(s, &st);
	ck_assert_uint_eq(st.kv_bytes_budget, 2 << 20);
	ck_assert_int_eq(scheduler_session_create(s, NULL, new_id, NULL, err, sizeof(err)), 0);
	ck_assert_int_eq(scheduler_session_info(s, old_id, &info), 0);
	ck_assert_int_eq(info.window_size, 64);
	size_t old_bytes = info.bytes_reserved;
	ck_assert_int_eq(scheduler_session_info(s, new_id, &info), 0);
	ck_assert_int_eq(info.window_size, 32);
	ck_assert_uint_lt(info.bytes_reserved, old_bytes);
	scheduler_get_stats(s, &st);
	ck_assert_uint_eq(st.kv_bytes_reserved, old_bytes + info.bytes_reserved);
	ck_assert_int_eq(scheduler_session_delete(s, old_id), 0);
	ck_assert_int_eq(scheduler_session_delete(s, new_id), 0);
	wait_idle(s);
	scheduler_free(s);
	config_deinit(&cfg);
	config_deinit(&cfg2);
}
END_TEST

/* A reload the scheduler cannot take changes nothing (a budget too small for
 * one session of the new geometry); a budget below what is reserved is taken:
 * running sessions stay, nothing new is admitted until use falls under it. */
START_TEST(test_prepare_refuses_and_shrinks)
{
	const char *ov1[] = {"inference.cache.global_cache_limit=3MiB",
	                     "inference.cache.window_size=2048"};
	const char *too_small[] = {"inference.cache.global_cache_limit=1MiB",
	                           "inference.cache.window_size=4000",
	                           "inference.max_context_length=4096"};
	struct sinkd_config cfg, cfg2, cfg3;
	struct config_errors errs = {0};
	struct scheduler_stats st;
	struct sched_prepared *p = NULL;
	char a[SCHED_SESSION_ID_LEN], b[SCHED_SESSION_ID_LEN], err[SINKD_ERR_LEN];
	struct scheduler *s = sched_make(&cfg, ov1, 2);
	ck_assert_int_eq(config_load(&cfg2, NULL, too_small, 3, &errs), 0);
	ck_assert_int_eq(scheduler_prepare(s, &cfg2, &p, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "global_cache_limit"));
	scheduler_get_stats(s, &st);
	ck_assert_uint_eq(st.kv_bytes_budget, 3 << 20);
	ck_assert_int_eq(scheduler_session_create(s, NULL, a, NULL, err, sizeof(err)), 0);
	struct sched_session_info info;
	ck_assert_int_eq(scheduler_session_info(s, a, &info), 0);
	ck_assert_int_eq(info.window_size, 2048);
	ck_assert_uint_gt(info.bytes_reserved, 1 << 20);
	/* Shrink the budget to one session's bound while two are reserved. */
	ck_assert_int_eq(scheduler_session_create(s, NULL, b, NULL, err, sizeof(err)), 0);
	char limit[64];
	snprintf(limit, sizeof(limit), "inference.cache.global_cache_limit=%zu",
	         info.bytes_reserved);
	const char *shrink[] = {limit, "inference.cache.window_size=2048"};
	ck_assert_int_eq(config_load(&cfg3, NULL, shrink, 2, &errs), 0);
	ck_assert_int_eq(scheduler_prepare(s, &cfg3, &p, err, sizeof(err)), 0);
	scheduler_commit(s, p);
	char c[SCHED_SESSION_ID_LEN];
	ck_assert_int_eq(scheduler_session_create(s, NULL, c, NULL, err, sizeof(err)), -EAGAIN);
	ck_assert_int_eq(scheduler_session_info(s, a, &info), 0);
	ck_assert_int_eq(scheduler_session_info(s, b, &info), 0);
	ck_assert_int_eq(scheduler_session_delete(s, a), 0);
	ck_assert_int_eq(scheduler_session_delete(s, b), 0);
	wait_idle(s);
	scheduler_get_stats(s, &st);
	ck_assert_uint_eq(st.kv_bytes_reserved, 0);
	ck_assert_int_eq(scheduler_session_create(s, NULL, c, NULL, err, sizeof(err)), 0);
	ck_assert_int_eq(scheduler_session_delete(s, c), 0);
	/* A client-chosen id: taken once, 409 the second time, checked. */
	struct session_settings named = {.window_size = 0, .sink_keep_count = -1, .id = "abc123"};
	wait_idle(s);
	ck_assert_int_eq(scheduler_session_create(s, &named, c, NULL, err, sizeof(err)), 0);
	ck_assert_str_eq(c, "abc123");
	const char *param = NULL;
	ck_assert_int_eq(scheduler_session_create(s, &named, c, &param, err, sizeof(err)), -EEXIST);
	ck_assert_str_eq(param, "id");
	named.id = "../etc";
	ck_assert_int_eq(scheduler_session_create(s, &named, c, &param, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(param, "id");
	ck_assert_int_eq(scheduler_session_delete(s, "abc123"), 0);
	wait_idle(s);
	scheduler_free(s);
	config_deinit(&cfg);
	config_deinit(&cfg2);
	config_deinit(&cfg3);
}
END_TEST

/* The engine loop's heartbeat turns while idle and stops while the stall
 * hook's file exists (the systemd watchdog relies on both). */
START_TEST(test_heartbeat_and_stall)
{
	struct sinkd_config cfg;
	struct scheduler *s = sched_make(&cfg, NULL, 0);
	char path[] = "/tmp/sinkd-stall-XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	close(fd);
	unlink(path);
	scheduler_set_stall_file(s, path);
	uint64_t h0 = scheduler_heartbeat(s);
	usleep(2500 * 1000);
	uint64_t h1 = scheduler_heartbeat(s);
	ck_assert_uint_gt(h1, h0); /* idle: still at least one turn a second */
	fd = open(path, O_CREAT | O_WRONLY, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);
	usleep(1500 * 1000); /* the loop notices within one idle wait */
	uint64_t h2 = scheduler_heartbeat(s);
	usleep(2000 * 1000);
	ck_assert_uint_eq(scheduler_heartbeat(s), h2);
	unlink(path);
	usleep(1500 * 1000);
	ck_assert_uint_gt(scheduler_heartbeat(s), h2);
	scheduler_free(s);
	config_deinit(&cfg);
}
END_TEST

/* Flow control: a stream whose client takes nothing stops at
 * max_unsent_tokens tokens while another runs to its end; taking its tokens
 * (and kicking) lets it go on, to the same greedy tokens as alone; a
 * cancel ends it while it is held; with the limit 0 nothing is held. */
START_TEST(test_flow_control)
{
	const char *ov[][1] = {{"scheduler.max_unsent_tokens=3"},
	                       {"scheduler.max_unsent_tokens=0"}};
	struct sinkd_config cfg;
	struct scheduler_stats st;
	const struct ref_prompt *r = &fx.ref[0];
	int32_t alone[GEN];
	struct scheduler *s = sched_make(&cfg, ov[_i], 1);
	ck_assert_int_eq(run_one(s, r->ids, r->n, GEN, NULL, 0, alone), GEN);
	struct coll *slow = coll_new(s), *fast = coll_new(s), *gone = coll_new(s);
	slow->flow = gone->flow = true;
	ck_assert_int_eq(submit(s, slow, r->ids, r->n, GEN, NULL, 0), 0);
	ck_assert_int_eq(submit(s, gone, r->ids, r->n, GEN, NULL, 0), 0);
	ck_assert_int_eq(submit(s, fast, fx.ref[1].ids, fx.ref[1].n, GEN, NULL, 0), 0);
	coll_wait(fast);
	ck_assert_int_eq(fast->n_tokens, GEN);
	scheduler_get_stats(s, &st);
	if (_i == 0) {
		ck_assert_int_eq(coll_tokens(slow), 3);
		ck_assert_int_eq(coll_tokens(gone), 3);
		ck_assert_uint_gt(st.flow_held, 0);
		scheduler_cancel(s, gone->handle);
		coll_wait(gone);
		ck_assert_int_eq(gone->finish, GEN_FINISH_CANCELLED);
		ck_assert_int_eq(gone->n_tokens, 3);
		for (;;) { /* the client takes one token at a time */
			pthread_mutex_lock(&slow->mu);
			bool done = slow->n_done > 0;
			if (slow->taken < slow->n_tokens)
				slow->taken++;
			pthread_mutex_unlock(&slow->mu);
			if (done)
				break;
			scheduler_kick(s);
			usleep(200);
		}
		ck_assert_int_le(slow->most_unsent, 3);
	} else {
		coll_wait(gone);
		coll_wait(slow);
		ck_assert_uint_eq(st.flow_held, 0);
		ck_assert_int_eq(gone->n_tokens, GEN);
	}
	coll_wait(slow);
	ck_assert_int_eq(slow->finish, GEN_FINISH_LENGTH);
	ck_assert_int_eq(slow->n_tokens, GEN);
	for (int k = 0; k < GEN; k++)
		ck_assert_int_eq(slow->tokens[k], alone[k]);
	coll_free(slow);
	coll_free(fast);
	coll_free(gone);
	wait_idle(s);
	scheduler_free(s);
	config_deinit(&cfg);
}
END_TEST

START_TEST(test_auto_budget_and_metrics)
{
	struct sinkd_config cfg;
	struct scheduler_stats st;
	struct scheduler *s = sched_make(&cfg, NULL, 0);
	scheduler_get_stats(s, &st);
	ck_assert_uint_gt(st.kv_bytes_budget, 0); /* "auto" from MemAvailable */
	int32_t out[16];
	ck_assert_int_eq(run_one(s, fx.ref[0].ids, fx.ref[0].n, 16, NULL, 0, out), 16);
	char *text = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&text, &len);
	scheduler_write_metrics(s, mem);
	fclose(mem);
	scheduler_get_stats(s, &st);
	char line[128];
	snprintf(line, sizeof(line), "sinkd_scheduler_batch_tokens_count %llu\n",
	         (unsigned long long)st.ticks);
	ck_assert_ptr_nonnull(strstr(text, line));
	ck_assert_ptr_nonnull(strstr(text, "# TYPE sinkd_scheduler_tick_seconds histogram\n"));
	ck_assert_ptr_nonnull(strstr(text, "sinkd_scheduler_batch_sequences_bucket{le=\"+Inf\"}"));
	ck_assert_ptr_nonnull(strstr(text, "sinkd_tokens_generated_total 16\n"));
	ck_assert_ptr_nonnull(
	    strstr(text, "sinkd_scheduler_rejections_total{reason=\"queue_full\"} 0"));
	struct sched_histogram h;
	scheduler_get_histogram(s, SCHED_HIST_BATCH_TOKENS, &h);
	ck_assert_uint_eq(h.total, st.ticks);
	ck_assert_uint_eq(h.count[h.n_buckets - 1], h.total);
	ck_assert_uint_eq(h.count[0], 15); /* 15 decode ticks of one token, one prefill of 5 */
	free(text);

	/* Idle: the engine thread sleeps on its condition variable. */
	struct rusage r0, r1;
	usleep(100000); /* the backend's workers stop spinning */
	getrusage(RUSAGE_SELF, &r0);
	usleep(400000);
	getrusage(RUSAGE_SELF, &r1);
	double cpu = (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec + r1.ru_stime.tv_sec -
	                      r0.ru_stime.tv_sec) +
	             (double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec + r1.ru_stime.tv_usec -
	                      r0.ru_stime.tv_usec) *
	                 1e-6;
	ck_assert_msg(cpu < 0.05, "idle scheduler used %.3f s of CPU in 0.4 s", cpu);

	/* Freeing with a request in flight: it still gets its DONE. */
	struct coll *c = coll_new(s);
	ck_assert_int_eq(submit(s, c, fx.ref[0].ids, fx.ref[0].n, 4000, NULL, 0), 0);
	scheduler_free(s);
	ck_assert_int_eq(c->n_done, 1);
	ck_assert(c->finish == GEN_FINISH_CANCELLED || c->finish == GEN_FINISH_LENGTH);
	coll_free(c);
	config_deinit(&cfg);
}
END_TEST

/* ---- the random walk --------------------------------------------------- */

#define WALK_OPS 400
#define WALK_SESSIONS 5

struct walk {
	struct scheduler *s;
	uint64_t rng;
	struct coll *req[WALK_OPS * 2];
	int n_req;
	char ids[WALK_SESSIONS][SCHED_SESSION_ID_LEN];
	bool live[WALK_SESSIONS];
};

static uint32_t walk_rand(struct walk *w, uint32_t n)
{
	w->rng ^= w->rng << 13;
	w->rng ^= w->rng >> 7;
	w->rng ^= w->rng << 17;
	return (uint32_t)(w->rng % n);
}

static void walk_check(struct walk *w)
{
	struct scheduler_stats st;
	scheduler_get_stats(w->s, &st);
	ck_assert_uint_le(st.kv_bytes_reserved, st.kv_bytes_budget);
	ck_assert_uint_le(st.kv_bytes_resident, st.kv_bytes_reserved);
}

static void walk_submit(struct walk *w, int sess)
{
	int32_t ids[24];
	size_t n = 1 + walk_rand(w, 24);
	for (size_t i = 0; i < n; i++)
		ids[i] = (int32_t)(3 + walk_rand(w, 500));
	int max_tokens = walk_rand(w, 3) == 0 ? 0 : 1 + (int)walk_rand(w, 12);
	size_t revise = sess >= 0 && walk_rand(w, 2) ? walk_rand(w, 4) : 0;
	struct coll *c = coll_new(w->s);
	if (walk_rand(w, 5) == 0 && max_tokens > 2)
		c->cancel_after = 1 + (int)walk_rand(w, (uint32_t)max_tokens - 1);
	int rc = submit(w->s, c, ids, n, max_tokens, sess >= 0 ? w->ids[sess] : NULL, revise);
	if (rc == 0) {
		w->req[w->n_req++] = c;
		return;
	}
	/* Clear refusals only: unknown (expired) session, busy, revise too far, full. */
	ck_assert_msg(rc == -ENOENT || rc == -EBUSY || rc == -ERANGE || rc == -EAGAIN ||
	                  rc == -EINVAL,
	              "submit: %d", rc);
	if (rc == -ENOENT)
		w->live[sess] = false;
	coll_free(c);
}

static void walk_step(struct walk *w)
{
	char err[SINKD_ERR_LEN];
	uint32_t op = walk_rand(w, 100);
	int k = (int)walk_rand(w, WALK_SESSIONS);
	if (op < 10) { /* create */
		if (!w->live[k]) {
			int rc =
			    scheduler_session_create(w->s, NULL, w->ids[k], NULL, err, sizeof(err));
			ck_assert_msg(rc == 0 || rc == -EAGAIN, "%s", err);
			w->live[k] = rc == 0;
		}
	} else if (op < 45) { /* append / revise / generate on a session */
		if (w->live[k])
			walk_submit(w, k);
	} else if (op < 70) { /* one-shot */
		walk_submit(w, -1);
	} else if (op < 78) { /* cancel something in flight */
		if (w->n_req) {
			struct coll *c = w->req[walk_rand(w, (uint32_t)w->n_req)];
			c->expect_cancel = true;
			scheduler_cancel(w->s, c->handle);
		}
	} else if (op < 85) { /* delete */
		if (w->live[k]) {
			int rc = scheduler_session_delete(w->s, w->ids[k]);
			ck_assert(rc == 0 || rc == -ENOENT);
			w->live[k] = false;
		}
	} else if (op < 99) { /* let the engine run a little */
		usleep(4000);
	} else { /* idle long enough for every session to expire (TTL 1 s) */
		usleep(1100 * 1000);
	}
}

static void walk_check_done(struct coll *c)
{
	coll_wait(c);
	ck_assert_int_eq(c->n_done, 1);
	switch (c->finish) {
	case GEN_FINISH_ERROR:
		/* a queue timeout, a revise or a prompt the session cannot take */
		ck_assert_msg(c->error_rc == -EAGAIN || c->error_rc == -ERANGE ||
		                  c->error_rc == -E2BIG || c->error_rc == -EINVAL,
		              "rc %d: %s", c->error_rc, c->error);
		ck_assert_int_gt((int)strlen(c->error), 0);
		break;
	case GEN_FINISH_CANCELLED:
		/* cancelled by us, by the callback, or its session was deleted/expired */
		break;
	case GEN_FINISH_NONE:
		ck_assert_int_eq(c->max_tokens, 0);
		ck_assert_int_eq(c->n_prompt_done, 1);
		break;
	default:
		ck_assert_int_eq(c->n_tokens, c->done_generated);
		ck_assert_int_ge(c->n_tokens, 1);
		ck_assert(c->cancel_after == 0 || c->n_tokens <= c->max_tokens);
		if (c->finish == GEN_FINISH_LENGTH)
			ck_assert_int_eq(c->n_tokens, c->max_tokens);
	}
}

START_TEST(test_random_walk_invariants)
{
	/* bf16, window 200 + 4 sinks: 204 * 640 = 130 KB a session: 8 fit in 1 MiB,
	 * 5 of them persistent at most. */
	const char *ov[] = {
	    "inference.cache.window_size=200", "inference.cache.global_cache_limit=1MiB",
	    "scheduler.max_queue=4",           "scheduler.max_queue_wait_s=1",
	    "scheduler.session_ttl_s=1",       "scheduler.max_batch_tokens=16"};
	struct sinkd_config cfg;
	struct walk *w = calloc(1, sizeof(*w));
	w->s = sched_make(&cfg, ov, 6);
	w->rng = 0x9E3779B97F4A7C15ull;
	for (int i = 0; i < WALK_OPS; i++) {
		walk_step(w);
		walk_check(w);
	}
	for (int i = 0; i < w->n_req; i++) {
		walk_check_done(w->req[i]);
		walk_check(w);
	}
	for (int k = 0; k < WALK_SESSIONS; k++)
		if (w->live[k])
			scheduler_session_delete(w->s, w->ids[k]);
	wait_idle(w->s);
	struct scheduler_stats st;
	scheduler_get_stats(w->s, &st);
	fprintf(stderr,
	        "walk: %d requests: %llu completed, %llu cancelled, %llu errors; sessions %llu "
	        "created, "
	        "%llu expired; rejected: %llu queue full, %llu timeout, %llu busy; ticks %llu\n",
	        w->n_req, (unsigned long long)st.completed, (unsigned long long)st.cancelled,
	        (unsigned long long)st.errors, (unsigned long long)st.sessions_created,
	        (unsigned long long)st.sessions_expired, (unsigned long long)st.rejected_queue_full,
	        (unsigned long long)st.rejected_timeout, (unsigned long long)st.rejected_busy,
	        (unsigned long long)st.ticks);
	ck_assert_uint_eq(st.completed + st.cancelled + st.errors, (uint64_t)w->n_req);
	ck_assert_uint_gt(st.completed, 0);
	ck_assert_uint_gt(st.tokens_out, 0);
	ck_assert_uint_gt(st.sessions_expired + st.sessions_created, 0);
	for (int i = 0; i < w->n_req; i++)
		coll_free(w->req[i]);
	scheduler_free(w->s);
	config_deinit(&cfg);
	free(w);
}
END_TEST

/* ---- constrained decoding and logit_bias ----------------------------- */

/* The text of a request's tokens. */
static char *coll_text(const struct coll *c)
{
	char *text = NULL;
	size_t len = 0;
	char err[SINKD_ERR_LEN];
	ck_assert_int_eq(tokenizer_decode(fx.tok, c->tokens, (size_t)c->n_tokens, &text, &len, err,
	                                  sizeof(err)),
	                 0);
	return text;
}

/* Sampled constrained requests batched with an unconstrained one: every
 * constrained reply ends by itself (STOP) as JSON of the schema, and the
 * unconstrained one is the same as when it runs alone. */
START_TEST(test_grammar_constrains_batch)
{
	struct sinkd_config cfg;
	struct scheduler *s = sched_make(&cfg, NULL, 0);
	cJSON *schema = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"},"
	                            "\"ok\":{\"type\":\"boolean\"},\"k\":{\"enum\":[\"a\",\"b\"]}},"
	                            "\"required\":[\"n\",\"ok\",\"k\"],\"additionalProperties\":false}");
	struct grammar *g = NULL;
	char path[64], err[SINKD_ERR_LEN];
	ck_assert_msg(grammar_from_json_schema(schema, &g, path, sizeof(path), err, sizeof(err)) == 0,
	              "%s at %s", err, path);
	const struct ref_prompt *p = &fx.ref[0];
	int32_t alone[64];
	int n_alone = run_one(s, p->ids, p->n, 24, NULL, 0, alone);
	enum { N = 6 };
	struct coll *c[N + 1];
	for (int i = 0; i < N; i++) {
		c[i] = coll_new(s);
		c[i]->grammar = g;
		c[i]->temperature = 1.0f;
		c[i]->seed = 100 + (uint64_t)i;
		ck_assert_int_eq(submit(s, c[i], p->ids, p->n, 400, NULL, 0), 0);
	}
	c[N] = coll_new(s);
	ck_assert_int_eq(submit(s, c[N], p->ids, p->n, 24, NULL, 0), 0);
	for (int i = 0; i <= N; i++)
		coll_wait(c[i]);
	ck_assert_int_eq(c[N]->n_tokens, n_alone);
	ck_assert_mem_eq(c[N]->tokens, alone, (size_t)n_alone * sizeof(int32_t));
	for (int i = 0; i < N; i++) {
		ck_assert_msg(c[i]->finish == GEN_FINISH_STOP, "request %d: finish %d (%s)", i,
		              c[i]->finish, c[i]->error);
		char *text = coll_text(c[i]);
		cJSON *v = cJSON_Parse(text);
		ck_assert_msg(v, "request %d: not JSON: %s", i, text);
		ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(v, "n")));
		ck_assert(cJSON_IsBool(cJSON_GetObjectItem(v, "ok")));
		const cJSON *k = cJSON_GetObjectItem(v, "k");
		ck_assert(cJSON_IsString(k) && (!strcmp(k->valuestring, "a") || !strcmp(k->valuestring, "b")));
		ck_assert_int_eq(cJSON_GetArraySize(v), 3);
		cJSON_Delete(v);
		free(text);
		coll_free(c[i]);
	}
	coll_free(c[N]);
	grammar_unref(g);
	cJSON_Delete(schema);
	scheduler_free(s);
	config_deinit(&cfg);
}
END_TEST

START_TEST(test_logit_bias)
{
	struct sinkd_config cfg;
	struct scheduler *s = sched_make(&cfg, NULL, 0);
	const struct ref_prompt *p = &fx.ref[0];
	int32_t greedy[64];
	int n = run_one(s, p->ids, p->n, 8, NULL, 0, greedy);
	ck_assert_int_eq(n, 8);
	/* -100 on the greedy first token: another one comes first */
	struct coll *c = coll_new(s);
	c->bias[0] = (struct sampler_bias){.token = greedy[0], .bias = -100};
	c->n_bias = 1;
	ck_assert_int_eq(submit(s, c, p->ids, p->n, 8, NULL, 0), 0);
	coll_wait(c);
	ck_assert_int_ne(c->tokens[0], greedy[0]);
	coll_free(c);
	/* +100 on one token: greedy picks it every step */
	int32_t forced = greedy[3] == 100 ? 101 : 100;
	c = coll_new(s);
	c->bias[0] = (struct sampler_bias){.token = forced, .bias = 100};
	c->n_bias = 1;
	ck_assert_int_eq(submit(s, c, p->ids, p->n, 8, NULL, 0), 0);
	coll_wait(c);
	ck_assert_int_eq(c->n_tokens, 8);
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(c->tokens[i], forced);
	coll_free(c);
	/* an id outside the vocabulary is refused at submit, naming the field */
	c = coll_new(s);
	c->bias[0] = (struct sampler_bias){.token = 1 << 20, .bias = 1};
	c->n_bias = 1;
	ck_assert_int_eq(submit(s, c, p->ids, p->n, 8, NULL, 0), -EINVAL);
	ck_assert_str_eq(c->error_param, "logit_bias");
	coll_free(c);
	scheduler_free(s);
	config_deinit(&cfg);
}
END_TEST

int main(void)
{
	fixture_load();
	Suite *s = suite_create("scheduler");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_batched_equals_alone, 0, 2);
	tcase_add_test(tc, test_long_prefill_does_not_stall);
	tcase_add_test(tc, test_oversubscribed_streams_all_start);
	tcase_add_test(tc, test_pace_limit);
	tcase_add_test(tc, test_session_continue_and_revise);
	tcase_add_test(tc, test_session_cancel_keeps_stream);
	tcase_add_test(tc, test_session_revise_window);
	tcase_add_test(tc, test_admission_budget);
	tcase_add_test(tc, test_pinned_prefix);
	tcase_add_test(tc, test_session_limits_and_empty_expiry);
	tcase_add_test(tc, test_reconfigure);
	tcase_add_test(tc, test_prepare_refuses_and_shrinks);
	tcase_add_test(tc, test_heartbeat_and_stall);
	tcase_add_test(tc, test_auto_budget_and_metrics);
	tcase_add_loop_test(tc, test_flow_control, 0, 2);
	tcase_add_test(tc, test_random_walk_invariants);
	tcase_add_test(tc, test_grammar_constrains_batch);
	tcase_add_test(tc, test_logit_bias);
	suite_add_tcase(s, tc);
	int failed = tu_suite_failures(s);
	backend_free(fx.be);
	tokenizer_free(fx.tok);
	model_free(fx.model);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
