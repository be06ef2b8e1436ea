/* The table mirrors the cache: a kernel's lookup finds the key the host's
 * get is served, for every page of an entry, on each rail registered, with
 * the bytes left to the entry's end; an entry that leaves is gone from the
 * table when the call that made it leave returns; memory freed and
 * reallocated at the same address gets its new key, never the old; packed
 * allocations in one page each get their own; a table without room counts
 * what it leaves out and never answers wrong; entries registered for less
 * than params.access are left out; registration ahead of use fills it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <infiniband/verbs.h>

#include "fake_gpu.h"
#include "keys_fixture.h"
#include "test_sync.h"

#define A FX_ALLOC(0)
#define B FX_ALLOC(1)

static void misses(struct kx *k, uintptr_t addr, unsigned rail)
{
    struct regcache_device_key key;
    assert_int_equal(kx_usable(k, addr, 1, rail, &key), REGCACHE_DEVICE_MISS);
}

/* Entries cached before the attach are in the table when it returns. */
static void attach_holds_what_is_cached(void **state)
{
    struct kx *k = *state;
    fx_device_allocs(&k->fx, 2);
    fx_create(&k->fx);
    fx_use(&k->fx, A, 4096);
    assert_int_equal(regcache_device_keys_attach(k->fx.c, 0, &k->kp, &k->t), REGCACHE_OK);
    assert_int_equal(k->t.abi, REGCACHE_DEVICE_ABI);
    struct regcache_device_key key;
    assert_int_equal(kx_lookup(k, A + 100, 8, 0, &key), REGCACHE_DEVICE_HIT);
    assert_int_equal(key.lkey, 1); /* the backend's first registration */
    misses(k, B, 0);
    struct regcache_device_keys_stats s = kx_stats(k);
    assert_int_equal(s.records, 1);
    assert_int_equal(s.published, 1);
}

/* Registration ahead of use fills the table before a kernel runs:
 * regcache_prefetch(), and eager registration of a new allocation. */
static void prefetch_and_eager_fill_it(void **state)
{
    struct kx *k = *state;
    k->fx.p.eager_min_bytes = MiB;
    fx_device_allocs(&k->fx, 2);
    kx_attach(k);
    assert_int_equal(regcache_prefetch(k->fx.c, 0, (void *)A, MiB), REGCACHE_OK);
    regcache_notify_alloc((void *)B, MiB);
    assert_int_equal(regcache_prefetch_wait(k->fx.c), REGCACHE_OK);
    assert_int_equal(regcache_device_keys_sync(k->fx.c, 0), REGCACHE_OK);
    struct regcache_device_key a, b;
    assert_int_equal(kx_lookup(k, A, 64, 0, &a), REGCACHE_DEVICE_HIT);
    assert_int_equal(kx_lookup(k, B, 64, 0, &b), REGCACHE_DEVICE_HIT);
    assert_int_not_equal(a.lkey, b.lkey);
    fx_assert_stats(&k->fx, FX_STAT(misses, 0), FX_STAT(registrations, 2), NULL);
    kx_assert_agrees(k, A, 64, 0);
    kx_assert_agrees(k, B, 64, 0);
}

/* Every 64 KiB page of an entry hits, and says how far the entry goes. */
static void every_page_and_bytes_left(void **state)
{
    struct kx *k = *state;
    fx_device_allocs(&k->fx, 1);
    kx_attach(k);
    kx_assert_agrees(k, A, MiB, 0);
    for (uintptr_t p = A; p < A + MiB; p += 4096) {
        struct regcache_device_key key;
        assert_int_equal(kx_lookup(k, p, 1, 0, &key), REGCACHE_DEVICE_HIT);
        assert_int_equal(key.bytes, A + MiB - p);
    }
    misses(k, A + MiB, 0);
    misses(k, A - 1, 0);
}

static bool a_found(const void *arg)
{
    struct regcache_device_key key;
    return kx_lookup((struct kx *)arg, A, 64, 0, &key) == REGCACHE_DEVICE_HIT;
}

/* Without a sync, the table's thread writes a new registration (within
 * poll_ns of a quiet machine). */
