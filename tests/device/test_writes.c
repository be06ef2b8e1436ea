/* What the host writes to the GPU, and when: a removal the writer lands
 * is its record's number alone (one word; the span between the first and
 * the last when several records close together left, a word each when far
 * apart), and nothing at all for a record the device never held; a record
 * that changes hands goes through its three steps in one wait for the
 * device; slot changes a few chunks apart go in one copy, far apart in
 * copies of their own; publishing wakes no thread - the writer sleeps until the ring's reader
 * kicks it, after a rest as long as its last write was large; departures
 * are applied to the host's copy a few at a time; the host's copy of the
 * slots is in memory from the start, so that filling it faults no page
 * in; and the map of the table's members does not grow with entries that
 * came and went. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "device_table.h"
#include "fake_gpu.h"
#include "keys_fixture.h"
#include "test_sync.h"

#define A FX_ALLOC(0)
#define B FX_ALLOC(1)
#define PAGE KX_PAGE

static void reset_copies(void)
{
    atomic_store(&fake_gpu.copies, 0);
    atomic_store(&fake_gpu.bytes_copied, 0);
}

/* ---- through the cache -------------------------------------------------- */

/* The kernel's id of the table's writer thread (regcache-kwrite), or 0. */
static pid_t writer_tid(void)
{
    DIR *d = opendir("/proc/self/task");
    pid_t tid = 0;
    for (struct dirent *e; d && !tid && (e = readdir(d));) {
        char path[300], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f && fgets(comm, sizeof comm, f) && !strcmp(comm, "regcache-kwrite\n"))
            tid = (pid_t)atoi(e->d_name);
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    return tid;
}

static bool writer_named(const void *arg)
{
    (void)arg;
    return writer_tid() != 0;
}

/* How often thread tid went to sleep. */
static long sleeps_of(pid_t tid)
{
    char path[64], line[256];
    long n = -1;
    snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)tid);
    FILE *f = fopen(path, "r");
    while (f && n < 0 && fgets(line, sizeof line, f))
        sscanf(line, "voluntary_ctxt_switches: %ld", &n);
    if (f)
        fclose(f);
    return n;
}

/* Misses publish without waking anyone: the writer sleeps until the
 * ring's reader kicks it (here not within the test), and a sync writes
 * what was published. */
static void publishing_wakes_nobody(void **state)
{
    struct kx *k = *state;
    k->kp.poll_ns = 60ull * 1000 * 1000 * 1000;
    fx_device_allocs(&k->fx, 8);
    kx_attach(k);
    assert_true(wait_until(writer_named, NULL, HANG_SECONDS));
    pid_t writer = writer_tid();
    assert_true(await_sleeping(writer, HANG_SECONDS));
    long before = sleeps_of(writer);
    assert_true(before >= 0);
    for (int i = 0; i < 8; i++)
        fx_use(&k->fx, FX_ALLOC(i), 64);
    struct timespec pause = { 0, 20 * 1000 * 1000 };
    nanosleep(&pause, NULL);
    assert_int_equal(sleeps_of(writer), before);
    struct regcache_device_key key;
    assert_int_equal(kx_lookup(k, A, 64, 0, &key), REGCACHE_DEVICE_MISS);
    for (int i = 0; i < 8; i++)
        kx_assert_agrees(k, FX_ALLOC(i), 64, 0);
}

/* ---- one table, driven by hand ------------------------------------------ */

/* A record the host's copy gave an entry that left before any write
 * reached the device: nothing to write. */
static void unwritten_record_needs_no_write(void **state)
{
    struct rc_dtable *t = kx_table(*state);
    kx_publish(t, 1000, 7);
    rc_dtable_apply_lock(t); /* in the host's copy (as a miss's answer puts it) */
    pthread_mutex_unlock(&t->kt.lock);
    uint64_t removal = kx_leave(t, 1000);
    assert_int_equal(removal, 1);
    reset_copies();
    assert_int_equal(rc_dtable_write_removals(t), REGCACHE_OK);
    assert_int_equal(atomic_load(&fake_gpu.copies), 0);
    assert_int_equal(t->kt.landed, removal);
    assert_int_equal(*t->unlanded, 0);
    rc_dtable_destroy(t, false);
}

