/* Removals take effect in host memory: an invalidation copies nothing to
 * the GPU and waits for no stream; a section opened after an entry left,
 * while the table's copy in GPU memory still holds its record, is told to
 * confirm its keys, and the confirm refuses the stale one (which a section
 * that did not ask would have used); the writer lands the removal in the
 * background, `unlanded` falls back to 0 once the write is done (not
 * between its words), and sections need no confirm again; a record freed and handed to another
 * entry before its removal landed never confirms a key of its old entry; and a free notice over an
 * entry still held returns only after the sections open at its leaving
 * ended. */
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

static uint64_t unlanded(const struct kx *k)
{
    return __atomic_load_n(k->t.unlanded, __ATOMIC_ACQUIRE);
}

static void count_from_zero(void)
{
    atomic_store(&fake_gpu.copies, 0);
    atomic_store(&fake_gpu.bytes_copied, 0);
    atomic_store(&fake_gpu.syncs, 0);
}

/* The invalidation deregisters with no copy and no stream wait; after it,
 * the table's copy still holds the record - what a section that did not
 * read `unlanded` would use - and a section opened now is told to confirm,
 * and the confirm refuses that key. */
static void invalidation_waits_for_no_copy(void **state)
{
    struct kx *k = *state;
    k->kp.poll_ns = 60ull * 1000 * 1000 * 1000; /* the writer is not kicked here */
    fx_device_allocs(&k->fx, 1);
    kx_attach(k);
    kx_assert_agrees(k, A, 64, 0);
    assert_int_equal(unlanded(k), 0);
    count_from_zero();
    assert_int_equal(regcache_invalidate(k->fx.c, (void *)A, 64), REGCACHE_OK);
    assert_int_equal(atomic_load(&fake_gpu.copies), 0);
    assert_int_equal(atomic_load(&fake_gpu.syncs), 0);
    assert_int_equal(atomic_load(&k->fx.fb.deregs), 1);
    assert_int_equal(unlanded(k), 1);

    unsigned slot = 4;
    int confirm = regcache_device_hold_begin(&k->t, slot);
    struct regcache_device_key stale;
    int found = kx_lookup(k, A, 64, 0, &stale);
    int good = regcache_device_confirm(&k->t, &stale);
    regcache_device_hold_end(&k->t, slot);
    assert_int_equal(confirm, REGCACHE_DEVICE_CONFIRM);
    /* The naive section - lookups trusted without reading unlanded - gets
     * the key of the registration just deregistered. */
    assert_int_equal(found, REGCACHE_DEVICE_HIT);
    assert_int_equal(stale.lkey, 1);
    assert_true(regcache_device_key_current(&k->t, &stale));
    assert_false(good);
}

static bool landed(const void *arg)
{
    return unlanded(arg) == 0;
}

/* With nothing published, the ring's reader kicks the writer for the
 * removal alone; it lands one word, `unlanded` falls to 0, and a section
 * then needs no confirm: its lookup misses the record. */
static void writer_lands_in_the_background(void **state)
{
    struct kx *k = *state;
    k->kp.poll_ns = 1000;
    fx_device_allocs(&k->fx, 1);
    kx_attach(k);
    kx_assert_agrees(k, A, 64, 0);
    assert_int_equal(regcache_invalidate(k->fx.c, (void *)A, 64), REGCACHE_OK);
    assert_true(wait_until(landed, k, HANG_SECONDS));
    unsigned slot = 4;
    int confirm = regcache_device_hold_begin(&k->t, slot);
    struct regcache_device_key key;
    int found = kx_lookup(k, A, 64, 0, &key);
    regcache_device_hold_end(&k->t, slot);
    assert_int_equal(confirm, 0);
    assert_int_equal(found, REGCACHE_DEVICE_MISS);
}

/* By hand: a removal makes the writer due although nothing was published
 * and its last rest is not over; its write then is the record's number
 * alone, after which `unlanded` reads 0. */
