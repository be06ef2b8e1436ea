/* What a miss registers: the memory query's answer turned into a range to
 * register, the requests it may serve, and the buffer ids that keep it
 * valid. */
#include <stdlib.h>

#include "cache.h"
#include "host_mapping.h"
#include "last_error.h"
#include "status.h"

static int round_out(uintptr_t start, uintptr_t end, size_t align, uintptr_t *rs, uintptr_t *re)
{
    uintptr_t mask = (uintptr_t)align - 1;
    if (end > UINTPTR_MAX - mask)
        return rc_fail(REGCACHE_ERR_INVALID, "range end %#jx cannot be rounded to %zu bytes",
                       (uintmax_t)end, align);
    *rs = start & ~mask;
    *re = (end + mask) & ~mask;
    return REGCACHE_OK;
}

static int query(struct regcache *c, uintptr_t addr, size_t len, struct regcache_mem_info *info)
{
    *info = (struct regcache_mem_info){ 0 };
    /* A backend's query callback returns a bare status (it cannot set the
     * message): explain it here, or the message of whatever call failed
     * before would be left to explain this one. */
    rc_clear_error();
    int rc = c->mem.query(c->mem.ctx, (const void *)addr, len, info);
    if (rc != REGCACHE_OK && !rc_status_known(rc))
        return rc_fail(REGCACHE_ERR_BACKEND,
                       "the memory query for %p returned %d, which is no regcache status (a "
                       "query callback returns REGCACHE_OK or a REGCACHE_ERR_* code)",
                       (void *)addr, rc);
    if (rc != REGCACHE_OK && !regcache_last_error()[0])
        rc_set_error("the memory query for %p failed: %s (%s)", (void *)addr, regcache_err_name(rc),
                     regcache_strerror(rc));
    return rc;
}

static int add_mapping(struct rc_want *w, uintptr_t base, uint64_t id)
{
    struct rc_mapping *more = realloc(w->more, (w->nmore + 1) * sizeof(*more));
    if (!more)
        return rc_fail(REGCACHE_ERR_NO_MEMORY, "out of memory describing VMM mappings");
    more[w->nmore++] = (struct rc_mapping){ .base = base, .buffer_id = id };
    w->more = more;
    return REGCACHE_OK;
}

/* A request that runs past its first VMM mapping continues into the next
 * ones: each must be a mapping of the same device that starts where the
 * last ended.  *end grows to the end of the last mapping needed. */
static int span_mappings(struct regcache *c, struct rc_want *w,
                         const struct regcache_mem_info *first, uintptr_t *end)
{
    while (*end < w->end) {
        struct regcache_mem_info next;
        int rc = query(c, *end, w->end - *end, &next);
        if (rc != REGCACHE_OK)
            return rc;
        if (next.type != REGCACHE_MEM_DEVICE || next.base > *end || next.base + next.size <= *end)
            return rc_fail(REGCACHE_ERR_RANGE,
                           "[%p, %p) is not one piece of mapped memory: nothing is mapped at "
                           "%#jx (a hole after the VMM mapping that ends there)",
                           (void *)w->start, (void *)w->end, (uintmax_t)*end);
        if (!(next.flags & REGCACHE_MEM_MAPPING) || next.device != first->device)
            return rc_fail(REGCACHE_ERR_RANGE, "[%p, %p) spans two allocations: %#jx starts %s",
                           (void *)w->start, (void *)w->end, (uintmax_t)*end,
                           next.device != first->device
                               ? "memory of another device"
                               : "an allocation that is not a VMM mapping");
        rc = add_mapping(w, *end, next.buffer_id);
        if (rc != REGCACHE_OK)
            return rc;
        *end = next.base + next.size;
    }
    return REGCACHE_OK;
}

/* A request the NICs cannot register in one memory region: the transport
 * must split it, so nothing is registered. */