/* Records the device holds: one word for one of them, the span from the
 * first number to the last for two close together, a word each for two
 * far apart; each record dead on the device, the others still there. */
static void removals_write_numbers_only(void **state)
{
    struct kx *k = *state;
    enum { N = 80 };
    struct rc_dtable *t = kx_table(k);
    for (uint64_t page = 2000; page < 2000 + N; page++)
        kx_publish(t, page, (uint32_t)page);
    assert_int_equal(rc_dtable_flush(t), REGCACHE_OK);
    struct regcache_device_key key[N];
    for (int i = 0; i < N; i++)
        assert_int_equal(kx_look(t, 2000 + (uint64_t)i, &key[i]), REGCACHE_DEVICE_HIT);
    assert_true(key[N - 1].record - key[0].record > 64);
    reset_copies();
    kx_leave(t, 2001);
    assert_int_equal(rc_dtable_write_removals(t), REGCACHE_OK);
    assert_int_equal(atomic_load(&fake_gpu.copies), 1);
    assert_int_equal(atomic_load(&fake_gpu.bytes_copied), sizeof(uint64_t));
    reset_copies();
    kx_leave(t, 2003);
    kx_leave(t, 2000);
    assert_int_equal(rc_dtable_write_removals(t), REGCACHE_OK);
    assert_int_equal(atomic_load(&fake_gpu.copies), 1);
    assert_int_equal(atomic_load(&fake_gpu.bytes_copied),
                     (key[3].record - key[0].record) * sizeof(struct regcache_device_record) +
                         sizeof(uint64_t));
    reset_copies();
    kx_leave(t, 2000 + N - 1);
    kx_leave(t, 2004);
    assert_int_equal(rc_dtable_write_removals(t), REGCACHE_OK);
    assert_int_equal(atomic_load(&fake_gpu.copies), 2);
    assert_int_equal(atomic_load(&fake_gpu.bytes_copied), 2 * sizeof(uint64_t));
    assert_int_equal(t->kt.landed, 5);
    assert_int_equal(*t->unlanded, 0);
    struct regcache_device_key found;
    for (int i = 0; i < N; i++) {
        bool left = i <= 1 || i == 3 || i == 4 || i == N - 1;
        assert_int_equal(kx_look(t, 2000 + (uint64_t)i, &found),
                         left ? REGCACHE_DEVICE_MISS : REGCACHE_DEVICE_HIT);
        if (!left)
            assert_int_equal(found.lkey, 2000 + i);
    }
    rc_dtable_destroy(t, false);
}

/* A burst of departures is applied a few records a step, the table's
 * lock let go between steps (publishing waits for it). */
static void departures_applied_a_few_at_a_time(void **state)
{
    struct rc_dtable *t = kx_table(*state);
    for (uint64_t page = 3000; page < 3000 + 3 * RC_KT_LEAVE_STEP; page++)
        kx_publish(t, page, 1);
    rc_dtable_apply_lock(t);
    pthread_mutex_unlock(&t->kt.lock);
    for (uint64_t page = 3000; page < 3000 + 3 * RC_KT_LEAVE_STEP; page++)
        kx_leave(t, page);
    size_t next = 0;
    pthread_mutex_lock(&t->kt.lock);
    bool more = rc_kt_apply_step_locked(&t->kt, &next);
    uint32_t left = t->kt.nleaving;
    pthread_mutex_unlock(&t->kt.lock);
    rc_dtable_destroy(t, false);
    assert_true(more);
    assert_int_equal(left, 2 * RC_KT_LEAVE_STEP);
}

