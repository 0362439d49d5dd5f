/* Persistent sessions on the real stories260K model and the CPU backend:
 * they continue and revise exactly, a cancelled request keeps the stream,
 * a revise within the window, a pinned prefix that stays in the sink tier
 * (the same logprobs as without eviction), and the session limits with the
 * expiry of sessions no request ever ran on; a stored response's session
 * brought back for its continuation stays until that request has run. */
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
	ck_assert_int_eq(c2->error_field, SCHED_FIELD_SESSION_ID);
	scheduler_cancel(s, c1->handle);
	coll_wait(c1);
	ck_assert(c1->finish == GEN_FINISH_CANCELLED || c1->finish == GEN_FINISH_LENGTH);
	coll_free(c1);
	coll_free(c2);

	c2 = coll_new(s);
	ck_assert_int_eq(submit(s, c2, b, 5, 5, "00000000000000000000000000000000", 0), -ENOENT);
	ck_assert_int_eq(c2->error_field, SCHED_FIELD_SESSION_ID);
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
	enum sched_field field = SCHED_FIELD_NONE;
	ck_assert_int_eq(scheduler_session_create(s, &bad, id, &field, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(field, SCHED_FIELD_WINDOW_SIZE);
	bad = (struct session_settings){.window_size = 0, .sink_keep_count = 1 << 30};
	ck_assert_int_eq(scheduler_session_create(s, &bad, id, &field, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(field, SCHED_FIELD_SINK_KEEP_COUNT);
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
	ck_assert_int_eq(submit(s, c, ids, 3, 4, id, 10), SDERR_CONFLICT);
	ck_assert_int_eq(c->error_field, SCHED_FIELD_REVISE_LAST_TOKENS);
	ck_assert_int_eq(run_one(s, ids, 3, 4, id, 9, NULL), 4);
	ck_assert_int_eq(scheduler_session_info(s, id, &info), 0);
	ck_assert_uint_eq(info.n_seen, 30 - 9 + 3 + 4);
	coll_free(c);
	scheduler_free(s); /* with a live session: frees it */
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
 * moved past it.  Out of range pins are SDERR_OUT_OF_RANGE (400). */
START_TEST(test_pinned_prefix)
{
	const char *ov6[] = {"inference.attention.dtype=float32", "inference.cache.window_size=16",
	                     "inference.cache.sink_keep_count=6"};
	const char *ov2[] = {"inference.attention.dtype=float32", "inference.cache.window_size=16",
	                     "inference.cache.sink_keep_count=2",
	                     "inference.cache.max_pinned_tokens=8",
	                     "inference.prefix_cache.max_bytes=0"}; /* the whole pinned bound */
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

	s = sched_make(&cfg, ov2, 5);
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
	ck_assert_int_eq(submit_pinned(s, c, pr, n_pr, 1, id, 4), SDERR_OUT_OF_RANGE);
	ck_assert_int_eq(c->error_field, SCHED_FIELD_PIN_PREFIX_TOKENS);
	coll_free(c);
	/* over max_pinned_tokens, over the prompt */
	c = coll_new(s);
	ck_assert_int_eq(submit_pinned(s, c, pr, n_pr, 1, NULL, 9), SDERR_OUT_OF_RANGE);
	ck_assert_int_eq(submit_pinned(s, c, pr, 3, 1, NULL, 4), SDERR_OUT_OF_RANGE);
	coll_free(c);
	/* a session with a smaller window than the pin */
	char small[SCHED_SESSION_ID_LEN];
	struct session_settings set = {.window_size = 4, .sink_keep_count = -1};
	ck_assert_int_eq(scheduler_session_create(s, &set, small, NULL, err, sizeof(err)), 0);
	c = coll_new(s);
	ck_assert_int_eq(submit_pinned(s, c, pr, n_pr, 1, small, 6), SDERR_OUT_OF_RANGE);
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

/* Sessions are bounded in total (limits.max_sessions: SDERR_MAX_SESSIONS, 503) and per
 * owner (owner_max: SDERR_OWNER_SESSIONS, 429, another owner unaffected), and a session
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
	ck_assert_int_eq(scheduler_session_create(s, &a, x, NULL, err, sizeof(err)), SDERR_OWNER_SESSIONS);
	ck_assert_ptr_nonnull(strstr(err, "limits.per_key.max_sessions"));
	ck_assert_int_eq(scheduler_session_create(s, &b, b1, NULL, err, sizeof(err)), 0);
	ck_assert_int_eq(scheduler_session_create(s, &b, x, NULL, err, sizeof(err)), SDERR_MAX_SESSIONS);
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
		/* the count and the reservation drop in separate steps of the
		 * expiry: wait for both */
		if (st.sessions == 1 && st.kv_bytes_reserved == bound)
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

/* Polls until the session has left for the park (5 s); returns whether it did. */
static bool left_for_park(struct scheduler *s, const char *id)
{
	struct sched_session_info info;
	for (int i = 0; i < 500; i++) {
		if (scheduler_session_info(s, id, &info) == -ENOENT)
			return true;
		usleep(10000);
	}
	return false;
}

/* A stored response's session leaves once its request ends; brought back
 * for a continuation and held, it stays until that request has run, however
 * long the caller takes to submit it; released unused, it leaves again. */
START_TEST(test_parked_session_held_until_its_request)
{
	struct sinkd_config cfg;
	char id[SCHED_SESSION_ID_LEN], err[SINKD_ERR_LEN];
	struct sched_session_info info;
	struct scheduler *s = sched_make(&cfg, NULL, 0);
	const struct ref_prompt *a = &fx.ref[0];
	struct session_settings set = {
	    .window_size = 0, .sink_keep_count = -1, .owner = "k1", .owner_max = 4, .park_when_idle = true};
	ck_assert_int_eq(scheduler_session_create(s, &set, id, NULL, err, sizeof(err)), 0);
	ck_assert_int_eq(run_one(s, a->ids, a->n, 4, id, 0, NULL), 4);
	ck_assert_msg(left_for_park(s, id), "the ended response's session stayed");
	ck_assert_int_eq(scheduler_session_fetch(s, id, err, sizeof(err)), 0);
	scheduler_session_park_when_idle(s, id, true);
	usleep(300 * 1000); /* many engine wake-ups: the sweep must leave it here */
	ck_assert_int_eq(scheduler_session_info(s, id, &info), 0);
	ck_assert_uint_eq(info.n_seen, a->n + 4);
	ck_assert_int_eq(run_one(s, NULL, 0, 2, id, 0, NULL), 2);
	ck_assert_msg(left_for_park(s, id), "the continued session stayed after its request");
	/* held, then released without a request: it leaves again */
	ck_assert_int_eq(scheduler_session_fetch(s, id, err, sizeof(err)), 0);
	scheduler_session_park_when_idle(s, id, true);
	usleep(100 * 1000);
	ck_assert_int_eq(scheduler_session_info(s, id, &info), 0);
	scheduler_session_park_when_idle(s, id, false);
	ck_assert_msg(left_for_park(s, id), "the released session stayed");
	ck_assert_int_eq(scheduler_session_fetch(s, id, err, sizeof(err)), 0);
	ck_assert_int_eq(scheduler_session_info(s, id, &info), 0);
	ck_assert_uint_eq(info.n_seen, a->n + 6);
	ck_assert_int_eq(scheduler_session_delete(s, id), 0);
	wait_idle(s);
	scheduler_free(s);
	config_deinit(&cfg);
}
END_TEST

int main(void)
{
	fixture_load();
	Suite *s = suite_create("scheduler-sessions");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_session_continue_and_revise);
	tcase_add_test(tc, test_session_cancel_keeps_stream);
	tcase_add_test(tc, test_session_revise_window);
	tcase_add_test(tc, test_pinned_prefix);
	tcase_add_test(tc, test_session_limits_and_empty_expiry);
	tcase_add_test(tc, test_parked_session_held_until_its_request);
	suite_add_tcase(s, tc);
	int failed = tu_suite_failures(s);
	fixture_free();
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
