/* The page slots: a deletion leaves no mark behind - the entries after it
 * in its cluster move back into the gap - so entries coming and going never
 * make the table lay itself out again (and copy all of itself to the
 * device); a kernel that reads the slots while a write moves them may miss,
 * and never finds a wrong record. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "device_table.h"
#include "fake_gpu.h"
#include "keys_fixture.h"

/* The slots of the host's copy that hold a key, and those that are empty
 * but not as never used (a deletion's mark). */
static size_t slots_in_use(const struct rc_dtable *t, size_t *marked)
{
    size_t used = 0;
    *marked = 0;
    for (size_t i = 0; i < t->kt.nslots; i++) {
        used += t->kt.slots[i].key != 0;
        *marked += t->kt.slots[i].key == 0 && t->kt.slots[i].seq != 0;
    }
    return used;
}

/* The slot of the host's copy that holds the page, or nslots. */
static size_t slot_holding(const struct rc_dtable *t, uint64_t page)
{
    size_t i = 0;
    while (i < t->kt.nslots && t->kt.slots[i].key >> REGCACHE_DEVICE_RECORD_BITS != page)
        i++;
    return i;
}

/* A lookup of the page in `view` finds it, with key lkey. */
static void assert_finds(const struct regcache_device_table *view, uint64_t page, uint32_t lkey)
{
    struct regcache_device_key key = { 0 }; /* fail_msg() is not noreturn to gcc */
    if (regcache_device_lookup(view, (const void *)(uintptr_t)(page * KX_PAGE), 64, 0, &key) !=
        REGCACHE_DEVICE_HIT)
        fail_msg("page %llu (lkey %u) not found", (unsigned long long)page, lkey);
    assert_int_equal(key.lkey, lkey);
}

/* ... in the table's device memory. */
static void assert_found(struct rc_dtable *t, uint64_t page, uint32_t lkey)
{
    assert_finds(&t->desc, page, lkey);
}

/* ... in the image of the slots, with the host's records. */
static void assert_in_image(const struct rc_key_table *kt, const struct regcache_device_slot *image,
                            uint64_t page, uint32_t lkey)
{
    const struct regcache_device_table view = {
        .slot_bits = kt->slot_bits,
        .max_probe = kt->max_probe,
        .records = kt->nrecords,
        .slots = image,
        .records_at = kt->records,
    };
    assert_finds(&view, page, lkey);
}

/* The chunks of slots changed since the last call, copied to `image` as
 * a write copies them to the device: how many. */
static size_t take_changes(struct rc_key_table *kt, struct regcache_device_slot *image)
{
    size_t n = 0;
    for (size_t c = rc_kt_next_chunk(kt, 0); c < kt->nchunks; c = rc_kt_next_chunk(kt, c + 1), n++)
        rc_kt_take_chunk(kt, c, image);
    return n;
}

/* The page of the step'th entry: as random as pages come (consecutive
 * pages spread evenly over the slots, and would hardly ever collide). */
