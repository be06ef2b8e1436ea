#include <stdlib.h>
#include <string.h>

#include "entry.h"
#include "page_index.h"
#include "regcache.h"

#define INITIAL_SLOTS 16u

/* Page numbers are dense and aligned: a multiplicative mix spreads them;
 * the top bits pick the shard, the low bits the slot. */
static inline uint64_t page_hash(uintptr_t page)
{
    uint64_t h = (uint64_t)page * 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 29);
}

static inline struct rc_shard *shard_of(struct rc_page_index *idx, uint64_t h)
{
    return &idx->shards[h >> 58];
}

int rc_page_index_init(struct rc_page_index *idx, unsigned shift)
{
    idx->shift = shift;
    for (int i = 0; i < RC_SHARDS; i++) {
        struct rc_shard *s = &idx->shards[i];
        atomic_init(&s->lock.locked, 0);
        atomic_init(&s->hits, 0);
        s->used = 0;
        s->mask = INITIAL_SLOTS - 1;
        s->slots = calloc(INITIAL_SLOTS, sizeof(*s->slots));
        if (!s->slots) {
            rc_page_index_fini(idx);
            return REGCACHE_ERR_NO_MEMORY;
        }
    }
    return REGCACHE_OK;
}

void rc_page_index_fini(struct rc_page_index *idx)
{
    for (int i = 0; i < RC_SHARDS; i++) {
        free(idx->shards[i].slots);
        idx->shards[i].slots = NULL;
    }
}

struct regcache_entry *rc_page_index_hold(struct rc_page_index *idx, uintptr_t start,
                                          uintptr_t end)
{
    uintptr_t page = start >> idx->shift;
    uint64_t h = page_hash(page);
    struct rc_shard *s = shard_of(idx, h);
    struct regcache_entry *found = NULL;

    rc_spin_lock(&s->lock);
    for (uint32_t i = (uint32_t)h & s->mask; s->slots[i].entry; i = (i + 1) & s->mask) {
        struct regcache_entry *e = s->slots[i].entry;
        /* e cannot be freed while we hold the shard lock: removal clears
         * its slots under this lock before anyone frees it. */
        if (s->slots[i].page == page && rc_entry_covers(e, start, end) && rc_entry_try_hold(e)) {
            found = e;
            atomic_store_explicit(&s->hits,
                                  atomic_load_explicit(&s->hits, memory_order_relaxed) + 1,
                                  memory_order_relaxed);
            break;
        }
    }
    rc_spin_unlock(&s->lock);
    return found;
}

static void insert_slot(struct rc_slot *slots, uint32_t mask, uintptr_t page,
                        struct regcache_entry *e)
{
    uint32_t i = (uint32_t)page_hash(page) & mask;
    while (slots[i].entry)
        i = (i + 1) & mask;
    slots[i].page = page;
    slots[i].entry = e;
}

/* Writers are serialised by the cache lock, so the new table is built from
 * the old one without the shard lock; readers are shut out only for the
 * pointer swap. */
static int grow(struct rc_shard *s)
{
    uint32_t n = (s->mask + 1) * 2;
    struct rc_slot *slots = calloc(n, sizeof(*slots));
    if (!slots)
        return REGCACHE_ERR_NO_MEMORY;
    for (uint32_t i = 0; i <= s->mask; i++)
        if (s->slots[i].entry)
            insert_slot(slots, n - 1, s->slots[i].page, s->slots[i].entry);
    struct rc_slot *old = s->slots;
    rc_spin_lock(&s->lock);
    s->slots = slots;
    s->mask = n - 1;
    rc_spin_unlock(&s->lock);
    free(old);
    return REGCACHE_OK;
}

static int remember_page(struct regcache_entry *e, uintptr_t page)
{
    if (e->npages == e->pages_cap) {
        uint32_t cap = e->pages_cap * 2;
        uintptr_t *pages = malloc(cap * sizeof(*pages));
        if (!pages)
            return REGCACHE_ERR_NO_MEMORY;
        memcpy(pages, e->pages, e->npages * sizeof(*pages));
        if (e->pages != e->pages_inline)
            free(e->pages);
        e->pages = pages;
        e->pages_cap = cap;
    }
    e->pages[e->npages++] = page;
    return REGCACHE_OK;
}

int rc_page_index_add(struct rc_page_index *idx, struct regcache_entry *e, uintptr_t start)
{
    uintptr_t page = start >> idx->shift;
    for (uint32_t i = 0; i < e->npages; i++)
        if (e->pages[i] == page)
            return REGCACHE_OK;

    struct rc_shard *s = shard_of(idx, page_hash(page));
    /* At most half full keeps probe runs short. */
    if ((s->used + 1) * 2 > s->mask + 1 && grow(s) != REGCACHE_OK)
        return REGCACHE_ERR_NO_MEMORY;
    if (remember_page(e, page) != REGCACHE_OK)
        return REGCACHE_ERR_NO_MEMORY;
    rc_spin_lock(&s->lock);
    insert_slot(s->slots, s->mask, page, e);
    s->used++;
    rc_spin_unlock(&s->lock);
    return REGCACHE_OK;
}

/* Linear-probing deletion by shifting later members of the run back, so
 * lookups never need tombstones. */
static void delete_slot(struct rc_shard *s, uint32_t i)
{
    uint32_t j = i;
    for (;;) {
        j = (j + 1) & s->mask;
        if (!s->slots[j].entry)
            break;
        uint32_t home = (uint32_t)page_hash(s->slots[j].page) & s->mask;
        /* Move j into the hole unless its home lies cyclically in (i, j]. */
        bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            s->slots[i] = s->slots[j];
            i = j;
        }
    }
    s->slots[i].entry = NULL;
    s->used--;
}

void rc_page_index_remove_entry(struct rc_page_index *idx, struct regcache_entry *e)
{
    for (uint32_t k = 0; k < e->npages; k++) {
        uintptr_t page = e->pages[k];
        uint64_t h = page_hash(page);
        struct rc_shard *s = shard_of(idx, h);
        rc_spin_lock(&s->lock);
        for (uint32_t i = (uint32_t)h & s->mask; s->slots[i].entry; i = (i + 1) & s->mask) {
            if (s->slots[i].entry == e && s->slots[i].page == page) {
                delete_slot(s, i);
                break;
            }
        }
        rc_spin_unlock(&s->lock);
    }
    if (e->pages != e->pages_inline)
        free(e->pages);
    e->pages = e->pages_inline;
    e->npages = 0;
    e->pages_cap = RC_INLINE_PAGES;
}

uint64_t rc_page_index_hits(const struct rc_page_index *idx)
{
    uint64_t sum = 0;
    for (int i = 0; i < RC_SHARDS; i++)
        sum += atomic_load_explicit(&((struct rc_shard *)&idx->shards[i])->hits,
                                    memory_order_relaxed);
    return sum;
}
