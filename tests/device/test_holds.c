/* Hold sections: a deregistration of an entry the table mirrored waits
 * for the sections open when its record left the table, and only for
 * those; a section that outlasts drain_timeout_ns is given up on, counted,
 * and not waited for again.  Keys a miss's answer carried are held the
 * same way, and stop being current the moment their entry leaves. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "device_table.h"
#include "fake_gpu.h"
#include "keys_fixture.h"
#include "test_sync.h"

#define A FX_ALLOC(0)
#define B FX_ALLOC(1)

struct holder {
    struct kx *k;
    unsigned slot;
    struct gate got, end;
    uint32_t lkey;
};

static void hold_a(void *arg)
{
    struct holder *h = arg;
    struct regcache_device_key key;
    int confirm = regcache_device_hold_begin(&h->k->t, h->slot);
    if (kx_lookup(h->k, A, 64, 0, &key) == REGCACHE_DEVICE_HIT && kx_key_good(h->k, confirm, &key))
        h->lkey = key.lkey;
    gate_pass(&h->got);
    gate_pass(&h->end);
    regcache_device_hold_end(&h->k->t, h->slot);
}

static void invalidate_a(void *arg)
{
    struct kx *k = arg;
    regcache_invalidate(k->fx.c, (void *)A, 64);
}

static bool a_gone(const void *arg)
{
    struct regcache_device_key key;
    return kx_usable((struct kx *)arg, A, 64, 0, &key) == REGCACHE_DEVICE_MISS;
}

static bool sleeping(const void *arg)
{
    return await_sleeping(dthread_tid((struct dthread *)arg), 0.001);
}

/* The key found in an open section stays registered until it ends. */
static void deregistration_waits_for_section(void **state)
{
    struct kx *k = *state;
    fx_device_allocs(&k->fx, 1);
    kx_attach(k);
    kx_assert_agrees(k, A, 64, 0);
    struct holder h = { .k = k, .slot = 3 };
    gate_init(&h.got);
    gate_init(&h.end);
    struct dthread holder, invalidator;
    dthread_start(&holder, hold_a, &h);
    assert_true(gate_await(&h.got, 1, HANG_SECONDS));
    assert_int_equal(h.lkey, 1);
    gate_open(&h.got);
    dthread_start(&invalidator, invalidate_a, k);
    /* Out of the table already, still registered: the section is open. */
    assert_true(wait_until(a_gone, k, HANG_SECONDS));
    assert_true(wait_until(sleeping, &invalidator, HANG_SECONDS)); /* waiting for slot 3 */
    assert_int_equal(atomic_load(&k->fx.fb.deregs), 0);
    gate_open(&h.end);
    assert_true(dthread_join(&holder, HANG_SECONDS));
    assert_true(dthread_join(&invalidator, HANG_SECONDS));
    assert_int_equal(atomic_load(&k->fx.fb.deregs), 1);
    struct regcache_device_keys_stats s = kx_stats(k);
    assert_int_equal(s.drains, 1);
    assert_int_equal(s.drain_timeouts, 0);
}

struct key_of {
    struct kx *k;
    const struct regcache_device_key *key;
};

static bool answered_gone(const void *arg)
{
    const struct key_of *o = arg;
    return !regcache_device_key_current(&o->k->t, o->key);
}

/* A section opened while the drain waits for another is not waited for:
 * the drain waits for the sections open when it began, at most. */
static void later_sections_not_waited_for(void **state)
{
    struct kx *k = *state;
    k->kp.drain_timeout_ns = 60ull * 1000 * 1000 * 1000;
    fx_device_allocs(&k->fx, 1);
    kx_attach(k);
    kx_assert_agrees(k, A, 64, 0);
    struct holder h = { .k = k, .slot = 0 };
    gate_init(&h.got);
    gate_init(&h.end);
    gate_open(&h.got);
    struct dthread holder, invalidator;
    dthread_start(&holder, hold_a, &h);
    assert_true(gate_await(&h.end, 1, HANG_SECONDS)); /* its section is open */
    dthread_start(&invalidator, invalidate_a, k);
    assert_true(wait_until(a_gone, k, HANG_SECONDS));
    assert_true(wait_until(sleeping, &invalidator, HANG_SECONDS)); /* waiting for slot 0 */
    kx_hold_open(k, 1);
    gate_open(&h.end);
    assert_true(dthread_join(&holder, HANG_SECONDS));
    assert_true(dthread_join(&invalidator, HANG_SECONDS));
    assert_int_equal(kx_stats(k).drain_timeouts, 0);
    regcache_device_hold_end(&k->t, 1);
}

