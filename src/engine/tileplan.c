/* The tile plan of the integer GEMMs (see tileplan.h): pure arithmetic on
 * the sizes it is given; it reads nothing from the machine itself. */
#include "engine/tileplan.h"
#include "util/tuning.h"

/* Blocks each thread gets at least (util/tuning.h). */
#define TILEPLAN_BLOCKS_PER_THREAD TUNING_TILEPLAN_BLOCKS_PER_THREAD

static size_t at_least(size_t v, size_t lo)
{
	return v < lo ? lo : v;
}

struct tile_plan tileplan_make(size_t xq_bytes, size_t group_bytes, int n_groups, int n_threads,
                               int vec_granule, const struct cpu_caches *c)
{
	struct tile_plan p;
	size_t granule = vec_granule > 0 ? (size_t)vec_granule : 1;
	size_t l2 = at_least(c->l2, 64 << 10);
	/* half of L2 for the pass's activations, a quarter for the block's
	 * weights, the rest for the outputs and what else runs */
	size_t vecs = (l2 / 2) / at_least(xq_bytes, 1);
	vecs = at_least(vecs / granule * granule, granule);
	p.vecs_per_pass = vecs > (1u << 20) ? 1 << 20 : (int)vecs;
	size_t groups = at_least((l2 / 4) / at_least(group_bytes, 1), 1);
	int threads = n_threads > 0 ? n_threads : 1;
	size_t balanced = at_least((size_t)(n_groups > 0 ? n_groups : 1) /
	                               ((size_t)threads * TILEPLAN_BLOCKS_PER_THREAD),
	                           1);
	groups = groups < balanced ? groups : balanced;
	p.groups_per_block = groups > (1u << 20) ? 1 << 20 : (int)groups;
	return p;
}
