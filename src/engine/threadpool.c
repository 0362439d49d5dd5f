/* The CPU backend's thread pool.  threadpool_run() publishes a job by bumping
 * a generation counter; workers that are spinning see it within a few hundred
 * nanoseconds, sleeping ones are woken through a futex only when some worker
 * actually sleeps (counted in n_sleeping), so back-to-back calls inside one
 * token cost no system call.  Tasks are claimed from an atomic word that
 * carries the job's generation, and the caller waits for the tasks, not for
 * the workers: on a busy machine a worker that is not scheduled in time
 * costs nothing, the caller runs its tasks.  It does not pin threads or
 * schedule priorities, and is Linux-only (futex). */
#include "engine/threadpool.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/tuning.h"
#include "util/errbuf.h"

/* Spin iterations before sleeping (util/tuning.h). */
#define SPIN_ITERS TUNING_POOL_SPIN_ITERS

/* A published job; two slots so that the next job can be written while a
 * late worker still looks at the previous one. */
struct pool_job {
	_Atomic(threadpool_task_fn) fn;
	_Atomic(void *) ctx;
	_Atomic int n_tasks;
};

struct threadpool {
	int n_threads;
	pthread_t *workers; /* (n_threads - 1) */
	int n_started;
	unsigned last_generation;    /* caller side: of the latest job */
	struct pool_job jobs[2];     /* job g lives in jobs[g & 1] */
	_Atomic uint64_t claim;      /* (generation << 32) | next task of that job */
	_Atomic unsigned generation; /* of the latest job; futex word for workers */
	_Atomic unsigned n_done; /* tasks of the latest job finished; futex word for the caller */
	_Atomic int n_sleeping;  /* workers blocked on `generation` */
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

/* Claims and runs tasks of job `gen` until none is left or a newer job
 * replaced it.  The claim word carries the generation, so a worker that
 * arrives late can never take a task of a job it did not read. */
static void pool_work(struct threadpool *p, unsigned gen, int thread)
{
	struct pool_job *job = &p->jobs[gen & 1];
	for (;;) {
		uint64_t c = atomic_load(&p->claim);
		int task, n_tasks;
		do {
			n_tasks = atomic_load_explicit(&job->n_tasks, memory_order_relaxed);
			task = (int)(uint32_t)c;
			if ((unsigned)(c >> 32) != gen || task >= n_tasks)
				return;
		} while (!atomic_compare_exchange_weak(&p->claim, &c, c + 1));
		threadpool_task_fn fn = atomic_load_explicit(&job->fn, memory_order_relaxed);
		fn(atomic_load_explicit(&job->ctx, memory_order_relaxed), task, thread);
		if (atomic_fetch_add(&p->n_done, 1) + 1 == (unsigned)n_tasks &&
		    atomic_load(&p->caller_sleeping))
			futex_wake_all(&p->n_done);
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
		pool_work(p, seen, wa.thread);
	}
	return NULL;
}

/* Waits until every task is finished (not until every worker showed up: a
 * worker that was not scheduled in time finds nothing left to do). */
static void caller_wait_done(struct threadpool *p, unsigned n_tasks)
{
	for (int i = 0; i < SPIN_ITERS; i++) {
		if (atomic_load_explicit(&p->n_done, memory_order_acquire) == n_tasks)
			return;
		cpu_relax();
	}
	for (;;) {
		atomic_store(&p->caller_sleeping, 1);
		unsigned done = atomic_load(&p->n_done);
		if (done == n_tasks)
			break;
		futex_wait(&p->n_done, done);
	}
	atomic_store(&p->caller_sleeping, 0);
}

/* Makes job `gen` visible: its slot, then the claim word, then the
 * generation that wakes the workers. */
static void publish(struct threadpool *p, unsigned gen, threadpool_task_fn fn, void *ctx,
                    int n_tasks)
{
	struct pool_job *job = &p->jobs[gen & 1];
	atomic_store_explicit(&job->fn, fn, memory_order_relaxed);
	atomic_store_explicit(&job->ctx, ctx, memory_order_relaxed);
	atomic_store_explicit(&job->n_tasks, n_tasks, memory_order_relaxed);
	atomic_store_explicit(&p->n_done, 0, memory_order_relaxed);
	atomic_store(&p->claim, (uint64_t)gen << 32);
	atomic_store(&p->generation, gen); /* seq_cst: then reads n_sleeping */
	if (atomic_load(&p->n_sleeping) > 0)
		futex_wake_all(&p->generation);
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
	unsigned gen = ++p->last_generation;
	publish(p, gen, fn, ctx, n_tasks);
	pool_work(p, gen, 0);
	caller_wait_done(p, (unsigned)n_tasks);
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
	publish(p, ++p->last_generation, NULL, NULL, 0);
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
