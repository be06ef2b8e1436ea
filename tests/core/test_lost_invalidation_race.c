/* Under load: getter threads against a thread that frees
 * and reallocates memory the way NOTIFY mode needs it reported -
 * notify_free before the free, the reallocation (a new buffer id),
 * notify_alloc after the allocation - and then publishes the id that lives
 * there now.  Every get
 * that starts after an id was published must be served a registration of
 * that id or a newer one (the fake backend records the id at reg time).
 * Run for GPU memory and pageable host memory (which has no buffer id the
 * cache could check), in NOTIFY and TAG_CHECK mode.
 *
 * (With only the notify before the free, as an application reports free()
 * of pageable memory, no such claim can be made under load: a get that
 * begins between the notify and the free registers memory that is still
 * there, and nothing tells the cache of its reallocation: test_notify_alloc.c
 * forces that get.  That protocol's other race - the notify landing inside
 * a miss already under way - is forced in test_lost_invalidation.c.)
 *
 * Small random pauses after the memory query (the miss's answer is given,
 * its entry not yet visible) and between the mutator's steps widen the
 * windows in which the invalidation can be lost, so that two cores meet
 * them often.
 *
 * REGCACHE_RACE_GETS sets the gets of each run (default 1,000,000, over
 * all getters; 200,000 in the TSan build, see CMakeLists.txt). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "cache_fixture.h"
#include "test_sync.h"

#ifndef RACE_GETS_DEFAULT
#define RACE_GETS_DEFAULT 1000000
#endif

#define GETTERS 2
#define NALLOCS 8
#define SIZE (256 * KiB)
/* Pageable memory is registered a page at a time (nothing says where its
 * allocation ends): gets stay within a few pages of it, so that hits still
 * outnumber misses. */
#define PAGEABLE_SPAN (16 * KiB)

struct race {
    struct fx *f;
    size_t span; /* gets fall in [FX_ALLOC(k), FX_ALLOC(k) + span) */
    long gets_each;
    _Atomic uint64_t live_id[NALLOCS]; /* published after the second notify */
    atomic_bool stop;
    atomic_long stale, failures, gets, reallocs;
};

/* Up to a few microseconds of work, one time in `odds`. */
static void pause_sometimes(uint32_t *seed, unsigned odds)
{
    if (test_rand(seed) % odds)
        return;
    for (volatile unsigned spin = test_rand(seed) % 4096; spin; spin--) {
    }
}

static void pause_after_query(void *arg, const void *addr)
{
    static _Thread_local uint32_t seed = 1;
    (void)arg;
    (void)addr;
    pause_sometimes(&seed, 2);
}

static void *getter(void *arg)
{
    struct race *r = arg;
    uint32_t seed = (uint32_t)(uintptr_t)&seed | 1;
    for (long i = 0; i < r->gets_each; i++) {
        int k = (int)(test_rand(&seed) % NALLOCS);
        uintptr_t addr = FX_ALLOC(k) + (test_rand(&seed) % (r->span / 512)) * 512;
        uint64_t published = atomic_load_explicit(&r->live_id[k], memory_order_acquire);
        regcache_entry_t *e;
        if (regcache_get(r->f->c, (const void *)addr, 512, &e) != REGCACHE_OK) {
            atomic_fetch_add(&r->failures, 1);
            continue;
        }
        if (((struct fake_handle *)regcache_entry_handle(e))->id < published)
            atomic_fetch_add(&r->stale, 1);
        regcache_put(r->f->c, e);
        /* Let the reallocator run on this core too: with more threads than
         * cores it would otherwise wait out whole time slices, and meet
         * the getters rarely. */
        if (i % 64 == 63)
            sched_yield();
    }
    atomic_fetch_add(&r->gets, r->gets_each);
    return NULL;
}

static void *reallocator(void *arg)
{
    struct race *r = arg;
    uint32_t seed = 12345;
    while (!atomic_load(&r->stop)) {
        int k = (int)(test_rand(&seed) % NALLOCS);
        regcache_notify_free((const void *)FX_ALLOC(k), SIZE);
        pause_sometimes(&seed, 2);
        uint64_t id = fake_realloc(&r->f->fb, FX_ALLOC(k));
        regcache_notify_alloc((const void *)FX_ALLOC(k), SIZE);
        atomic_store_explicit(&r->live_id[k], id, memory_order_release);
        atomic_fetch_add(&r->reallocs, 1);
        pause_sometimes(&seed, 1);
        sched_yield();
    }
    return NULL;
}

static long gets_per_run(void)
{
    const char *v = getenv("REGCACHE_RACE_GETS");
    long n = v ? atol(v) : RACE_GETS_DEFAULT;
    return n > 0 ? n : RACE_GETS_DEFAULT;
}

static double seconds_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

static void run(struct fx *f, bool pageable, int validation)
{
    struct race *r = calloc(1, sizeof(*r));
    r->f = f;
    r->span = pageable ? PAGEABLE_SPAN : SIZE;
    r->gets_each = gets_per_run() / GETTERS + 1;
    for (int k = 0; k < NALLOCS; k++) {
        uint64_t id = pageable ? fx_pageable_alloc(f, FX_ALLOC(k), SIZE)
                               : fake_alloc(&f->fb, FX_ALLOC(k), SIZE, 0, REGCACHE_MEM_DEVICE);
        atomic_store(&r->live_id[k], id);
    }
    f->p.host_memory = pageable;
    f->p.validation = validation;
    f->fb.during_query = pause_after_query;
    fx_create(f);

    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_t g[GETTERS], m;
    pthread_create(&m, NULL, reallocator, r);
    for (int i = 0; i < GETTERS; i++)
        pthread_create(&g[i], NULL, getter, r);
    for (int i = 0; i < GETTERS; i++)
        pthread_join(g[i], NULL);
    atomic_store(&r->stop, true);
    pthread_join(m, NULL);

    struct regcache_stats s = fx_stats(f);
    printf("# %s %s: %ld gets in %.2f s, %ld reallocations; hits %llu, misses %llu, one-shots "
           "%llu, dropped by notify %llu, stale entries met by misses %llu; stale gets %ld\n",
           pageable ? "pageable" : "GPU",
           validation == REGCACHE_VALIDATE_NOTIFY ? "NOTIFY" : "TAG_CHECK", atomic_load(&r->gets),
           seconds_since(&t0), atomic_load(&r->reallocs), (unsigned long long)s.hits,
           (unsigned long long)s.misses, (unsigned long long)s.one_shots,
           (unsigned long long)s.invalidations_notify, (unsigned long long)s.invalidations_tag,
           atomic_load(&r->stale));
    assert_int_equal(atomic_load(&r->stale), 0);
    assert_int_equal(atomic_load(&r->failures), 0);
    assert_true(atomic_load(&r->gets) >= gets_per_run());
    assert_true(atomic_load(&r->reallocs) > 0);
    assert_true(s.invalidations_notify > 0);
    free(r);
}

#define RUN(name, pageable, mode)                        \
    static void name(void **state)                       \
    {                                                    \
        run(*state, pageable, REGCACHE_VALIDATE_##mode); \
    }
RUN(gpu_notify, false, NOTIFY)
RUN(gpu_tag_check, false, TAG_CHECK)
RUN(pageable_notify, true, NOTIFY)
RUN(pageable_tag_check, true, TAG_CHECK)
#undef RUN

FX_MAIN(gpu_notify, gpu_tag_check, pageable_notify, pageable_tag_check)
