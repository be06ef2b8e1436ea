/* A device key table's memory and its life (see device_table.h). */
#include "device_table.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "last_error.h"

uint64_t rc_dtable_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void rc_dtable_raise(atomic_uint_fast64_t *max, uint64_t v)
{
    uint64_t old = atomic_load_explicit(max, memory_order_relaxed);
    while (v > old && !atomic_compare_exchange_weak_explicit(max, &old, v, memory_order_relaxed,
                                                             memory_order_relaxed))
        ;
}

static size_t round64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* Where each part lies in the two blocks. */
struct layout {
    size_t records, slots, hold_counts, tail, dev_bytes;
    size_t holds, ring, answers, record_seqs, completed, unlanded, host_bytes;
};

static struct layout layout_of(const struct regcache_device_keys_params *p)
{
    struct layout l;
    l.records = 0;
    l.slots = round64(p->records * sizeof(struct regcache_device_record));
    l.hold_counts = l.slots + p->page_slots * sizeof(struct regcache_device_slot);
    l.tail = l.hold_counts + round64(p->hold_slots * sizeof(uint32_t));
    l.dev_bytes = l.tail + 64;
    l.holds = 0;
    l.ring = round64(p->hold_slots * sizeof(uint32_t)); /* whole lines of RC_HOLD_LINE */
    l.answers = round64(l.ring + p->ring_slots * sizeof(struct regcache_device_request));
    l.record_seqs = l.answers + p->ring_slots * sizeof(struct regcache_device_answer);
    l.completed = round64(l.record_seqs + p->records * sizeof(uint64_t));
    l.unlanded = l.completed + 64; /* a line of its own: read by every section */
    l.host_bytes = l.unlanded + 64;
    return l;
}

static int make_memory(struct rc_dtable *t, const struct layout *l)
{
    int rc = rc_devmem_alloc(&t->mem, l->dev_bytes, &t->dev_block);
    if (rc == REGCACHE_OK)
        rc = rc_devmem_host_alloc(&t->mem, l->dev_bytes, &t->image, &(uint64_t){ 0 });
    if (rc == REGCACHE_OK)
        rc = rc_devmem_host_alloc(&t->mem, l->host_bytes, &t->host_block, &t->host_dptr);
    if (rc == REGCACHE_OK)
        rc = rc_devmem_host_alloc(&t->mem, 2 * t->p.records * sizeof *t->stage, (void **)&t->stage,
                                  &(uint64_t){ 0 });
    if (rc != REGCACHE_OK)
        return rc;
    t->dev_bytes = l->dev_bytes;
    char *img = t->image, *host = t->host_block;
    t->image_records = (struct regcache_device_record *)(img + l->records);
    t->image_slots = (struct regcache_device_slot *)(img + l->slots);
    t->holds = (uint32_t *)(host + l->holds);
    t->ring = (struct regcache_device_request *)(host + l->ring);
    t->answers = (struct regcache_device_answer *)(host + l->answers);
    t->record_seqs = (uint64_t *)(host + l->record_seqs);
    t->completed = (uint64_t *)(host + l->completed);
    t->unlanded = (uint64_t *)(host + l->unlanded);
    /* No section open, the hold slots' padding included (the drain reads
     * whole lines); every record empty; each ring cell free for its first
     * ticket. */
    memset(t->host_block, 0, l->host_bytes);
    for (size_t r = 0; r < t->p.records; r++)
        t->image_records[r].seq = 1;
    for (size_t i = 0; i < t->p.ring_slots; i++)
        t->ring[i].seq = i;
    rc_kt_show(&t->kt, t->record_seqs, t->unlanded);
    return rc_devmem_copy(&t->mem, &(struct rc_copy){ t->dev_block, t->image, t->dev_bytes }, 1);
}

