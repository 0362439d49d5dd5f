/* In-process scheduler benchmark: the same load as sched-loadgen.c but
 * without HTTP, TLS or SSE, so that the scheduler + engine share of the
 * figures can be told from the server's.  N streams each generate
 * MAX_TOKENS greedy tokens (ignore_eos) from a short prompt; optionally a
 * LONG-token prompt is submitted alongside once the streams decode (and
 * cancelled if still prefilling when they are done: long_prefill_s -1).  Reports
 * aggregate tok/s, time to first token and inter-token latency (taken in the
 * event callback) as one JSON line.  Not part of the test suite.
 *
 * usage: sched-inproc MODEL STREAMS MAX_TOKENS THREADS LONG [key=value ...] */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/config.h"
#include "engine/backend.h"
#include "model/model.h"
#include "sched/scheduler.h"
#include "tokenizer/tokenizer.h"

struct stream {
	double t0, last, ttft;
	int n;
	bool is_long;
	double *gaps; /* (max_tokens) */
};

static atomic_int n_done;
static double long_prompt_done;

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void on_event(void *user, const struct gen_event *ev)
{
	struct stream *st = user;
	double t = now_s();
	if (ev->kind == GEN_EVENT_PROMPT_DONE && st->is_long)
		long_prompt_done = t;
	if (ev->kind == GEN_EVENT_TOKEN && !st->is_long) {
		if (st->n)
			st->gaps[st->n - 1] = t - st->last;
		else
			st->ttft = t - st->t0;
		st->last = t;
		st->n++;
	}
	if (ev->kind == GEN_EVENT_DONE)
		n_done++;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double p)
{
	qsort(v, n, sizeof(double), cmp_d);
	return n ? v[(size_t)(p * (double)(n - 1) + 0.5)] : 0;
}

static int submit(struct scheduler *s, struct stream *st, int32_t *ids, size_t n, int max_tokens,
                  uint64_t *handle)
{
	char err[SINKD_ERR_LEN];
	uint64_t h, *hp = handle ? handle : &h;
	struct gen_request q = {.prompt_ids = ids,
	                        .n_prompt = n,
	                        .max_tokens = max_tokens,
	                        .ignore_eos = true,
	                        .on_event = on_event,
	                        .user = st};
	sampler_params_default(&q.sampling);
	q.sampling.temperature = 0;
	st->t0 = now_s();
	int rc = scheduler_submit(s, &q, hp, err, sizeof(err));
	if (rc)
		fprintf(stderr, "submit: %s\n", err);
	return rc;
}

int main(int argc, char **argv)
{
	char err[SINKD_ERR_LEN];
	struct model *m;
	struct backend *be;
	struct tokenizer *tok;
	struct sinkd_config cfg;
	struct config_errors errs = {0};
	struct scheduler *s;
	if (argc < 6) {
		fprintf(stderr, "usage: %s MODEL STREAMS MAX_TOKENS THREADS LONG [key=value ...]\n",
		        argv[0]);
		return 2;
	}
	int n = atoi(argv[2]), gen = atoi(argv[3]), long_len = atoi(argv[5]);
	struct backend_options bo = {.n_threads = atoi(argv[4])};
	if (model_load(argv[1], NULL, &m, err, sizeof(err)) ||
	    backend_cpu_new(m, &bo, &be, err, sizeof(err)) ||
	    tokenizer_new_from_gguf(m->file, &tok, err, sizeof(err))) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	if (config_load(&cfg, NULL, (const char *const *)argv + 6, (size_t)(argc - 6), &errs) ||
	    scheduler_new(&cfg, be, tok, NULL, &s, err, sizeof(err))) {
		config_errors_print(&errs, stderr);
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	const char *prompt = "Once upon a time, there was a little girl named Lily. She loved to";
	int32_t *ids;
	size_t n_ids;
	tokenizer_encode(tok, prompt, strlen(prompt), true, false, &ids, &n_ids, err, sizeof(err));
	struct stream *st = calloc((size_t)n + 1, sizeof(*st));
	double t0 = now_s();
	for (int i = 0; i < n; i++) {
		st[i].gaps = calloc((size_t)gen, sizeof(double));
		int32_t *copy = malloc(n_ids * sizeof(int32_t));
		memcpy(copy, ids, n_ids * sizeof(int32_t));
		submit(s, &st[i], copy, n_ids, gen, NULL);
	}
	double t_long = 0;
	uint64_t long_handle = 0;
	if (long_len > 0) {
		while (st[0].n < 2)
			nanosleep(&(struct timespec){0, 100000}, NULL);
		int32_t *lp = malloc((size_t)long_len * sizeof(int32_t));
		for (int i = 0; i < long_len; i++)
			lp[i] = ids[1 + (size_t)i % (n_ids - 1)];
		st[n].is_long = true;
		t_long = now_s();
		submit(s, &st[n], lp, (size_t)long_len, 1, &long_handle);
	}
	while (n_done < n)
		nanosleep(&(struct timespec){0, 200000}, NULL);
	double wall = now_s() - t0;
	/* A prompt still prefilling when the streams are done is cancelled. */
	if (long_len > 0 && long_prompt_done == 0)
		scheduler_cancel(s, long_handle);
	while (n_done < n + (long_len > 0))
		nanosleep(&(struct timespec){0, 200000}, NULL);
	double *gaps = malloc((size_t)n * (size_t)gen * sizeof(double)),
	       *ttft = malloc((size_t)n * sizeof(double));
	size_t n_gaps = 0;
	long tokens = 0;
	for (int i = 0; i < n; i++) {
		tokens += st[i].n;
		ttft[i] = st[i].ttft;
		for (int k = 0; k + 1 < st[i].n; k++)
			gaps[n_gaps++] = st[i].gaps[k];
	}
	printf("{\"streams\":%d,\"long_prompt\":%d,\"tokens\":%ld,\"seconds\":%.3f,\"tok_s\":%.1f,"
	       "\"ttft_p50_ms\":%.2f,\"ttft_p99_ms\":%.2f,\"itl_p50_ms\":%.3f,\"itl_p99_ms\":%.3f,"
	       "\"long_prefill_s\":%.3f}\n",
	       n, long_len, tokens, wall, (double)tokens / wall, pct(ttft, (size_t)n, 0.5) * 1e3,
	       pct(ttft, (size_t)n, 0.99) * 1e3, pct(gaps, n_gaps, 0.5) * 1e3,
	       pct(gaps, n_gaps, 0.99) * 1e3,
	       long_len > 0 && long_prompt_done > 0 ? long_prompt_done - t_long : -1);
	scheduler_free(s);
	return 0;
}
