/* The hit path's index: a sharded hash from an aligned page number to the
 * entries that served requests starting in that page.  The interval tree
 * answers overlap queries under the cache lock; this index answers "which
 * entry serves a request starting here" without taking any lock.
 *
 * Each shard is an open-addressing table of 64-byte slots (page, entry and
 * copies of the entry's hit-path fields, below) guarded by a sequence
 * counter: writers (serialised by the cache lock) make it odd while they
 * change slots, readers probe without writing anything shared (but a
 * slot's stamp copy, a hint) and check afterwards that the counter did not
 * move.  Readers may look at a slot table that a writer has just replaced,
 * or at an entry that was just recycled: tables are kept until the index
 * is destroyed and entries are type-stable (entry.h), so such a reader
 * only fails validation. */
#ifndef RC_PAGE_INDEX_H
#define RC_PAGE_INDEX_H

#include <stdatomic.h>
#include <stdbool.h>
#include <sched.h>
#include <stdint.h>

#include "entry.h"
#include "cpu_relax.h"

struct regcache_entry;

#define RC_SHARDS 64

/* A slot carries, beside its key and entry, copies of everything a hit
 * and its put need from the entry, so that a hit reads one slot line and
 * no line of the entry: at 100k entries and more each line is a miss of
 * its own, and the entry's line would be a second one that waits for the
 * first.  The match range, buffer id, several-mappings flag and device
 * never change while the entry is indexed; `rails` follows rails_ready
 * (rc_page_index_refresh).  `stamp` copies the entry's LRU stamp: a hit
 * that finds it behind the epoch stamps the entry (and the copy), so that
 * a hit in an epoch that already stamped it reads nothing more (lru.h). */
struct rc_slot {
    _Atomic uintptr_t page;
    _Atomic(struct regcache_entry *) entry; /* NULL: empty */
    _Atomic uintptr_t match_start, match_end;
    _Atomic uint64_t buffer_id;
    atomic_uint_fast64_t stamp;
    atomic_uint rails;
    atomic_uint access; /* the entry's (entry.h) */
    _Atomic uint16_t device_slot;
    atomic_bool several; /* the entry spans more than one VMM mapping */
} __attribute__((aligned(64)));

struct rc_slot_table {
    uint32_t mask; /* slots - 1; a power of two */
    bool huge;     /* carved from the index's huge-page chunks */
    struct rc_slot_table *retired_next;
    struct rc_slot slots[];
};

/* Memory for large tables: 2 MiB chunks the kernel is asked to back with
 * huge pages, freed with the index. */
struct rc_huge_chunk {
    struct rc_huge_chunk *next;
    size_t size, used;
};

struct rc_shard {
    atomic_uint_fast64_t seq; /* odd while a writer changes the shard */
    _Atomic(struct rc_slot_table *) table;
    /* The table's mask, on the line a probe reads first, so that the slot's
     * address waits for one load instead of two in a row.  Tables only
     * grow, and a growth stores the mask after the table: a probe that
     * loads it first never indexes past the table it then loads. */
    atomic_uint mask;
    uint32_t used; /* writers only */
} __attribute__((aligned(64)));

/* From this many listed pages on, the slot tables (256 bytes a page or
 * more below it, at most a quarter full - an eighth below 2048 pages; from
 * here on they fill to half) outgrow a core's 2 MiB L2 cache, and the slot
 * a probe reads is mostly a cache miss. */
#define RC_INDEX_LARGE 16384

struct rc_page_index {
    unsigned shift; /* log2 of the page size */
    /* At least large_from pages listed: a probe's slot is mostly a miss of
     * the cache level the owner cares about, which it says by large_from
     * (RC_INDEX_LARGE, L2, unless set).  Read by hits, so written only
     * when that changes. */
    atomic_bool large;
    size_t large_from;
    struct rc_slot_table *retired; /* replaced tables, freed at fini */
    struct rc_huge_chunk *chunks;
    struct rc_shard shards[RC_SHARDS];
    size_t listed; /* writers only; off the lines hits read */
};

/* REGCACHE_ERR_NO_MEMORY if the first tables cannot be allocated. */
int rc_page_index_init(struct rc_page_index *idx, unsigned shift);
/* Free every table; no reader may be inside the index. */
void rc_page_index_fini(struct rc_page_index *idx);

/* Under the cache lock: let requests starting in start's page find e.
 * REGCACHE_ERR_NO_MEMORY if the table cannot grow (the entry stays valid;
 * only the fast path misses it). */
int rc_page_index_add(struct rc_page_index *idx, struct regcache_entry *e, uintptr_t start);

/* Under the cache lock: take e's slots out of the index but keep its list
 * of pages, for rc_page_index_relist() to put them back (an eviction that
 * finds its victim held) or rc_page_index_forget() to drop. */
