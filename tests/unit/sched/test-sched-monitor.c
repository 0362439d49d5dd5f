/* The streaming-perplexity monitor (sched_monitor.c) from given NLLs and
 * logits rows, no model: a session's first window is its baseline, a
 * running perplexity that rises past the alert ratio is logged once (with
 * the word "perplexity") and counted until it falls back, input and
 * generated tokens land in their own histograms at the flush, and input
 * sampling scores every K-th offered token. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/geometry.h"
#include "config/config.h"
#include "sched/sched_monitor.h"
#include "util/log.h"
#include "testutil.h"

/* A session of 4 sinks and a window of 12: the first window is the tokens
 * predicted at stream indexes 0..15. */
struct stream {
	struct sched_perplexity ppl;
	uint64_t offered;
	struct sched_monitor_stream ms;
};

static void stream_init(struct stream *t)
{
	memset(t, 0, sizeof(*t));
	struct cache_geometry geom = {.n_layers = 1,
	                              .n_kv_heads = 1,
	                              .head_dim = 8,
	                              .rope_dim = 8,
	                              .rope_theta = 10000.0,
	                              .strategy = CACHE_STRATEGY_SLIDING_WINDOW,
	                              .sink_keep_count = 4,
	                              .window_size = 12,
	                              .full_precision_recent = 12,
	                              .anchor_promote = 0.5f,
	                              .anchor_demote_steps = 1};
	ck_assert_uint_eq(cache_geometry_capacity_tokens(&geom), 16);
	t->ms = (struct sched_monitor_stream){.ppl = &t->ppl,
	                                      .first_window = cache_geometry_capacity_tokens(&geom),
	                                      .session_id = "t-0123abcd",
	                                      .request_id = "req-1"};
}

/* Scores n tokens of NLL nll from stream index *pos on. */
static void feed(struct sched_monitor *m, struct stream *t, uint64_t *pos, int n, double nll,
                 bool input)
{
	for (int i = 0; i < n; i++)
		sched_monitor_add(m, &t->ms, nll, input, (*pos)++);
}

START_TEST(test_alert_once_per_rise)
{
	char *text = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&text, &len);
	struct sinkd_log *log = log_new(mem, LOG_INFO, LOG_FORMAT_TEXT);
	struct sched_monitor m;
	struct stream t;
	uint64_t pos = 0;
	sched_monitor_init(&m, log, 4);
	m.set = (struct sched_monitor_settings){.alert_ratio = 2.0};
	stream_init(&t);
	const struct sched_perplexity *p = &t.ppl;

	feed(&m, &t, &pos, 16, 1.0, false); /* the first window: the baseline */
	ck_assert_uint_eq(p->first_tokens, 16);
	feed(&m, &t, &pos, 16, 1.5, false); /* ratio e^0.5 < 2: quiet */
	ck_assert(fabs(p->ratio - exp(0.5)) < 1e-9);
	ck_assert_uint_eq(m.alerts, 0);
	feed(&m, &t, &pos, 32, 3.0, false); /* running mean 2.25: ratio e^1.25 > 2 */
	ck_assert(p->alerting);
	ck_assert_uint_eq(p->alerts, 1);
	ck_assert_uint_eq(m.alerts, 1);
	feed(&m, &t, &pos, 64, 3.0, false); /* still above: no second alert */
	ck_assert_uint_eq(m.alerts, 1);
	feed(&m, &t, &pos, 512, 1.0, false); /* back below the ratio */
	ck_assert(!p->alerting);
	feed(&m, &t, &pos, 2048, 4.0, false); /* a second rise: a second alert */
	ck_assert_uint_eq(m.alerts, 2);
	ck_assert_uint_eq(p->alerts, 2);
	/* a token the model gave -inf teaches nothing */
	uint64_t n = p->generated_tokens;
	sched_monitor_add(&m, &t.ms, INFINITY, false, pos++);
	ck_assert_uint_eq(p->generated_tokens, n);

	fflush(mem);
	ck_assert_ptr_nonnull(strstr(text, "perplexity rose above the session's first window"));
	ck_assert_ptr_nonnull(strstr(text, "t-0123abcd"));
	char *second = strstr(strstr(text, "perplexity rose") + 1, "perplexity rose");
	ck_assert_ptr_nonnull(second);
	ck_assert_ptr_null(strstr(second + 1, "perplexity rose")); /* two lines, not more */
	sched_monitor_deinit(&m);
	log_free(log);
	fclose(mem);
	free(text);
}
END_TEST

