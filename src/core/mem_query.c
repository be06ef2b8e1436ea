/* Choosing where the cache learns what memory is: the backend's own query,
 * the CUDA driver, or -- with neither -- every range taken as host memory. */
#include "mem_query.h"

/* Without a driver nothing is GPU memory: describe the request itself as
 * host memory, which the cache then accepts or refuses by host_memory. */
static int host_query(void *ctx, const void *addr, size_t len, struct regcache_mem_info *info)
{
    (void)ctx;
    info->base = (uintptr_t)addr;
    info->size = len;
    info->buffer_id = 0;
    info->device = REGCACHE_DEVICE_HOST;
    info->type = REGCACHE_MEM_HOST;
    return REGCACHE_OK;
}

void rc_memory_select(const struct regcache_backend *backend, struct rc_memory *m)
{
    if (backend && backend->query) {
        m->query = backend->query;
        m->read_tag = backend->query;
        m->ctx = backend->arg;
        m->slow_tag = false;
        return;
    }
    if (rc_cuda_query(m) == REGCACHE_OK)
        return;
    m->query = host_query;
    m->read_tag = host_query;
    m->ctx = NULL;
    m->slow_tag = false;
}

bool rc_memory_host_only(const struct rc_memory *m)
{
    return m->query == host_query;
}