/* Sections that ended, and sections opened after the record left, are
 * not waited for. */
static void closed_sections_cost_nothing(void **state)
{
    struct kx *k = *state;
    fx_device_allocs(&k->fx, 2);
    kx_attach(k);
    for (unsigned s = 0; s < 8; s++) {
        kx_hold_open(k, s);
        regcache_device_hold_end(&k->t, s);
    }
    kx_assert_agrees(k, A, 64, 0);
    assert_int_equal(regcache_invalidate(k->fx.c, (void *)A, 64), REGCACHE_OK);
    assert_int_equal(kx_stats(k).drains, 0);
    assert_int_equal(atomic_load(&k->fx.fb.deregs), 1);
}

/* A section that never ends: the wait stops at the bound, the
 * registration goes, and the next deregistration does not wait for that
 * section again. */
static void stuck_section_given_up(void **state)
{
    struct kx *k = *state;
    k->kp.drain_timeout_ns = 20 * 1000 * 1000;
    fx_device_allocs(&k->fx, 2);
    kx_attach(k);
    kx_assert_agrees(k, A, 64, 0);
    kx_assert_agrees(k, B, 64, 0);
    kx_hold_open(k, 7);
    assert_int_equal(regcache_invalidate(k->fx.c, (void *)A, 64), REGCACHE_OK);
    assert_int_equal(atomic_load(&k->fx.fb.deregs), 1);
    struct regcache_device_keys_stats s = kx_stats(k);
    assert_int_equal(s.drains, 1);
    assert_int_equal(s.drain_timeouts, 1);
    assert_true(s.drain_ns_max >= k->kp.drain_timeout_ns);
    assert_true(s.drain_ns_total >= s.drain_ns_max);
    assert_int_equal(regcache_invalidate(k->fx.c, (void *)B, 64), REGCACHE_OK);
    s = kx_stats(k);
    assert_int_equal(s.drains, 1);
    assert_int_equal(s.drain_timeouts, 1);
    /* A new section on the slot is waited for again. */
    regcache_device_hold_end(&k->t, 7);
    kx_hold_open(k, 7);
    kx_assert_agrees(k, A, 64, 0);
    assert_int_equal(regcache_invalidate(k->fx.c, (void *)A, 64), REGCACHE_OK);
    assert_int_equal(kx_stats(k).drain_timeouts, 2);
    regcache_device_hold_end(&k->t, 7);
}

/* A key the host answered a miss with, found current in an open section,
 * stays registered until the section ends, like a key looked up in it. */
struct answered {
    struct kx *k;
    struct gate held, end;
    int rc, current;
    struct regcache_device_key key;
};

static void hold_answered_a(void *arg)
{
    struct answered *h = arg;
    h->rc = regcache_device_get_key(&h->k->t, (void *)A, 64, 0, UINT64_C(1) << 40, &h->key);
    h->current = kx_key_good(h->k, regcache_device_hold_begin(&h->k->t, 5), &h->key);
    gate_pass(&h->held);
    gate_pass(&h->end);
    regcache_device_hold_end(&h->k->t, 5);
}

