/* In-process scheduler benchmark: the same load as sched-loadgen.c but
 * without HTTP, TLS or SSE, so that the scheduler + engine share of the
 * figures can be told from the server's.  N streams each run a loop of
 * greedy requests (ignore_eos) of MAX_TOKENS tokens from a short prompt; a
 * stream submits its next request from the DONE event, so new prompts keep
 * joining running batches (continuous batching).  The first request of
 * stream i asks for MAX_TOKENS*(i+1)/N tokens, so that the streams' request
 * ends (and the next prompts) are spread over the ticks as in a steady load,
 * not all at once.
 *
 * The measured window opens when every stream has received its first token
 * (start-up prefill excluded) and lasts SECONDS; inside it: generated tokens
 * (aggregate tok/s), inter-token gaps (both ends inside), time to first
 * token of the requests submitted inside it, the engine ticks (mean period
 * of a whole tick, mean forward-pass time, tokens per tick).  With LONG > 0
 * one more request with a LONG-token prompt (max_tokens 1) is submitted when
 * the window opens, and again whenever it finishes, so a long prefill runs
 * alongside the streams for the whole window (long_prefill_s: how long the
 * first one took, -1 if it had not finished when the window closed).  Prints
 * one JSON line.  Not part of the test suite.
 *
 * usage: sched-inproc MODEL STREAMS MAX_TOKENS THREADS LONG SECONDS [key=value ...] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/config.h"
#include "engine/backend.h"
#include "model/model.h"
#include "sched/scheduler.h"
#include "tokenizer/tokenizer.h"

struct samples {
	double *v;
	size_t n, cap;
};

struct bench;

struct stream {
	struct bench *b;
	double t_submit, last;
	bool got_first; /* of the current request */
	bool is_long;
	uint64_t handle; /* current request, 0 when none */
	int n_requests;
};

struct bench {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct scheduler *s;
	int32_t *ids, *long_ids; /* prompts */
	size_t n_ids, n_long;
	int max_tokens, n_streams;
	int n_first;             /* streams that received their first token */
	double t_open, t_close;  /* the window; 0 until known */
	bool stopping;           /* no more submissions */
	int n_running;           /* requests submitted and not DONE */
	long tokens;             /* inside the window */
	struct samples itl, ttft;
	double long_t0, long_done; /* the first long request */
	int long_requests;
};

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void push(struct samples *s, double v)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 4096;
		s->v = realloc(s->v, s->cap * sizeof(double));
	}
	s->v[s->n++] = v;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pct(struct samples *s, double p)
{
	if (!s->n)
		return 0;
	qsort(s->v, s->n, sizeof(double), cmp_d);
	return s->v[(size_t)(p * (double)(s->n - 1) + 0.5)];
}

static void on_event(void *user, const struct gen_event *ev);

/* Submits the stream's next request; b->mu held. */
static int submit_locked(struct stream *st, int max_tokens)
{
	struct bench *b = st->b;
	char err[SINKD_ERR_LEN];
	size_t n = st->is_long ? b->n_long : b->n_ids;
	int32_t *copy = malloc(n * sizeof(int32_t));
	memcpy(copy, st->is_long ? b->long_ids : b->ids, n * sizeof(int32_t));
	struct gen_request q = {.prompt_ids = copy,
	                        .n_prompt = n,
	                        .max_tokens = max_tokens,
	                        .ignore_eos = true,
	                        .on_event = on_event,
	                        .user = st};
	sampler_params_default(&q.sampling);
	q.sampling.temperature = 0;
	st->t_submit = now_s();
	st->got_first = false;
	int rc = scheduler_submit(b->s, &q, &st->handle, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "submit: %s\n", err);
		return rc;
	}
	b->n_running++;
	st->n_requests++;
	return 0;
}

static bool in_window(const struct bench *b, double t)
{
	return b->t_open > 0 && t >= b->t_open && t <= b->t_close;
}

static void on_token(struct stream *st, double t)
{
	struct bench *b = st->b;
	if (in_window(b, t)) {
		b->tokens++;
		if (st->got_first && in_window(b, st->last))
			push(&b->itl, t - st->last);
		if (!st->got_first && in_window(b, st->t_submit))
			push(&b->ttft, t - st->t_submit);
	}
	if (!st->got_first && st->n_requests == 1 && ++b->n_first == b->n_streams)
		pthread_cond_broadcast(&b->cv); /* every stream decodes: open the window */
	st->got_first = true;
	st->last = t;
}

static void on_event(void *user, const struct gen_event *ev)
{
	struct stream *st = user;
	struct bench *b = st->b;
	double t = now_s();
	pthread_mutex_lock(&b->mu);
	if (ev->kind == GEN_EVENT_TOKEN && !st->is_long)
		on_token(st, t);
	if (ev->kind == GEN_EVENT_PROMPT_DONE && st->is_long && b->long_done == 0 &&
	    st->n_requests == 1)
		b->long_done = t;
	if (ev->kind == GEN_EVENT_DONE) {
		b->n_running--;
		st->handle = 0;
		if (!b->stopping)
			submit_locked(st, st->is_long ? 1 : b->max_tokens);
		pthread_cond_broadcast(&b->cv);
	}
	pthread_mutex_unlock(&b->mu);
}

