/* The heavy fence when membarrier() worked at first and then fails for
 * good (a seccomp filter installed later, memory that never comes back),
 * injected through the system call's seam: the switch to real fences
 * returns after a bounded wait, under the cache lock of the invalidation
 * that paid for it, while another thread's gets of that cache wait for
 * the lock.  Everything goes on: the held entry stays registered until its
 * put, which deregisters it; unused entries of before the switch are
 * evicted; hits go on; and a heavy fence no longer asks the kernel.  A
 * hang is reported by alarm(). */
#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include <cmocka.h>

#include "asym_fence.h"
#include "cache.h"
#include "cache_fixture.h"

static long (*system_membarrier)(int cmd);
static atomic_bool refuse;
static atomic_int refused;

/* Where the kernel has no expedited membarrier the seam stands in for it
 * until the refusal begins: a fence, for the one thread that runs then. */
static long refusing_membarrier(int cmd)
{
    if (cmd == MEMBARRIER_CMD_PRIVATE_EXPEDITED && atomic_load(&refuse)) {
        atomic_fetch_add(&refused, 1);
        errno = ENOMEM;
        return -1;
    }
    long rc = system_membarrier(cmd);
    atomic_thread_fence(memory_order_seq_cst);
    if (cmd == MEMBARRIER_CMD_QUERY)
        return (rc < 0 ? 0 : rc) | MEMBARRIER_CMD_PRIVATE_EXPEDITED;
    return rc < 0 ? 0 : rc;
}

struct getter {
    struct fx *f;
    atomic_bool stop;
    atomic_long gets, failures;
};

/* Gets and puts of allocation 1 until told to stop: its misses and
 * evictions take the lock that the switch holds. */
static void *get_and_put(void *arg)
{
    struct getter *g = arg;
    while (!atomic_load(&g->stop)) {
        regcache_entry_t *e = NULL;
        if (regcache_get(g->f->c, (const void *)FX_ALLOC(1), 4096, &e) != REGCACHE_OK) {
            atomic_fetch_add(&g->failures, 1);
            continue;
        }
        regcache_put(g->f->c, e);
        regcache_invalidate(g->f->c, (const void *)FX_ALLOC(1), 4096);
        atomic_fetch_add(&g->gets, 1);
    }
    return NULL;
}

static void a_barrier_refused_for_good_still_returns(void **state)
{
    struct fx *f = *state;
    system_membarrier = rc_membarrier;
    rc_membarrier = refusing_membarrier;
    rc_fence_setup(NULL);
    assert_true(atomic_load(&rc_heavy_fence_works));
    for (int i = 0; i < 3; i++)
        fx_device_alloc(f, i);
    f->p.validation = REGCACHE_VALIDATE_TAG_CHECK;
    fx_create(f);
    assert_true(atomic_load(&f->c->fenceless));
    fx_use(f, FX_ALLOC(2), 4096); /* cached, unused, from before the switch */
    regcache_entry_t *held = fx_get(f, FX_ALLOC(0), 4096);

    struct getter g = { .f = f };
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, get_and_put, &g), 0);
    while (atomic_load(&g.gets) < 10)
        sched_yield();

    alarm(60);
    atomic_store(&refuse, true);
    /* Held: the invalidation pays the heavy fence, which switches. */
    assert_int_equal(regcache_invalidate(f->c, (const void *)FX_ALLOC(0), 1), REGCACHE_OK);
    long seen = atomic_load(&g.gets);
    while (atomic_load(&g.gets) < seen + 10)
        sched_yield();
    atomic_store(&g.stop, true);
    assert_int_equal(pthread_join(t, NULL), 0);
    alarm(0);
    assert_int_equal(atomic_load(&g.failures), 0);
    assert_true(atomic_load(&refused) > 0);

    /* Every fast side fences now. */
    assert_false(atomic_load(&rc_heavy_fence_works));
    assert_false(atomic_load(&f->c->fenceless));
    assert_true(atomic_load(&f->c->put_flags) & RC_PUT_FENCE);
    /* The held entry stayed registered until its put. */
    assert_int_equal(fx_handle(held)->magic, 0x5ca1ab1eu);
    long live = atomic_load(&f->fb.live);
    regcache_put(f->c, held);
    assert_int_equal(atomic_load(&f->fb.live), live - 1);

    /* The entry of before the switch is evicted, and hits go on. */
    assert_int_equal(regcache_flush(f->c), REGCACHE_OK);
    assert_int_equal(atomic_load(&f->fb.live), 0);
    fx_use(f, FX_ALLOC(2), 4096);
    fx_use(f, FX_ALLOC(2), 4096);
    assert_true(fx_stats(f).hits >= 1);

    /* A heavy fence no longer asks the kernel. */
    int before = atomic_load(&refused);
    held = fx_get(f, FX_ALLOC(0), 4096);
    assert_int_equal(regcache_invalidate(f->c, (const void *)FX_ALLOC(0), 1), REGCACHE_OK);
    assert_int_equal(atomic_load(&refused), before);
    regcache_put(f->c, held);
}

FX_MAIN(a_barrier_refused_for_good_still_returns)
