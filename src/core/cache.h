/* The cache object shared by the cache policy, statistics and registry. */
#ifndef RC_CACHE_H
#define RC_CACHE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "entry.h"
#include "entry_pool.h"
#include "interval_tree.h"
#include "lru.h"
#include "mem_query.h"
#include "options.h"
#include "page_index.h"

/* CUDA ordinals 0..RC_MAX_DEVICES-1 plus one slot for host memory. */
#define RC_MAX_DEVICES 64
#define RC_HOST_SLOT RC_MAX_DEVICES

/* One device's share of the cache: its eviction order and its budget, so
 * that pressure on one GPU never evicts another's entries. */
struct rc_device {
    struct rc_lru lru;
    /* Entries in the cache and their bytes.  Written under the cache lock,
     * read without it by put() to decide whether to trim. */
    atomic_size_t bytes, entries;
    size_t max_bytes, max_entries; /* 0 = unlimited */
    bool budget_set;
};

/* Hits are counted where threads do not share a line: each thread adds to
 * the counter its stack address picks (threads' stacks are megabytes
 * apart).  A cache-wide counter would be the one line every hit writes. */
#define RC_HIT_COUNTERS 64
struct rc_hit_counter {
    atomic_uint_fast64_t n;
} __attribute__((aligned(64)));

struct rc_counters {
    atomic_uint_fast64_t slow_hits, misses, registrations, deregistrations,
        evictions, invalidations_tag, invalidations_notify, invalidations_explicit,
        reg_failures, peak_bytes;
};

enum rc_cause { RC_BY_TAG, RC_BY_NOTIFY, RC_BY_EXPLICIT };

struct regcache {
    /* Hit path first. */
    struct rc_page_index index;
    struct rc_memory mem;
    bool tag_check;
    unsigned fork_generation;
    unsigned shift; /* log2(alignment) */
    atomic_uint_fast64_t clock; /* LRU clock, see rc_clock_tick() */
    struct rc_hit_counter hits[RC_HIT_COUNTERS];

    struct regcache_backend backend;
    bool builtin;
    int method_used;
    int validation;
    size_t host_page;
    struct rc_options opts;

    pthread_mutex_t lock; /* tree, LRU heaps, budgets, zombies, pool */
    pthread_cond_t registered; /* a pending registration finished */
    struct rc_itree tree;
    struct rc_device dev[RC_MAX_DEVICES + 1];
    struct regcache_entry *zombies; /* detached but still held */
    struct rc_entry_pool pool;
    struct rc_counters stats;

    struct regcache *registry_next, *registry_prev;
};

/* regcache_invalidate() with the cause to count; used by notify_free. */
void rc_cache_invalidate(struct regcache *c, uintptr_t start, uintptr_t end, enum rc_cause cause);

/* Deregister and free every entry, held ones included (regcache_destroy).
 * In a fork child nothing is deregistered: the registrations are the
 * parent's. */
void rc_cache_drain(struct regcache *c);

/* Print the statistics to stderr (REGCACHE_STATS). */
void rc_stats_dump(const struct regcache *c);

#endif