static void hist_read(struct scheduler *s, double *ticks, double *fwd_s, double *batch_tokens)
{
	struct sched_histogram h;
	scheduler_get_histogram(s, SCHED_HIST_TICK_SECONDS, &h);
	*ticks = (double)h.total;
	*fwd_s = h.sum;
	scheduler_get_histogram(s, SCHED_HIST_BATCH_TOKENS, &h);
	*batch_tokens = h.sum;
}

static int setup(int argc, char **argv, struct bench *b, struct tokenizer **tok)
{
	char err[SINKD_ERR_LEN];
	struct model *m;
	struct backend *be;
	struct sinkd_config cfg;
	struct config_errors errs = {0};
	struct backend_options bo = {.n_threads = atoi(argv[4])};
	if (model_load(argv[1], NULL, &m, err, sizeof(err)) ||
	    backend_cpu_new(m, &bo, &be, err, sizeof(err)) ||
	    tokenizer_new_from_gguf(m->file, tok, err, sizeof(err))) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	if (config_load(&cfg, NULL, (const char *const *)argv + 7, (size_t)(argc - 7), &errs) ||
	    scheduler_new(&cfg, be, *tok, NULL, &b->s, err, sizeof(err))) {
		config_errors_print(&errs, stderr);
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	const char *prompt = "Once upon a time, there was a little girl named Lily. She loved to";
	tokenizer_encode(*tok, prompt, strlen(prompt), true, false, &b->ids, &b->n_ids, err,
	                 sizeof(err));
	int long_len = atoi(argv[5]);
	if (long_len > 0) {
		b->n_long = (size_t)long_len;
		b->long_ids = malloc(b->n_long * sizeof(int32_t));
		for (size_t i = 0; i < b->n_long; i++)
			b->long_ids[i] = b->ids[1 + i % (b->n_ids - 1)];
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct tokenizer *tok;
	struct bench b = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
	if (argc < 7) {
		fprintf(stderr,
		        "usage: %s MODEL STREAMS MAX_TOKENS THREADS LONG SECONDS [key=value ...]\n",
		        argv[0]);
		return 2;
	}
	b.n_streams = atoi(argv[2]);
	b.max_tokens = atoi(argv[3]);
	double seconds = atof(argv[6]);
	if (setup(argc, argv, &b, &tok))
		return 1;
	int n = b.n_streams;
	struct stream *st = calloc((size_t)n + 1, sizeof(*st));
	pthread_mutex_lock(&b.mu);
	for (int i = 0; i < n; i++) {
		st[i].b = &b;
		int first = (int)((long)b.max_tokens * (i + 1) / n);
		submit_locked(&st[i], first > 0 ? first : 1);
	}
	while (b.n_first < n)
		pthread_cond_wait(&b.cv, &b.mu);
	double t_start = now_s(), ticks0, fwd0, bt0, ticks1, fwd1, bt1;
	b.t_close = t_start + seconds;
	b.t_open = t_start;
	hist_read(b.s, &ticks0, &fwd0, &bt0);
	if (b.n_long > 0) {
		st[n] = (struct stream){.b = &b, .is_long = true};
		b.long_t0 = now_s();
		submit_locked(&st[n], 1);
	}
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)seconds;
	ts.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	while (now_s() < b.t_close)
		pthread_cond_timedwait(&b.cv, &b.mu, &ts);
	hist_read(b.s, &ticks1, &fwd1, &bt1);
	b.stopping = true;
	for (int i = 0; i <= n; i++)
		if (st[i].handle)
			scheduler_cancel(b.s, st[i].handle);
	while (b.n_running > 0)
		pthread_cond_wait(&b.cv, &b.mu);
	pthread_mutex_unlock(&b.mu);
	double ticks = ticks1 - ticks0;
	printf("{\"streams\":%d,\"long_prompt\":%zu,\"seconds\":%.3f,\"tokens\":%ld,\"tok_s\":%.1f,"
	       "\"ttft_p50_ms\":%.2f,\"ttft_p99_ms\":%.2f,\"itl_p50_ms\":%.3f,\"itl_p99_ms\":%.3f,"
	       "\"ticks\":%.0f,\"tick_ms\":%.3f,\"forward_ms\":%.3f,\"tokens_per_tick\":%.2f,"
	       "\"long_prefill_s\":%.3f,\"long_requests\":%d}\n",
	       n, b.n_long, seconds, b.tokens, (double)b.tokens / seconds, pct(&b.ttft, 0.5) * 1e3,
	       pct(&b.ttft, 0.99) * 1e3, pct(&b.itl, 0.5) * 1e3, pct(&b.itl, 0.99) * 1e3, ticks,
	       ticks > 0 ? seconds / ticks * 1e3 : 0, ticks > 0 ? (fwd1 - fwd0) / ticks * 1e3 : 0,
	       ticks > 0 ? (bt1 - bt0) / ticks : 0,
	       b.long_done > 0 ? b.long_done - b.long_t0 : -1.0, st[n].n_requests);
	scheduler_free(b.s);
	tokenizer_free(tok);
	return 0;
}
