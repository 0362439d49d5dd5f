/* sinkd's fixed tuning constants (engine kernels, the KV cache, the
 * scheduler's pacing), in one place, each with its unit and why.  Header
 * only, in util so that every layer can read it.  What depends on the
 * machine is not here: it is read from the machine (cache sizes in
 * util/cpu.c, core count in backend_cpu.c).  Measurements behind the
 * values: tests/bench/results/code-notes.md. */
#pragma once

#include <stddef.h>

/* Batch rows the CPU kernels multiply in one step (panels of 16 weight rows
 * against blocks of 8 batch rows, engine/panels.h); a part block costs
 * about what a whole one does. */
#define TUNING_CPU_BATCH_ROWS_GRANULE 8
/* The CUDA backend's batch granule: the CPU's value until one is chosen
 * for GPUs, so that the scheduler paces both backends alike. */
#define TUNING_CUDA_BATCH_ROWS_GRANULE 8

/* Work below which threads are not woken (multiply-adds): a wake-up and a
 * wait cost more than such work shared.  One limit per kind of work, as
 * their per-item cost differs. */
#define TUNING_ATTEND_PARALLEL_MIN_MACS 60000  /* attention of one layer */
#define TUNING_MATMUL_PARALLEL_MIN_MACS 200000 /* one matrix product */
#define TUNING_FORWARD_PARALLEL_MIN_MACS 8e6   /* a whole forward, small models */
/* A model of at most this many weight bytes (bytes) counts as staying in
 * the caches for the rule above: larger models stream their weights from
 * memory, which one core alone cannot read fast enough to keep up.  Kept
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
 * (caches, bytes of resident full-precision tiers): a fresh page is faulted
 * in and zeroed on first touch, and where the host takes back what a
 * process frees (VMs) every new cache would pay that again. */
#define TUNING_CACHE_POOL_MAX 32
#define TUNING_CACHE_POOL_BYTES ((size_t)256 << 20)

/* ---- matrix products (engine/matmul.c, engine/panels.c, engine/qdot_*.c) */

/* How far ahead of its loads a weight stream is prefetched (bytes): far
 * enough to cover a memory access at the rate a kernel consumes a row,
 * short enough that the lines are still in L1 when read.  One distance for
 * every kernel that streams weight rows. */
#define TUNING_PREFETCH_BYTES 1024
/* Rows per unit of work handed to a thread (rows): small enough to balance
 * the threads at the end of a product, large enough that each unit is one
 * long sequential read (and, for batches, a multiple of every tile
 * height). */
#define TUNING_MATMUL_BLOCK_ROWS_DECODE 64
#define TUNING_MATMUL_BLOCK_ROWS_BATCH 48
/* Decode blocks an owner claims at once (blocks): longer sequential runs
 * per call (the panel kernels read four streams over a call's rows), while
 * thieves still take one block, so the threads end together. */
#define TUNING_MATMUL_OWNER_BLOCKS_DECODE 8
/* Columns of the AVX2 packed GEMM's weight panel (columns): 16 rows of this
 * many fp32 columns stay in L1 while every batch row group runs over it. */
#define TUNING_MATMUL_GEMM_KC 256
/* Batch rows per pass of that GEMM over the weights (rows): this many rows
 * of x by TUNING_MATMUL_GEMM_KC columns stay in L2. */
#define TUNING_MATMUL_GEMM_BATCH 96
/* Columns the portable (plain C) path converts to fp32 per step (columns):
 * a stack buffer that stays in L1. */
#define TUNING_MATMUL_GENERIC_CHUNK 256
/* Panel groups (16 rows each) per batch tile and per decode step.  A
 * decode step reads its groups as streams, each over its own share of the
 * rows a call gets (not adjacent groups), so that each stream's prefetch
 * runs on into its next group and a call reads a few long runs instead of
 * restarting every stream every few groups. */
#define TUNING_PANELS_TILE_GROUPS 3
#define TUNING_PANELS_DECODE_GROUPS 4

/* Blocks of row groups each thread gets at least from a tile plan of the
 * integer GEMMs (blocks, engine/tileplan.c): enough that one finishing
 * early can take work from one still busy. */
#define TUNING_TILEPLAN_BLOCKS_PER_THREAD 4

/* ---- the KV cache (cache/attend.c, cache/sinkcache.c) */

/* Cache prefetch of the rows a head group reads, when they are too many to
 * load ahead (bytes per run): the runs are too short for the hardware
 * prefetcher to ramp up; longer runs are left to the hardware. */
#define TUNING_ATTEND_PREFETCH_MAX 8192
/* Runs loaded side by side when a query's rows are loaded ahead (runs):
 * enough independent misses in flight to hide memory latency, few enough
 * not to stall the core on outstanding misses. */
#define TUNING_ATTEND_LOAD_RUNS 4
/* A session's full-precision fronts go on huge pages when their block spans
 * 2 MiB up to this many bytes: a decode step then does not wait on address
 * translation; larger fronts (no quantization: the whole window is hot)
 * keep small pages and commit only what the tokens reach. */
#define TUNING_CACHE_HUGE_FRONT_MAX ((size_t)8 << 20)
/* Bytes of a block made resident at once when a token first writes into
 * them (bytes): one populate call instead of a fault per page, while what a
 * short session commits ahead stays small. */
#define TUNING_CACHE_POPULATE_CHUNK ((size_t)16384)

/* ---- batch pacing (sched/sched_pace.c) */

/* The pacing of prompt rows beside decoding streams (the rule: the top of
 * sched/sched_pace.c).  A batch carrying prompt rows may take PACE_FACTOR times
 * as long as a decode-only one: the room prompts get against the latency
 * streams see.  The cap on prompt rows starts at PACE_START_CAP (nothing
 * measured yet) and never goes below PACE_MIN_CAP, so a prompt always
 * advances; every PACE_REMEASURE-th paced batch is decode-only, so that its
 * measured time follows contexts as they grow. */
#define TUNING_PACE_FACTOR 1.5
#define TUNING_PACE_MIN_CAP 1.0
#define TUNING_PACE_START_CAP 4.0
#define TUNING_PACE_REMEASURE 8 /* paced batches between two decode-only ones */
/* A whole block beyond the cap is granted only while the measured rows of
 * one block add at most this share of a decode-only batch; dearer rows (a
 * prompt deep into a long window on a small model, where a row's attention
 * outweighs its matmul) are granted a few at a time, as their cost is
 * linear. */
#define TUNING_PACE_BLOCK_EXTRA_MAX 1.0
/* A prompt token costs at least this share of a decode batch. */
#define TUNING_PACE_TOKEN_FLOOR 0.01

/* Tokens per block of the prefix cache's chained hash (sched_prefix.h):
 * an unpinned prefix is kept and found in whole blocks; vLLM's default
 * block, small enough that a prompt loses at most 15 tokens of a match. */
#define TUNING_PREFIX_BLOCK_TOKENS 16