static int too_large(const struct regcache *c, const struct rc_want *w)
{
    return rc_fail(REGCACHE_ERR_TOO_LARGE,
                   "[%p, %p) needs a registration of %zu bytes, more than the largest memory "
                   "region the cache's NICs take (%zu bytes%s): split the transfer",
                   (void *)w->start, (void *)w->end, (size_t)(w->reg_end - w->reg_start),
                   c->max_reg,
                   c->opts.max_mr_size ? ", REGCACHE_MAX_MR_SIZE" : ": their max_mr_size");
}

/* Register the whole allocation [base, end) when asked to and it is not
 * too large for the budget nor for the NICs, else the request; rounded to
 * `align`.  The entry serves requests inside both the registration and the
 * allocation.  Inlined into its three callers: every miss takes one, and
 * out of line its frame cost the miss more than its work. */
static inline __attribute__((always_inline)) int choose_range(struct regcache *c, struct rc_want *w,
                                                              uintptr_t base, uintptr_t end,
                                                              size_t align, bool clip)
{
    struct rc_device *d = rc_device(c, w->slot);
    bool whole = c->opts.params.whole_allocation && end - base <= d->whole_max;
    int rc = whole ? round_out(base, end, align, &w->reg_start, &w->reg_end) : REGCACHE_OK;
    if (rc == REGCACHE_OK && (!whole || w->reg_end - w->reg_start > c->max_reg))
        rc = round_out(w->start, w->end, align, &w->reg_start, &w->reg_end);
    if (rc != REGCACHE_OK)
        return rc;
    if (w->reg_end - w->reg_start > c->max_reg)
        return too_large(c, w);
    w->match_start = clip && w->reg_start < base ? base : w->reg_start;
    w->match_end = clip && w->reg_end > end ? end : w->reg_end;
    return REGCACHE_OK;
}

/* Pageable memory: the request rounded to the alignment, inside the
 * mappings that hold it, so that nothing beyond them is pinned; rounded to
 * host pages only where those mappings cannot be learnt (the backend then
 * judges the address). */
static int choose_pageable_range(struct regcache *c, struct rc_want *w)
{
    uintptr_t lo, hi;
    (void)rc_device(c, w->slot); /* fixes the budget, as choose_range() does */
    if (!rc_host_mapping_span(w->start, w->end, &lo, &hi, &w->span_shared))
        return choose_range(c, w, w->start, w->end, c->host_page, false);
    int rc = round_out(w->start, w->end, c->opts.params.alignment, &w->reg_start, &w->reg_end);
    if (rc != REGCACHE_OK)
        return rc;
    w->reg_start = w->match_start = w->reg_start < lo ? lo : w->reg_start;
    w->reg_end = w->match_end = w->reg_end > hi ? hi : w->reg_end;
    w->span_start = lo;
    w->span_end = hi;
    return REGCACHE_OK;
}

/* Pageable memory up to the request's last byte: a request from it into
 * CUDA memory (a GPU allocation mapped right after a host mapping) is no
 * one registration.  Its last page asked, when that is not the first. */
static int pageable_to_the_end(struct regcache *c, struct rc_want *w)
{
    uintptr_t last = w->end - 1;
    if ((last ^ w->start) < c->host_page)
        return REGCACHE_OK;
    struct regcache_mem_info info;
    int rc = query(c, last, 1, &info);
    if (rc != REGCACHE_OK)
        return rc;
    if (info.type == REGCACHE_MEM_HOST && !info.buffer_id)
        return REGCACHE_OK;
    return rc_fail(REGCACHE_ERR_RANGE,
                   "[%p, %p) runs from pageable host memory into CUDA memory at %p",
                   (void *)w->start, (void *)w->end, (void *)last);
}

