/* Benchmark driver for the CPU backend: loads a model, opens N sessions with
 * the default cache geometry, fills each with a prompt of P tokens, then
 * times G decode steps (one token per session per forward, logits for every
 * token, as the scheduler does); repeats with fresh sessions until the time
 * is spent, so the context stays at P..P+G tokens.  One such round runs
 * untimed first (--warmup-rounds): a fresh process commits every KV page
 * its sessions touch on first use (on the test VM, 12-50 us per 16 KiB),
 * and a serving daemon pays that once, then reuses the caches of ended
 * sessions; at 32 streams of the 134M model a 3-second measurement is a
 * single round, so without it the figure was that first round's.  Prints one JSON line:
 *   {"model":..,"streams":N,"threads":T,"steps":K,"tok_s":X,"step_ms":Y,
 *    "cpu_ms_per_step":C,"weight_bytes":B,"weight_macs":M,"prefill_tok_s":Z}
 * weight_macs: multiply-adds of the weight matrices per token (the compute
 * that a batch cannot share).
 * cpu_ms_per_step: CPU time of all threads per step (spinning included),
 * which tells a busy machine (step_ms >> cpu/threads) from a slow kernel.
 * prefill_tok_s: one session's prompt of --prompt-tokens fed as one batch.
 * --trace 1 turns on the collection of cache traces (attention masses) in
 * every session, as GET /v1/sessions/{id}/cache does: what it costs.
 * Linked against the sinkd library; run by engine-bench.sh.  Not a test. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/config.h"
#include "engine/backend.h"
#include "util/errbuf.h"

static double clock_s(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double now_s(void)
{
	return clock_s(CLOCK_MONOTONIC);
}

struct opts {
	const char *model;
	int streams, threads, prompt_tokens, gen_tokens, warmup_rounds, trace;
	double seconds;
};

static int parse(int argc, char **argv, struct opts *o)
{
	*o = (struct opts){.streams = 1,
	                   .threads = 0,
	                   .prompt_tokens = 64,
	                   .gen_tokens = 128,
	                   .seconds = 3.0,
	                   .warmup_rounds = 1};
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--model"))
			o->model = argv[i + 1];
		else if (!strcmp(argv[i], "--streams"))
			o->streams = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--threads"))
			o->threads = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--prompt-tokens"))
			o->prompt_tokens = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--gen-tokens"))
			o->gen_tokens = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--seconds"))
			o->seconds = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--warmup-rounds"))
			o->warmup_rounds = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--trace"))
			o->trace = atoi(argv[i + 1]);
		else
			return -1;
	}
	return o->model && o->streams > 0 && o->prompt_tokens > 0 && o->gen_tokens > 0 ? 0 : -1;
}

static int32_t token_for(int n_vocab, int a, int b)
{
	return (int32_t)(((unsigned)a * 7919u + (unsigned)b * 104729u + 3u) % (unsigned)n_vocab);
}

int main(int argc, char **argv)
{
	struct opts o;
	char err[SINKD_ERR_LEN] = "";
	if (parse(argc, argv, &o)) {
		fprintf(stderr, "usage: engine-driver --model FILE [--streams N] [--threads T] "
		                "[--prompt-tokens P] [--gen-tokens G] [--seconds S] "
		                "[--warmup-rounds W] [--trace 0|1]\n");
		return 2;
	}
	struct model *m = NULL;
	struct backend *be = NULL;
	struct sinkd_config cfg;
	struct config_errors errs;
	if (config_load(&cfg, NULL, NULL, 0, &errs)) {
		config_errors_print(&errs, stderr);
		return 1;
	}
	struct backend_options bo = {.n_threads = o.threads};
	if (model_load(o.model, NULL, &m, err, sizeof(err)) ||
	    backend_cpu_new(m, &bo, &be, err, sizeof(err))) {
		fprintf(stderr, "engine-driver: %s\n", err);
		return 1;
	}
	int n_vocab = m->hp.n_vocab, P = o.prompt_tokens, N = o.streams, G = o.gen_tokens;
	struct cache_geometry g;
	config_cache_geometry(&cfg, &m->hp, &g);
	struct backend_session **ss = calloc((size_t)N, sizeof(*ss));
	size_t cap = (size_t)(N > P ? N : P);
	struct backend_token *batch = calloc(cap, sizeof(*batch));
	float *logits = malloc(cap * (size_t)n_vocab * sizeof(float));
	double prefill_s = 0, el = 0, cpu = 0;
	long steps = 0;
	/* Warm-up: the first forward faults the mapped weights in. */
	if (be->ops->session_new(be, &g, &ss[0], err, sizeof(err)))
		goto fail;
	for (int i = 0; i < P; i++)
		batch[i] = (struct backend_token){
		    .session = ss[0], .token = token_for(n_vocab, 0, i), .want_logits = i == P - 1};
	if (be->ops->forward(be, batch, (size_t)P, logits, err, sizeof(err)))
		goto fail;
	be->ops->session_free(be, ss[0]);
	/* Rounds of: fresh sessions, a prompt each, G timed decode steps (the
	 * context stays at P..P+G tokens, like llama-bench's tg runs). */
	for (int round = 0; round <= o.warmup_rounds || el < o.seconds; round++) {
		bool timed = round >= o.warmup_rounds;
		for (int s = 0; s < N; s++) {
			if (be->ops->session_new(be, &g, &ss[s], err, sizeof(err)))
				goto fail;
			if (o.trace &&
			    be->ops->session_trace_enable(be, ss[s], true, err, sizeof(err)))
				goto fail;
			for (int i = 0; i < P; i++)
				batch[i] = (struct backend_token){.session = ss[s],
				                                  .token = token_for(n_vocab, s, i),
				                                  .want_logits = i == P - 1};
			double t0 = now_s();
			if (be->ops->forward(be, batch, (size_t)P, logits, err, sizeof(err)))
				goto fail;
			if (s == 0 && round == o.warmup_rounds)
				prefill_s = now_s() - t0;
		}
		double t0 = now_s(), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
		for (int k = 0; k < G; k++) {
			for (int s = 0; s < N; s++)
				batch[s] =
				    (struct backend_token){.session = ss[s],
				                           .token = token_for(n_vocab, s, P + k),
				                           .want_logits = true};
			if (be->ops->forward(be, batch, (size_t)N, logits, err, sizeof(err)))
				goto fail;
		}
		if (timed) {
			el += now_s() - t0;
			cpu += clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
			steps += G;
		}
		for (int s = 0; s < N; s++)
			be->ops->session_free(be, ss[s]);
	}

	printf("{\"model\":\"%s\",\"streams\":%d,\"threads\":%d,\"steps\":%ld,\"tok_s\":%.2f,"
	       "\"step_ms\":%.3f,\"cpu_ms_per_step\":%.3f,\"weight_bytes\":%zu,"
	       "\"weight_macs\":%.0f,\"prefill_tok_s\":%.1f}\n",
	       m->name, N, o.threads, steps, (double)steps * N / el, el / steps * 1e3,
	       cpu / steps * 1e3, model_weight_bytes(m), model_weight_params(m), P / prefill_s);
	return 0;
fail:
	fprintf(stderr, "engine-driver: %s\n", err);
	return 1;
}