/* What the flush hands over, per kind: count and sum. */
struct observed {
	uint64_t n[2];
	double sum[2];
};

static void observe(void *arg, double nll, bool input)
{
	struct observed *o = arg;
	o->n[input]++;
	o->sum[input] += nll;
}

START_TEST(test_histograms_at_flush)
{
	struct observed o = {0};
	struct sched_monitor m;
	struct stream t;
	uint64_t pos = 0, alerts = 99;
	sched_monitor_init(&m, NULL, 4);
	m.set = (struct sched_monitor_settings){.alert_ratio = 2.0};
	stream_init(&t);
	feed(&m, &t, &pos, 5, 0.5, true);
	feed(&m, &t, &pos, 3, 2.0, false);
	/* nothing handed over before the flush (the histograms are [mu]) */
	ck_assert_uint_eq(o.n[1], 0);
	sched_monitor_flush_locked(&m, observe, &o, &alerts);
	ck_assert_uint_eq(alerts, 0);
	ck_assert_uint_eq(o.n[1], 5);
	ck_assert(fabs(o.sum[1] - 2.5) < 1e-9);
	ck_assert_uint_eq(o.n[0], 3);
	ck_assert(fabs(o.sum[0] - 6.0) < 1e-9);
	ck_assert_uint_eq(t.ppl.input_tokens, 5);
	ck_assert_uint_eq(t.ppl.generated_tokens, 3);
	/* flushed once: a second flush adds nothing */
	sched_monitor_flush_locked(&m, observe, &o, &alerts);
	ck_assert_uint_eq(o.n[1], 5);
	sched_monitor_deinit(&m);
}
END_TEST

START_TEST(test_rows_scored_against_targets)
{
	struct sched_monitor m;
	struct stream t;
	sched_monitor_init(&m, NULL, 4);
	stream_init(&t);
	/* a uniform row: every token has NLL log 4 */
	float row[4] = {1, 1, 1, 1};
	ck_assert(fabs(sched_monitor_nll(row, 4, 2) - log(4.0)) < 1e-5);
	/* two rows of a batch scored against their next input tokens */
	float logits[2 * 4] = {0, 0, 0, 0, /* uniform */ 10, 0, 0, 0 /* token 0 sure */};
	sched_monitor_batch_begin(&m);
	ck_assert(sched_monitor_score_room(&m));
	sched_monitor_score_row(&m, &t.ms, 0, 3, 1);
	ck_assert(sched_monitor_score_room(&m));
	sched_monitor_score_row(&m, &t.ms, 1, 0, 2);
	sched_monitor_score_batch(&m, logits);
	ck_assert_uint_eq(t.ppl.input_tokens, 2);
	ck_assert(t.ppl.input_nll > log(4.0) && t.ppl.input_nll < log(4.0) + 0.01);
	/* a sampled token: scored on the row as it was before sampling */
	float sampled[4] = {0, 0, 5, 0};
	sched_monitor_keep_raw(&m, sampled);
	sampled[2] = -INFINITY; /* what a grammar or a bias may do to the row */
	sched_monitor_add_generated(&m, &t.ms, 2, 3);
	ck_assert_uint_eq(t.ppl.generated_tokens, 1);
	ck_assert(t.ppl.generated_nll < 0.03);
	sched_monitor_deinit(&m);
}
END_TEST

START_TEST(test_input_sampling)
{
	struct stream t;
	stream_init(&t);
	struct sched_monitor_settings off = {.input = MONITOR_INPUT_OFF, .every = 4};
	struct sched_monitor_settings all = {.input = MONITOR_INPUT_ALL, .every = 4};
	struct sched_monitor_settings some = {.input = MONITOR_INPUT_SAMPLE, .every = 4};
	int n_off = 0, n_all = 0, n_some = 0;
	for (int i = 0; i < 40; i++) {
		n_off += sched_monitor_wants_input(&t.offered, &off);
		n_all += sched_monitor_wants_input(&t.offered, &all);
		n_some += sched_monitor_wants_input(&t.offered, &some);
	}
	ck_assert_int_eq(n_off, 0);
	ck_assert_int_eq(n_all, 40);
	ck_assert_int_eq(n_some, 10);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sched-monitor");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_alert_once_per_rise);
	tcase_add_test(tc, test_histograms_at_flush);
	tcase_add_test(tc, test_rows_scored_against_targets);
	tcase_add_test(tc, test_input_sampling);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
