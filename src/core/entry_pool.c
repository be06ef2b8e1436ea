#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "entry.h"
#include "entry_pool.h"

#define FIRST_SLAB_ENTRIES 64
/* 2 MiB of entries: a huge page where the kernel grants one, which keeps
 * the TLB from missing on every hit at a million entries. */
#define MAX_SLAB_ENTRIES (((size_t)2 << 20) / sizeof(struct regcache_entry))

/* The entries of the slab after one of n: slabs double up to the most. */
static size_t next_slab(size_t n)
{
    return n * 2 <= MAX_SLAB_ENTRIES ? n * 2 : MAX_SLAB_ENTRIES;
}

void rc_entry_pool_init(struct rc_entry_pool *p)
{
    memset(p, 0, sizeof(*p));
    p->next_slab_entries = FIRST_SLAB_ENTRIES;
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
    size_t bytes = n * sizeof(struct regcache_entry);
    size_t align = n == MAX_SLAB_ENTRIES ? ((size_t)2 << 20) : 64;
    struct regcache_entry *slab;
    if (posix_memalign((void **)&slab, align, bytes))
        return REGCACHE_ERR_NO_MEMORY;
    if (n == MAX_SLAB_ENTRIES)
        madvise(slab, bytes, MADV_HUGEPAGE); /* a hint: failure changes nothing */
    memset(slab, 0, bytes);
    for (size_t i = 0; i < n; i++) {
        atomic_init(&slab[i].refs, RC_DETACHED);
        slab[i].state = RC_FREE;
        slab[i].link_next = p->free;
        p->free = &slab[i];
    }
    p->slabs[p->nslabs++] = slab;
    p->next_slab_entries = next_slab(n);
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
        if ((uintptr_t)e >= start && (uintptr_t)e < start + n * sizeof(struct regcache_entry))
            return true;
        n = next_slab(n);
    }
    return false;
}

void rc_entry_pool_fini(struct rc_entry_pool *p)
{
    for (size_t i = 0; i < p->nslabs; i++)
        free(p->slabs[i]);
    free(p->slabs);
    rc_entry_pool_init(p);
}
