/* The views (sched_views.c) of given sessions and streams, no model and no
 * engine: the session list, the stream list (running ones first, finished,
 * cancelled and unnamed ones left out, a persistent session's client id
 * and cache), and one stream by its request id, scoped per API key. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/scheduler_impl.h"
#include "session/session_key.h"
#include "testutil.h"

#define ALICE "key:00112233445566aa"
#define BOB "key:00112233445566bb"

struct fx {
	struct scheduler s;
	struct sched_session sess[2];
	struct sched_session *sessions[2];
	struct sched_req req[5];
	struct sched_req *active[3], *queue[2];
};

static void req_set(struct sched_req *r, const char *rid, const char *owner,
                    enum sched_req_state st, struct sched_session *ss)
{
	snprintf(r->rid, sizeof(r->rid), "%s", rid);
	snprintf(r->owner, sizeof(r->owner), "%s", owner);
	r->state = r->pub_state = st;
	r->sess = ss;
}

/* Alice's persistent session 0a (12 tokens resident) and a one-shot one;
 * streams: alice's "r1" decoding on 0a with 5 tokens out, an unnamed one,
 * a finished one; queued: bob's "r2" and a cancelled "r3". */
static struct fx *fx_new(void)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct scheduler *s = &f->s;
	pthread_mutex_init(&s->mu, NULL);
	ck_assert_int_eq(session_key_make(ALICE, "0a", f->sess[0].id), 0);
	snprintf(f->sess[0].owner, sizeof(f->sess[0].owner), "%s", ALICE);
	f->sess[0].persistent = true;
	f->sess[0].stats.n_resident = 12;
	f->sess[0].stats.n_seen = 30;
	f->sess[0].has_pending = true;
	ck_assert_int_eq(session_key_make(BOB, "0b", f->sess[1].id), 0);
	snprintf(f->sess[1].owner, sizeof(f->sess[1].owner), "%s", BOB);
	f->sessions[0] = &f->sess[0];
	f->sessions[1] = &f->sess[1];
	s->sessions = f->sessions;
	s->n_sessions = 2;
	req_set(&f->req[0], "r1", ALICE, REQ_DECODE, &f->sess[0]);
	f->req[0].pub_generated = 5;
	f->req[0].req.n_prompt = 7;
	req_set(&f->req[1], "", ALICE, REQ_PREFILL, NULL);
	req_set(&f->req[2], "r0", ALICE, REQ_FINISHED, NULL);
	req_set(&f->req[3], "r2", BOB, REQ_QUEUED, NULL);
	req_set(&f->req[4], "r3", BOB, REQ_QUEUED, NULL);
	f->req[4].cancelled = true;
	for (int i = 0; i < 3; i++)
		f->active[i] = &f->req[i];
	f->queue[0] = &f->req[3];
	f->queue[1] = &f->req[4];
	s->active = f->active;
	s->n_active = 3;
	s->queue = f->queue;
	s->n_queue = 2;
	return f;
}

static void fx_free(struct fx *f)
{
	pthread_mutex_destroy(&f->s.mu);
	free(f);
}

START_TEST(test_list_sessions)
{
	struct fx *f = fx_new();
	struct sched_session_ref *a;
	size_t n;
	ck_assert_int_eq(scheduler_list_sessions(&f->s, &a, &n), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_str_eq(a[0].id, f->sess[0].id);
	ck_assert_str_eq(a[0].owner, ALICE);
	ck_assert_str_eq(a[1].owner, BOB);
	free(a);
	fx_free(f);
}
END_TEST

START_TEST(test_list_streams)
{
	struct fx *f = fx_new();
	struct sched_stream_info *a;
	size_t n;
	ck_assert_int_eq(scheduler_list_streams(&f->s, &a, &n), 0);
	ck_assert_uint_eq(n, 2); /* r1 running, r2 waiting */
	ck_assert_str_eq(a[0].id, "r1");
	ck_assert_str_eq(a[0].state, "decode");
	ck_assert_str_eq(a[0].session_id, "0a"); /* the client's id, not the key */
	ck_assert_int_eq(a[0].prompt_tokens, 7);
	ck_assert_int_eq(a[0].generated_tokens, 5);
	ck_assert_int_eq(a[0].cache.n_resident, 12);
	ck_assert_uint_eq(a[0].cache.n_seen, 31); /* with its pending token */
	ck_assert_str_eq(a[1].id, "r2");
	ck_assert_str_eq(a[1].state, "queued");
	ck_assert_str_eq(a[1].session_id, "");
	ck_assert_int_eq(a[1].cache.n_resident, 0); /* no cache while queued */
	free(a);
	fx_free(f);
}
END_TEST

START_TEST(test_stream_info_per_key)
{
	struct fx *f = fx_new();
	struct sched_stream_info o;
	ck_assert_int_eq(scheduler_stream_info(&f->s, ALICE, "r1", &o), 0);
	ck_assert_str_eq(o.owner, ALICE);
	ck_assert_int_eq(scheduler_stream_info(&f->s, BOB, "r1", &o), -ENOENT);
	ck_assert_int_eq(scheduler_stream_info(&f->s, NULL, "r1", &o), 0); /* anyone's */
	ck_assert_int_eq(scheduler_stream_info(&f->s, BOB, "r2", &o), 0);
	ck_assert_str_eq(o.state, "queued");
	ck_assert_int_eq(scheduler_stream_info(&f->s, NULL, "", &o), -ENOENT);
	ck_assert_int_eq(scheduler_stream_info(&f->s, NULL, "nope", &o), -ENOENT);
	fx_free(f);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sched-views");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_list_sessions);
	tcase_add_test(tc, test_list_streams);
	tcase_add_test(tc, test_stream_info_per_key);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