/* The writer rests after a write as long as the write was large, and is
 * kicked only when something was published, it sleeps, it has rested and
 * poll_ns passed since the last kick. */
static void writer_rests_by_what_it_wrote(void **state)
{
    struct kx *k = *state;
    k->kp.poll_ns = 1000;
    struct rc_dtable *t = kx_table(k);
    for (uint64_t page = 4000; page < 4064; page++)
        kx_publish(t, page, 1);
    uint64_t begun = rc_dtable_clock();
    rc_dtable_write_and_rest(t);
    uint64_t bytes = atomic_load(&t->bytes_written), rest = atomic_load(&t->rest_until);
    struct regcache_device_key key;
    int found = kx_look(t, 4063, &key);
    atomic_store(&t->asleep, true);
    atomic_store(&t->dirty, true);
    bool early = rc_dtable_writer_due(t, rest - 1, 0);
    bool rested = rc_dtable_writer_due(t, rest, 0);
    bool soon = rc_dtable_writer_due(t, rest + 999, rest);
    bool later = rc_dtable_writer_due(t, rest + 1000, rest);
    atomic_store(&t->dirty, false);
    bool clean = rc_dtable_writer_due(t, rest + 1000, rest);
    atomic_store(&t->dirty, true);
    atomic_store(&t->asleep, false);
    bool busy = rc_dtable_writer_due(t, rest + 1000, rest);
    rc_dtable_destroy(t, false);
    assert_int_equal(found, REGCACHE_DEVICE_HIT);
    assert_true(bytes >= 64 * sizeof(struct regcache_device_slot));
    assert_true(rest >= begun + bytes * RC_REST_NS_PER_BYTE);
    assert_false(early);
    assert_true(rested);
    assert_false(soon);
    assert_true(later);
    assert_false(clean);
    assert_false(busy);
}

/* A page whose search starts in slot chunk `chunk`, from page `from` on. */
static uint64_t page_in_chunk(const struct rc_dtable *t, size_t chunk, uint64_t from)
{
    return kx_page_homed(t, chunk * RC_KT_CHUNK, (chunk + 1) * RC_KT_CHUNK, from);
}

/* New records in a write: their contents, then their numbers with the
 * slot runs - so a write of n runs is 2 + n copies. */
static long copies_for_chunks(struct kx *k, size_t first, size_t second)
{
    struct rc_dtable *t = kx_table(k);
    uint64_t a = page_in_chunk(t, first, 5000), b = page_in_chunk(t, second, a + 1);
    kx_publish(t, a, 1);
    kx_publish(t, b, 2);
    reset_copies();
    assert_int_equal(rc_dtable_flush(t), REGCACHE_OK);
    struct regcache_device_key key;
    assert_int_equal(kx_look(t, a, &key), REGCACHE_DEVICE_HIT);
    assert_int_equal(kx_look(t, b, &key), REGCACHE_DEVICE_HIT);
    rc_dtable_destroy(t, false);
    return atomic_load(&fake_gpu.copies);
}

static void near_chunks_share_a_copy(void **state)
{
    struct kx *k = *state;
    assert_true(k->kp.page_slots / RC_KT_CHUNK >= 16);
    assert_int_equal(copies_for_chunks(k, 2, 5), 3);
    assert_int_equal(copies_for_chunks(k, 2, 14), 4);
}

/* The record write_waits_once() changes, and what the device showed of
 * it between any two words: a number that is even must go with the
 * contents of its own entry, never with the other's. */
static const struct regcache_device_record *watched;
static uint64_t old_seq;
static long looks, mismatches;

static void check_record(void)
{
    uint64_t seq = __atomic_load_n(&watched->seq, __ATOMIC_ACQUIRE);
    looks++;
    if (seq & 1)
        return;
    uint64_t page = seq == old_seq ? 3000 : 3001;
    mismatches += watched->start != page * PAGE || watched->lkey[0] != page - 2999;
}

