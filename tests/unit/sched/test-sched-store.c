/* The store's side of the hand-over (sched_store.c) with a real folder
 * store in a temp dir and a second instance beside it: a create's named key
 * is leased before the scheduler's checks run and stays leased when they
 * pass, goes back when they refuse, and is refused itself when the store
 * holds it or another instance leases it; the owner's stored keys reach
 * the checks for its session limit; a restore's and a change's leases; a
 * fetch of nothing gives its lease back; the record of what left; the
 * writer runs its jobs in order and finishes them when stopped.  The
 * scheduler's checks and jobs are the test's own (callbacks); no model is
 * loaded and no scheduler made. */
#include <check.h>
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "sched/sched_store.h"
#include "session/store.h"
#include "testutil.h"

#define OWNER "key:00112233445566ff"

struct fx {
	char dir[64];
	struct sinkd_config cfg;
	pthread_mutex_t mu; /* the scheduler's lock, as the store is given it */
	struct sched_store st;
	struct session_store *other; /* instance "b" on the same folder */
	/* what the admit callback saw and says */
	int n_admit;
	struct sched_store_claim claim;
	char stored0[SESSION_KEY_LEN];
	int admit_rc;
};

static struct session_store *open_folder(const char *dir, const char *instance)
{
	struct session_store_options o = {.dir = dir,
	                                  .max_bytes = 1 << 20,
	                                  .lease_timeout_s = 30,
	                                  .ttl_s = 3600,
	                                  .sweep_interval_s = 3600,
	                                  .instance = instance};
	struct session_store *st = NULL;
	char err[SINKD_ERR_LEN] = "";
	int rc = session_store_open(&o, &st, err, sizeof(err));
	ck_assert_msg(rc == 0, "open %s: %d %s", dir, rc, err);
	return st;
}

