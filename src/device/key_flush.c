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

#include <string.h>

/* Under kt's lock: the slot lines changed go to the image (the others hold
 * there what the device holds), and the runs of chunks they lie in become
 * copies appended to t->copies[*n]. */
static void take_slot_runs(struct rc_dtable *t, size_t *n)
{
    struct rc_key_table *kt = &t->kt;
    size_t chunks = kt->nslots / RC_KT_CHUNK;
    uint64_t slots = (uint64_t)(uintptr_t)t->desc.slots;
    for (size_t c = 0; c < chunks;) {
        if (!kt->chunk_dirty[c]) {
            c++;
            continue;
        }
        size_t first = c;
        for (; c < chunks && kt->chunk_dirty[c]; c++) {
            kt->chunk_dirty[c] = 0;
            for (size_t l = c * (RC_KT_CHUNK / RC_KT_LINE);
                 l < (c + 1) * (RC_KT_CHUNK / RC_KT_LINE); l++) {
                if (!kt->line_dirty[l])
                    continue;
                kt->line_dirty[l] = 0;
                memcpy(&t->image_slots[l * RC_KT_LINE], &kt->slots[l * RC_KT_LINE],
                       RC_KT_LINE * sizeof *kt->slots);
            }
        }
        size_t at = first * RC_KT_CHUNK, count = (c - first) * RC_KT_CHUNK;
        t->copies[(*n)++] = (struct rc_copy){ slots + at * sizeof *kt->slots, &t->image_slots[at],
                                              count * sizeof *kt->slots };
    }
}

/* The queue goes a step at a time: the cache lock's holders (publishing,
 * leaving) wait at most one step for kt's lock.  One applier at a time (the
 * ring's reader applies too, outside the writer's lock): a second would
 * apply an insert the first applied already, and give an entry that left
 * meanwhile a record again. */
void rc_dtable_apply_lock(struct rc_dtable *t)
{
    struct rc_key_table *kt = &t->kt;
    size_t next = 0;
    pthread_mutex_lock(&t->applier);
    pthread_mutex_lock(&kt->lock);
    while (rc_kt_apply_step_locked(kt, &next)) {
        pthread_mutex_unlock(&kt->lock);
        pthread_mutex_lock(&kt->lock);
    }
    rc_kt_queue_done_locked(kt);
    pthread_mutex_unlock(&t->applier);
}

static int copy(struct rc_dtable *t, const struct rc_copy *c, size_t n)
{
    return n ? rc_devmem_copy(&t->mem, c, n) : REGCACHE_OK;
}

/* Steps A to C over records [lo, hi], the slot copies t->copies[1 .. runs]
 * going with the last step. */
static int write_steps(struct rc_dtable *t, uint32_t lo, uint32_t hi, size_t runs)
{
    struct regcache_device_record *img = t->image_records, *want = t->want;
    bool a = false, b = false;
    for (uint32_t r = lo; r <= hi && lo <= hi; r++) {
        uint64_t g = img[r].seq, d = want[r].seq;
        if (d == g)
            continue;
        if (!(g & 1)) {
            img[r].seq = d & 1 ? d : d - 1;
            a = true;
        }
        b |= !(d & 1);
    }
    uint64_t records = (uint64_t)(uintptr_t)t->desc.records_at;
    t->copies[0] = (struct rc_copy){ records + lo * sizeof *img, &img[lo],
                                     (size_t)(hi - lo + 1) * sizeof *img };
    int rc = REGCACHE_OK;
    if (a)
        rc = b ? copy(t, t->copies, 1) : copy(t, t->copies, 1 + runs);
    if (rc == REGCACHE_OK && b) {
        for (uint32_t r = lo; r <= hi; r++) {
            if (!(want[r].seq & 1) && img[r].seq != want[r].seq) {
                uint64_t odd = img[r].seq;
                img[r] = want[r];
                img[r].seq = odd;
            }
        }
        rc = copy(t, t->copies, 1);
        if (rc == REGCACHE_OK) {
            memcpy(&img[lo], &want[lo], (size_t)(hi - lo + 1) * sizeof *img);
            rc = copy(t, t->copies, 1 + runs);
        }
    }
    if (!a && !b)
        rc = copy(t, t->copies + 1, runs);
    return rc;
}

int rc_dtable_flush(struct rc_dtable *t)
{
    struct rc_key_table *kt = &t->kt;
    pthread_mutex_lock(&t->writer);
    uint64_t begun = rc_dtable_clock();
    /* Cleared first: what is published after it is in this snapshot or
     * sets it again. */
    atomic_store_explicit(&t->dirty, false, memory_order_seq_cst);
    rc_dtable_apply_lock(t);
    uint32_t lo = kt->dirty_lo, hi = kt->dirty_hi;
    if (lo <= hi)
        memcpy(&t->want[lo], &kt->records[lo], (size_t)(hi - lo + 1) * sizeof *t->want);
    kt->dirty_lo = 1;
    kt->dirty_hi = 0;
    size_t n = 1; /* t->copies[0] is the span of records */
    take_slot_runs(t, &n);
    uint64_t removals = kt->removals;
    pthread_mutex_unlock(&kt->lock);

    int rc = write_steps(t, lo, hi, n - 1);
    if (rc == REGCACHE_OK) {
        atomic_store_explicit(&t->flushed, removals, memory_order_release);
        atomic_fetch_add_explicit(&t->flushes, 1, memory_order_relaxed);
    } else {
        atomic_fetch_add_explicit(&t->flush_failures, 1, memory_order_relaxed);
    }
    uint64_t ns = rc_dtable_clock() - begun;
    atomic_fetch_add_explicit(&t->flush_ns_total, ns, memory_order_relaxed);
    rc_dtable_raise(&t->flush_ns_max, ns);
    pthread_mutex_unlock(&t->writer);
    return rc;
}
