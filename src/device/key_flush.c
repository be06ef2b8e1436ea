/* Writing a device key table to the GPU.
 *
 * The host writes GPU memory only by DMA, whose bytes a kernel may see
 * land in any order within one copy, but copies on one stream land one
 * after another.  A lookup trusts a record only while its sequence number
 * is the one the slot it came through carries, re-read after the record
 * (regcache_device.h).  So a record changes in up to three copies:
 *   A. a record that held an entry and changes: its number turns odd
 *      (a removal ends here);
 *   B. a record that will hold an entry: its new contents, number odd;
 *   C. its new number, and the slots that carry it.
 * A lookup that read a slot written in C reads the record after it, so
 * sees B's contents, and accepts them only if no A of a later change
 * landed before its re-read.  Each step is one copy of the span of records
 * that changed (records are handed out lowest first, so the span stays
 * short) and, in C, one per run of changed slot chunks. */
#include "device_table.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Dirty chunks this close together go in one copy: rewriting the clean
 * chunks between them (the image holds there what the device holds) costs
 * less than a copy of its own - 32 KiB at the bus's speed against a call
 * into the driver - and a burst of entries scatters its slots over most of
 * a large table, a few chunks apart. */
#define RC_KT_GAP 8

/* The copy of slot chunks [first, end) from the image. */
static struct rc_copy slot_run(const struct rc_dtable *t, size_t first, size_t end)
{
    size_t at = first * RC_KT_CHUNK, bytes = (end - first) * RC_KT_CHUNK * sizeof *t->image_slots;
    return (struct rc_copy){ (uint64_t)(uintptr_t)t->desc.slots + at * sizeof *t->image_slots,
                             &t->image_slots[at], bytes };
}

/* Under the applier's lock: the slot lines changed go to the image (the
 * others hold there what the device holds), and the runs of chunks they
 * lie in become copies appended to t->copies[*n]. */
static void take_slot_runs(struct rc_dtable *t, size_t *n)
{
    struct rc_key_table *kt = &t->kt;
    size_t first = 0, end = 0; /* the run gathered: chunks [first, end); none while end is 0 */
    for (size_t c = rc_kt_next_chunk(kt, 0); c < kt->nchunks; c = rc_kt_next_chunk(kt, c + 1)) {
        rc_kt_take_chunk(kt, c, t->image_slots);
        if (end && c - end > RC_KT_GAP) {
            t->copies[(*n)++] = slot_run(t, first, end);
            end = 0;
        }
        if (!end)
            first = c;
        end = c + 1;
    }
    if (end)
        t->copies[(*n)++] = slot_run(t, first, end);
}

/* The queue goes a step at a time: the cache lock's holders (publishing,
 * leaving) wait at most one step for kt's lock.  One applier at a time (the
 * ring's reader applies too, outside the writer's lock): a second would
 * apply an insert the first applied already, and give an entry that left
 * meanwhile a record again.  Under t->applier; returns with kt's lock. */
static void apply_queue(struct rc_dtable *t)
{
    struct rc_key_table *kt = &t->kt;
    size_t next = 0;
    pthread_mutex_lock(&kt->lock);
    while (rc_kt_apply_step_locked(kt, &next)) {
        pthread_mutex_unlock(&kt->lock);
        pthread_mutex_lock(&kt->lock);
    }
    rc_kt_queue_done_locked(kt);
}

void rc_dtable_apply_lock(struct rc_dtable *t)
{
    pthread_mutex_lock(&t->applier);
    apply_queue(t);
    pthread_mutex_unlock(&t->applier);
}

static int copy(struct rc_dtable *t, const struct rc_copy *c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        atomic_fetch_add_explicit(&t->bytes_written, c[i].bytes, memory_order_relaxed);
    return n ? rc_devmem_copy(&t->mem, c, n) : REGCACHE_OK;
}

/* Step A of record r: the device holds an entry in it (the image's number
 * is even) and the host's copy now says `seq`: the number turns odd.
 * True when it did. */
static bool empty_on_device(struct regcache_device_record *img, uint64_t seq)
{
    if ((img->seq & 1) || img->seq == seq)
        return false;
    img->seq = seq & 1 ? seq : seq - 1;
    return true;
}