static void fx_init(struct fx *f, bool with_store)
{
	struct config_errors errs = {0};
	char err[SINKD_ERR_LEN];
	memset(f, 0, sizeof(*f));
	ck_assert_int_eq(config_load(&f->cfg, NULL, NULL, 0, &errs), 0);
	config_errors_deinit(&errs);
	snprintf(f->dir, sizeof(f->dir), "/tmp/sinkd-sched-store-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(f->dir));
	pthread_mutex_init(&f->mu, NULL);
	ck_assert_msg(sched_store_init(&f->st, &f->cfg, NULL, &f->mu, err, sizeof(err)) == 0, "%s",
	              err);
	if (with_store)
		f->st.shared = open_folder(f->dir, "a");
	f->other = open_folder(f->dir, "b");
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

static void fx_deinit(struct fx *f)
{
	session_store_close(f->st.shared);
	session_store_close(f->other);
	sched_store_deinit(&f->st);
	pthread_mutex_destroy(&f->mu);
	config_deinit(&f->cfg);
	nftw(f->dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static int admit(void *arg, const struct sched_store_claim *claim, enum sched_field *field,
                 char *err, size_t err_len)
{
	struct fx *f = arg;
	f->n_admit++;
	f->claim = *claim;
	if (claim->n_stored)
		snprintf(f->stored0, sizeof(f->stored0), "%s", claim->stored[0]);
	*field = SCHED_FIELD_NONE;
	return f->admit_rc ? err_set(err, err_len, f->admit_rc, "refused by the test") : 0;
}

static int create(struct fx *f, const char *key, enum sched_lease lease, enum sched_field *field,
                  char *err, size_t err_len)
{
	*field = SCHED_FIELD_SESSION_ID;
	return sched_store_create(&f->st, OWNER, 4, key, lease, admit, f, field, err, err_len);
}

static void key_of(const char *id, char key[SESSION_KEY_LEN])
{
	ck_assert_int_eq(session_key_make(OWNER, id, key), 0);
}

START_TEST(test_create_keeps_its_lease)
{
	struct fx f;
	char key[SESSION_KEY_LEN], err[SINKD_ERR_LEN], holder[160];
	enum sched_field field;
	fx_init(&f, true);
	key_of("0123abcd", key);
	ck_assert_int_eq(create(&f, key, SCHED_LEASE_TAKE, &field, err, sizeof(err)), 0);
	ck_assert_int_eq(f.n_admit, 1);
	ck_assert(f.claim.leased);
	ck_assert_uint_eq(f.claim.generation, 0);
	ck_assert_str_eq(f.claim.id, key);
	/* the other instance cannot create it meanwhile */
	ck_assert_int_eq(
	    session_store_lease_take(f.other, key, NULL, holder, sizeof(holder), err, sizeof(err)),
	    -EBUSY);
	ck_assert_ptr_nonnull(strstr(holder, "a"));
	fx_deinit(&f);
}
END_TEST

START_TEST(test_refused_create_gives_lease_back)
{
	struct fx f;
	char key[SESSION_KEY_LEN], err[SINKD_ERR_LEN], holder[160];
	enum sched_field field;
	fx_init(&f, true);
	key_of("0123abcd", key);
	f.admit_rc = -EAGAIN; /* say, the budget is exhausted */
	ck_assert_int_eq(create(&f, key, SCHED_LEASE_TAKE, &field, err, sizeof(err)), -EAGAIN);
	ck_assert_str_eq(err, "refused by the test");
	ck_assert_int_eq(
	    session_store_lease_take(f.other, key, NULL, holder, sizeof(holder), err, sizeof(err)),
	    0);
	fx_deinit(&f);
}
END_TEST

START_TEST(test_stored_or_held_elsewhere_exists)
{
	struct fx f;
	char stored[SESSION_KEY_LEN], held[SESSION_KEY_LEN], err[SINKD_ERR_LEN], holder[160];
	enum sched_field field;
	fx_init(&f, true);
	key_of("0a", stored);
	key_of("0b", held);
	ck_assert_int_eq(session_store_put(f.other, stored, 3, "snap", 4, err, sizeof(err)), 0);
	ck_assert_int_eq(create(&f, stored, SCHED_LEASE_TAKE, &field, err, sizeof(err)), -EEXIST);
	ck_assert_int_eq(field, SCHED_FIELD_SESSION_ID);
	ck_assert_ptr_nonnull(strstr(err, "session 0a exists"));
	ck_assert_int_eq(
	    session_store_lease_take(f.other, held, NULL, holder, sizeof(holder), err, sizeof(err)),
	    0);
	ck_assert_int_eq(create(&f, held, SCHED_LEASE_TAKE, &field, err, sizeof(err)), -EEXIST);
	ck_assert_ptr_nonnull(strstr(err, "held by instance b"));
	ck_assert_int_eq(f.n_admit, 0); /* the scheduler's checks never ran */
	fx_deinit(&f);
}
END_TEST

START_TEST(test_owner_stored_keys_reach_the_checks)
{
	struct fx f;
	char key[SESSION_KEY_LEN], a[SESSION_KEY_LEN], err[SINKD_ERR_LEN];
	enum sched_field field;
	fx_init(&f, true);
	key_of("0123abcd", key);
	key_of("0a", a);
	ck_assert_int_eq(session_store_put(f.other, a, 1, "snap", 4, err, sizeof(err)), 0);
	ck_assert_int_eq(session_store_put(f.other, "0b", 1, "snap", 4, err, sizeof(err)), 0);
	ck_assert_int_eq(create(&f, key, SCHED_LEASE_TAKE, &field, err, sizeof(err)), 0);
	ck_assert_uint_eq(f.claim.n_stored, 1); /* its own, not the shared namespace's */
	ck_assert_str_eq(f.stored0, a);
	fx_deinit(&f);
}
END_TEST

START_TEST(test_without_store)
{
	struct fx f;
	char key[SESSION_KEY_LEN], err[SINKD_ERR_LEN];
	enum sched_field field;
	fx_init(&f, false);
	key_of("0123abcd", key);
	ck_assert_ptr_eq(sched_leave_store(&f.st), f.st.park); /* stored responses park */
	ck_assert_int_eq(create(&f, key, SCHED_LEASE_TAKE, &field, err, sizeof(err)), 0);
	ck_assert(!f.claim.leased);
	ck_assert_uint_eq(f.claim.n_stored, 0);
	/* a restore that took its lease itself keeps it */
	ck_assert_int_eq(create(&f, key, SCHED_LEASE_HELD, &field, err, sizeof(err)), 0);
	ck_assert(f.claim.leased);
	fx_deinit(&f);
}
END_TEST

START_TEST(test_left_list)
{
	struct fx f;
	struct sched_left_info info;
	fx_init(&f, false);
	pthread_mutex_lock(&f.mu);
	ck_assert_int_eq(sched_store_left_find_locked(&f.st, "k1", &info), -ENOENT);
	sched_store_left_remember_locked(&f.st, "k1", &(struct sched_left_info){.n_seen = 1});
	sched_store_left_remember_locked(&f.st, "k2", &(struct sched_left_info){.n_seen = 2});
	/* a second leave replaces the first record */
	sched_store_left_remember_locked(&f.st, "k1", &(struct sched_left_info){.n_seen = 3});
	ck_assert_uint_eq(f.st.n_left, 2);
	ck_assert_int_eq(sched_store_left_find_locked(&f.st, "k1", &info), 0);
	ck_assert_uint_eq(info.n_seen, 3);
	sched_store_left_forget_locked(&f.st, "k1");
	ck_assert_int_eq(sched_store_left_find_locked(&f.st, "k1", &info), -ENOENT);
	/* past SCHED_LEFT_MAX the oldest goes */
	char id[32];
	for (int i = 0; i < SCHED_LEFT_MAX; i++) {
		snprintf(id, sizeof(id), "n%d", i);
		sched_store_left_remember_locked(&f.st, id, &(struct sched_left_info){.n_seen = 9});
	}
	ck_assert_uint_eq(f.st.n_left, SCHED_LEFT_MAX);
	ck_assert_int_eq(sched_store_left_find_locked(&f.st, "k2", &info), -ENOENT);
	ck_assert_int_eq(sched_store_left_find_locked(&f.st, "n0", &info), 0);
	pthread_mutex_unlock(&f.mu);
	fx_deinit(&f);
}
END_TEST

/* The writer's jobs are the core's (the store only queues them): here a
 * number, and what the calls saw. */
struct sched_offload {
	int n;
	int begun; /* begin_locked ran first */
};

struct written {
	int order[8];
	int n;
	bool all_begun;
};

static void job_begin_locked(void *arg, struct sched_offload *j)
{
	(void)arg;
	j->begun = 1;
}

static void job_write(void *arg, struct sched_offload *j)
{
	struct written *w = arg;
	w->order[w->n++] = j->n;
	w->all_begun = w->all_begun && j->begun;
}

START_TEST(test_writer_runs_jobs_in_order)
{
	static const struct sched_store_writer_ops ops = {.begin_locked = job_begin_locked,
	                                                  .write = job_write};
	struct fx f;
	struct written w = {.all_begun = true};
	struct sched_offload jobs[3] = {{.n = 1}, {.n = 2}, {.n = 3}};
	fx_init(&f, false);
	pthread_mutex_lock(&f.mu);
	ck_assert_int_eq(sched_store_writer_push_locked(&f.st, &jobs[0]), -ESRCH); /* no writer */
	ck_assert_int_eq(sched_store_writer_start_locked(&f.st, &ops, &w), 0);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(sched_store_writer_push_locked(&f.st, &jobs[i]), 0);
	sched_store_writer_wake_locked(&f.st);
	pthread_mutex_unlock(&f.mu);
	/* the stop lets it finish what it was given */
	sched_store_writer_stop(&f.st);
	ck_assert(!f.st.writer_started);
	ck_assert_int_eq(w.n, 3);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(w.order[i], i + 1);
	ck_assert(w.all_begun);
	fx_deinit(&f);
}
END_TEST

START_TEST(test_restore_and_change_leases)
{
	struct fx f;
	char key[SESSION_KEY_LEN], stored[SESSION_KEY_LEN], err[SINKD_ERR_LEN], holder[160];
	uint64_t gen = 99;
	bool leased = true;
	/* without a store: no lease, nothing to refuse */
	fx_init(&f, false);
	key_of("0123abcd", key);
	ck_assert_int_eq(
	    sched_store_restore_lease(&f.st, key, "0123abcd", &gen, &leased, err, sizeof(err)), 0);
	ck_assert(!leased);
	ck_assert_uint_eq(gen, 0);
	fx_deinit(&f);

	fx_init(&f, true);
	key_of("0123abcd", key);
	key_of("0a", stored);
	ck_assert_int_eq(
	    sched_store_restore_lease(&f.st, key, "0123abcd", &gen, &leased, err, sizeof(err)), 0);
	ck_assert(leased);
	ck_assert_int_eq(
	    session_store_lease_take(f.other, key, NULL, holder, sizeof(holder), err, sizeof(err)),
	    -EBUSY);
	sched_store_lease_release(&f.st, key);
	/* a stored key, or one held elsewhere, exists */
	ck_assert_int_eq(session_store_put(f.other, stored, 3, "snap", 4, err, sizeof(err)), 0);
	ck_assert_int_eq(
	    sched_store_restore_lease(&f.st, stored, "0a", &gen, &leased, err, sizeof(err)),
	    -EEXIST);
	ck_assert_ptr_nonnull(strstr(err, "session 0a exists"));
	ck_assert_int_eq(
	    session_store_lease_take(f.other, key, NULL, holder, sizeof(holder), err, sizeof(err)),
	    0);
	ck_assert_int_eq(
	    sched_store_restore_lease(&f.st, key, "0123abcd", &gen, &leased, err, sizeof(err)),
	    -EEXIST);
	ck_assert_ptr_nonnull(strstr(err, "held by instance b"));
	/* a change of a session another instance holds */
	ck_assert_int_eq(sched_store_mark_generation(&f.st, key, 5, err, sizeof(err)), -EBUSY);
	ck_assert_ptr_nonnull(strstr(err, "held by instance b"));
	fx_deinit(&f);
}
END_TEST

START_TEST(test_fetch_of_nothing_gives_its_lease_back)
{
	struct fx f;
	char key[SESSION_KEY_LEN], err[SINKD_ERR_LEN], holder[160];
	unsigned char *buf = NULL;
	size_t len = 0;
	struct snapshot sn;
	uint64_t gen = 0;
	fx_init(&f, true);
	key_of("0123abcd", key);
	ck_assert_int_eq(
	    sched_store_fetch(&f.st, NULL, key, 1 << 20, &buf, &len, &sn, &gen, err, sizeof(err)),
	    -ENOENT);
	ck_assert_ptr_null(buf);
	ck_assert_int_eq(
	    session_store_lease_take(f.other, key, NULL, holder, sizeof(holder), err, sizeof(err)),
	    0);
	/* held by the other instance now: a fetch says where */
	ck_assert_int_eq(
	    sched_store_fetch(&f.st, NULL, key, 1 << 20, &buf, &len, &sn, &gen, err, sizeof(err)),
	    -EBUSY);
	ck_assert_ptr_nonnull(strstr(err, "held by instance b"));
	fx_deinit(&f);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sched-store");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_create_keeps_its_lease);
	tcase_add_test(tc, test_refused_create_gives_lease_back);
	tcase_add_test(tc, test_stored_or_held_elsewhere_exists);
	tcase_add_test(tc, test_owner_stored_keys_reach_the_checks);
	tcase_add_test(tc, test_without_store);
	tcase_add_test(tc, test_left_list);
	tcase_add_test(tc, test_writer_runs_jobs_in_order);
	tcase_add_test(tc, test_restore_and_change_leases);
	tcase_add_test(tc, test_fetch_of_nothing_gives_its_lease_back);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
