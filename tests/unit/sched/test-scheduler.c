/* The scheduler as a whole on the real stories260K model and the CPU
 * backend: batched greedy generation equals each request run alone (and the
 * independent reference continuation), a long prompt is prefilled between
 * the decode steps of a running stream, more streams than a batch has rows
 * all start, flow control, the heartbeat and the stall hook, the counters,
 * histograms and metrics text, and constrained decoding and logit_bias in
 * a batch.  Sessions: test-scheduler-sessions.c; admission and the budget:
 * test-scheduler-admission.c; the parts on their own: test-sched-*.c. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "engine/backend.h"
#include "grammar/grammar.h"
#include "sched/scheduler_impl.h"
#include "sched/scheduler.h"
#include "util/errbuf.h"
#include "sched_fixture.h"
#include "testutil.h"
#include "util/sderr.h"

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
	/* an id outside the vocabulary is the server's to refuse (gen_prepare):
	 * one that reaches the scheduler is a caller's bug, blaming no field */
	c = coll_new(s);
	c->bias[0] = (struct sampler_bias){.token = 1 << 20, .bias = 1};
	c->n_bias = 1;
	ck_assert_int_eq(submit(s, c, p->ids, p->n, 8, NULL, 0), SDERR_UNCHECKED);
	ck_assert_int_eq(c->error_field, SCHED_FIELD_NONE);
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
	tcase_add_test(tc, test_heartbeat_and_stall);
	tcase_add_test(tc, test_auto_budget_and_metrics);
	tcase_add_loop_test(tc, test_flow_control, 0, 2);
	tcase_add_test(tc, test_grammar_constrains_batch);
	tcase_add_test(tc, test_logit_bias);
	suite_add_tcase(s, tc);
	int failed = tu_suite_failures(s);
	fixture_free();
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
