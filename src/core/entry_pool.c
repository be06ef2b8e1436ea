#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "entry.h"
#include "entry_pool.h"

#define FIRST_SLAB_ENTRIES 64
/* 2 MiB of entries: a huge page where the kernel grants one, which keeps
 * the TLB from missing on every hit at a million entries. */
#define SLAB_BYTES ((size_t)2 << 20)

static size_t max_slab(const struct rc_entry_pool *p)
{
    size_t n = SLAB_BYTES / p->stride;
    return n > FIRST_SLAB_ENTRIES ? n : FIRST_SLAB_ENTRIES;
}

/* The entries of the slab after one of n: slabs double up to the most. */
static size_t next_slab(const struct rc_entry_pool *p, size_t n)
{
    return n * 2 <= max_slab(p) ? n * 2 : max_slab(p);
}

static struct regcache_entry *nth(void *slab, size_t stride, size_t i)
{
    return (struct regcache_entry *)((char *)slab + i * stride);
}

void rc_entry_pool_init(struct rc_entry_pool *p, size_t priv_size)
{
    memset(p, 0, sizeof(*p));
    p->next_slab_entries = FIRST_SLAB_ENTRIES;
    p->priv_size = priv_size;
    /* Entries stay 64-byte aligned, their private data too. */
    p->stride = sizeof(struct regcache_entry) + ((priv_size + 63) & ~(size_t)63);
}

static int add_slab(struct rc_entry_pool *p)
{
    if (p->nslabs == p->slab_cap) {
        size_t cap = p->slab_cap ? p->slab_cap * 2 : 8;
        void **slabs = realloc(p->slabs, cap * sizeof(*slabs));
        if (!slabs)
            return REGCACHE_ERR_NO_MEMORY;
        p->slabs = slabs;
        p->slab_cap = cap;
    }
    size_t n = p->next_slab_entries;
    size_t bytes = n * p->stride;
    bool huge = bytes >= SLAB_BYTES;
    void *slab;
    if (posix_memalign(&slab, huge ? SLAB_BYTES : 64, bytes))
        return REGCACHE_ERR_NO_MEMORY;
    if (huge)
        madvise(slab, bytes, MADV_HUGEPAGE); /* a hint: failure changes nothing */
    memset(slab, 0, bytes);
    for (size_t i = 0; i < n; i++) {
        struct regcache_entry *e = nth(slab, p->stride, i);
        atomic_init(&e->refs, RC_DETACHED);
        e->state = RC_FREE;
        e->link_next = p->free;
        p->free = e;
    }
    p->slabs[p->nslabs++] = slab;
    p->next_slab_entries = next_slab(p, n);
    return REGCACHE_OK;
}

struct regcache_entry *rc_entry_pool_get(struct rc_entry_pool *p)
{
    if (!p->free && add_slab(p))
        return NULL;
    struct regcache_entry *e = p->free;
    p->free = e->link_next;
    e->link_next = NULL;
    return e;
}

void rc_entry_pool_put(struct rc_entry_pool *p, struct regcache_entry *e)
{
    e->link_next = p->free;
    p->free = e;
}

bool rc_entry_pool_owns(const struct rc_entry_pool *p, const void *e)
{
    size_t n = FIRST_SLAB_ENTRIES;
    for (size_t i = 0; i < p->nslabs; i++) {
        uintptr_t start = (uintptr_t)p->slabs[i];
        if ((uintptr_t)e >= start && (uintptr_t)e < start + n * p->stride)
            return true;
        n = next_slab(p, n);
    }
    return false;
}

void rc_entry_pool_fini(struct rc_entry_pool *p)
{
    for (size_t i = 0; i < p->nslabs; i++)
        free(p->slabs[i]);
    free(p->slabs);
    rc_entry_pool_init(p, p->priv_size);
}
