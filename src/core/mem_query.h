/* How the cache learns what memory an address is: the CUDA driver, or a
 * custom backend's query callback.  The cache never calls CUDA directly. */
#ifndef RC_MEMORY_H
#define RC_MEMORY_H

#include <stdbool.h>
#include <stdint.h>

#include "regcache.h"

struct rc_memory {
    /* Full description of the memory at [addr, addr+len), on a miss.  For
     * GPU memory it also sets CU_POINTER_ATTRIBUTE_SYNC_MEMOPS the first time
     * it sees an allocation (before its first registration).  Memory the
     * driver does not know -- malloc memory, and also freed GPU memory,
     * which the driver cannot tell apart from it -- is reported as
     * REGCACHE_MEM_HOST with no buffer id.  Returns REGCACHE_OK, RANGE (the
     * range runs past its allocation), or CUDA. */
    int (*query)(void *ctx, const void *addr, size_t len, struct regcache_mem_info *info);
    /* The hit path's tag check: info->buffer_id set to the buffer id now at
     * addr (other fields as the implementation likes).  REGCACHE_OK, or
     * NOT_GPU when the memory is gone.  Must be as cheap as one
     * cuPointerGetAttribute(BUFFER_ID).  Of query's type, so that a
     * backend's query serves as both with no call in between. */
    int (*read_tag)(void *ctx, const void *addr, size_t len, struct regcache_mem_info *info);
    void *ctx;
    /* read_tag is a driver call, long enough that a cache line asked for
     * before it arrives meanwhile; a backend's query may be a few loads
     * (the "hits" rows: the null query beside the cuda one). */
    bool slow_tag;
};

/* The buffer id of the mapping at addr now.  A query that fails or sets
 * no id reads as 0, which no tag-checked entry has. */
static inline uint64_t rc_memory_tag(const struct rc_memory *m, uintptr_t addr)
{
    struct regcache_mem_info info;
    info.buffer_id = 0;
    return m->read_tag(m->ctx, (const void *)addr, 1, &info) == REGCACHE_OK ? info.buffer_id : 0;
}

/* Fill *m with the CUDA driver's implementation.  REGCACHE_ERR_UNSUPPORTED
 * (and m untouched) when no driver can be loaded. */
int rc_cuda_query(struct rc_memory *m);

/* The cache's choice: backend->query when the backend has one, else the
 * CUDA driver, else every range described as host memory. */
void rc_memory_select(const struct regcache_backend *backend, struct rc_memory *m);

/* Whether rc_memory_select() found neither: every range is host memory. */
bool rc_memory_host_only(const struct rc_memory *m);

#endif