void rc_page_index_unlist(struct rc_page_index *idx, struct regcache_entry *e);
void rc_page_index_relist(struct rc_page_index *idx, struct regcache_entry *e);
/* Under the cache lock: fetch the slot that unlisting e reads first (of
 * its first page) into the cache, ahead of its eviction. */
void rc_page_index_prefetch_unlist(struct rc_page_index *idx, const struct regcache_entry *e);
/* e is unlisted: drop its list of pages. */
void rc_page_index_forget(struct regcache_entry *e);

/* Under the cache lock: forget every page of e.  Once this returns no new
 * lookup can reach e.  Inline, as every unlink calls it and an evicted
 * entry, forgotten when it was claimed, lists no page: nothing to do.  One
 * that lists none uses its inline list (only a full list moves out), so
 * there is nothing to free either. */
static inline void rc_page_index_remove_entry(struct rc_page_index *idx, struct regcache_entry *e)
{
    if (e->npages) {
        rc_page_index_unlist(idx, e);
        rc_page_index_forget(e);
    }
}

/* Before the first add: the index is large from `pages` listed pages on
 * (rc_page_index_large()). */
void rc_page_index_large_from(struct rc_page_index *idx, size_t pages);

/* How many slots a core's L1 data cache holds (glibc's figure, else 32 KiB
 * worth): from about that many listed pages on, a probe's slot is mostly an
 * L1 miss. */
size_t rc_page_index_l1_slots(void);

/* Under the cache lock: e's rails_ready changed; its slots follow. */
void rc_page_index_refresh(struct rc_page_index *idx, struct regcache_entry *e);

/* Page numbers are dense and aligned: a multiplicative mix spreads them;
 * the top bits pick the shard, the low bits the slot.  The final shift
 * leaves the top 29 bits of the product as they are, so that a lookup
 * takes the shard from the product and its loads wait for no more
 * (rc_page_key()). */
#define RC_PAGE_MIX 0x9e3779b97f4a7c15ull

static inline uint64_t rc_page_hash(uintptr_t page)
{
    uint64_t h = (uint64_t)page * RC_PAGE_MIX;
    return h ^ (h >> 29);
}

static inline struct rc_shard *rc_shard_of(struct rc_page_index *idx, uint64_t h)
{
    /* &idx->shards[h >> 58] in two steps, not three: the top six bits
     * times the shard's size. */
    _Static_assert(sizeof(struct rc_shard) == 64 && RC_SHARDS == 64, "64 shards of 64 bytes");
    return (struct rc_shard *)((char *)idx->shards + ((h >> 52) & ~(uint64_t)63));
}

/* A writer is inside the shard (it holds the cache lock and is moving a few
 * slots).  Spin briefly; if it was preempted, let it run. */
static inline void rc_wait_for_writer(unsigned *spins)
{
    if (++*spins < 128)
        rc_cpu_relax();
    else
        sched_yield();
}

/* Where a probe looked, so that the caller can check afterwards that no
 * writer changed the shard since, and what it read of the slot it found. */
struct rc_probe {
    struct rc_shard *shard;
    uint64_t seq;
    struct rc_slot *slot;
    uint64_t buffer_id, stamp;
    uint32_t rails, access;
    uint16_t device_slot;
    bool several;
};

/* Does the slot's entry serve a get of rq: registered on its rail, for
 * at least its access?  With rq a constant of regcache_get() it is two
 * tests of the slot's line. */
static inline bool rc_probe_serves(const struct rc_probe *p, struct rc_req rq)
{
    return (p->rails >> rq.rail & 1) && rc_access_covers(p->access, rq.want);
}

/* Where a lookup of start begins: its page, the page's hash and shard. */
struct rc_page_key {
    uintptr_t page;
    uint64_t hash;
    struct rc_shard *shard;
};

static inline struct rc_page_key rc_page_key(struct rc_page_index *idx, uintptr_t start)
{
    uintptr_t page = start >> idx->shift;
    uint64_t product = (uint64_t)page * RC_PAGE_MIX;
    return (struct rc_page_key){ page, product ^ (product >> 29), rc_shard_of(idx, product) };
}

/*
 * The hit path's lookup: an entry covering [start, end) indexed under
 * start's page, or NULL; NULL also while a writer is inside the shard, and
 * then rc_page_index_busy(probe) says so.  Nothing is held: the caller
 * publishes its hold and then asks rc_page_index_unchanged() whether the
 * shard stayed as the probe saw it, which proves the entry was in the index
 * (so neither recycled nor detached) when the hold became visible.
 *
 * Ordering (a seqlock, as C11 needs it, not only as x86 gives it): the
 * writer makes the count odd, then issues a release fence before it stores
 * slots; the reader loads slot fields relaxed, then issues an
 * acquire fence before it loads the count again.  If any load of the probe
 * read a store of a writer, the fences synchronise and the second load of
 * the count sees at least that writer's odd value.
 */
