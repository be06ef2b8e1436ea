/* Gets of cached host memory while the host memory monitor is behind: its
 * drain, which calls back nobody, is held while it takes an unmapped
 * range out of another cache (a gate in that cache's listener, which
 * hears the entry leave under the cache's lock).  A non-blocking get of a
 * range that no unhandled unmap concerns is a hit at once - it never
 * waits for the drain, and queues nothing - and so is a blocking one; a
 * get of a range that an unmap queued behind the drain concerns is no hit:
 * the non-blocking one returns AGAIN at once, and once the drain ends the
 * range misses.  Hangs are reported by alarm(). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache.h"
#include "cache_fixture.h"
#include "host_events.h"
#include "test_sync.h"

#define LEN (1 * MiB)

static struct gate drain_gate;
static char *slow; /* the range whose leave holds the drain at the gate */

static void slow_leave(void *arg, const struct rc_entry_view *e)
{
    (void)arg;
    if (e->start >= (uintptr_t)slow && e->start < (uintptr_t)slow + LEN)
        gate_pass(&drain_gate);
}

static const struct rc_listener slow_listener = { .on_leave = slow_leave };

static bool deregistered_two(const void *arg)
{
    return atomic_load(&((const struct fx *)arg)->fb.deregs) == 2;
}

static char *anon(void *at, int flags)
{
    char *p = mmap(at, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
    assert_true(p != MAP_FAILED);
    return p;
}

static int nonblocking_get(struct fx *f, const char *p, regcache_entry_t **e)
{
    return regcache_get_access(f->c, 0, p, 4096, f->p.access, REGCACHE_GET_NONBLOCK, e);
}

static void gets_while_the_monitor_drains_slowly(void **state)
{
    struct fx *f = *state;
    f->p.host_memory = 1;
    f->p.alignment = 4096;
    gate_init(&drain_gate);
    fx_create(f);
    /* Newer than f's: the drain comes to it first. */
    void *other;
    fx_setup(&other);
    struct fx *held = other;
    held->p.host_memory = 1;
    held->p.alignment = 4096;
    fx_create(held);
    assert_true(rc_listen(held->c, &slow_listener, NULL) >= 0);
    slow = anon(NULL, 0);
    char *kept = anon(NULL, 0), *gone = anon(NULL, 0);
    fx_use(held, (uintptr_t)slow, 4096);
    fx_use(f, (uintptr_t)slow, 4096);
    fx_use(f, (uintptr_t)kept, 4096);
    fx_use(f, (uintptr_t)gone, 4096);
    long regs = atomic_load(&f->fb.regs);

    alarm(60);
    assert_int_equal(munmap(slow, LEN), 0);
    assert_true(gate_await(&drain_gate, 1, HANG_SECONDS));
    /* The drain is in slow's leave from the other cache; gone's unmap
     * queues behind. */
    assert_int_equal(munmap(gone, LEN), 0);
    char *fresh = anon(gone, MAP_FIXED_NOREPLACE);
    assert_true(rc_host_monitor_behind());

    regcache_entry_t *e = NULL;
    assert_int_equal(nonblocking_get(f, kept, &e), REGCACHE_OK);
    assert_non_null(e);
    regcache_put(f->c, e);
    e = fx_get(f, (uintptr_t)kept, 4096);
    regcache_put(f->c, e);
    /* Not the registration of the pages that were there. */
    e = (regcache_entry_t *)1;
    assert_int_equal(nonblocking_get(f, fresh, &e), REGCACHE_ERR_AGAIN);
    assert_null(e);
    assert_int_equal(atomic_load(&f->fb.regs), regs);
    fx_assert_stats(f, FX_STAT(hits, 2), FX_STAT(prefetches, 1), NULL);

    /* Once the drain ends, both unmapped ranges are deregistered (by the
     * monitor's thread), and the new pages registered (by the queued
     * range). */
    gate_open(&drain_gate);
    assert_int_equal(regcache_prefetch_wait(f->c), REGCACHE_OK);
    assert_true(wait_until(deregistered_two, f, HANG_SECONDS));
    alarm(0);
    assert_int_equal(atomic_load(&f->fb.regs), regs + 1);
    e = fx_get(f, (uintptr_t)fresh, 4096);
    regcache_put(f->c, e);
    assert_int_equal(atomic_load(&f->fb.regs), regs + 1);
    regcache_destroy(f->c);
    f->c = NULL;
    fx_teardown(&other);
    munmap(kept, LEN);
    munmap(fresh, LEN);
}

/* libc cannot be patched where a sanitizer's allocator unmaps by system
 * call, and the userfaultfd would have the unmapping thread wait for the
 * drain that the gate holds: a skip, said so. */
static bool monitored(void)
{
    void *state;
    fx_setup(&state);
    struct fx *f = state;
    f->p.host_memory = 1;
    fx_create(f);
    const char *why = strstr(regcache_validation_reason(f->c), "host memory: ");
    bool ok = why && strncmp(why, "host memory: monitored", 22) == 0;
    if (!ok)
        printf("SKIP: %s\n", why ? why : regcache_validation_reason(f->c));
    fx_teardown(&state);
    return ok;
}

int main(void)
{
    if (!monitored())
        return 77;
    return FX_RUN(fx_setup, fx_teardown, gets_while_the_monitor_drains_slowly);
}