static void removal_alone_makes_writer_due(void **state)
{
    struct kx *k = *state;
    k->kp.poll_ns = 1000;
    struct rc_dtable *t = kx_table(k);
    kx_publish(t, 6000, 1);
    rc_dtable_write_and_rest(t);
    struct regcache_device_key key;
    int before = kx_look(t, 6000, &key);
    uint64_t rest = rc_dtable_clock() + 60ull * 1000 * 1000 * 1000;
    atomic_store(&t->rest_until, rest);
    atomic_store(&t->asleep, true);
    bool idle = rc_dtable_writer_due(t, rest - 1, 0);
    uint64_t removal = kx_leave(t, 6000);
    uint64_t raised = __atomic_load_n(t->unlanded, __ATOMIC_ACQUIRE);
    bool due = rc_dtable_writer_due(t, rest - 1, 0);
    bool soon = rc_dtable_writer_due(t, rest - 1, rest - 2);
    count_from_zero();
    rc_dtable_write_and_rest(t);
    long copies = atomic_load(&fake_gpu.copies), bytes = atomic_load(&fake_gpu.bytes_copied);
    uint64_t after = __atomic_load_n(t->unlanded, __ATOMIC_ACQUIRE);
    int gone = kx_look(t, 6000, &key);
    bool again = rc_dtable_writer_due(t, rest - 1, 0);
    rc_dtable_destroy(t, false);
    assert_int_equal(before, REGCACHE_DEVICE_HIT);
    assert_false(idle);
    assert_int_equal(removal, 1);
    assert_int_equal(raised, 1);
    assert_true(due);
    assert_false(soon);
    assert_int_equal(copies, 1);
    assert_int_equal(bytes, sizeof(uint64_t));
    assert_int_equal(after, 0);
    assert_int_equal(gone, REGCACHE_DEVICE_MISS);
    assert_false(again);
}

/* A section opened between any two words of the write that lands a
 * removal (a flush: the record's steps and its slots' deletion) never uses
 * the old key: `unlanded` falls only once the write is done. */
static struct rc_dtable *watched;
static long looks, used;

static void section_between_words(void)
{
    struct regcache_device_key key;
    int confirm = regcache_device_hold_begin(&watched->desc, 1);
    looks++;
    if (kx_look(watched, 8000, &key) == REGCACHE_DEVICE_HIT &&
        (!confirm || regcache_device_confirm(&watched->desc, &key)))
        used++;
    regcache_device_hold_end(&watched->desc, 1);
}

static void no_old_key_while_landing(void **state)
{
    struct rc_dtable *t = kx_table(*state);
    kx_publish(t, 8000, 1);
    assert_int_equal(rc_dtable_flush(t), REGCACHE_OK);
    kx_leave(t, 8000);
    kx_publish(t, 8001, 2); /* the write also gives the record to another */
    watched = t;
    looks = used = 0;
    fake_gpu.after_word = section_between_words;
    atomic_store(&fake_gpu.backwards, 1); /* each record's number lands last */
    int rc = rc_dtable_flush(t);
    atomic_store(&fake_gpu.backwards, 0);
    fake_gpu.after_word = NULL;
    struct regcache_device_key key;
    int confirm = regcache_device_hold_begin(&t->desc, 1);
    int after = kx_look(t, 8000, &key);
    regcache_device_hold_end(&t->desc, 1);
    rc_dtable_destroy(t, false);
    assert_int_equal(rc, REGCACHE_OK);
    assert_true(looks > 0);
    assert_int_equal(used, 0);
    assert_int_equal(confirm, 0);
    assert_int_equal(after, REGCACHE_DEVICE_MISS);
}

/* A record whose entry left is freed and handed to the next entry before
 * the removal reached the device: the table's copy still pairs the old
 * entry's slot with its old number, and the host's number has moved past
 * it - the old key is refused, the new entry's confirmed. */
