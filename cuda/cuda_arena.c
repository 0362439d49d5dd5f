/* First-fit offsets allocator for the KV arena of the CUDA backend: low
 * allocations (sink tiers) from the bottom, high ones (window tiers) from
 * the top.  Blocks are kept sorted; sessions are few (hundreds), so linear
 * scans are fine.  It knows nothing about CUDA or caches. */
#include "cuda_arena.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void cuda_arena_init(struct cuda_arena *a, uint64_t size)
{
	memset(a, 0, sizeof(*a));
	a->size = size / CUDA_ARENA_ALIGN * CUDA_ARENA_ALIGN;
}

void cuda_arena_deinit(struct cuda_arena *a)
{
	free(a->blocks);
	memset(a, 0, sizeof(*a));
}

static int arena_insert(struct cuda_arena *a, int at, uint64_t off, uint64_t size, bool low)
{
	if (a->n == a->cap) {
		int cap = a->cap ? a->cap * 2 : 64;
		struct cuda_arena_block *b = realloc(a->blocks, (size_t)cap * sizeof(*b));
		if (!b)
			return -ENOMEM;
		a->blocks = b;
		a->cap = cap;
	}
	memmove(&a->blocks[at + 1], &a->blocks[at], (size_t)(a->n - at) * sizeof(*a->blocks));
	a->blocks[at] = (struct cuda_arena_block){off, size, low};
	a->n++;
	return 0;
}

/* Gap i lies before block i (i == n: after the last block). */
static void arena_gap(const struct cuda_arena *a, int i, uint64_t *begin, uint64_t *end)
{
	*begin = i == 0 ? 0 : a->blocks[i - 1].off + a->blocks[i - 1].size;
	*end = i == a->n ? a->size : a->blocks[i].off;
}

int cuda_arena_alloc(struct cuda_arena *a, uint64_t size, bool low, uint64_t *off)
{
	uint64_t need = (size + CUDA_ARENA_ALIGN - 1) / CUDA_ARENA_ALIGN * CUDA_ARENA_ALIGN;
	if (need == 0)
		need = CUDA_ARENA_ALIGN;
	for (int k = 0; k <= a->n; k++) {
		int i = low ? k : a->n - k;
		uint64_t b, e;
		arena_gap(a, i, &b, &e);
		if (e - b < need)
			continue;
		*off = low ? b : e - need;
		return arena_insert(a, i, *off, need, low);
	}
	return -ENOSPC;
}

void cuda_arena_free(struct cuda_arena *a, uint64_t off)
{
	for (int i = 0; i < a->n; i++)
		if (a->blocks[i].off == off) {
			memmove(&a->blocks[i], &a->blocks[i + 1],
			        (size_t)(a->n - i - 1) * sizeof(*a->blocks));
			a->n--;
			return;
		}
}

uint64_t cuda_arena_low_end(const struct cuda_arena *a)
{
	uint64_t end = 0;
	for (int i = 0; i < a->n; i++)
		if (a->blocks[i].low && a->blocks[i].off + a->blocks[i].size > end)
			end = a->blocks[i].off + a->blocks[i].size;
	return end;
}

uint64_t cuda_arena_used(const struct cuda_arena *a)
{
	uint64_t used = 0;
	for (int i = 0; i < a->n; i++)
		used += a->blocks[i].size;
	return used;
}