static int classify_host(struct regcache *c, struct rc_want *w,
                         const struct regcache_mem_info *info)
{
    if (!c->opts.params.host_memory)
        return rc_fail(REGCACHE_ERR_NOT_GPU,
                       "%p is not GPU memory (host memory is accepted only with "
                       "params.host_memory or REGCACHE_HOST_MEMORY=1)",
                       (void *)w->start);
    w->buffer_id = info->buffer_id;
    w->device = REGCACHE_DEVICE_HOST;
    w->slot = RC_HOST_SLOT;
    /* Pinned memory (cuMemAllocHost) is an allocation with a buffer id, and
     * the driver packs small ones into one page: clip to it as for GPU
     * memory.  Pageable memory is known by its mappings. */
    if (!info->buffer_id) {
        int rc = pageable_to_the_end(c, w);
        return rc != REGCACHE_OK ? rc : choose_pageable_range(c, w);
    }
    if (w->start < info->base || w->end > info->base + info->size)
        return rc_fail(REGCACHE_ERR_RANGE,
                       "[%p, %p) is not inside the pinned allocation [%#jx, %#jx)",
                       (void *)w->start, (void *)w->end, (uintmax_t)info->base,
                       (uintmax_t)(info->base + info->size));
    return choose_range(c, w, info->base, info->base + info->size, c->host_page, true);
}

static int classify_device(struct regcache *c, struct rc_want *w,
                           const struct regcache_mem_info *info)
{
    if (c->builtin && c->method_used == REGCACHE_METHOD_HOST)
        return rc_fail(REGCACHE_ERR_UNSUPPORTED,
                       "%p is GPU memory, but this cache found no GPU registration method "
                       "(host memory only): load nvidia_peermem or use a verbs provider with "
                       "dmabuf support",
                       (void *)w->start);
    if (info->device < 0 || info->device >= RC_MAX_DEVICES)
        return rc_fail(REGCACHE_ERR_UNSUPPORTED, "device ordinal %d is outside 0..%d", info->device,
                       RC_MAX_DEVICES - 1);
    uintptr_t end = info->base + info->size;
    if (w->start < info->base || w->start >= end)
        return rc_fail(REGCACHE_ERR_BACKEND,
                       "the memory query described [%#jx, %#jx), which does not hold %p",
                       (uintmax_t)info->base, (uintmax_t)end, (void *)w->start);
    w->buffer_id = info->buffer_id;
    w->device = info->device;
    w->slot = info->device;
    if (w->end > end) {
        if (!(info->flags & REGCACHE_MEM_MAPPING))
            return rc_fail(REGCACHE_ERR_RANGE,
                           "[%p, %p) runs past the end of its CUDA allocation [%#jx, %#jx)",
                           (void *)w->start, (void *)w->end, (uintmax_t)info->base, (uintmax_t)end);
        int rc = span_mappings(c, w, info, &end);
        if (rc != REGCACHE_OK)
            return rc;
    }
    return choose_range(c, w, info->base, end, c->opts.params.alignment, true);
}

int rc_classify(struct regcache *c, struct rc_want *w)
{
    struct regcache_mem_info info;
    int rc = query(c, w->start, w->end - w->start, &info);
    if (rc != REGCACHE_OK)
        return rc;
    switch (info.type) {
    case REGCACHE_MEM_MANAGED:
        return rc_fail(REGCACHE_ERR_MANAGED,
                       "%p is CUDA managed memory, which GPUDirect RDMA cannot register",
                       (void *)w->start);
    case REGCACHE_MEM_HOST:
        return classify_host(c, w, &info);
    case REGCACHE_MEM_DEVICE:
        return classify_device(c, w, &info);
    default:
        return rc_fail(REGCACHE_ERR_BACKEND, "the memory query reported unknown type %d",
                       info.type);
    }
}

void rc_want_fini(struct rc_want *w)
{
    free(w->more);
    w->more = NULL;
    w->nmore = 0;
}

bool rc_entry_memory_current(struct regcache *c, const struct regcache_entry *e)
{
    struct rc_want w = { .start = e->match_start, .end = e->match_end };
    bool same =
        rc_classify(c, &w) == REGCACHE_OK && w.buffer_id == e->buffer_id && w.nmore == e->nmore;
    for (uint32_t i = 0; same && i < w.nmore; i++)
        same = w.more[i].base == e->more[i].base && w.more[i].buffer_id == e->more[i].buffer_id;
    rc_want_fini(&w);
    return same;
}
