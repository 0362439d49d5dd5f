/* The CPU backend's thread pool.  threadpool_run() publishes a job by bumping
 * a generation counter; workers that are spinning see it within a few hundred
 * nanoseconds, sleeping ones are woken through a futex only when some worker
 * actually sleeps (counted in n_sleeping), so back-to-back calls inside one
 * token cost no system call.  Completion is counted the same way in reverse.
 * Tasks are claimed from an atomic counter.  It does not pin threads or
 * schedule priorities, and is Linux-only (futex). */
#include "engine/threadpool.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/errbuf.h"

/* Spin iterations before sleeping: long enough to bridge the gap between two
 * operations of one token, short enough not to steal a shared core for long
 * (a pause is ~60 ns here: about 120 us). */
#define SPIN_ITERS 2000

struct threadpool {
	int n_threads;
	pthread_t *workers; /* (n_threads - 1) */
	int n_started;
	/* The current job. */
	threadpool_task_fn fn;
	void *ctx;
	int n_tasks;
	_Atomic int next_task;
	_Atomic unsigned generation; /* bumped once per job; futex word for workers */
	_Atomic unsigned
	    n_pending;          /* workers still in the current job; futex word for the caller */
	_Atomic int n_sleeping; /* workers blocked on `generation` */
	_Atomic int caller_sleeping;
	_Atomic bool stop;
};

static void futex_wait(_Atomic unsigned *addr, unsigned expected)
{
	syscall(SYS_futex, (unsigned *)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic unsigned *addr)
{
	syscall(SYS_futex, (unsigned *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static void pool_work(struct threadpool *p, int thread)
{
	for (;;) {
		int task = atomic_fetch_add_explicit(&p->next_task, 1, memory_order_relaxed);
		if (task >= p->n_tasks)
			break;
		p->fn(p->ctx, task, thread);
	}
}

/* Waits until `generation` differs from `seen`; returns the new value. */
static unsigned worker_wait_job(struct threadpool *p, unsigned seen)
{
	for (int i = 0; i < SPIN_ITERS; i++) {
		unsigned g = atomic_load_explicit(&p->generation, memory_order_acquire);
		if (g != seen)
			return g;
		cpu_relax();
	}
	for (;;) {
		atomic_fetch_add(&p->n_sleeping, 1);
		futex_wait(&p->generation, seen);
		atomic_fetch_sub(&p->n_sleeping, 1);
		unsigned g = atomic_load(&p->generation);
		if (g != seen)
			return g;
	}
}

struct worker_arg {
	struct threadpool *pool;
	int thread;
};

static void *worker_main(void *arg)
{
	struct worker_arg wa = *(struct worker_arg *)arg;
	free(arg);
	struct threadpool *p = wa.pool;
	unsigned seen = 0;
	for (;;) {
		seen = worker_wait_job(p, seen);
		if (atomic_load(&p->stop))
			break;
		pool_work(p, wa.thread);
		if (atomic_fetch_sub(&p->n_pending, 1) == 1 && atomic_load(&p->caller_sleeping))
			futex_wake_all(&p->n_pending);
	}
	return NULL;
}

static void caller_wait_done(struct threadpool *p)
{
	for (int i = 0; i < SPIN_ITERS; i++) {
		if (atomic_load_explicit(&p->n_pending, memory_order_acquire) == 0)
			return;
		cpu_relax();
	}
	for (;;) {
		atomic_store(&p->caller_sleeping, 1);
		unsigned pending = atomic_load(&p->n_pending);
		if (pending == 0)
			break;
		futex_wait(&p->n_pending, pending);
	}
	atomic_store(&p->caller_sleeping, 0);
}

void threadpool_run(struct threadpool *p, int n_tasks, threadpool_task_fn fn, void *ctx)
{
	if (n_tasks <= 0)
		return;
	if (p->n_threads == 1 || n_tasks == 1) {
		for (int t = 0; t < n_tasks; t++)
			fn(ctx, t, 0);
		return;
	}
	p->fn = fn;
	p->ctx = ctx;
	p->n_tasks = n_tasks;
	atomic_store_explicit(&p->next_task, 0, memory_order_relaxed);
	atomic_store_explicit(&p->n_pending, (unsigned)(p->n_threads - 1), memory_order_relaxed);
	atomic_fetch_add(&p->generation, 1); /* seq_cst: publishes the job, then reads n_sleeping */
	if (atomic_load(&p->n_sleeping) > 0)
		futex_wake_all(&p->generation);
	pool_work(p, 0);
	caller_wait_done(p);
}

static int online_cores(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

int threadpool_new(int n_threads, struct threadpool **out, char *err, size_t err_len)
{
	*out = NULL;
	if (n_threads <= 0)
		n_threads = online_cores();
	if (n_threads > 1024)
		return err_set(err, err_len, -EINVAL, "threadpool: %d threads is too many",
		               n_threads);
	struct threadpool *p = calloc(1, sizeof(*p));
	if (!p)
		return err_set(err, err_len, -ENOMEM, "threadpool: out of memory");
	p->n_threads = n_threads;
	p->workers = calloc((size_t)n_threads, sizeof(*p->workers));
	if (!p->workers) {
		free(p);
		return err_set(err, err_len, -ENOMEM, "threadpool: out of memory");
	}
	for (int i = 1; i < n_threads; i++) {
		struct worker_arg *wa = malloc(sizeof(*wa));
		int rc = ENOMEM;
		if (wa) {
			wa->pool = p;
			wa->thread = i;
			rc = pthread_create(&p->workers[i - 1], NULL, worker_main, wa);
		}
		if (rc != 0) {
			free(wa);
			threadpool_free(p);
			return err_set(err, err_len, -rc, "threadpool: cannot start thread %d: %s",
			               i, strerror(rc));
		}
		p->n_started++;
	}
	*out = p;
	return 0;
}

void threadpool_free(struct threadpool *p)
{
	if (!p)
		return;
	atomic_store(&p->stop, true);
	atomic_fetch_add(&p->generation, 1);
	futex_wake_all(&p->generation);
	for (int i = 0; i < p->n_started; i++)
		pthread_join(p->workers[i], NULL);
	free(p->workers);
	free(p);
}

int threadpool_size(const struct threadpool *p)
{
	return p->n_threads;
}

void threadpool_split(int n, int parts, int part, int align, int *begin, int *end)
{
	if (align < 1)
		align = 1;
	int units = (n + align - 1) / align;
	int per = units / parts, extra = units % parts;
	int b = part * per + (part < extra ? part : extra);
	int e = b + per + (part < extra ? 1 : 0);
	*begin = b * align < n ? b * align : n;
	*end = e * align < n ? e * align : n;
}