/* Steps A to C over records [lo, hi], then the slot copies
 * t->copies[RC_KT_STEPS .. RC_KT_STEPS + runs): all on one stream, so
 * they land in that order, and waited for once.  The copies read their
 * sources when they run, so the records' earlier states go from staging
 * (A's and B's), the last from the image itself. */
static int write_steps(struct rc_dtable *t, uint32_t lo, uint32_t hi, size_t runs)
{
    struct regcache_device_record *img = t->image_records, *want = t->want;
    bool a = false, b = false;
    for (uint32_t r = lo; r <= hi && lo <= hi; r++) {
        a |= empty_on_device(&img[r], want[r].seq);
        b |= !(want[r].seq & 1) && img[r].seq != want[r].seq;
    }
    size_t span = lo <= hi ? (size_t)(hi - lo + 1) : 0, bytes = span * sizeof *img;
    uint64_t at = (uint64_t)(uintptr_t)t->desc.records_at + lo * sizeof *img;
    struct regcache_device_record *staged_a = t->stage, *staged_b = t->stage + span;
    struct rc_copy *first = t->copies + RC_KT_STEPS;
    if (b) {
        if (a)
            memcpy(staged_a, &img[lo], bytes);
        for (uint32_t r = lo; r <= hi; r++) {
            if (!(want[r].seq & 1) && img[r].seq != want[r].seq) {
                uint64_t odd = img[r].seq;
                img[r] = want[r];
                img[r].seq = odd;
            }
        }
        memcpy(staged_b, &img[lo], bytes);
        memcpy(&img[lo], &want[lo], bytes);
        *--first = (struct rc_copy){ at, &img[lo], bytes };
        *--first = (struct rc_copy){ at, staged_b, bytes };
        if (a)
            *--first = (struct rc_copy){ at, staged_a, bytes };
    } else if (a) {
        *--first = (struct rc_copy){ at, &img[lo], bytes };
    }
    return copy(t, first, (size_t)(t->copies + RC_KT_STEPS - first) + runs);
}

/* Removals up to number `removals` are on the device: kernels may stop
 * confirming keys (the copies that wrote them completed before this). */
static void landed(struct rc_dtable *t, uint64_t removals)
{
    pthread_mutex_lock(&t->kt.lock);
    rc_kt_landed_locked(&t->kt, removals);
    pthread_mutex_unlock(&t->kt.lock);
}

/* Under the writer's lock: a write that began at `begun` ended with rc;
 * when it succeeded, removals up to number `removals` are on the device. */
static int written(struct rc_dtable *t, uint64_t begun, int rc, uint64_t removals)
{
    if (rc == REGCACHE_OK) {
        landed(t, removals);
        atomic_fetch_add_explicit(&t->flushes, 1, memory_order_relaxed);
    } else {
        atomic_fetch_add_explicit(&t->flush_failures, 1, memory_order_relaxed);
    }
    uint64_t ns = rc_dtable_clock() - begun;
    atomic_fetch_add_explicit(&t->flush_ns_total, ns, memory_order_relaxed);
    rc_dtable_raise(&t->flush_ns_max, ns);
    return rc;
}

/* Records copied into the snapshot per hold of kt's lock. */
#define RC_KT_TAKE 64

/* Under kt's lock and the applier's: records [lo, hi] into the snapshot,
 * a few at a time, letting kt's lock go between them: a span of a thousand
 * records is 64 KiB to copy, which a departure (under the cache lock) and
 * a publish would otherwise wait for.  Only departures
 * change records meanwhile (applying them takes the applier's lock, held
 * here): a record that leaves after its piece was taken is dirty again for
 * the next write, and its removal, numbered after `removals`, is landed by
 * that write; one that leaves before its piece is taken is written odd here
 * too, which does no harm. */