static void thread_writes_new_entries(void **state)
{
    struct kx *k = *state;
    fx_device_allocs(&k->fx, 1);
    k->kp.poll_ns = 1000;
    kx_attach(k);
    fx_use(&k->fx, A, 64);
    assert_true(wait_until(a_found, k, HANG_SECONDS));
    struct regcache_device_key key;
    assert_int_equal(kx_lookup(k, A, 64, 0, &key), REGCACHE_DEVICE_HIT);
    assert_int_equal(key.lkey, 1);
}

/* Gone at once: an unused entry invalidated, a held one whose memory was
 * freed, an evicted one. */
static void leaving_entries_are_gone_at_once(void **state)
{
    struct kx *k = *state;
    k->fx.p.max_entries = 2;
    fx_device_allocs(&k->fx, 3);
    kx_attach(k);
    kx_assert_agrees(k, A, 64, 0);
    struct regcache_device_key old;
    assert_int_equal(kx_lookup(k, A, 64, 0, &old), REGCACHE_DEVICE_HIT);
    assert_true(kx_still_good(k, &old));
    assert_int_equal(regcache_invalidate(k->fx.c, (void *)A, 64), REGCACHE_OK);
    misses(k, A, 0);
    assert_false(kx_still_good(k, &old));

    regcache_entry_t *held = fx_get(&k->fx, B, 64);
    assert_int_equal(regcache_device_keys_sync(k->fx.c, 0), REGCACHE_OK);
    regcache_notify_free((void *)B, MiB);
    misses(k, B, 0);
    regcache_put(k->fx.c, held);

    kx_assert_agrees(k, A, 64, 0);
    kx_assert_agrees(k, B, 64, 0);
    kx_assert_agrees(k, FX_ALLOC(2), 64, 0); /* evicts A */
    misses(k, A, 0);
    struct regcache_device_keys_stats s = kx_stats(k);
    assert_int_equal(s.records, 2);
    assert_int_equal(s.removed, 3);
}

/* Freed and reallocated at the same address: the new registration's key,
 * never the old one's. */
static void reallocated_memory_gets_its_new_key(void **state)
{
    struct kx *k = *state;
    fx_device_allocs(&k->fx, 1);
    kx_attach(k);
    kx_assert_agrees(k, A, 64, 0);
    for (int round = 0; round < 5; round++) {
        regcache_notify_free((void *)A, MiB);
        fake_realloc(&k->fx.fb, A);
        regcache_notify_alloc((void *)A, MiB);
        misses(k, A, 0);
        kx_assert_agrees(k, A, 64, 0);
    }
}

/* Two allocations packed into one 64 KiB page: each address gets the key
 * of its own allocation's entry. */
static void packed_allocations(void **state)
{
    struct kx *k = *state;
    fake_alloc(&k->fx.fb, A, 1000, 0, REGCACHE_MEM_DEVICE);
    fake_alloc(&k->fx.fb, A + 1024, 1000, 0, REGCACHE_MEM_DEVICE);
    kx_attach(k);
    kx_assert_agrees(k, A, 100, 0);
    kx_assert_agrees(k, A + 1024, 100, 0);
    struct regcache_device_key a, b;
    assert_int_equal(kx_lookup(k, A + 10, 1, 0, &a), REGCACHE_DEVICE_HIT);
    assert_int_equal(kx_lookup(k, A + 1030, 1, 0, &b), REGCACHE_DEVICE_HIT);
    assert_int_not_equal(a.lkey, b.lkey);
    assert_int_equal(a.bytes, 990);
    assert_int_equal(b.bytes, 994);
    misses(k, A + 1010, 0); /* between them */
    regcache_notify_free((void *)A, 1000);
    misses(k, A + 10, 0);
    assert_int_equal(kx_lookup(k, A + 1030, 1, 0, &b), REGCACHE_DEVICE_HIT);
}

/* One more rail of an entry: its record carries both keys. */
static void rails(void **state)
{
    struct kx *k = *state;
    k->fx.p.rails = 2;
    fx_device_allocs(&k->fx, 1);
    kx_attach(k);
    kx_assert_agrees(k, A, 64, 0);
    misses(k, A, 1);
    kx_assert_agrees(k, A, 64, 1);
    kx_assert_agrees(k, A, 64, 0);
    struct regcache_device_keys_stats s = kx_stats(k);
    assert_int_equal(s.records, 1);
    assert_int_equal(s.published, 2);
}

/* A table with room for one record, and one with searches of one slot:
 * what does not fit is counted and misses; nothing answers wrong. */
