#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "entry.h"
#include "page_index.h"
#include "regcache.h"

#define INITIAL_SLOTS 16u

#define HUGE ((size_t)2 << 20)
/* Tables from this size on come from huge pages: with 100k entries the
 * shards' tables take megabytes that a hit reaches at random, and in 4 KiB
 * pages nearly every probe would also miss the TLB. */
#define HUGE_TABLE ((size_t)64 << 10)

/* size bytes from the index's huge-page chunks (zeroed: fresh mappings). */
static void *huge_alloc(struct rc_page_index *idx, size_t size)
{
    struct rc_huge_chunk *c = idx->chunks;
    size = (size + 63) & ~(size_t)63;
    if (!c || c->size - c->used < size) {
        size_t bytes = (sizeof(*c) + size + HUGE - 1) & ~(HUGE - 1);
        /* Over-map by one huge page and trim, for 2 MiB alignment. */
        char *p =
            mmap(NULL, bytes + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return NULL;
        char *aligned = (char *)(((uintptr_t)p + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
        if (aligned > p)
            munmap(p, (size_t)(aligned - p));
        munmap(aligned + bytes, (size_t)(p + HUGE - aligned));
        madvise(aligned, bytes, MADV_HUGEPAGE); /* a hint: failure changes nothing */
        c = (struct rc_huge_chunk *)aligned;
        c->next = idx->chunks;
        c->size = bytes;
        c->used = (sizeof(*c) + 63) & ~(size_t)63;
        idx->chunks = c;
    }
    void *t = (char *)c + c->used;
    c->used += size;
    return t;
}

static struct rc_slot_table *new_table(struct rc_page_index *idx, uint32_t slots)
{
    size_t bytes = sizeof(struct rc_slot_table) + slots * sizeof(struct rc_slot);
    bool huge = bytes >= HUGE_TABLE;
    struct rc_slot_table *t = huge ? huge_alloc(idx, bytes) : calloc(1, bytes);
    if (t) {
        t->mask = slots - 1;
        t->huge = huge;
    }
    return t;
}

static void free_table(struct rc_slot_table *t)
{
    if (t && !t->huge)
        free(t);
}

int rc_page_index_init(struct rc_page_index *idx, unsigned shift)
{
    idx->shift = shift;
    idx->retired = NULL;
    idx->chunks = NULL;
    for (int i = 0; i < RC_SHARDS; i++) {
        struct rc_shard *s = &idx->shards[i];
        atomic_init(&s->seq, 0);
        s->used = 0;
        struct rc_slot_table *t = new_table(idx, INITIAL_SLOTS);
        atomic_init(&s->table, t);
        if (!t) {
            rc_page_index_fini(idx);
            return REGCACHE_ERR_NO_MEMORY;
        }
    }
    return REGCACHE_OK;
}

void rc_page_index_fini(struct rc_page_index *idx)
{
    for (int i = 0; i < RC_SHARDS; i++) {
        free_table(atomic_load_explicit(&idx->shards[i].table, memory_order_relaxed));
        atomic_store_explicit(&idx->shards[i].table, NULL, memory_order_relaxed);
    }
    while (idx->retired) {
        struct rc_slot_table *next = idx->retired->retired_next;
        free_table(idx->retired);
        idx->retired = next;
    }
    while (idx->chunks) {
        struct rc_huge_chunk *next = idx->chunks->next;
        munmap(idx->chunks, idx->chunks->size);
        idx->chunks = next;
    }
}

/* The writer half of the seqlock (see rc_page_index_probe). */
static void write_begin(struct rc_shard *s)
{
    uint64_t seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
    atomic_store_explicit(&s->seq, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
}

static void write_end(struct rc_shard *s)
{
    uint64_t seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
    atomic_store_explicit(&s->seq, seq + 1, memory_order_release);
}

static void copy_slot(struct rc_slot *to, struct rc_slot *from)
{
#define COPY(field)                                                                             \
    atomic_store_explicit(&to->field, atomic_load_explicit(&from->field, memory_order_relaxed), \
                          memory_order_relaxed)
    COPY(page);
    COPY(match_start);
    COPY(match_end);
    COPY(buffer_id);
    COPY(stamp);
    COPY(rails);
    COPY(device_slot);
    COPY(several);
    COPY(entry);
#undef COPY
}

/* Put a filled slot (page, entry, match range) into t's first free place on
 * its probe run. */
static void insert_slot(struct rc_slot_table *t, struct rc_slot *from)
{
    uint32_t i =
        (uint32_t)rc_page_hash(atomic_load_explicit(&from->page, memory_order_relaxed)) & t->mask;
    while (atomic_load_explicit(&t->slots[i].entry, memory_order_relaxed))
        i = (i + 1) & t->mask;
    copy_slot(&t->slots[i], from);
}

/* The new table is filled while readers keep using the old one (writers
 * are serialised by the cache lock); only the pointer swap is a write. */
static int grow(struct rc_page_index *idx, struct rc_shard *s)
{
    struct rc_slot_table *old = atomic_load_explicit(&s->table, memory_order_relaxed);
    struct rc_slot_table *t = new_table(idx, (old->mask + 1) * 2);
    if (!t)
        return REGCACHE_ERR_NO_MEMORY;
    for (uint32_t i = 0; i <= old->mask; i++) {
        if (atomic_load_explicit(&old->slots[i].entry, memory_order_relaxed))
            insert_slot(t, &old->slots[i]);
    }
    write_begin(s);
    atomic_store_explicit(&s->table, t, memory_order_release);
    write_end(s);
    old->retired_next = idx->retired;
    idx->retired = old;
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

/* Under the lock: list e under `page` in its shard, which has room. */
static void list_page(struct rc_page_index *idx, struct regcache_entry *e, uintptr_t page)
{
    struct rc_shard *s = rc_shard_of(idx, rc_page_hash(page));
    struct rc_slot filled;
    atomic_init(&filled.page, page);
    atomic_init(&filled.entry, e);
    atomic_init(&filled.match_start, atomic_load_explicit(&e->match_start, memory_order_relaxed));
    atomic_init(&filled.match_end, atomic_load_explicit(&e->match_end, memory_order_relaxed));
    atomic_init(&filled.buffer_id, e->buffer_id);
    atomic_init(&filled.stamp, atomic_load_explicit(&e->last_use, memory_order_relaxed));
    atomic_init(&filled.rails, atomic_load_explicit(&e->rails_ready, memory_order_relaxed));
    atomic_init(&filled.device_slot, (uint16_t)e->device_slot);
    atomic_init(&filled.several, e->more != NULL);
    write_begin(s);
    insert_slot(atomic_load_explicit(&s->table, memory_order_relaxed), &filled);
    write_end(s);
    s->used++;
}

int rc_page_index_add(struct rc_page_index *idx, struct regcache_entry *e, uintptr_t start)
{
    uintptr_t page = start >> idx->shift;
    for (uint32_t i = 0; i < e->npages; i++)
        if (e->pages[i] == page)
            return REGCACHE_OK;

    struct rc_shard *s = rc_shard_of(idx, rc_page_hash(page));
    struct rc_slot_table *t = atomic_load_explicit(&s->table, memory_order_relaxed);
    /* At most half full keeps probe runs short. */
    if ((s->used + 1) * 2 > t->mask + 1 && grow(idx, s) != REGCACHE_OK)
        return REGCACHE_ERR_NO_MEMORY;
    if (remember_page(e, page) != REGCACHE_OK)
        return REGCACHE_ERR_NO_MEMORY;
    list_page(idx, e, page);
    return REGCACHE_OK;
}

/* Linear-probing deletion by shifting later members of the run back, so
 * lookups never need tombstones. */
static void delete_slot(struct rc_slot_table *t, uint32_t i)
{
    uint32_t j = i;
    for (;;) {
        j = (j + 1) & t->mask;
        struct regcache_entry *e = atomic_load_explicit(&t->slots[j].entry, memory_order_relaxed);
        if (!e)
            break;
        uintptr_t page = atomic_load_explicit(&t->slots[j].page, memory_order_relaxed);
        uint32_t home = (uint32_t)rc_page_hash(page) & t->mask;
        /* Move j into the hole unless its home lies cyclically in (i, j]. */
        bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            copy_slot(&t->slots[i], &t->slots[j]);
            i = j;
        }
    }
    atomic_store_explicit(&t->slots[i].entry, NULL, memory_order_relaxed);
}

/* The slot that lists e under page, in shard *s; NULL if none does. */
static struct rc_slot *slot_of(struct rc_page_index *idx, const struct regcache_entry *e,
                               uintptr_t page, struct rc_shard **s)
{
    uint64_t h = rc_page_hash(page);
    *s = rc_shard_of(idx, h);
    struct rc_slot_table *t = atomic_load_explicit(&(*s)->table, memory_order_relaxed);
    struct regcache_entry *x;
    for (uint32_t i = (uint32_t)h & t->mask;
         (x = atomic_load_explicit(&t->slots[i].entry, memory_order_relaxed)) != NULL;
         i = (i + 1) & t->mask)
        if (x == e && atomic_load_explicit(&t->slots[i].page, memory_order_relaxed) == page)
            return &t->slots[i];
    return NULL;
}

void rc_page_index_unlist(struct rc_page_index *idx, struct regcache_entry *e)
{
    for (uint32_t k = 0; k < e->npages; k++) {
        struct rc_shard *s;
        struct rc_slot *slot = slot_of(idx, e, e->pages[k], &s);
        if (!slot)
            continue;
        struct rc_slot_table *t = atomic_load_explicit(&s->table, memory_order_relaxed);
        write_begin(s);
        delete_slot(t, (uint32_t)(slot - t->slots));
        write_end(s);
        s->used--;
    }
}

/* Its slots left room that nothing else took (writers hold the lock):
 * listing them again needs no growth. */
void rc_page_index_relist(struct rc_page_index *idx, struct regcache_entry *e)
{
    for (uint32_t k = 0; k < e->npages; k++)
        list_page(idx, e, e->pages[k]);
}

void rc_page_index_forget(struct regcache_entry *e)
{
    if (e->pages != e->pages_inline)
        free(e->pages);
    e->pages = e->pages_inline;
    e->npages = 0;
    e->pages_cap = RC_INLINE_PAGES;
}

void rc_page_index_remove_entry(struct rc_page_index *idx, struct regcache_entry *e)
{
    rc_page_index_unlist(idx, e);
    rc_page_index_forget(e);
}

void rc_page_index_refresh(struct rc_page_index *idx, struct regcache_entry *e)
{
    unsigned rails = atomic_load_explicit(&e->rails_ready, memory_order_relaxed);
    for (uint32_t k = 0; k < e->npages; k++) {
        struct rc_shard *s;
        struct rc_slot *slot = slot_of(idx, e, e->pages[k], &s);
        if (!slot)
            continue;
        write_begin(s);
        atomic_store_explicit(&slot->rails, rails, memory_order_relaxed);
        write_end(s);
    }
}

#ifdef RC_DEBUG
#include <stdio.h>

static void broken(const char *what, const void *e)
{
    fprintf(stderr, "regcache: page index broken: %s (entry %p)\n", what, e);
    abort();
}

/* Is (page, e) in the index? */
static bool listed(struct rc_page_index *idx, uintptr_t page, const struct regcache_entry *e)
{
    struct rc_shard *s;
    return slot_of(idx, e, page, &s) != NULL;
}

void rc_page_index_check(struct rc_page_index *idx)
{
    for (int s = 0; s < RC_SHARDS; s++) {
        struct rc_shard *sh = &idx->shards[s];
        if (atomic_load_explicit(&sh->seq, memory_order_relaxed) & 1)
            broken("a shard left odd", NULL);
        struct rc_slot_table *t = atomic_load_explicit(&sh->table, memory_order_relaxed);
        uint32_t used = 0;
        for (uint32_t i = 0; i <= t->mask; i++) {
            struct regcache_entry *e =
                atomic_load_explicit(&t->slots[i].entry, memory_order_relaxed);
            if (!e)
                continue;
            used++;
            uintptr_t page = atomic_load_explicit(&t->slots[i].page, memory_order_relaxed);
            if (e->state != RC_READY)
                broken("a slot names an entry that is not ready", e);
            bool mine = false;
            for (uint32_t k = 0; k < e->npages; k++)
                mine |= e->pages[k] == page;
            if (!mine)
                broken("a slot names a page its entry does not list", e);
            if (atomic_load_explicit(&t->slots[i].rails, memory_order_relaxed) !=
                atomic_load_explicit(&e->rails_ready, memory_order_relaxed))
                broken("a slot's rails differ from its entry's", e);
        }
        if (used != sh->used)
            broken("a shard's count of used slots", NULL);
    }
}

/* Every page a ready entry lists is found by a lookup. */
void rc_page_index_check_entry(struct rc_page_index *idx, const struct regcache_entry *e)
{
    for (uint32_t k = 0; k < e->npages; k++)
        if (!listed(idx, e->pages[k], e))
            broken("an entry's page is not in the index", e);
}
#else
void rc_page_index_check(struct rc_page_index *idx)
{
    (void)idx;
}

void rc_page_index_check_entry(struct rc_page_index *idx, const struct regcache_entry *e)
{
    (void)idx;
    (void)e;
}
#endif
