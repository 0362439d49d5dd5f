/* Offsets allocator of the CUDA backend's KV arena: one buffer of `size`
 * bytes; sink tiers are taken from the low end, window tiers from the high
 * end, so that the sinks of all sessions stay in one contiguous low range
 * (which an L2 access-policy window can cover).  It only hands out offsets;
 * the device buffer is the caller's.  Plain C, no CUDA. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CUDA_ARENA_ALIGN 256

struct cuda_arena_block {
	uint64_t off, size;
	bool low;
};

struct cuda_arena {
	uint64_t size;
	struct cuda_arena_block *blocks; /* (n) sorted by off */
	int n, cap;
};

void cuda_arena_init(struct cuda_arena *a, uint64_t size);
void cuda_arena_deinit(struct cuda_arena *a);
/* Allocates size bytes (rounded up to CUDA_ARENA_ALIGN) at the lowest
 * (low) or highest free place; 0 and *off, or -ENOSPC / -ENOMEM. */
int cuda_arena_alloc(struct cuda_arena *a, uint64_t size, bool low, uint64_t *off);
void cuda_arena_free(struct cuda_arena *a, uint64_t off);
/* End of the highest low block: [0, end) holds every sink tier. */
uint64_t cuda_arena_low_end(const struct cuda_arena *a);
/* Bytes in use. */
uint64_t cuda_arena_used(const struct cuda_arena *a);