static uint64_t scattered(uint32_t step)
{
    uint64_t x = step + 1;
    for (int i = 0; i < 3; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    return (x & 0xfffff) << 13 | step; /* a page of its own */
}

/* Entries of one page come and go one at a time, a quarter of the slots
 * live at once, the oldest leaving as each new one comes, until far more
 * have left than the table has slots: each step changes a few chunks of
 * slots - what a write copies to the device - never all of them, and a
 * lookup over the chunks taken finds every live page with its key. */
static void churn_changes_a_few_chunks(void **state)
{
    (void)state;
    enum { BITS = 12, LIVE = (1 << BITS) / 4, STEPS = 3 * (1 << BITS) / 4 };
    struct rc_key_table kt;
    assert_int_equal(rc_kt_init(&kt, BITS, 16, 2 * LIVE), 0);
    struct regcache_device_slot *image = calloc(kt.nslots, sizeof *image);
    assert_non_null(image);
    uint64_t page[LIVE];
    size_t worst = 0;
    for (uint32_t step = 0; step < LIVE + STEPS; step++) {
        uint32_t at = step % LIVE, keys[REGCACHE_DEVICE_RAILS] = { step + 1 };
        pthread_mutex_lock(&kt.lock);
        if (step >= LIVE)
            rc_kt_leave_locked(&kt, (const void *)(uintptr_t)page[at]);
        page[at] = scattered(step);
        rc_kt_publish_locked(&kt, (const void *)(uintptr_t)page[at], page[at] * KX_PAGE,
                             (page[at] + 1) * KX_PAGE, 1, keys);
        size_t next = 0;
        while (rc_kt_apply_step_locked(&kt, &next))
            ;
        rc_kt_queue_done_locked(&kt);
        pthread_mutex_unlock(&kt.lock);
        size_t chunks = take_changes(&kt, image);
        if (chunks > worst)
            worst = chunks;
        if (chunks > 3)
            fail_msg("step %u changed %zu chunks of %zu", step, chunks, kt.nchunks);
        assert_in_image(&kt, image, page[at], step + 1);
        if (step % 64 == 63)
            for (uint32_t i = 0; i < LIVE && i <= step; i++)
                assert_in_image(&kt, image, page[i], step + 1 - (at - i + LIVE) % LIVE);
    }
    uint64_t unmirrored = kt.unmirrored;
    free(image);
    rc_kt_fini(&kt);
    assert_int_equal(unmirrored, 0);
    assert_true(worst > 0);
}

/* `gone` leaves: the n pages left are still found with their keys, they
 * are all the slots in use, none marked, and slot `emptied`, where the
 * cluster now ends, reads (0, 0). */
static void leave_closes(struct rc_dtable *t, uint64_t gone, const uint64_t *pages,
                         const uint32_t *lkeys, size_t n, size_t emptied)
{
    struct regcache_device_key key;
    size_t marked;
    kx_leave(t, gone);
    assert_int_equal(rc_dtable_flush(t), REGCACHE_OK);
    assert_int_equal(kx_look(t, gone, &key), REGCACHE_DEVICE_MISS);
    for (size_t i = 0; i < n; i++)
        assert_found(t, pages[i], lkeys[i]);
    assert_int_equal(slots_in_use(t, &marked), n);
    assert_int_equal(marked, 0);
    assert_int_equal(t->desc.slots[emptied].key, 0);
    assert_int_equal(t->desc.slots[emptied].seq, 0);
}

/* A cluster that wraps around the table's end - searches starting in its
 * last two slots, run on into its first ones - loses an entry in its
 * middle, then its first: the entries after each move back, every one
 * still found on the device with its key, and the slot the cluster ended
 * with is free again, not marked. */
static void deletion_closes_its_cluster(void **state)
{
    struct rc_dtable *t = kx_table(*state);
    size_t n = t->kt.nslots;
    /* Published in this order, they take slots n-2, n-1, 0, 1 and 2. */
    uint64_t a1 = kx_page_homed(t, n - 2, n - 1, 1 << 20);
    uint64_t b1 = kx_page_homed(t, n - 1, n, 1 << 20);
    uint64_t b2 = kx_page_homed(t, n - 1, n, b1 + 1);
    uint64_t a2 = kx_page_homed(t, n - 2, n - 1, a1 + 1);
    uint64_t c = kx_page_homed(t, 0, 1, 1 << 20);
    const uint64_t page[] = { a1, b1, b2, a2, c };
    for (uint32_t i = 0; i < 5; i++)
        kx_publish(t, page[i], i + 1);
    assert_int_equal(rc_dtable_flush(t), REGCACHE_OK);
    const size_t laid[] = { n - 2, n - 1, 0, 1, 2 };
    for (uint32_t i = 0; i < 5; i++) {
        assert_int_equal(slot_holding(t, page[i]), laid[i]);
        assert_found(t, page[i], i + 1);
    }
    leave_closes(t, b1, (const uint64_t[]){ a1, b2, a2, c }, (const uint32_t[]){ 1, 3, 4, 5 }, 4,
                 2);
    leave_closes(t, a1, (const uint64_t[]){ b2, a2, c }, (const uint32_t[]){ 3, 4, 5 }, 3, 1);
    rc_dtable_destroy(t, false);
}

/* The pages moves_landing() looks up at every word a write
 * copies, with the key each must be found with, if found at all. */
enum { GROUPS = 3, PER_GROUP = 10, WATCHED = GROUPS * PER_GROUP + 8 };
static struct rc_dtable *moving;
static uint64_t watched_page[WATCHED];
static uint32_t watched_lkey[WATCHED];
static long looks, hits, wrong;

static void look_at_all(void)
{
    for (int i = 0; i < WATCHED; i++) {
        struct regcache_device_key key;
        looks++;
        if (kx_look(moving, watched_page[i], &key) != REGCACHE_DEVICE_HIT)
            continue;
        hits++;
        wrong += key.lkey != watched_lkey[i];
    }
}

/* Three clusters - one wrapping around the table's end, one across two
 * chunks - lose every third entry, and new entries take the records that
 * freed: the write moves the entries after each gap back.  Between any
 * two words of it, the copies' words landing first to last or last to
 * first, a lookup of any page either misses or finds that page's own
 * key. */
static void moves_landing(void **state, int backwards)
{
    struct rc_dtable *t = kx_table(*state);
    size_t n = t->kt.nslots;
    const size_t home[GROUPS] = { n - 4, 250, 1000 };
    uint64_t last[GROUPS] = { 1 << 20, 1 << 20, 1 << 20 };
    int w = 0;
    for (int g = 0; g < GROUPS; g++) {
        for (int i = 0; i < PER_GROUP; i++, w++) {
            last[g] = kx_page_homed(t, home[g], home[g] + 4, last[g] + 1);
            watched_page[w] = last[g];
            watched_lkey[w] = 100 + (uint32_t)w;
            kx_publish(t, last[g], watched_lkey[w]);
        }
    }
    assert_int_equal(rc_dtable_flush(t), REGCACHE_OK);
    size_t before[WATCHED];
    for (int i = 0; i < w; i++) {
        assert_found(t, watched_page[i], watched_lkey[i]);
        before[i] = slot_holding(t, watched_page[i]);
    }
    for (int i = 0; i < w; i += 3)
        kx_leave(t, watched_page[i]);
    for (int g = 0; w < WATCHED; g = (g + 1) % GROUPS, w++) {
        last[g] = kx_page_homed(t, home[g], home[g] + 4, last[g] + 1);
        watched_page[w] = last[g];
        watched_lkey[w] = 100 + (uint32_t)w;
        kx_publish(t, last[g], watched_lkey[w]);
    }
    moving = t;
    looks = hits = wrong = 0;
    fake_gpu.after_word = look_at_all;
    atomic_store(&fake_gpu.backwards, backwards);
    assert_int_equal(rc_dtable_flush(t), REGCACHE_OK);
    atomic_store(&fake_gpu.backwards, 0);
    fake_gpu.after_word = NULL;
    int moved = 0;
    struct regcache_device_key key;
    for (int i = 0; i < WATCHED; i++) {
        bool left = i < GROUPS * PER_GROUP && i % 3 == 0;
        if (left) {
            assert_int_equal(kx_look(t, watched_page[i], &key), REGCACHE_DEVICE_MISS);
            continue;
        }
        assert_found(t, watched_page[i], watched_lkey[i]);
        moved += i < GROUPS * PER_GROUP && slot_holding(t, watched_page[i]) != before[i];
    }
    uint64_t unmirrored = t->kt.unmirrored;
    rc_dtable_destroy(t, false);
    assert_int_equal(unmirrored, 0);
    assert_true(moved > 0);
    assert_true(looks > 0);
    assert_true(hits > 0);
    assert_int_equal(wrong, 0);
}

static void moves_show_no_wrong_record(void **state)
{
    moves_landing(state, 0);
}

static void moves_landing_backwards_show_no_wrong_record(void **state)
{
    moves_landing(state, 1);
}

KX_MAIN(churn_changes_a_few_chunks, deletion_closes_its_cluster, moves_show_no_wrong_record,
        moves_landing_backwards_show_no_wrong_record)
