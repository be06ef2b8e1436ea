/* A callback the monitor's invalidations run (here an on_leave) may get
 * host memory at once: it is never served a registration of pages whose
 * unmap the monitor has heard of, even one queued behind the unmap that
 * made its own entry leave.  One munmap takes the pages of two caches'
 * entries; the newer cache, which the monitor reaches first, has a leave
 * notice that gets the other cache's range. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

#include <cmocka.h>

#include "host_fixture.h"
#include "test_sync.h"

#define LEN (2 * MiB)

struct reentry {
    regcache_t *other;
    uintptr_t other_range;
    atomic_int notices;
    atomic_int got; /* the get from inside the notice: its status + 1 */
};

static void get_the_other(void *arg, const struct regcache_leave *l)
{
    (void)l;
    struct reentry *r = arg;
    if (atomic_fetch_add(&r->notices, 1) != 0)
        return;
    regcache_entry_t *e;
    int rc = regcache_get(r->other, (const void *)r->other_range, LEN, &e);
    if (rc == REGCACHE_OK)
        regcache_put(r->other, e);
    atomic_store(&r->got, rc + 1);
}

static bool got(const void *arg)
{
    return atomic_load(&((const struct reentry *)arg)->got) != 0;
}

static void notice_gets_memory_unmapped_later(void **state)
{
    struct fx *f = *state;
    static struct reentry r;
    char *p = hx_anon(NULL, 2 * LEN, 0);
    /* The other cache first: the registry lists the newest first. */
    struct fake_backend other_fb;
    fake_init(&other_fb);
    struct regcache_params op;
    fake_params(&other_fb, &op);
    op.host_memory = 1;
    op.alignment = 4096;
    assert_int_equal(regcache_create(&op, &r.other), REGCACHE_OK);
    r.other_range = (uintptr_t)p + LEN;
    regcache_entry_t *e;
    assert_int_equal(regcache_get(r.other, p + LEN, LEN, &e), REGCACHE_OK);
    regcache_put(r.other, e);

    f->p.on_leave = get_the_other;
    f->p.callback_arg = &r;
    hx_create(f);
    fx_use(f, (uintptr_t)p, LEN);
    assert_int_equal(munmap(p, 2 * LEN), 0);
    assert_true(wait_until(got, &r, HANG_SECONDS));
    assert_int_equal(atomic_load(&r.got) - 1, REGCACHE_OK);
    assert_cache_stats(r.other, FX_STAT(hits, 0), FX_STAT(misses, 2),
                       FX_STAT(invalidations_monitor, 1), NULL);
    regcache_destroy(r.other);
    assert_int_equal(atomic_load(&other_fb.live), 0);
}

int main(void)
{
    int status = hx_start();
    if (status)
        return status;
    return FX_RUN(fx_setup, fx_teardown, notice_gets_memory_unmapped_later);
}
