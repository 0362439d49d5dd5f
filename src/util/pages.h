/* Page-granular memory: anonymous mappings (optionally on transparent huge
 * pages), making fresh memory resident in one call, and giving back the
 * pages of a read-only file mapping.  The advice calls act on the whole
 * pages inside the range given and ignore failures (they only change when
 * pages are faulted in, never what the memory holds). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define PAGES_HUGE_BYTES ((size_t)2 << 20)

/* Fresh zero-filled anonymous memory of bytes (> 0), not from the heap; NULL
 * when the system has none.  With huge, the block starts on a 2 MiB boundary
 * and is advised for transparent huge pages (MADV_HUGEPAGE): each 2 MiB of it
 * is one TLB entry instead of 512, which matters most under nested paging
 * (a VM); the kernel may still use small pages.
 * Every 2 MiB of it that is touched is committed whole. */
void *pages_map(size_t bytes, bool huge);
/* Unmaps a block of pages_map (the same bytes). */
void pages_unmap(void *p, size_t bytes);

/* Makes the pages inside [p, p + bytes) resident and writable in one call
 * (MADV_POPULATE_WRITE), much cheaper than a fault per 4 KiB page.  Before
 * Linux 5.14 the pages fault
 * in when first written, as without the call. */
void pages_populate(void *p, size_t bytes);

/* Drops the resident pages inside [p, p + bytes) (MADV_DONTNEED).  Only for
 * read-only file mappings, whose pages are read again from the file when
 * touched: on anonymous memory it would zero them. */
void pages_release(const void *p, size_t bytes);
/* The same for anonymous memory whose contents are no longer wanted: its
 * pages go back to the system and read as zero when touched again. */
void pages_discard(void *p, size_t bytes);