static void reused_record_refuses_old_key(void **state)
{
    struct kx *k = *state;
    struct rc_dtable *t = kx_table(k);
    kx_publish(t, 7000, 1);
    assert_int_equal(rc_dtable_flush(t), REGCACHE_OK);
    struct regcache_device_key old;
    assert_int_equal(kx_look(t, 7000, &old), REGCACHE_DEVICE_HIT);
    kx_leave(t, 7000);
    kx_publish(t, 7001, 2);
    rc_dtable_apply_lock(t); /* the record freed, and given to 7001 */
    struct regcache_device_key fresh;
    uint64_t start, end;
    bool found = rc_kt_find_locked(&t->kt, 7001 * KX_PAGE, 64, 0, &fresh, &start, &end);
    pthread_mutex_unlock(&t->kt.lock);
    int confirm = regcache_device_hold_begin(&t->desc, 0);
    struct regcache_device_key stale;
    int look = kx_look(t, 7000, &stale);
    int old_good = regcache_device_confirm(&t->desc, &stale);
    int fresh_good = regcache_device_confirm(&t->desc, &fresh);
    regcache_device_hold_end(&t->desc, 0);
    rc_dtable_destroy(t, false);
    assert_true(found);
    assert_int_equal(fresh.record, old.record);
    assert_true(fresh.seq > old.seq);
    assert_int_equal(confirm, REGCACHE_DEVICE_CONFIRM);
    assert_int_equal(look, REGCACHE_DEVICE_HIT);
    assert_int_equal(stale.lkey, 1);
    assert_false(old_good);
    assert_true(fresh_good);
}

struct holder {
    struct kx *k;
    struct gate open, end;
    uint32_t lkey;
};

static void hold_a(void *arg)
{
    struct holder *h = arg;
    struct regcache_device_key key;
    int confirm = regcache_device_hold_begin(&h->k->t, 3);
    if (kx_lookup(h->k, A, 64, 0, &key) == REGCACHE_DEVICE_HIT && kx_key_good(h->k, confirm, &key))
        h->lkey = key.lkey;
    gate_pass(&h->open);
    gate_pass(&h->end);
    regcache_device_hold_end(&h->k->t, 3);
}

static void free_a(void *arg)
{
    (void)arg;
    regcache_notify_free((void *)A, MiB);
}

static bool sleeping(const void *arg)
{
    return await_sleeping(dthread_tid((struct dthread *)arg), 0.001);
}

/* An entry held by the host when its memory is freed is deregistered at
 * its last put; the free notice still returns only once the section open
 * at its leaving ended (a section opened after the notice, which is all
 * a kernel told of the next allocation there has, confirms) - and the
 * deregistration then waits for nothing more. */
static void free_notice_waits_for_open_sections(void **state)
{
    struct kx *k = *state;
    k->kp.poll_ns = 60ull * 1000 * 1000 * 1000;
    k->kp.drain_timeout_ns = 60ull * 1000 * 1000 * 1000;
    fx_device_allocs(&k->fx, 1);
    kx_attach(k);
    regcache_entry_t *held = fx_get(&k->fx, A, 64);
    assert_int_equal(regcache_device_keys_sync(k->fx.c, 0), REGCACHE_OK);
    struct holder h = { .k = k };
    gate_init(&h.open);
    gate_init(&h.end);
    gate_open(&h.open);
    struct dthread holder, freer;
    dthread_start(&holder, hold_a, &h);
    assert_true(gate_await(&h.end, 1, HANG_SECONDS)); /* its section is open */
    assert_int_equal(h.lkey, 1);
    dthread_start(&freer, free_a, NULL);
    assert_true(wait_until(sleeping, &freer, HANG_SECONDS)); /* waiting for slot 3 */
    assert_int_equal(unlanded(k), 1);
    gate_open(&h.end);
    assert_true(dthread_join(&holder, HANG_SECONDS));
    assert_true(dthread_join(&freer, HANG_SECONDS));
    assert_int_equal(atomic_load(&k->fx.fb.deregs), 0);
    kx_hold_open(k, 5); /* opened after: not waited for */
    regcache_put(k->fx.c, held);
    regcache_device_hold_end(&k->t, 5);
    assert_int_equal(atomic_load(&k->fx.fb.deregs), 1);
    struct regcache_device_keys_stats s = kx_stats(k);
    assert_int_equal(s.drains, 1);
    assert_int_equal(s.drain_timeouts, 0);
}

KX_MAIN(invalidation_waits_for_no_copy, writer_lands_in_the_background,
        removal_alone_makes_writer_due, no_old_key_while_landing, reused_record_refuses_old_key,
        free_notice_waits_for_open_sections)
