/* Threads get and put while others invalidate and reallocate: no entry is
 * ever served after its invalidation, and none is deregistered while held. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "fake_backend.h"

#define MiB (1024ul * 1024ul)
#define SLOTS 16
#define GETTERS 8
#define ALLOC(i) ((uintptr_t)0x7f0000000000ull + (uintptr_t)(i)*2 * MiB)
#define MAGIC 0x5ca1ab1eu

struct world {
    struct fake_backend fb;
    regcache_t *c;
    /* A getter holds a slot shared while it gets and checks; the mutator
     * holds it exclusive while it frees and reallocates, so "after the
     * invalidation" is well defined. */
    pthread_rwlock_t slot[SLOTS];
    atomic_int stop;
    atomic_long stale, torn, served;
    bool notify; /* invalidate through notify_free; else rely on the tag check */
    int iterations;
};

static uint32_t next_rand(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static void *getter(void *arg)
{
    struct world *w = arg;
    uint32_t seed = (uint32_t)(uintptr_t)&seed | 1;
    for (int i = 0; i < w->iterations; i++) {
        int k = (int)(next_rand(&seed) % SLOTS);
        uintptr_t addr = ALLOC(k) + (next_rand(&seed) % 1024) * 1024;
        regcache_entry_t *e;
        pthread_rwlock_rdlock(&w->slot[k]);
        int rc = regcache_get(w->c, (void *)addr, 512, &e);
        if (rc == REGCACHE_OK) {
            struct fake_handle *h = regcache_entry_handle(e);
            if (h->id != fake_id_at(&w->fb, addr))
                atomic_fetch_add(&w->stale, 1);
            atomic_fetch_add(&w->served, 1);
        }
        pthread_rwlock_unlock(&w->slot[k]);
        if (rc != REGCACHE_OK)
            continue;
        /* Keep the entry a little past the lock, so invalidations land on
         * held entries: a held registration must stay alive until put. */
        for (int spin = 0; spin < (int)(next_rand(&seed) % 64); spin++)
            if (((struct fake_handle *)regcache_entry_handle(e))->magic != MAGIC)
                atomic_fetch_add(&w->torn, 1);
        regcache_put(w->c, e);
    }
    return NULL;
}

static void *mutator(void *arg)
{
    struct world *w = arg;
    uint32_t seed = 12345;
    while (!atomic_load(&w->stop)) {
        int k = (int)(next_rand(&seed) % SLOTS);
        pthread_rwlock_wrlock(&w->slot[k]);
        if (w->notify)
            regcache_notify_free((void *)ALLOC(k), MiB);
        fake_realloc(&w->fb, ALLOC(k));
        pthread_rwlock_unlock(&w->slot[k]);
        if (next_rand(&seed) % 4 == 0)
            regcache_flush(w->c);
    }
    return NULL;
}

static void run(bool notify, int validation)
{
    struct world *w = calloc(1, sizeof(*w));
    struct regcache_params p;
    fake_init(&w->fb);
    for (int k = 0; k < SLOTS; k++) {
        fake_alloc(&w->fb, ALLOC(k), MiB, k % 2, REGCACHE_MEM_DEVICE);
        pthread_rwlock_init(&w->slot[k], NULL);
    }
    fake_params(&w->fb, &p);
    p.validation = validation;
    p.whole_allocation = 0; /* many entries per allocation */
    p.max_entries = 24;     /* and eviction racing everything else */
    w->notify = notify;
    w->iterations = 20000;
    assert_int_equal(regcache_create(&p, &w->c), REGCACHE_OK);

    pthread_t g[GETTERS], m;
    pthread_create(&m, NULL, mutator, w);
    for (int i = 0; i < GETTERS; i++)
        pthread_create(&g[i], NULL, getter, w);
    for (int i = 0; i < GETTERS; i++)
        pthread_join(g[i], NULL);
    atomic_store(&w->stop, 1);
    pthread_join(m, NULL);

    struct regcache_stats s;
    regcache_get_stats(w->c, &s);
    assert_int_equal(atomic_load(&w->stale), 0);
    assert_int_equal(atomic_load(&w->torn), 0);
    assert_int_equal(atomic_load(&w->served), (long)GETTERS * w->iterations);
    assert_true(s.hits > 0);
    assert_true(s.registrations > 0);
    if (notify)
        assert_true(s.invalidations_notify > 0);
    else
        assert_true(s.invalidations_tag > 0);
    regcache_destroy(w->c);
    assert_int_equal(atomic_load(&w->fb.live), 0);
    assert_int_equal(atomic_load(&w->fb.regs), atomic_load(&w->fb.deregs));
    free(w);
}

static void invalidations_by_notify_race_lookups(void **state)
{
    (void)state;
    run(true, REGCACHE_VALIDATE_NOTIFY);
}

static void reallocations_caught_by_tag_checks(void **state)
{
    (void)state;
    run(false, REGCACHE_VALIDATE_TAG_CHECK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(invalidations_by_notify_race_lookups),
        cmocka_unit_test(reallocations_caught_by_tag_checks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