/* A record that held an entry and now holds another changes in three
 * steps (empty, new contents, new number with its slots), one copy each,
 * on one stream: the write waits for the device once, and at no word of
 * it does the device pair a valid number with the other entry's contents
 * - the fake GPU makes each copy at that wait, from what its source holds
 * then. */
static void write_waits_once(void **state)
{
    struct rc_dtable *t = kx_table(*state);
    kx_publish(t, 3000, 1);
    assert_int_equal(rc_dtable_flush(t), REGCACHE_OK);
    struct regcache_device_key key;
    assert_int_equal(kx_look(t, 3000, &key), REGCACHE_DEVICE_HIT);
    uint32_t record = key.record;
    kx_leave(t, 3000);
    rc_dtable_apply_lock(t); /* the record free again: the next entry's */
    pthread_mutex_unlock(&t->kt.lock);
    kx_publish(t, 3001, 2);
    reset_copies();
    atomic_store(&fake_gpu.syncs, 0);
    watched = &t->desc.records_at[record];
    old_seq = key.seq;
    fake_gpu.after_word = check_record;
    assert_int_equal(rc_dtable_flush(t), REGCACHE_OK);
    fake_gpu.after_word = NULL;
    assert_int_equal(atomic_load(&fake_gpu.syncs), 1);
    assert_true(atomic_load(&fake_gpu.copies) >= 4); /* A, B, C, the slots */
    assert_true(looks > 0);
    assert_int_equal(mismatches, 0);
    assert_int_equal(kx_look(t, 3000, &key), REGCACHE_DEVICE_MISS);
    assert_int_equal(kx_look(t, 3001, &key), REGCACHE_DEVICE_HIT);
    assert_int_equal(key.record, record);
    assert_int_equal(key.lkey, 2);
    rc_dtable_destroy(t, false);
}

/* Entries that come and go one at a time keep the host's map of the
 * table's members small: the tombs they leave are swept, not grown over. */
static void members_stay_few(void **state)
{
    (void)state;
    struct rc_key_table kt;
    assert_int_equal(rc_kt_init(&kt, 20, 16, 1024), 0);
    uint32_t keys[REGCACHE_DEVICE_RAILS] = { 1 };
    for (uintptr_t id = 1; id <= 100000; id++) {
        pthread_mutex_lock(&kt.lock);
        rc_kt_publish_locked(&kt, (const void *)(id << 6), id * PAGE, (id + 1) * PAGE, 1, keys);
        rc_kt_leave_locked(&kt, (const void *)(id << 6));
        size_t next = 0;
        while (rc_kt_apply_step_locked(&kt, &next))
            ;
        rc_kt_queue_done_locked(&kt);
        pthread_mutex_unlock(&kt.lock);
    }
    size_t cap = kt.member_cap;
    rc_kt_fini(&kt);
    assert_in_range(cap, 1, 256);
}

/* Every page of the host's copy of the slots is in memory before the
 * first entry: no insert faults one in (under the table's lock). */
static void slots_resident_from_the_start(void **state)
{
    (void)state;
    struct rc_key_table kt;
    assert_int_equal(rc_kt_init(&kt, 20, 16, 1024), 0);
    size_t bytes = kt.nslots * sizeof *kt.slots, page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char *in = malloc(bytes / page);
    assert_non_null(in);
    assert_int_equal(mincore(kt.slots, bytes, in), 0);
    size_t out = 0;
    for (size_t i = 0; i < bytes / page; i++)
        out += !(in[i] & 1);
    free(in);
    rc_kt_fini(&kt);
    assert_int_equal(out, 0);
}

KX_MAIN(write_waits_once, members_stay_few, publishing_wakes_nobody,
        unwritten_record_needs_no_write, removals_write_numbers_only,
        departures_applied_a_few_at_a_time, writer_rests_by_what_it_wrote, near_chunks_share_a_copy,
        slots_resident_from_the_start)
