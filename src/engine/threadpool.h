/* A fixed pool of worker threads for the CPU backend: one parallel-for that is
 * cheap enough to call many times per token (workers spin briefly on a
 * generation counter, then sleep on a futex).  Not re-entrant: one caller at
 * a time, and a task must not call threadpool_run itself. */
#pragma once

#include <stddef.h>

struct threadpool;

/* Runs one task.  task: in [0, n_tasks); thread: in [0, threadpool_size()),
 * stable for the duration of the call (index per-thread scratch with it). */
typedef void (*threadpool_task_fn)(void *ctx, int task, int thread);

/* n_threads <= 0: one per online core.  The caller is thread 0, so a pool of
 * n threads starts n-1 workers. */
int threadpool_new(int n_threads, struct threadpool **out, char *err, size_t err_len);
void threadpool_free(struct threadpool *p);
int threadpool_size(const struct threadpool *p);

/* Runs fn for every task in [0, n_tasks) across the pool (the caller takes
 * part) and returns when all are done.  Tasks are claimed in increasing
 * order by whichever thread is free, so split work into a few tasks per
 * thread to balance it. */
void threadpool_run(struct threadpool *p, int n_tasks, threadpool_task_fn fn, void *ctx);

/* Splits [0, n) into `parts` contiguous ranges of near-equal size, each a
 * multiple of `align` except the last; writes range `part`. */
void threadpool_split(int n, int parts, int part, int align, int *begin, int *end);
