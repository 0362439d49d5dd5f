/* The CPU backend's thread pool: every task runs exactly once on a valid
 * thread, back-to-back calls (as within one token) work and are cheap, and
 * pools sleep and wake correctly after idling. */
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "engine/threadpool.h"
#include "testutil.h"

struct count_ctx {
	_Atomic int *hits; /* (n_tasks) */
	_Atomic int bad_thread;
	int n_threads;
};

static void count_task(void *ctx, int task, int thread)
{
	struct count_ctx *c = ctx;
	atomic_fetch_add(&c->hits[task], 1);
	if (thread < 0 || thread >= c->n_threads)
		atomic_store(&c->bad_thread, 1);
}

static void check_each_task_once(struct threadpool *p, int n_tasks)
{
	struct count_ctx c = {.n_threads = threadpool_size(p)};
	c.hits = calloc((size_t)n_tasks, sizeof(*c.hits));
	threadpool_run(p, n_tasks, count_task, &c);
	for (int i = 0; i < n_tasks; i++)
		ck_assert_int_eq(atomic_load(&c.hits[i]), 1);
	ck_assert_int_eq(atomic_load(&c.bad_thread), 0);
	free(c.hits);
}

START_TEST(test_tasks_run_once)
{
	int sizes[] = {1, 2, 3, 4, 7};
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		struct threadpool *p = NULL;
		char err[256];
		ck_assert_int_eq(threadpool_new(sizes[s], &p, err, sizeof(err)), 0);
		ck_assert_int_eq(threadpool_size(p), sizes[s]);
		for (int n = 0; n < 40; n++)
			check_each_task_once(p, n);
		check_each_task_once(p, 1000);
		threadpool_free(p);
	}
}
END_TEST

START_TEST(test_default_size_is_cores)
{
	struct threadpool *p = NULL;
	ck_assert_int_eq(threadpool_new(0, &p, NULL, 0), 0);
	ck_assert_int_eq(threadpool_size(p), (int)sysconf(_SC_NPROCESSORS_ONLN));
	threadpool_free(p);
}
END_TEST

static void add_task(void *ctx, int task, int thread)
{
	atomic_fetch_add((_Atomic long *)ctx, task + 1);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Many short dispatches, as a forward pass makes: all complete, and the
 * dispatch overhead is printed (about 1 us on an idle 2-core machine; the
 * bound only catches a pool that sleeps or polls instead of waking). */
START_TEST(test_many_dispatches)
{
	struct threadpool *p = NULL;
	ck_assert_int_eq(threadpool_new(2, &p, NULL, 0), 0);
	_Atomic long sum = 0;
	int n_calls = 5000;
	double t0 = now_s();
	for (int i = 0; i < n_calls; i++)
		threadpool_run(p, 2, add_task, &sum);
	double per_call = (now_s() - t0) / n_calls;
	ck_assert_int_eq(atomic_load(&sum), 3L * n_calls);
	printf("threadpool: %.2f us per 2-thread dispatch\n", per_call * 1e6);
	ck_assert(per_call < 2e-3);
	threadpool_free(p);
}
END_TEST

/* After idling long enough for the workers to sleep on the futex, a call
 * still wakes them and completes. */
START_TEST(test_wake_after_sleep)
{
	struct threadpool *p = NULL;
	ck_assert_int_eq(threadpool_new(3, &p, NULL, 0), 0);
	for (int round = 0; round < 3; round++) {
		usleep(20000);
		check_each_task_once(p, 9);
	}
	threadpool_free(p);
}
END_TEST

/* Jobs of varied sizes back to back, with uneven tasks, so that workers
 * arrive late, find the job done, or race for its last task: every task of
 * every job still runs exactly once. */
static void uneven_task(void *ctx, int task, int thread)
{
	if (task % 3 == 1)
		for (volatile int i = 0; i < 2000; i++)
			;
	count_task(ctx, task, thread);
}

START_TEST(test_stress_uneven)
{
	struct threadpool *p = NULL;
	ck_assert_int_eq(threadpool_new(3, &p, NULL, 0), 0);
	_Atomic int hits[16];
	for (int round = 0; round < 3000; round++) {
		int n = 2 + round % 14;
		for (int i = 0; i < n; i++)
			atomic_store(&hits[i], 0);
		struct count_ctx c = {.hits = hits, .n_threads = 3};
		threadpool_run(p, n, uneven_task, &c);
		for (int i = 0; i < n; i++)
			ck_assert_int_eq(atomic_load(&hits[i]), 1);
		ck_assert_int_eq(atomic_load(&c.bad_thread), 0);
		if (round % 500 == 0)
			usleep(2000); /* let the workers fall asleep now and then */
	}
	threadpool_free(p);
}
END_TEST

START_TEST(test_split)
{
	int b, e, prev = 0;
	for (int part = 0; part < 3; part++) {
		threadpool_split(103, 3, part, 4, &b, &e);
		ck_assert_int_eq(b, prev);
		ck_assert_int_eq(b % 4, 0);
		prev = e;
	}
	ck_assert_int_eq(prev, 103);
	threadpool_split(2, 4, 3, 4, &b, &e);
	ck_assert_int_eq(b, e); /* more parts than units: empty ranges */
}
END_TEST

int main(void)
{
	Suite *s = suite_create("threadpool");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_tasks_run_once);
	tcase_add_test(tc, test_default_size_is_cores);
	tcase_add_test(tc, test_many_dispatches);
	tcase_add_test(tc, test_wake_after_sleep);
	tcase_add_test(tc, test_stress_uneven);
	tcase_add_test(tc, test_split);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
