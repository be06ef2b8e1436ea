/* Choosing where the cache learns what memory is: the backend's own query,
 * the CUDA driver, or -- with neither -- every range taken as host memory. */
#include "mem_query.h"

static int backend_query(void *ctx, const void *addr, size_t len, struct regcache_mem_info *info)
{
    const struct regcache_backend *b = ctx;
    return b->query(b->arg, addr, len, info);
}

static int backend_read_tag(void *ctx, const void *addr, uint64_t *buffer_id)
{
    struct regcache_mem_info info = { 0 };
    int rc = backend_query(ctx, addr, 1, &info);
    if (rc == REGCACHE_OK)
        *buffer_id = info.buffer_id;
    return rc;
}

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

static int host_read_tag(void *ctx, const void *addr, uint64_t *buffer_id)
{
    (void)ctx;
    (void)addr;
    *buffer_id = 0;
    return REGCACHE_OK;
}

/* The backend struct must outlive the cache (the cache keeps its own copy
 * and passes that as ctx). */
void rc_memory_select(const struct regcache_backend *backend, struct rc_memory *m)
{
    if (backend && backend->query) {
        m->query = backend_query;
        m->read_tag = backend_read_tag;
        m->ctx = (void *)backend;
        return;
    }
    if (rc_cuda_query(m) == REGCACHE_OK)
        return;
    m->query = host_query;
    m->read_tag = host_read_tag;
    m->ctx = NULL;
}