static void deregistration_waits_for_answered_key(void **state)
{
    struct kx *k = *state;
    fx_device_allocs(&k->fx, 1);
    kx_attach(k);
    struct answered h = { .k = k };
    gate_init(&h.held);
    gate_init(&h.end);
    struct dthread holder, invalidator;
    dthread_start(&holder, hold_answered_a, &h);
    assert_true(gate_await(&h.held, 1, HANG_SECONDS));
    assert_int_equal(h.rc, REGCACHE_DEVICE_HIT);
    assert_int_equal(h.key.answered, 1);
    assert_int_equal(h.key.lkey, 1);
    assert_true(h.current);
    gate_open(&h.held);
    dthread_start(&invalidator, invalidate_a, k);
    assert_true(wait_until(a_gone, k, HANG_SECONDS));
    assert_true(wait_until(sleeping, &invalidator, HANG_SECONDS)); /* waiting for slot 5 */
    assert_int_equal(atomic_load(&k->fx.fb.deregs), 0);
    gate_open(&h.end);
    assert_true(dthread_join(&holder, HANG_SECONDS));
    assert_true(dthread_join(&invalidator, HANG_SECONDS));
    assert_int_equal(atomic_load(&k->fx.fb.deregs), 1);
    assert_int_equal(kx_stats(k).drain_timeouts, 0);
}

/* An answered key stops being current when its entry leaves, before any
 * copy reaches the GPU: a section opened after the leave cannot use it even
 * while the table's copies wait. */
static void answered_key_gone_before_copies(void **state)
{
    struct kx *k = *state;
    fx_device_allocs(&k->fx, 1);
    kx_attach(k);
    struct regcache_device_key key;
    assert_int_equal(regcache_device_get_key(&k->t, (void *)A, 64, 0, UINT64_C(1) << 40, &key),
                     REGCACHE_DEVICE_HIT);
    assert_int_equal(key.answered, 1);
    assert_int_equal(regcache_device_keys_sync(k->fx.c, 0), REGCACHE_OK);
    atomic_store(&fake_gpu.hold_copies, 1);
    struct dthread invalidator;
    dthread_start(&invalidator, invalidate_a, k);
    kx_hold_open(k, 2);
    bool left = wait_until(answered_gone, &(struct key_of){ k, &key }, HANG_SECONDS);
    /* The table's copy still has it: the copy that takes it out waits. */
    struct regcache_device_key looked;
    int still = kx_lookup(k, A, 64, 0, &looked);
    regcache_device_hold_end(&k->t, 2);
    atomic_store(&fake_gpu.hold_copies, 0);
    assert_true(dthread_join(&invalidator, HANG_SECONDS));
    assert_true(left);
    assert_int_equal(still, REGCACHE_DEVICE_HIT);
    assert_int_equal(atomic_load(&k->fx.fb.deregs), 1);
}

/* The drain reads the slots a line at a time, two to a word: a section
 * open on either half of a word, in the first or a later line, or on the
 * last slot of a count that ends mid-line, is seen (here: waited for in
 * vain, and counted). */
static void every_slot_seen(void **state)
{
    struct kx *k = *state;
    k->kp.hold_slots = 37;
    k->kp.drain_timeout_ns = 1000 * 1000;
    struct rc_dtable *t = kx_table(k);
    static const unsigned slots[] = { 0, 1, 14, 15, 16, 17, 33, 36 };
    uint64_t timeouts[sizeof slots / sizeof *slots];
    for (size_t i = 0; i < sizeof slots / sizeof *slots; i++) {
        int confirm = regcache_device_hold_begin(&t->desc, slots[i]);
        (void)confirm; /* nothing is looked up in it */
        rc_dtable_drain(t, i + 1, i + 1);
        timeouts[i] = atomic_load(&t->drain_timeouts);
        regcache_device_hold_end(&t->desc, slots[i]);
    }
    rc_dtable_drain(t, 100, 100); /* every section ended */
    uint64_t drains = atomic_load(&t->drains);
    rc_dtable_destroy(t, false);
    for (size_t i = 0; i < sizeof slots / sizeof *slots; i++)
        assert_int_equal(timeouts[i], i + 1);
    assert_int_equal(drains, sizeof slots / sizeof *slots);
}

KX_MAIN(every_slot_seen, deregistration_waits_for_section, later_sections_not_waited_for,
        closed_sections_cost_nothing, stuck_section_given_up, deregistration_waits_for_answered_key,
        answered_key_gone_before_copies)
