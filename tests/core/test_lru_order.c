/* Eviction takes the least recently used unused entry, so
 * a hot set that fits the limit survives any number of one-off buffers
 * passing through, and the order of eviction is the order of last use
 * (within one LRU epoch the threads' use logs give it; lru.h).  The entry
 * limit binds unused entries only: a held entry is never evicted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "cache.h" /* the entry pool, to see that evicted entries come back */
#include "cache_fixture.h"

/* Starts of the registrations deregistered, in order. */
struct dereg_log {
    uintptr_t start[2048];
    int n;
};

static void log_dereg(void *arg, const struct fake_handle *h)
{
    struct dereg_log *log = arg;
    if (log->n < (int)(sizeof(log->start) / sizeof(log->start[0])))
        log->start[log->n++] = h->start;
}

static void watch_deregs(struct fx *f, struct dereg_log *log)
{
    log->n = 0;
    f->fb.during_dereg = log_dereg;
    f->fb.during_dereg_arg = log;
}

#define HOT 7
#define ONE_OFFS 1000

static void hot_set_survives_a_thousand_one_offs(void **state)
{
    struct fx *f = *state;
    struct dereg_log log;
    for (int i = 0; i < HOT + ONE_OFFS; i++)
        fx_device_alloc(f, i);
    f->p.max_entries = HOT + 1;
    f->p.validation = REGCACHE_VALIDATE_NOTIFY;
    watch_deregs(f, &log);
    fx_create(f);
    for (int k = 0; k < HOT; k++)
        fx_use(f, FX_ALLOC(k), 10);
    for (int i = 0; i < ONE_OFFS; i++) {
        fx_use(f, FX_ALLOC(HOT + i), 10);
        for (int k = 0; k < HOT; k++)
            fx_use(f, FX_ALLOC(k), 10);
    }
    struct regcache_stats s = fx_stats(f);
    /* Each one-off registered once, each hot one never again. */
    assert_int_equal(atomic_load(&f->fb.regs), HOT + ONE_OFFS);
    assert_int_equal(s.hits, (uint64_t)HOT * ONE_OFFS);
    assert_int_equal(s.entries, HOT + 1);
    assert_int_equal(s.evictions, ONE_OFFS - 1);
    assert_int_equal(log.n, ONE_OFFS - 1);
    for (int i = 0; i < log.n; i++)
        if (log.start[i] != FX_ALLOC(HOT + i))
            fail_msg("eviction %d took allocation %d, not the one-off %d", i,
                     (int)((log.start[i] - FX_BASE) / (2 * MiB)), HOT + i);
    f->fb.during_dereg = NULL;
}

static void eviction_follows_the_order_of_last_use(void **state)
{
    struct fx *f = *state;
    struct dereg_log log;
    fx_device_allocs(f, 8);
    f->p.max_entries = 4;
    watch_deregs(f, &log);
    fx_create(f);
    for (int i = 0; i < 4; i++)
        fx_use(f, FX_ALLOC(i), 10);
    const int used[] = { 3, 1, 0, 2 };
    for (int i = 0; i < 4; i++)
        fx_use(f, FX_ALLOC(used[i]), 10);
    assert_int_equal(fx_stats(f).hits, 4);
    /* Each new allocation's miss evicts the least recently used one. */
    for (int i = 0; i < 4; i++) {
        fx_use(f, FX_ALLOC(4 + i), 10);
        assert_int_equal(log.n, i + 1);
        if (log.start[i] != FX_ALLOC(used[i]))
            fail_msg("miss %d evicted allocation %d, not %d", i,
                     (int)((log.start[i] - FX_BASE) / (2 * MiB)), used[i]);
    }
    f->fb.during_dereg = NULL;
}

static void held_entry_is_never_evicted(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 3);
    f->p.max_entries = 1;
    fx_create(f);
    regcache_entry_t *a = fx_get(f, FX_ALLOC(0), 10);
    regcache_entry_t *b = fx_get(f, FX_ALLOC(1), 10);
    /* Both held, each by its miss in a slot of this thread (no count): the
     * limit binds unused entries only. */
    assert_int_equal((uintptr_t)a & 1, 1);
    assert_int_equal((uintptr_t)b & 1, 1);
    assert_int_equal(fx_stats(f).entries, 2);
    assert_int_equal(fx_handle(a)->magic, 0x5ca1ab1eu);
    regcache_put(f->c, a);
    /* a became unused while over the limit: it goes, b stays. */
    fx_assert_stats(f, FX_STAT(entries, 1), FX_STAT(evictions, 1), NULL);
    assert_int_equal(atomic_load(&f->fb.deregs), 1);
    assert_int_equal(fx_handle(b)->magic, 0x5ca1ab1eu);
    regcache_put(f->c, b);
}

