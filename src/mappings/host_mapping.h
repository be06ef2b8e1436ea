/* Which mappings of this process hold a range of host memory: what a miss
 * of pageable memory rounds its registration to, so that it never pins
 * beyond the memory the application mapped. */
#ifndef RC_HOST_MAPPING_H
#define RC_HOST_MAPPING_H

#include <stdbool.h>
#include <stdint.h>

/* [*lo, *hi): the mappings that hold [start, end), one after the other
 * without a hole; *shared: whether one of them is shared (MAP_SHARED,
 * System V shared memory, a memfd's): its pages may go through its file
 * or another process.  False when part of the range is not mapped, or when the
 * kernel cannot be asked cheaply (no PROCMAP_QUERY: before Linux 6.11, or
 * /proc not readable); the caller then registers the request's pages only.
 * Three system calls and no allocation.  Thread safe. */
bool rc_host_mapping_span(uintptr_t start, uintptr_t end, uintptr_t *lo, uintptr_t *hi,
                          bool *shared);

/* Whether [start, end) is mapped without a hole, by private mappings only,
 * where rc_host_mapping_span() could not say: reads /proc/self/maps (its
 * text before Linux 6.11).  Thread safe. */
bool rc_host_mapping_private(uintptr_t start, uintptr_t end);

/* The mappings that overlap [start, end), whole, in address order: their
 * number (at most max, the first max of them), or -1 when the kernel cannot
 * be asked (/proc not readable).  PROCMAP_QUERY where the kernel has it,
 * else the text of /proc/self/maps (which allocates).  Thread safe. */
int rc_host_mappings(uintptr_t start, uintptr_t end, uintptr_t (*out)[2], int max);

#endif
