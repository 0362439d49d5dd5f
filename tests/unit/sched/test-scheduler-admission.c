/* Admission on the real stories260K model and the CPU backend: under a
 * tiny KV budget (queue full, queue timeout with Retry-After, over-budget),
 * a reload of the scheduler's settings, prepare refusing and shrinking, and
 * a seeded random walk of a few hundred operations that checks the budget
 * invariants after every step. */
#include <check.h>
#include <errno.h>
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
#include "util/sderr.h"
#include "sched/scheduler.h"
#include "util/errbuf.h"
#include "sched_fixture.h"
#include "testutil.h"


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
	ck_assert_int_eq(waiting->error_field, SCHED_FIELD_NONE);
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
	enum sched_field field = SCHED_FIELD_NONE;
	ck_assert_int_eq(scheduler_session_create(s, &named, c, &field, err, sizeof(err)), -EEXIST);
	ck_assert_int_eq(field, SCHED_FIELD_SESSION_ID);
	named.id = "../etc";
	ck_assert_int_eq(scheduler_session_create(s, &named, c, &field, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(field, SCHED_FIELD_SESSION_ID);
	ck_assert_int_eq(scheduler_session_delete(s, "abc123"), 0);
	wait_idle(s);
	scheduler_free(s);
	config_deinit(&cfg);
	config_deinit(&cfg2);
	config_deinit(&cfg3);
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
	ck_assert_msg(rc == -ENOENT || rc == -EBUSY || rc == SDERR_CONFLICT || rc == -EAGAIN ||
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
		ck_assert_msg(c->error_rc == -EAGAIN || c->error_rc == SDERR_CONFLICT ||
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

int main(void)
{
	fixture_load();
	Suite *s = suite_create("scheduler-admission");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_admission_budget);
	tcase_add_test(tc, test_reconfigure);
	tcase_add_test(tc, test_prepare_refuses_and_shrinks);
	tcase_add_test(tc, test_random_walk_invariants);
	suite_add_tcase(s, tc);
	int failed = tu_suite_failures(s);
	fixture_free();
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