/* A claim takes its victim out of the page index before it looks for
 * holders; one that finds a hit holding it must list it again, or the
 * entry, still cached, would be served by the slow path from then on. */
static void held_victim_stays_on_the_hit_path(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 2);
    f->p.max_entries = 1;
    fx_create(f);
    fx_use(f, FX_ALLOC(0), 10);
    regcache_entry_t *a = fx_get(f, FX_ALLOC(0), 10); /* a hit: a slot hold */
    /* Its miss tries to evict a, and cannot (a hit holds it); its put, with
     * the device over the limit, evicts the new entry instead. */
    fx_use(f, FX_ALLOC(1), 10);
    fx_assert_stats(f, FX_STAT(hits, 1), FX_STAT(entries, 1), FX_STAT(evictions, 1), NULL);
    struct rc_probe probe;
    struct regcache_entry *listed =
        rc_page_index_probe(&f->c->index, FX_ALLOC(0), FX_ALLOC(0) + 10, &probe);
    assert_non_null(listed);
    assert_int_equal(listed->node.start, FX_ALLOC(0));
    regcache_put(f->c, a);
}

/* A hold that spans a registration counts as a use at its put: the entry
 * is then more recent than the one registered meanwhile (the put must
 * stamp it, since the hit's stamp predates that registration). */
static void hold_across_a_registration_counts_at_its_put(void **state)
{
    struct fx *f = *state;
    struct dereg_log log;
    fx_device_allocs(f, 3);
    f->p.max_entries = 2;
    watch_deregs(f, &log);
    fx_create(f);
    fx_use(f, FX_ALLOC(0), 10);
    regcache_entry_t *a = fx_get(f, FX_ALLOC(0), 10);
    fx_use(f, FX_ALLOC(1), 10);
    regcache_put(f->c, a);
    fx_use(f, FX_ALLOC(2), 10);
    assert_int_equal(log.n, 1);
    assert_int_equal(log.start[0], FX_ALLOC(1));
    f->fb.during_dereg = NULL;
}

static void lru_order(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 4);
    f->p.max_entries = 3;
    fx_create(f);
    regcache_entry_t *e[3];
    for (int i = 0; i < 3; i++)
        regcache_put(f->c, e[i] = fx_get(f, FX_ALLOC(i), 10));
    /* Use 0 again: 1 is now the least recently used. */
    fx_use(f, FX_ALLOC(0), 10);
    fx_use(f, FX_ALLOC(3), 10);
    assert_int_equal(fx_stats(f).evictions, 1);
    long regs = atomic_load(&f->fb.regs);
    /* 0 and 2 are still cached, 1 is not. */
    fx_use(f, FX_ALLOC(0), 10);
    fx_use(f, FX_ALLOC(2), 10);
    assert_int_equal(atomic_load(&f->fb.regs), regs);
    fx_use(f, FX_ALLOC(1), 10);
    assert_int_equal(atomic_load(&f->fb.regs), regs + 1);
}

#define LIMIT 16
#define ROUNDS 20

/* The evicting churn the benchmarks time: a cycle over twice the limit, so
 * that every get misses and evicts the entry used LIMIT misses before.
 * Each victim's entry returns to the pool by the time the next miss needs
 * one, so the first slab (64 entries) is all the cache ever takes. */
static void cycle_twice_the_limit_evicts_in_order_and_reuses_entries(void **state)
{
    struct fx *f = *state;
    struct dereg_log log;
    fx_device_allocs(f, 2 * LIMIT);
    f->p.max_entries = LIMIT;
    watch_deregs(f, &log);
    fx_create(f);
    for (int i = 0; i < ROUNDS * 2 * LIMIT; i++)
        fx_use(f, FX_ALLOC(i % (2 * LIMIT)), 10);
    fx_assert_stats(f, FX_STAT(hits, 0), FX_STAT(entries, LIMIT),
                    FX_STAT(evictions, (ROUNDS * 2 - 1) * LIMIT), NULL);
    assert_int_equal(log.n, (ROUNDS * 2 - 1) * LIMIT);
    for (int i = 0; i < log.n; i++)
        if (log.start[i] != FX_ALLOC(i % (2 * LIMIT)))
            fail_msg("eviction %d took allocation %d, not %d", i,
                     (int)((log.start[i] - FX_BASE) / (2 * MiB)), i % (2 * LIMIT));
    assert_int_equal(atomic_load(&f->fb.live), LIMIT);
    assert_int_equal(f->c->pool.nslabs, 1);
    f->fb.during_dereg = NULL;
}

FX_MAIN(hot_set_survives_a_thousand_one_offs, eviction_follows_the_order_of_last_use,
        held_entry_is_never_evicted, held_victim_stays_on_the_hit_path,
        hold_across_a_registration_counts_at_its_put, lru_order,
        cycle_twice_the_limit_evicts_in_order_and_reuses_entries)
