#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fake_backend.h"

#define HANDLE_MAGIC 0x5ca1ab1eu

/* reg and reg_access alike; access -1 where reg was not told it. */
static int reg_common(struct fake_backend *f, void *addr, size_t len, int device, int rail,
                      int access, void *get_arg, void **handle)
{
    if (f->during_reg)
        f->during_reg(f->during_reg_arg);
    pthread_mutex_lock(&f->lock);
    int err = 0;
    size_t slot = device > 0 ? 1 : 0;
    if (f->fail_count > 0 && (f->fail_rail < 0 || f->fail_rail == rail)) {
        f->fail_count--;
        err = f->fail_errno;
    } else if (f->capacity && f->live_bytes[slot] + len > f->capacity) {
        err = ENOSPC;
    }
    pthread_mutex_unlock(&f->lock);
    if (err)
        return err;
    struct fake_handle *h = malloc(sizeof(*h));
    if (!h)
        return ENOMEM;
    h->start = (uintptr_t)addr;
    h->len = len;
    h->id = fake_id_at(f, (uintptr_t)addr);
    h->device = device;
    h->rail = rail;
    h->sync_memops = 0;
    h->access = access;
    h->get_arg = get_arg;
    h->magic = HANDLE_MAGIC;
    h->serial = (uint32_t)atomic_fetch_add(&f->regs, 1) + 1;
    if (f->on_handle)
        f->on_handle(f->on_handle_arg, h);
    atomic_fetch_add(&f->live, 1);
    atomic_fetch_add(&f->live_bytes[slot], len);
    *handle = h;
    return 0;
}

static int fake_reg(void *arg, void *addr, size_t len, int device, int rail, void **handle)
{
    return reg_common(arg, addr, len, device, rail, -1, NULL, handle);
}

static int fake_reg_access(void *arg, void *addr, size_t len, int device, int rail, int access,
                           void *get_arg, void **handle)
{
    return reg_common(arg, addr, len, device, rail, access, get_arg, handle);
}

void fake_tell_access(struct fake_backend *f)
{
    f->ops.reg = NULL;
    f->ops.reg_access = fake_reg_access;
}

static void fake_dereg(void *arg, void *handle)
{
    struct fake_backend *f = arg;
    struct fake_handle *h = handle;
    /* A double dereg or a foreign handle would trip this. */
    if (h->magic != HANDLE_MAGIC)
        abort();
    if (f->during_dereg)
        f->during_dereg(f->during_dereg_arg, h);
    h->magic = 0;
    atomic_fetch_add(&f->deregs, 1);
    atomic_fetch_sub(&f->live, 1);
    atomic_fetch_sub(&f->live_bytes[h->device > 0 ? 1 : 0], h->len);
    free(h);
}

static struct fake_alloc *find_locked(struct fake_backend *f, uintptr_t addr)
{
    for (int i = 0; i < f->nallocs; i++) {
        struct fake_alloc *a = &f->allocs[i];
        if (a->live && addr >= a->base && addr < a->base + a->size)
            return a;
    }
    return NULL;
}

static int fake_query(void *arg, const void *addr, size_t len, struct regcache_mem_info *info)
{
    struct fake_backend *f = arg;
    atomic_fetch_add(&f->queries, 1);
    if (f->query_status)
        return f->query_status;
    pthread_mutex_lock(&f->lock);
    struct fake_alloc *a = find_locked(f, (uintptr_t)addr);
    if (a) {
        info->base = a->base;
        info->size = a->size;
        info->buffer_id = a->pageable ? 0 : a->id;
        info->device = a->device;
        info->type = a->type;
        info->flags = a->flags;
    } else {
        /* Unknown memory looks like host memory, as CUDA reports it. */
        info->base = (uintptr_t)addr;
        info->size = len;
        info->buffer_id = 0;
        info->device = REGCACHE_DEVICE_HOST;
        info->type = REGCACHE_MEM_HOST;
    }
    pthread_mutex_unlock(&f->lock);
    if (f->during_query)
        f->during_query(f->during_query_arg, addr);
    return REGCACHE_OK;
}

void fake_init(struct fake_backend *f)
{
    memset(f, 0, sizeof(*f));
    pthread_mutex_init(&f->lock, NULL);
    f->next_id = 1000;
    f->ops.reg = fake_reg;
    f->ops.dereg = fake_dereg;
    f->ops.query = fake_query;
    f->ops.arg = f;
    f->fail_rail = -1;
}

uint64_t fake_alloc_as(struct fake_backend *f, const struct fake_alloc *like)
{
    pthread_mutex_lock(&f->lock);
    struct fake_alloc *a = &f->allocs[f->nallocs++];
    *a = *like;
    a->id = ++f->next_id;
    a->live = true;
    uint64_t id = a->id;
    pthread_mutex_unlock(&f->lock);
    return id;
}

uint64_t fake_alloc(struct fake_backend *f, uintptr_t base, size_t size, int device, int type)
{
    return fake_alloc_as(
        f, &(struct fake_alloc){ .base = base, .size = size, .device = device, .type = type });
}

void fake_free(struct fake_backend *f, uintptr_t base)
{
    pthread_mutex_lock(&f->lock);
    struct fake_alloc *a = find_locked(f, base);
    if (a)
        a->live = false;
    pthread_mutex_unlock(&f->lock);
}

uint64_t fake_realloc(struct fake_backend *f, uintptr_t base)
{
    pthread_mutex_lock(&f->lock);
    struct fake_alloc *a = find_locked(f, base);
    uint64_t id = a ? (a->id = ++f->next_id) : 0;
    pthread_mutex_unlock(&f->lock);
    return id;
}

uint64_t fake_id_at(struct fake_backend *f, uintptr_t addr)
{
    pthread_mutex_lock(&f->lock);
    struct fake_alloc *a = find_locked(f, addr);
    uint64_t id = a ? a->id : 0;
    pthread_mutex_unlock(&f->lock);
    return id;
}

void fake_params(struct fake_backend *f, struct regcache_params *p)
{
    regcache_params_init(p);
    p->backend = &f->ops;
}