static void take_records(struct rc_dtable *t, uint32_t lo, uint32_t hi)
{
    struct rc_key_table *kt = &t->kt;
    if (lo > hi)
        return;
    for (uint32_t at = lo;; at += RC_KT_TAKE) {
        uint32_t left = hi - at + 1, n = left < RC_KT_TAKE ? left : RC_KT_TAKE;
        memcpy(&t->want[at], &kt->records[at], n * sizeof *t->want);
        if (n == left)
            return;
        pthread_mutex_unlock(&kt->lock);
        pthread_mutex_lock(&kt->lock);
    }
}

int rc_dtable_flush(struct rc_dtable *t)
{
    struct rc_key_table *kt = &t->kt;
    pthread_mutex_lock(&t->writer);
    uint64_t begun = rc_dtable_clock();
    /* Cleared first: what is published after it is in this snapshot or
     * sets it again. */
    atomic_store_explicit(&t->dirty, false, memory_order_seq_cst);
    pthread_mutex_lock(&t->applier);
    apply_queue(t);
    uint32_t lo = kt->dirty_lo, hi = kt->dirty_hi;
    kt->dirty_lo = 1;
    kt->dirty_hi = 0;
    rc_kt_take_unsent_locked(kt, NULL); /* their step A is below */
    uint64_t removals = kt->removals;
    take_records(t, lo, hi);
    pthread_mutex_unlock(&kt->lock);
    /* Slots change only where the queue is applied, under the applier's
     * lock: they are taken without kt's, which publishing waits for. */
    size_t n = RC_KT_STEPS; /* before them, the records' steps */
    take_slot_runs(t, &n);
    pthread_mutex_unlock(&t->applier);

    int rc = written(t, begun, write_steps(t, lo, hi, n - RC_KT_STEPS), removals);
    pthread_mutex_unlock(&t->writer);
    return rc;
}

/* Removed records this close together are written in one copy, from the
 * first's number to the last's (what lies between is what the device
 * holds). */
#define RC_REMOVAL_GAP 64

static int by_index(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The copy of the numbers of records first .. last from the image. */
static struct rc_copy numbers(const struct rc_dtable *t, uint32_t first, uint32_t last)
{
    const struct regcache_device_record *img = t->image_records;
    size_t seq = offsetof(struct regcache_device_record, seq);
    return (struct rc_copy){ (uint64_t)(uintptr_t)t->desc.records_at + first * sizeof *img + seq,
                             (const char *)&img[first] + seq,
                             (last - first) * sizeof *img + sizeof img[first].seq };
}

/* Step A alone, for the records whose entry left since the device was last
 * written and which the device still holds.  A removal needs no more: a
 * lookup accepts a record only while its number is the one its slot
 * carries, which is even, so the record and every slot naming it are dead
 * from this word on.  The slots themselves, the queue and new records are
 * the writer's next write; a record the device never held (its number
 * still odd there) needs nothing. */
int rc_dtable_write_removals(struct rc_dtable *t)
{
    struct rc_key_table *kt = &t->kt;
    uint32_t *gone = t->removed;
    pthread_mutex_lock(&t->writer);
    uint64_t begun = rc_dtable_clock();
    pthread_mutex_lock(&kt->lock);
    uint64_t removals = kt->removals;
    uint32_t n = rc_kt_take_unsent_locked(kt, gone), held = 0;
    for (uint32_t i = 0; i < n; i++)
        if (empty_on_device(&t->image_records[gone[i]], kt->records[gone[i]].seq))
            gone[held++] = gone[i];
    pthread_mutex_unlock(&kt->lock);
    if (held > 1)
        qsort(gone, held, sizeof *gone, by_index);
    int rc = REGCACHE_OK;
    size_t copies = 0;
    for (uint32_t i = 0, j; i < held && rc == REGCACHE_OK; i = j + 1) {
        for (j = i; j + 1 < held && gone[j + 1] - gone[j] <= RC_REMOVAL_GAP; j++)
            ;
        t->copies[copies++] = numbers(t, gone[i], gone[j]);
        if (copies == t->ncopies || j + 1 == held) {
            rc = copy(t, t->copies, copies);
            copies = 0;
        }
    }
    if (held)
        written(t, begun, rc, removals);
    else
        landed(t, removals);
    pthread_mutex_unlock(&t->writer);
    return rc;
}