static inline struct regcache_entry *rc_page_index_probe_at(struct rc_page_key k, uintptr_t start,
                                                            uintptr_t end, struct rc_probe *probe)
{
    uintptr_t page = k.page;
    uint64_t h = k.hash;
    struct rc_shard *s = k.shard;
    uint64_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
    probe->shard = s;
    probe->seq = seq;
    if (__builtin_expect(seq & 1, 0))
        return NULL;
    uint32_t mask = atomic_load_explicit(&s->mask, memory_order_acquire);
    struct rc_slot_table *t = atomic_load_explicit(&s->table, memory_order_acquire);
    struct regcache_entry *e;
    for (uint32_t i = (uint32_t)h & mask;
         (e = atomic_load_explicit(&t->slots[i].entry, memory_order_relaxed)) != NULL;
         i = (i + 1) & mask) {
        struct rc_slot *slot = &t->slots[i];
        if (atomic_load_explicit(&slot->page, memory_order_relaxed) == page &&
            start >= atomic_load_explicit(&slot->match_start, memory_order_relaxed) &&
            end <= atomic_load_explicit(&slot->match_end, memory_order_relaxed)) {
            probe->slot = slot;
            break;
        }
    }
    atomic_thread_fence(memory_order_acquire);
    return e;
}

static inline struct regcache_entry *rc_page_index_probe(struct rc_page_index *idx, uintptr_t start,
                                                         uintptr_t end, struct rc_probe *probe)
{
    return rc_page_index_probe_at(rc_page_key(idx, start), start, end, probe);
}

static inline bool rc_page_index_large(struct rc_page_index *idx)
{
    return atomic_load_explicit(&idx->large, memory_order_relaxed);
}

/* Ask for the line of the slot where a probe for k begins: a hint for
 * a caller with other work to do before it probes.  Tables are kept until
 * the index is destroyed, so even a replaced one may be read. */
static inline void rc_page_index_prefetch(struct rc_page_key k)
{
    struct rc_shard *s = k.shard;
    uint32_t mask = atomic_load_explicit(&s->mask, memory_order_acquire);
    struct rc_slot_table *t = atomic_load_explicit(&s->table, memory_order_acquire);
    __builtin_prefetch(&t->slots[(uint32_t)k.hash & mask]);
}

/* What the found slot copies of its entry, read before
 * rc_page_index_unchanged() so that its answer covers them too; the tag
 * fields only for TAG_CHECK, where they are needed.  These loads come after
 * the probe's acquire fence, so they need one of their own before the
 * count is loaded again (free on x86; without it a weakly ordered CPU may
 * load them after the count and pass a slot a writer was changing). */
static inline void rc_page_index_read_slot(struct rc_probe *probe, bool tags)
{
    struct rc_slot *s = probe->slot;
    probe->stamp = atomic_load_explicit(&s->stamp, memory_order_relaxed);
    probe->rails = atomic_load_explicit(&s->rails, memory_order_relaxed);
    probe->access = atomic_load_explicit(&s->access, memory_order_relaxed);
    probe->device_slot = atomic_load_explicit(&s->device_slot, memory_order_relaxed);
    if (tags) {
        probe->buffer_id = atomic_load_explicit(&s->buffer_id, memory_order_relaxed);
        probe->several = atomic_load_explicit(&s->several, memory_order_relaxed);
    }
    atomic_thread_fence(memory_order_acquire);
}

/* The probe found the shard with a writer inside. */
static inline bool rc_page_index_busy(const struct rc_probe *probe)
{
    return probe->seq & 1;
}

/* rc_page_index_probe(), waiting out writers. */
static inline struct regcache_entry *rc_page_index_find(struct rc_page_index *idx, uintptr_t start,
                                                        uintptr_t end, struct rc_probe *probe)
{
    unsigned spins = 0;
    struct regcache_entry *e;
    while (!(e = rc_page_index_probe(idx, start, end, probe)) && rc_page_index_busy(probe))
        rc_wait_for_writer(&spins);
    return e;
}

/* After the caller's seq_cst fence: true when no writer touched the shard
 * since the probe began.  An entry leaves the index before anyone decides
 * that it is unheld (entry.h), so a hold published before that fence is on
 * an entry that was indexed, neither recycled nor detached. */
static inline bool rc_page_index_unchanged(const struct rc_probe *probe)
{
    return atomic_load_explicit(&probe->shard->seq, memory_order_relaxed) == probe->seq;
}

/* Debug builds: every listed page belongs to a ready entry that lists it,
 * and every page a ready entry lists is in the index.  Aborts otherwise. */
void rc_page_index_check(struct rc_page_index *idx);
void rc_page_index_check_entry(struct rc_page_index *idx, const struct regcache_entry *e);

#endif
