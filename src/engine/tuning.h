/* The engine's fixed tuning constants, in one place, each with its unit and
 * why.  What depends on the machine is not here: it is read from the
 * machine (cache sizes in util/cpu.c, core count in backend_cpu.c).
 * Measurements behind the values: tests/bench/results/code-notes.md. */
#pragma once

#include <stddef.h>

/* Batch rows the CPU kernels multiply in one step (panels of 16 weight rows
 * against blocks of 8 batch rows, engine/panels.h); a part block costs
 * about what a whole one does. */
#define TUNING_CPU_BATCH_ROWS_GRANULE 8
/* The CUDA backend's batch granule: not yet measured on a GPU; the CPU's
 * value keeps the scheduler's pacing as it was. */
#define TUNING_CUDA_BATCH_ROWS_GRANULE 8

/* Work below which threads are not woken (multiply-adds): a wake-up and a
 * wait cost more than such work shared.  One limit per kind of work, as
 * their per-item cost differs. */
#define TUNING_ATTEND_PARALLEL_MIN_MACS 60000  /* attention of one layer */
#define TUNING_MATMUL_PARALLEL_MIN_MACS 200000 /* one matrix product */
#define TUNING_FORWARD_PARALLEL_MIN_MACS 8e6   /* a whole forward, small models */
/* A model of at most this many weight bytes (bytes) counts as staying in
 * the caches for the rule above: larger models stream their weights from
 * memory, where one core's share of the bandwidth is not enough.  Kept
 * fixed: VMs report the host's last-level cache, not their share of it. */
#define TUNING_FORWARD_SERIAL_MAX_WEIGHT_BYTES ((size_t)8 << 20)
/* A session with at least this many tokens in a batch (tokens) is attended
 * alone with its heads split over threads; fewer go one session per task. */
#define TUNING_HEAD_PARALLEL_MIN_TOKENS 4

/* Spin iterations (pause instructions) of an idle worker before it sleeps:
 * long enough to bridge two operations of one token, short enough not to
 * hold a shared core for long. */
#define TUNING_POOL_SPIN_ITERS 2000

/* Caches of ended sessions kept for the next session of the same geometry
 * (caches, bytes of resident full-precision tiers): fresh pages are slow to
 * fault in where the host takes back what a process frees (VMs). */
#define TUNING_CACHE_POOL_MAX 32
#define TUNING_CACHE_POOL_BYTES ((size_t)256 << 20)
