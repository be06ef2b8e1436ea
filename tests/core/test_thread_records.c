/* Per-thread records (threads.h) as threads come and go: every evicting
 * miss scans the live records' hold slots, so records of exited threads
 * must leave that scan, except one whose hold is still out. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cache_fixture.h"
#include "threads.h"

#define X FX_ALLOC(0)
#define POOL 16

struct pool {
    regcache_t *c;
    pthread_barrier_t all_in, all_done;
    atomic_int failures;
};

/* A get+put while every thread of the pool is alive, so that each takes a
 * record of its own. */
static void *pool_thread(void *arg)
{
    struct pool *p = arg;
    regcache_entry_t *e;
    pthread_barrier_wait(&p->all_in);
    if (regcache_get(p->c, (const void *)X, 4096, &e) == REGCACHE_OK)
        regcache_put(p->c, e);
    else
        atomic_fetch_add(&p->failures, 1);
    pthread_barrier_wait(&p->all_done);
    return NULL;
}

static void run_pool(struct fx *f)
{
    struct pool p = { .c = f->c };
    pthread_t t[POOL];
    pthread_barrier_init(&p.all_in, NULL, POOL);
    pthread_barrier_init(&p.all_done, NULL, POOL);
    for (int i = 0; i < POOL; i++)
        assert_int_equal(pthread_create(&t[i], NULL, pool_thread, &p), 0);
    for (int i = 0; i < POOL; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    pthread_barrier_destroy(&p.all_in);
    pthread_barrier_destroy(&p.all_done);
    assert_int_equal(atomic_load(&p.failures), 0);
}

/* A cache with X cached, used by this thread; the scan's length then. */
static size_t cache_in_use(struct fx *f)
{
    fx_device_alloc(f, 0);
    fx_create(f);
    fx_use(f, X, 4096);
    return rc_thread_live_span();
}

static void scan_shrinks_when_a_thread_pool_exits(void **state)
{
    struct fx *f = *state;
    size_t before = cache_in_use(f);
    run_pool(f);
    assert_int_equal(rc_thread_live_span(), before);
    fx_assert_stats(f, FX_STAT(hits, POOL), FX_STAT(misses, 1), NULL);
}

/* A thread that exits holding an entry keeps its record scanned: the
 * entry, invalidated meanwhile, stays registered until its put, and the
 * threads that come and go after it do not shrink the scan past it. */
static void hold_outliving_its_thread_stays_scanned(void **state)
{
    struct fx *f = *state;
    size_t before = cache_in_use(f);
    regcache_entry_t *handle = fx_get_and_exit(f, X, 4096);
    assert_true(rc_thread_live_span() > before);
    size_t with_holder = rc_thread_live_span();

    run_pool(f);
    assert_int_equal(rc_thread_live_span(), with_holder);

    assert_int_equal(regcache_invalidate(f->c, (const void *)X, 4096), REGCACHE_OK);
    assert_int_equal(atomic_load(&f->fb.deregs), 0);
    regcache_put(f->c, handle);
    assert_int_equal(atomic_load(&f->fb.deregs), 1);
}

FX_MAIN(scan_shrinks_when_a_thread_pool_exits, hold_outliving_its_thread_stays_scanned)
