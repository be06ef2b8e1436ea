/* The GPU cache: threads against a reallocator. */
#include "gpu_cache.h"

/* ------------------------------------------------------------------------ */
/* Threads against a reallocator                                             */
/* ------------------------------------------------------------------------ */

#define SLOTS 8
#define GETTERS 16
#define GETS_PER_THREAD 20000
#define REALLOCS 2000

/* A getter holds its slot's lock shared from get to put, so the memory it
 * checks is live; the reallocator takes it exclusively around free+alloc. */
struct slot {
    pthread_rwlock_t lock;
    CUdeviceptr addr;
};

static struct slot slots[SLOTS];
static regcache_t *stress_cache;
static atomic_int wrong, moved; /* stale handle or failed get */
static atomic_bool stop;

static void *getter(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    for (int i = 0; i < GETS_PER_THREAD; i++) {
        struct slot *s = &slots[rand_r(&seed) % SLOTS];
        size_t offset = (rand_r(&seed) % 256) * 4096;
        pthread_rwlock_rdlock(&s->lock);
        uintptr_t addr = s->addr + offset;
        regcache_entry_t *e;
        requested = addr;
        if (regcache_get(stress_cache, (const void *)addr, 4096, &e) != REGCACHE_OK) {
            atomic_fetch_add(&wrong, 1);
        } else {
            struct handle *h = regcache_entry_handle(e);
            if (atomic_load(&h->dead) || h->id != buffer_id(addr))
                atomic_fetch_add(&wrong, 1);
            regcache_put(stress_cache, e);
        }
        pthread_rwlock_unlock(&s->lock);
    }
    return NULL;
}

static void *reallocator(void *arg)
{
    (void)arg;
    unsigned seed = 1;
    cu.cuCtxSetCurrent(ctx);
    for (int i = 0; i < REALLOCS && !atomic_load(&stop); i++) {
        struct slot *s = &slots[rand_r(&seed) % SLOTS];
        pthread_rwlock_wrlock(&s->lock);
        CUdeviceptr old = s->addr;
        if (cu.cuMemFree(old) != CUDA_SUCCESS || cu.cuMemAlloc(&s->addr, MIB) != CUDA_SUCCESS)
            abort();
        if (s->addr != old)
            atomic_fetch_add(&moved, 1);
        pthread_rwlock_unlock(&s->lock);
    }
    return NULL;
}

void threads_never_see_a_stale_handle(void **state)
{
    (void)state;
    stress_cache = new_cache(0);
    for (int i = 0; i < SLOTS; i++) {
        pthread_rwlock_init(&slots[i].lock, NULL);
        CK(cu.cuMemAlloc(&slots[i].addr, MIB));
    }
    atomic_store(&wrong, 0);
    atomic_store(&moved, 0);
    atomic_store(&stop, false);
    pthread_t g[GETTERS], r;
    assert_int_equal(pthread_create(&r, NULL, reallocator, NULL), 0);
    for (int i = 0; i < GETTERS; i++)
        assert_int_equal(pthread_create(&g[i], NULL, getter, (void *)(uintptr_t)(i + 1)), 0);
    for (int i = 0; i < GETTERS; i++)
        pthread_join(g[i], NULL);
    atomic_store(&stop, true);
    pthread_join(r, NULL);
    struct regcache_stats s = stats_of(stress_cache);
    printf("16 getters x %d gets, reallocations moved %d times: hits %ju misses %ju "
           "registrations %ju invalidations_tag %ju, stale or failed %d\n",
           GETS_PER_THREAD, atomic_load(&moved), (uintmax_t)s.hits, (uintmax_t)s.misses,
           (uintmax_t)s.registrations, (uintmax_t)s.invalidations_tag, atomic_load(&wrong));
    assert_int_equal(atomic_load(&wrong), 0);
    assert_true(s.invalidations_tag > 0);
    regcache_destroy(stress_cache);
    for (int i = 0; i < SLOTS; i++) {
        CK(cu.cuMemFree(slots[i].addr));
        pthread_rwlock_destroy(&slots[i].lock);
    }
}