static void describe(struct rc_dtable *t, const struct layout *l)
{
    uint64_t dev = t->dev_block, host = t->host_dptr;
    t->desc = (struct regcache_device_table){
        .abi = REGCACHE_DEVICE_ABI,
        .slot_bits = t->kt.slot_bits,
        .max_probe = t->p.max_probe,
        .records = (uint32_t)t->p.records,
        .hold_slots = (uint32_t)t->p.hold_slots,
        .ring_slots = (uint32_t)t->p.ring_slots,
        .slots = (const struct regcache_device_slot *)(uintptr_t)(dev + l->slots),
        .records_at = (const struct regcache_device_record *)(uintptr_t)(dev + l->records),
        .holds = (uint32_t *)(uintptr_t)(host + l->holds),
        .hold_counts = (uint32_t *)(uintptr_t)(dev + l->hold_counts),
        .ring = (struct regcache_device_request *)(uintptr_t)(host + l->ring),
        .ring_tail = (unsigned long long *)(uintptr_t)(dev + l->tail),
        .answers = (struct regcache_device_answer *)(uintptr_t)(host + l->answers),
        .completed = (uint64_t *)(uintptr_t)(host + l->completed),
        .record_seqs = (const uint64_t *)(uintptr_t)(host + l->record_seqs),
        .unlanded = (const uint64_t *)(uintptr_t)(host + l->unlanded),
    };
}

int rc_dtable_create(struct rc_dtable **out, regcache_t *cache, int device,
                     const struct regcache_device_keys_params *p)
{
    struct rc_dtable *t = calloc(1, sizeof *t);
    if (!t)
        return rc_fail(REGCACHE_ERR_NO_MEMORY, "out of memory for a device key table");
    t->cache = cache;
    t->device = device;
    t->p = *p;
    pthread_mutex_init(&t->writer, NULL);
    pthread_mutex_init(&t->applier, NULL);
    pthread_mutex_init(&t->nap, NULL);
    pthread_condattr_t monotonic;
    pthread_condattr_init(&monotonic);
    pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC); /* rc_dtable_clock()'s */
    pthread_cond_init(&t->kicked, &monotonic);
    pthread_condattr_destroy(&monotonic);
    unsigned bits = (unsigned)__builtin_ctzll(p->page_slots);
    size_t chunks = p->page_slots / RC_KT_CHUNK + 1;
    int rc = rc_kt_init(&t->kt, bits, p->max_probe, (uint32_t)p->records)
                 ? rc_fail(REGCACHE_ERR_NO_MEMORY, "out of memory for a device key table")
                 : REGCACHE_OK;
    t->want = malloc(p->records * sizeof *t->want);
    t->ncopies = RC_KT_STEPS + chunks + 1;
    t->copies = malloc(t->ncopies * sizeof *t->copies);
    t->removed = malloc(p->records * sizeof *t->removed);
    size_t hold_lines = (p->hold_slots + RC_HOLD_LINE - 1) / RC_HOLD_LINE;
    t->given_up = calloc(hold_lines * RC_HOLD_LINE, sizeof *t->given_up);
    t->open = malloc(hold_lines * RC_HOLD_LINE * sizeof *t->open);
    pthread_mutex_init(&t->drain_lock, NULL);
    if (rc == REGCACHE_OK && (!t->want || !t->copies || !t->removed || !t->given_up || !t->open))
        rc = rc_fail(REGCACHE_ERR_NO_MEMORY, "out of memory for a device key table");
    struct layout l = layout_of(p);
    if (rc == REGCACHE_OK)
        rc = rc_devmem_open(&t->mem, device);
    if (rc == REGCACHE_OK)
        rc = make_memory(t, &l);
    if (rc != REGCACHE_OK) {
        rc_prefix_error("device key table on device %d: ", device);
        rc_dtable_destroy(t, false);
        return rc;
    }
    describe(t, &l);
    *out = t;
    return REGCACHE_OK;
}

void rc_dtable_destroy(struct rc_dtable *t, bool child)
{
    if (!child) {
        rc_devmem_host_free(&t->mem, t->stage);
        rc_devmem_host_free(&t->mem, t->host_block);
        rc_devmem_host_free(&t->mem, t->image);
        rc_devmem_free(&t->mem, t->dev_block);
        if (t->mem.ctx)
            rc_devmem_close(&t->mem);
    }
    if (t->kt.slots)
        rc_kt_fini(&t->kt);
    free(t->want);
    free(t->copies);
    free(t->removed);
    free(t->given_up);
    free(t->open);
    /* A fork child's copies of the locks may be held, and the condition
     * waited on, by the parent's threads: destroying that condition would
     * wait for a waiter that is not in this process. */
    if (!child) {
        pthread_mutex_destroy(&t->drain_lock);
        pthread_mutex_destroy(&t->writer);
        pthread_mutex_destroy(&t->applier);
        pthread_mutex_destroy(&t->nap);
        pthread_cond_destroy(&t->kicked);
    }
    free(t);
}