static void no_room(void **state)
{
    struct kx *k = *state;
    k->kp.records = 2;
    fx_device_allocs(&k->fx, 3);
    kx_attach(k);
    kx_assert_agrees(k, A, 64, 0);
    fx_use(&k->fx, B, 64);
    assert_int_equal(regcache_device_keys_sync(k->fx.c, 0), REGCACHE_OK);
    misses(k, B, 0);
    assert_int_equal(kx_stats(k).unmirrored, 1);
    /* The record comes free when A leaves; B's entry was never written. */
    assert_int_equal(regcache_invalidate(k->fx.c, (void *)A, 64), REGCACHE_OK);
    kx_assert_agrees(k, FX_ALLOC(2), 64, 0);
}

static void probe_of_one(void **state)
{
    struct kx *k = *state;
    k->kp.max_probe = 1;
    k->kp.page_slots = 1024;
    fx_device_allocs(&k->fx, 8);
    kx_attach(k);
    for (int i = 0; i < 8; i++)
        fx_use(&k->fx, FX_ALLOC(i), MiB);
    assert_int_equal(regcache_device_keys_sync(k->fx.c, 0), REGCACHE_OK);
    /* 8 entries of 16 pages in 1024 slots with no second look: some
     * collide.  Every hit is right. */
    unsigned hits = 0;
    for (int i = 0; i < 8; i++) {
        for (uintptr_t p = FX_ALLOC(i); p < FX_ALLOC(i) + MiB; p += 65536) {
            struct regcache_device_key key;
            if (kx_lookup(k, p, 1, 0, &key) != REGCACHE_DEVICE_HIT)
                continue;
            hits++;
            assert_int_equal(key.lkey, (uint32_t)i + 1);
        }
    }
    struct regcache_device_keys_stats s = kx_stats(k);
    assert_int_equal(hits + s.unmirrored, 8 * 16);
    assert_true(hits > 0);
}

/* An entry registered for less than params.access serves gets of that
 * access only: a kernel, which asks for none, never gets its key. */
static void narrower_access_is_left_out(void **state)
{
    struct kx *k = *state;
    fx_device_allocs(&k->fx, 1);
    kx_attach(k);
    regcache_entry_t *e = NULL;
    assert_int_equal(regcache_get_access(k->fx.c, 0, (void *)A, 64, IBV_ACCESS_REMOTE_READ, 0, &e),
                     REGCACHE_OK);
    regcache_put(k->fx.c, e);
    assert_int_equal(regcache_device_keys_sync(k->fx.c, 0), REGCACHE_OK);
    misses(k, A, 0);
    kx_assert_agrees(k, A, 64, 0);
}

/* Detach: every record leaves and the memory goes; a second table on the
 * same device may follow. */
static void detach_and_again(void **state)
{
    struct kx *k = *state;
    fx_device_allocs(&k->fx, 1);
    kx_attach(k);
    kx_assert_agrees(k, A, 64, 0);
    struct regcache_device_table old = k->t;
    assert_int_equal(regcache_device_keys_detach(k->fx.c, 0), REGCACHE_OK);
    assert_int_equal(atomic_load(&fake_gpu.allocs), 0);
    assert_int_equal(atomic_load(&fake_gpu.streams), 0);
    assert_int_equal(regcache_device_keys_detach(k->fx.c, 0), REGCACHE_ERR_INVALID);
    assert_int_equal(regcache_device_keys_table(k->fx.c, 0, &old), REGCACHE_ERR_INVALID);
    assert_int_equal(regcache_device_keys_attach(k->fx.c, 0, &k->kp, &k->t), REGCACHE_OK);
    struct regcache_device_key key;
    assert_int_equal(kx_lookup(k, A, 64, 0, &key), REGCACHE_DEVICE_HIT);
    assert_int_equal(regcache_device_keys_table(k->fx.c, 0, &old), REGCACHE_OK);
    assert_ptr_equal(old.slots, k->t.slots);
}

KX_MAIN(attach_holds_what_is_cached, prefetch_and_eager_fill_it, every_page_and_bytes_left,
        thread_writes_new_entries, leaving_entries_are_gone_at_once,
        reallocated_memory_gets_its_new_key, packed_allocations, rails, no_room, probe_of_one,
        narrower_access_is_left_out, detach_and_again)
