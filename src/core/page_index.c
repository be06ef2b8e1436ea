#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "compiler.h"
#include "entry.h"
#include "page_index.h"
#include "regcache.h"

#define INITIAL_SLOTS 16u

#define HUGE ((size_t)2 << 20)
/* Tables from this size on (64 slots: a shard of about 16 entries, a
 * cache of about a thousand) come from huge pages.  With 100k entries the
 * shards' tables take megabytes that a hit reaches at random, and in 4 KiB
 * pages nearly every probe would also miss the TLB; with a thousand they
 * still spread over some 70 pages that an evicting miss's entries and tree
 * nodes compete with for the TLB (evicting get+puts are faster, hits the
 * same: bench/ab/run.sh churn and hooks).  The price is one 2 MiB
 * chunk, mapped once an index holds that many. */
#define HUGE_TABLE ((size_t)4 << 10)

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

/* Aligned as its slots are, a line each: from calloc's 16-byte alignment,
 * three slots in four straddled two lines, and a hit read both. */
static struct rc_slot_table *new_table(struct rc_page_index *idx, uint32_t slots)
{
    size_t bytes = sizeof(struct rc_slot_table) + slots * sizeof(struct rc_slot);
    bool huge = bytes >= HUGE_TABLE;
    struct rc_slot_table *t =
        huge ? huge_alloc(idx, bytes) : aligned_alloc(_Alignof(struct rc_slot_table), bytes);
    if (t && !huge)
        memset(t, 0, bytes);
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
    atomic_init(&idx->large, false);
    idx->large_from = RC_INDEX_LARGE;
    idx->listed = 0;
    idx->retired = NULL;
    idx->chunks = NULL;
    for (int i = 0; i < RC_SHARDS; i++) {
        struct rc_shard *s = &idx->shards[i];
        atomic_init(&s->seq, 0);
        s->used = 0;
        struct rc_slot_table *t = new_table(idx, INITIAL_SLOTS);
        atomic_init(&s->table, t);
        atomic_init(&s->mask, INITIAL_SLOTS - 1);
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
    COPY(access);
    COPY(device_slot);
    COPY(several);
    COPY(entry);
#undef COPY
}

/* s's table, as writers (serialised by the lock) read it. */
static struct rc_slot_table *table_of(struct rc_shard *s)
{
    return atomic_load_explicit(&s->table, memory_order_relaxed);
}

/* The first free slot on page's probe run in t (at most half full). */
static struct rc_slot *free_slot(struct rc_slot_table *t, uint64_t h)
{
    uint32_t mask = t->mask, i = (uint32_t)h & mask;
    while (atomic_load_explicit(&t->slots[i].entry, memory_order_relaxed))
        i = (i + 1) & mask;
    return &t->slots[i];
}

/* The new table is filled while readers keep using the old one (writers
 * are serialised by the cache lock); only the pointer swap is a write. */
static int grow(struct rc_page_index *idx, struct rc_shard *s)
{
    struct rc_slot_table *old = table_of(s);
    struct rc_slot_table *t = new_table(idx, (old->mask + 1) * 2);
    if (!t)
        return REGCACHE_ERR_NO_MEMORY;
    for (uint32_t i = 0; i <= old->mask; i++) {
        struct rc_slot *from = &old->slots[i];
        if (atomic_load_explicit(&from->entry, memory_order_relaxed))
            copy_slot(
                free_slot(t, rc_page_hash(atomic_load_explicit(&from->page, memory_order_relaxed))),
                from);
    }
    write_begin(s);
    atomic_store_explicit(&s->table, t, memory_order_release);
    atomic_store_explicit(&s->mask, t->mask, memory_order_release);
    write_end(s);
    old->retired_next = idx->retired;
    idx->retired = old;
    return REGCACHE_OK;
}

/* e's list of pages is full: twice the room (an entry is mostly indexed
 * under one page, and its inline room suffices). */
static int more_pages(struct regcache_entry *e)
{
    uint32_t cap = e->pages_cap * 2;
    uintptr_t *pages = malloc(cap * sizeof(*pages));
    if (!pages)
        return REGCACHE_ERR_NO_MEMORY;
    memcpy(pages, e->pages, e->npages * sizeof(*pages));
    if (e->pages != e->pages_inline)
        free(e->pages);
    e->pages = pages;
    e->pages_cap = cap;
    return REGCACHE_OK;
}

/* Under the lock: list e under `page` (hashed to h) in shard s, whose table
 * t has room.  The free slot is found before the shard turns odd: hits
 * retry only while the stores themselves are made.  Inlined into each
 * caller: every miss adds, and a call would cost adding a frame. */
static inline __attribute__((always_inline)) void list_page(struct rc_shard *s,
                                                            struct rc_slot_table *t,
                                                            struct regcache_entry *e,
                                                            uintptr_t page, uint64_t h)
{
#define FROM_ENTRY(field, from)                                                               \
    atomic_store_explicit(&slot->field, atomic_load_explicit(&e->from, memory_order_relaxed), \
                          memory_order_relaxed)
    struct rc_slot *slot = free_slot(t, h);
    write_begin(s);
    atomic_store_explicit(&slot->page, page, memory_order_relaxed);
    FROM_ENTRY(match_start, match_start);
    FROM_ENTRY(match_end, match_end);
    FROM_ENTRY(stamp, last_use);
    FROM_ENTRY(rails, rails_ready);
    atomic_store_explicit(&slot->buffer_id, e->buffer_id, memory_order_relaxed);
    atomic_store_explicit(&slot->access, e->access, memory_order_relaxed);
    atomic_store_explicit(&slot->device_slot, (uint16_t)e->device_slot, memory_order_relaxed);
    atomic_store_explicit(&slot->several, e->more != NULL, memory_order_relaxed);
    atomic_store_explicit(&slot->entry, e, memory_order_relaxed);
    write_end(s);
    s->used++;
#undef FROM_ENTRY
}

void rc_page_index_large_from(struct rc_page_index *idx, size_t pages)
{
    idx->large_from = pages;
}

size_t rc_page_index_l1_slots(void)
{
    long bytes = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    return (bytes > 0 ? (size_t)bytes : (size_t)32 << 10) / sizeof(struct rc_slot);
}

/* n pages more listed (or fewer, n negative). */
static void count_listed(struct rc_page_index *idx, ptrdiff_t n)
{
    idx->listed += (size_t)n;
    bool large = idx->listed >= idx->large_from;
    if (large != rc_page_index_large(idx))
        atomic_store_explicit(&idx->large, large, memory_order_relaxed);
}

/* Below this many listed pages the tables stay at most an eighth full:
 * their slots then take 2 MiB at most (64 tables of 512). */
#define SPARSE_INDEX 2048

/* Every add, unlist and hit walks a probe run, and linear probing's runs
 * lengthen steeply with the load, and a hit whose entry is not first on its
 * run mispredicts a branch.  Evicting misses and hits at 1000 entries
 * are faster with tables at most a quarter full than at most half full,
 * and faster again at most an eighth full with the tables in huge pages;
 * hits at 1 and 4000 entries are the same (bench/ab/run.sh churn and
 * hooks, 1000 entries).  A small index affords the room; a larger one fills to a quarter, and a
 * large one to half, which halves the megabytes its tables take. */
static bool crowded(struct rc_page_index *idx, const struct rc_shard *s,
                    const struct rc_slot_table *t)
{
    unsigned room = idx->listed < SPARSE_INDEX ? 8 : idx->listed < RC_INDEX_LARGE ? 4 : 2;
    return (s->used + 1) * room > t->mask + 1;
}

/* e joins the index under a page new to it, in shard s, whose table t and
 * e's list of pages have room. */
static inline __attribute__((always_inline)) void add_page(struct rc_shard *s,
                                                           struct rc_slot_table *t,
                                                           struct regcache_entry *e, uintptr_t page,
                                                           uint64_t h)
{
    e->pages[e->npages++] = page;
    list_page(s, t, e, page, h);
}

/* An add that finds the shard's table or e's list of pages full: they grow
 * first.  Out of line, so that the common add calls nothing and needs no
 * stack frame. */
static COLD int add_after_growth(struct rc_page_index *idx, struct regcache_entry *e,
                                 uintptr_t page, uint64_t h)
{
    struct rc_shard *s = rc_shard_of(idx, h);
    if (crowded(idx, s, table_of(s)) && grow(idx, s) != REGCACHE_OK)
        return REGCACHE_ERR_NO_MEMORY;
    if (e->npages == e->pages_cap && more_pages(e) != REGCACHE_OK)
        return REGCACHE_ERR_NO_MEMORY;
    add_page(s, table_of(s), e, page, h);
    count_listed(idx, 1);
    return REGCACHE_OK;
}

int rc_page_index_add(struct rc_page_index *idx, struct regcache_entry *e, uintptr_t start)
{
    uintptr_t page = start >> idx->shift;
    for (uint32_t i = 0; i < e->npages; i++)
        if (e->pages[i] == page)
            return REGCACHE_OK;

    uint64_t h = rc_page_hash(page);
    struct rc_shard *s = rc_shard_of(idx, h);
    struct rc_slot_table *t = table_of(s);
    if (crowded(idx, s, t) || e->npages == e->pages_cap)
        return add_after_growth(idx, e, page, h);
    add_page(s, t, e, page, h);
    count_listed(idx, 1);
    return REGCACHE_OK;
}

/* Linear-probing deletion by shifting later members of the run back, so
 * lookups never need tombstones.  A member moves into the hole unless its
 * home lies cyclically in (hole, its place]: it moves when it is at least
 * as far from its home as from the hole. */
static void delete_slot(struct rc_slot_table *t, struct rc_slot *hole)
{
    uint32_t mask = t->mask, j = (uint32_t)(hole - t->slots), gap = 0;
    for (;;) {
        j = (j + 1) & mask;
        gap++;
        struct rc_slot *x = &t->slots[j];
        if (!atomic_load_explicit(&x->entry, memory_order_relaxed))
            break;
        uintptr_t page = atomic_load_explicit(&x->page, memory_order_relaxed);
        if (((j - (uint32_t)rc_page_hash(page)) & mask) >= gap) {
            copy_slot(hole, x);
            hole = x;
            gap = 0;
        }
    }
    atomic_store_explicit(&hole->entry, NULL, memory_order_relaxed);
}

/* The slot of t that lists e under page (hashed to h); NULL if none does. */
static struct rc_slot *slot_of(struct rc_slot_table *t, uint64_t h, const struct regcache_entry *e,
                               uintptr_t page)
{
    uint32_t mask = t->mask;
    struct regcache_entry *x;
    for (uint32_t i = (uint32_t)h & mask;
         (x = atomic_load_explicit(&t->slots[i].entry, memory_order_relaxed)) != NULL;
         i = (i + 1) & mask)
        if (x == e && atomic_load_explicit(&t->slots[i].page, memory_order_relaxed) == page)
            return &t->slots[i];
    return NULL;
}

void rc_page_index_unlist(struct rc_page_index *idx, struct regcache_entry *e)
{
    const uintptr_t *pages = e->pages;
    for (uint32_t k = 0, n = e->npages; k < n; k++) {
        uint64_t h = rc_page_hash(pages[k]);
        struct rc_shard *s = rc_shard_of(idx, h);
        struct rc_slot_table *t = table_of(s);
        struct rc_slot *slot = slot_of(t, h, e, pages[k]);
        if (!slot)
            continue;
        write_begin(s);
        delete_slot(t, slot);
        write_end(s);
        s->used--;
        count_listed(idx, -1);
    }
}

void rc_page_index_prefetch_unlist(struct rc_page_index *idx, const struct regcache_entry *e)
{
    if (!e->npages)
        return;
    uint64_t h = rc_page_hash(e->pages[0]);
    struct rc_slot_table *t = table_of(rc_shard_of(idx, h));
    uint32_t i = (uint32_t)h & t->mask;
    /* The slot, and the next one that a deletion shifts back, mostly. */
    __builtin_prefetch(&t->slots[i], 1);
    __builtin_prefetch(&t->slots[(i + 1) & t->mask], 1);
}

/* Its slots left room that nothing else took (writers hold the lock):
 * listing them again needs no growth. */
void rc_page_index_relist(struct rc_page_index *idx, struct regcache_entry *e)
{
    for (uint32_t k = 0; k < e->npages; k++) {
        uint64_t h = rc_page_hash(e->pages[k]);
        struct rc_shard *s = rc_shard_of(idx, h);
        list_page(s, table_of(s), e, e->pages[k], h);
    }
    count_listed(idx, e->npages);
}

/* e's pages outgrew its inline room: back to it. */
static COLD void free_pages(struct regcache_entry *e)
{
    free(e->pages);
    e->pages = e->pages_inline;
    e->pages_cap = RC_INLINE_PAGES;
}

void rc_page_index_forget(struct regcache_entry *e)
{
    e->npages = 0;
    if (e->pages != e->pages_inline)
        free_pages(e);
}

void rc_page_index_refresh(struct rc_page_index *idx, struct regcache_entry *e)
{
    unsigned rails = atomic_load_explicit(&e->rails_ready, memory_order_relaxed);
    for (uint32_t k = 0; k < e->npages; k++) {
        uint64_t h = rc_page_hash(e->pages[k]);
        struct rc_shard *s = rc_shard_of(idx, h);
        struct rc_slot *slot = slot_of(table_of(s), h, e, e->pages[k]);
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
    uint64_t h = rc_page_hash(page);
    return slot_of(table_of(rc_shard_of(idx, h)), h, e, page) != NULL;
}

void rc_page_index_check(struct rc_page_index *idx)
{
    size_t listed = 0;
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
        listed += used;
    }
    if (listed != idx->listed ||
        (listed >= idx->large_from) != atomic_load_explicit(&idx->large, memory_order_relaxed))
        broken("the count of listed pages", NULL);
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
