/* How a tiled integer GEMM over packed weight rows walks its operands:
 * weights interleaved in row groups (engine/qpack.h) against B activation
 * vectors quantized once per product (engine/qdot.h).  The sizes come from
 * the machine's caches (util/cpu.h), passed in, so that tests can plan for
 * made-up machines. */
#pragma once

#include <stddef.h>

#include "util/cpu.h"

/* The plan of one product.  A thread takes a block of row groups; for each
 * pass of up to vecs_per_pass activation vectors it runs every group of the
 * block against them, register tile by register tile. */
struct tile_plan {
	/* Activation vectors of one pass: they stay in about half of L2 while
	 * every row group of the block reads them (a multiple of the kernel's
	 * vector granule, at least one granule). */
	int vecs_per_pass;
	/* Row groups of a thread's unit of work: their weights stay in L2
	 * beside a pass's activations, so passes after the first read them
	 * from L2; fewer when the matrix has too few groups to give each
	 * thread several blocks. */
	int groups_per_block;
};

/* The plan for activation vectors of xq_bytes each, weight row groups of
 * group_bytes each (every column of the group's rows), n_groups groups in
 * the matrix, n_threads threads, and a register tile of vec_granule
 * vectors, on a machine with caches c. */
struct tile_plan tileplan_make(size_t xq_bytes, size_t group_bytes, int n_groups, int n_threads,
                               int vec_granule, const struct cpu_caches *c);
