/* Page-granular memory advice (see pages.h). */
#include "util/pages.h"

#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE /* Linux 5.14; older headers lack the name */
#define MADV_POPULATE_WRITE 23
#endif

static void advise_pages(const void *p, size_t bytes, int advice)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = ((uintptr_t)p + page - 1) & ~(uintptr_t)(page - 1);
	uintptr_t hi = ((uintptr_t)p + bytes) & ~(uintptr_t)(page - 1);
	if (hi > lo)
		madvise((void *)lo, hi - lo, advice);
}

void *pages_map(size_t bytes, bool huge)
{
	size_t extra = huge ? PAGES_HUGE_BYTES : 0;
	if (bytes == 0 || bytes > SIZE_MAX - extra)
		return NULL;
	unsigned char *p = mmap(NULL, bytes + extra, PROT_READ | PROT_WRITE,
	                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	if (!huge)
		return p;
	/* trim the mapping to the aligned block: head and tail are whole pages */
	uintptr_t at = ((uintptr_t)p + extra - 1) & ~(uintptr_t)(extra - 1);
	unsigned char *a = (unsigned char *)at;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t end = ((size_t)(a - p) + bytes + page - 1) & ~(page - 1);
	if (a > p)
		munmap(p, (size_t)(a - p));
	if (end < bytes + extra)
		munmap(p + end, bytes + extra - end);
	madvise(a, bytes, MADV_HUGEPAGE);
	return a;
}

void pages_unmap(void *p, size_t bytes)
{
	if (p)
		munmap(p, bytes);
}

void pages_populate(void *p, size_t bytes)
{
	advise_pages(p, bytes, MADV_POPULATE_WRITE);
}

void pages_release(const void *p, size_t bytes)
{
	advise_pages(p, bytes, MADV_DONTNEED);
}

void pages_discard(void *p, size_t bytes)
{
	advise_pages(p, bytes, MADV_DONTNEED);
}
