/* Misses through the ring: a kernel's request for memory never registered
 * is registered by the table's thread through the cache's miss path and
 * answered once it is in the table; a registration that fails, memory
 * that is no GPU memory and a table without room answer with their
 * status; misses read together are answered one by one; many posters on
 * a ring smaller than their requests all get answers, in ticket order; a
 * wait of no polls says pending. */
#include <errno.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "fake_gpu.h"
#include "keys_fixture.h"
#include "test_sync.h"

#define A FX_ALLOC(0)
#define B FX_ALLOC(1)
#define POLLS (UINT64_C(1) << 40) /* a hang is the alarm's to report */

static int ask(struct kx *k, uintptr_t addr, size_t len, unsigned rail, int *status)
{
    uint64_t ticket;
    assert_int_equal(regcache_device_request(&k->t, (void *)addr, len, rail, 1, &ticket),
                     REGCACHE_DEVICE_POSTED);
    return regcache_device_wait(&k->t, ticket, POLLS, status);
}

/* First touch: a miss, answered, and then a hit with the host's key. */
static void first_touch(void **state)
{
    struct kx *k = *state;
    fx_device_allocs(&k->fx, 1);
    kx_attach(k);
    struct regcache_device_key key;
    assert_int_equal(kx_lookup(k, A + 4096, 64, 0, &key), REGCACHE_DEVICE_MISS);
    assert_int_equal(regcache_device_get_key(&k->t, (void *)(A + 4096), 64, 0, POLLS, &key),
                     REGCACHE_DEVICE_HIT);
    assert_int_equal(key.lkey, 1);
    assert_int_equal(key.bytes, MiB - 4096);
    fx_assert_stats(&k->fx, FX_STAT(misses, 1), FX_STAT(registrations, 1), NULL);
    kx_assert_agrees(k, A, 64, 0);
    struct regcache_device_keys_stats s = kx_stats(k);
    assert_int_equal(s.requests, 1);
    assert_int_equal(s.request_failures, 0);
}

/* Failures come back as statuses; the ring goes on. */
static void failures_answered(void **state)
{
    struct kx *k = *state;
    k->fx.p.rails = 2;
    fx_device_allocs(&k->fx, 1);
    kx_attach(k);
    int status = 0;
    k->fx.fb.fail_errno = EIO;
    k->fx.fb.fail_count = 1;
    k->fx.fb.fail_rail = -1;
    assert_int_equal(ask(k, A, 64, 0, &status), REGCACHE_DEVICE_FAILED);
    assert_int_equal(status, REGCACHE_ERR_BACKEND);
    assert_int_equal(ask(k, B, 64, 0, &status), REGCACHE_DEVICE_FAILED);
    assert_int_equal(status, REGCACHE_ERR_NOT_GPU);
    assert_int_equal(ask(k, A, 64, 5, &status), REGCACHE_DEVICE_FAILED);
    assert_int_equal(status, REGCACHE_ERR_INVALID);
    assert_int_equal(ask(k, A, 64, 1, &status), REGCACHE_DEVICE_DONE);
    assert_int_equal(status, REGCACHE_OK);
    struct regcache_device_keys_stats s = kx_stats(k);
    assert_int_equal(s.requests, 4);
    assert_int_equal(s.request_failures, 3);
}

/* Registered, but no record free: the kernel learns it must fall back. */
static void no_room_answered(void **state)
{
    struct kx *k = *state;
    k->kp.records = 2;
    fx_device_allocs(&k->fx, 2);
    kx_attach(k);
    int status = 0;
    assert_int_equal(ask(k, A, 64, 0, &status), REGCACHE_DEVICE_DONE);
    assert_int_equal(ask(k, B, 64, 0, &status), REGCACHE_DEVICE_FAILED);
    assert_int_equal(status, REGCACHE_ERR_NO_SPACE);
}

static void no_polls_pending(void **state)
{
    struct kx *k = *state;
    fx_device_allocs(&k->fx, 1);
    kx_attach(k);
    uint64_t ticket;
    assert_int_equal(regcache_device_request(&k->t, (void *)A, 64, 0, 1, &ticket),
                     REGCACHE_DEVICE_POSTED);
    assert_int_equal(regcache_device_wait(&k->t, ticket, 0, NULL), REGCACHE_DEVICE_PENDING);
    assert_int_equal(regcache_device_wait(&k->t, ticket, POLLS, NULL), REGCACHE_DEVICE_DONE);
    /* A thread that does not need the host posts nothing. */
    assert_int_equal(regcache_device_request(&k->t, (void *)A, 64, 0, 0, &ticket),
                     REGCACHE_DEVICE_NOT_POSTED);
}

struct asker {
    struct kx *k;
    uintptr_t addr;
    int rc;
    struct regcache_device_key key;
};

static void ask_key(void *arg)
{
    struct asker *a = arg;
    a->rc = regcache_device_get_key(&a->k->t, (void *)a->addr, 64, 0, POLLS, &a->key);
}

/* The table's copies are GPU work, which may wait behind the application's
 * (a synchronous copy queued behind a kernel that waits for this very
 * answer): a miss is answered without them, and the key it carries is good
 * in a hold section before the table holds it. */
