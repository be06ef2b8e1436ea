/* The heavy fence when membarrier() fails after it worked (the kernel
 * documents ENOMEM), injected through the system call's seam: a failure
 * that passes is tried again, and nothing changes; one that lasts switches
 * every fast side to real fences - the TAG_CHECK hits of every cache, every
 * put, new caches - and the heavy fence returns only once a barrier has
 * succeeded after the switch, which covers a fast side that read its flag
 * just before.  From then on a heavy fence is a plain fence, and entries
 * invalidated while held are still released at their put. */
#include <errno.h>
#include <linux/membarrier.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "asym_fence.h"
#include "cache.h"
#include "cache_fixture.h"

#define A FX_ALLOC(0)

static long (*system_membarrier)(int cmd);
static atomic_int fail_next;        /* fail this many barriers */
static atomic_bool fail_until_flip; /* fail while fast sides may skip fences */
static atomic_int fail_after_flip;  /* then fail this many more */
static atomic_int barriers, succeeded_after_flip;

/* Where the kernel has no expedited membarrier the seam stands in for it:
 * these tests run one thread at a time, for which a fence is a barrier. */
static long pretend(long rc)
{
    atomic_thread_fence(memory_order_seq_cst);
    return rc < 0 ? 0 : rc;
}

static long failing_membarrier(int cmd)
{
    if (cmd == MEMBARRIER_CMD_QUERY)
        return pretend(system_membarrier(cmd)) | MEMBARRIER_CMD_PRIVATE_EXPEDITED;
    if (cmd != MEMBARRIER_CMD_PRIVATE_EXPEDITED)
        return pretend(system_membarrier(cmd));
    atomic_fetch_add(&barriers, 1);
    bool flipped = !atomic_load(&rc_heavy_fence_works);
    bool fail = atomic_load(&fail_next) > 0 ? atomic_fetch_sub(&fail_next, 1) > 0
                : flipped
                    ? atomic_load(&fail_after_flip) > 0 && atomic_fetch_sub(&fail_after_flip, 1) > 0
                    : atomic_load(&fail_until_flip);
    if (fail) {
        errno = ENOMEM;
        return -1;
    }
    if (flipped)
        atomic_fetch_add(&succeeded_after_flip, 1);
    return pretend(system_membarrier(cmd));
}

/* Before the first cache, which registers the process through the seam. */
static void inject(void)
{
    if (!system_membarrier) {
        system_membarrier = rc_membarrier;
        rc_membarrier = failing_membarrier;
    }
    rc_fence_setup(NULL);
    assert_true(atomic_load(&rc_heavy_fence_works));
}

static bool put_fences(regcache_t *c)
{
    return atomic_load(&c->put_flags) & RC_PUT_FENCE;
}

/* A held entry of c invalidated, which pays the heavy fence. */
static regcache_entry_t *held_and_invalidated(struct fx *f, regcache_t *c)
{
    regcache_entry_t *e = NULL;
    assert_int_equal(regcache_get(c, (const void *)A, 10, &e), REGCACHE_OK);
    assert_int_equal(regcache_invalidate(c, (const void *)A, 1), REGCACHE_OK);
    assert_int_equal(fx_handle(e)->magic, 0x5ca1ab1eu); /* still registered */
    (void)f;
    return e;
}

static void a_failing_barrier_is_tried_again(void **state)
{
    struct fx *f = *state;
    inject();
    fx_device_alloc(f, 0);
    f->p.validation = REGCACHE_VALIDATE_TAG_CHECK;
    fx_create(f);
    assert_true(atomic_load(&f->c->fenceless));

    atomic_store(&fail_next, 3);
    regcache_entry_t *e = held_and_invalidated(f, f->c);
    assert_int_equal(atomic_load(&fail_next), 0);
    /* Nothing was switched. */
    assert_true(atomic_load(&rc_heavy_fence_works));
    assert_true(atomic_load(&f->c->fenceless));
    assert_false(put_fences(f->c));
    regcache_put(f->c, e);
    assert_int_equal(atomic_load(&f->fb.live), 0);
}

/* Last: the switch is for good. */
static void a_barrier_that_keeps_failing_makes_every_side_fence(void **state)
{
    struct fx *f = *state;
    inject();
    fx_device_alloc(f, 0);
    f->p.validation = REGCACHE_VALIDATE_TAG_CHECK;
    fx_create(f);
    struct regcache_params hooks = f->p;
    hooks.validation = REGCACHE_VALIDATE_NOTIFY;
    regcache_t *h;
    assert_int_equal(regcache_create(&hooks, &h), REGCACHE_OK);
    assert_false(put_fences(f->c));
    assert_false(put_fences(h));

    atomic_store(&fail_until_flip, true);
    atomic_store(&fail_after_flip, 2);
    regcache_entry_t *e = held_and_invalidated(f, f->c);
    /* Every fast side fences now, and a barrier succeeded after the switch
     * (two more failed first) before the invalidation returned. */
    assert_false(atomic_load(&rc_heavy_fence_works));
    assert_false(atomic_load(&f->c->fenceless));
    assert_true(put_fences(f->c));
    assert_true(put_fences(h));
    assert_int_equal(atomic_load(&fail_after_flip), 0);
    assert_int_equal(atomic_load(&succeeded_after_flip), 1);
    regcache_put(f->c, e);
    assert_int_equal(atomic_load(&f->fb.live), 0);

    /* A cache created now fences from the start. */
    regcache_t *later;
    assert_int_equal(regcache_create(&f->p, &later), REGCACHE_OK);
    assert_false(atomic_load(&later->fenceless));
    assert_true(put_fences(later));
    regcache_destroy(later);

    /* Hits go on, and a heavy fence no longer asks the kernel. */
    fx_use(f, A, 10);
    fx_use(f, A, 10);
    assert_int_equal(fx_stats(f).hits, 1);
    int before = atomic_load(&barriers);
    e = held_and_invalidated(f, f->c);
    assert_int_equal(atomic_load(&barriers), before);
    regcache_put(f->c, e);
    assert_int_equal(atomic_load(&f->fb.live), 0);
    regcache_destroy(h);
}

FX_MAIN(a_failing_barrier_is_tried_again, a_barrier_that_keeps_failing_makes_every_side_fence)
