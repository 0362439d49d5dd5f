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

void pages_populate(void *p, size_t bytes)
{
	advise_pages(p, bytes, MADV_POPULATE_WRITE);
}

void pages_release(const void *p, size_t bytes)
{
	advise_pages(p, bytes, MADV_DONTNEED);
}