static void answered_while_copies_wait(void **state)
{
    struct kx *k = *state;
    fx_device_allocs(&k->fx, 1);
    kx_attach(k);
    atomic_store(&fake_gpu.hold_copies, 1);
    struct asker a = { .k = k, .addr = A + 4096 };
    struct dthread th;
    dthread_start(&th, ask_key, &a);
    bool answered = dthread_join(&th, HANG_SECONDS);
    bool current = false;
    if (answered && a.rc == REGCACHE_DEVICE_HIT) {
        current = kx_key_good(k, regcache_device_hold_begin(&k->t, 0), &a.key);
        regcache_device_hold_end(&k->t, 0);
    }
    atomic_store(&fake_gpu.hold_copies, 0);
    if (!answered)
        assert_true(dthread_join(&th, HANG_SECONDS));
    assert_true(answered);
    assert_int_equal(a.rc, REGCACHE_DEVICE_HIT);
    assert_int_equal(a.key.lkey, 1);
    assert_int_equal(a.key.bytes, MiB - 4096);
    assert_true(current);
    /* Written once the copies go on. */
    kx_assert_agrees(k, A, 64, 0);
}

/* Registrations the ring's reader makes, the first and the third held at
 * gates. */
struct gated {
    atomic_int regs;
    struct gate first, third;
};

static void gated_reg(void *arg)
{
    struct gated *g = arg;
    int n = atomic_fetch_add(&g->regs, 1) + 1;
    if (n == 1)
        gate_pass(&g->first);
    else if (n == 3)
        gate_pass(&g->third);
}

static uint64_t post(struct kx *k, uintptr_t addr)
{
    uint64_t ticket;
    assert_int_equal(regcache_device_request(&k->t, (void *)addr, 64, 0, 1, &ticket),
                     REGCACHE_DEVICE_POSTED);
    return ticket;
}

/* Misses read together are answered one by one: the first is answered
 * while the registration of the second is still in flight.  (The gates
 * outlive the test: the reader may still be at one if it fails.) */
static void answered_one_at_a_time(void **state)
{
    static struct gated g;
    struct kx *k = *state;
    fx_device_allocs(&k->fx, 3);
    atomic_store(&g.regs, 0);
    gate_init(&g.first);
    gate_init(&g.third);
    k->fx.fb.during_reg = gated_reg;
    k->fx.fb.during_reg_arg = &g;
    kx_attach(k);
    uint64_t c = post(k, FX_ALLOC(2));
    bool busy = gate_await(&g.first, 1, HANG_SECONDS); /* the reader is busy with c */
    uint64_t a = post(k, A), b = post(k, B);
    gate_open(&g.first);
    bool in_flight = gate_await(&g.third, 1, HANG_SECONDS); /* b's registration */
    int first = regcache_device_wait(&k->t, a, 1, NULL);
    gate_open(&g.third);
    assert_true(busy);
    assert_true(in_flight);
    assert_int_equal(first, REGCACHE_DEVICE_DONE);
    assert_int_equal(regcache_device_wait(&k->t, b, POLLS, NULL), REGCACHE_DEVICE_DONE);
    assert_int_equal(regcache_device_wait(&k->t, c, POLLS, NULL), REGCACHE_DEVICE_DONE);
    assert_int_equal(kx_stats(k).requests, 3);
}

#define POSTERS 6
#define ASKS 40
#define BUFFERS (2 * POSTERS)

/* Each poster asks for its own two buffers, and now and then drops them
 * again so that they are asked for anew: it must be answered every time,
 * and a key current in its hold section is the host's (the cells' answers
 * are rewritten for later tickets meanwhile). */
struct poster {
    struct kx *k;
    int first;
    uint32_t seed;
    int wrong, current;
};

static uint32_t host_key(struct kx *k, uintptr_t addr)
{
    regcache_entry_t *e = NULL;
    if (regcache_get(k->fx.c, (void *)addr, 1, &e) != REGCACHE_OK)
        return 0;
    uint32_t lkey = ((struct fake_handle *)regcache_entry_handle(e))->serial;
    regcache_put(k->fx.c, e);
    return lkey;
}

static void post_many(void *arg)
{
    struct poster *p = arg;
    unsigned slot = (unsigned)p->first;
    for (int i = 0; i < ASKS; i++) {
        uintptr_t base = FX_ALLOC(p->first + (int)(test_rand(&p->seed) % 2));
        uintptr_t addr = base + test_rand(&p->seed) % MiB;
        struct regcache_device_key key;
        if (regcache_device_get_key(&p->k->t, (void *)addr, 1, 0, POLLS, &key) !=
                REGCACHE_DEVICE_HIT ||
            key.bytes != base + MiB - addr) {
            p->wrong++;
            continue;
        }
        if (kx_key_good(p->k, regcache_device_hold_begin(&p->k->t, slot), &key)) {
            p->current++;
            p->wrong += key.lkey != host_key(p->k, addr);
        }
        regcache_device_hold_end(&p->k->t, slot);
        if ((i & 7) == 0)
            regcache_invalidate(p->k->fx.c, (void *)base, MiB);
    }
}

/* More requests in flight than the ring has cells: posters wait for cells,
 * and every one is answered. */
static void many_posters_small_ring(void **state)
{
    struct kx *k = *state;
    k->kp.ring_slots = 4;
    k->kp.poll_ns = 1000;
    fx_device_allocs(&k->fx, BUFFERS);
    kx_attach(k);
    struct poster p[POSTERS];
    struct dthread th[POSTERS];
    for (int i = 0; i < POSTERS; i++) {
        p[i] = (struct poster){ .k = k, .first = 2 * i, .seed = 77u + (uint32_t)i };
        dthread_start(&th[i], post_many, &p[i]);
    }
    for (int i = 0; i < POSTERS; i++) {
        assert_true(dthread_join(&th[i], 120));
        assert_int_equal(p[i].wrong, 0);
        assert_true(p[i].current > 0);
    }
    struct regcache_device_keys_stats s = kx_stats(k);
    assert_true(s.requests >= POSTERS);
    assert_int_equal(s.request_failures, 0);
}

KX_MAIN(first_touch, failures_answered, no_room_answered, no_polls_pending,
        answered_while_copies_wait, answered_one_at_a_time, many_posters_small_ring)
