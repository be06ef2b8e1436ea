/* One device key table: the host's copy (key_table.h), its image in GPU
 * memory and how it is written there (key_flush.c), the wait for kernels'
 * hold sections before a deregistration (key_drain.c), and its two threads
 * (key_ring.c): one answers the misses kernels post, the other writes the
 * table to the GPU.
 *
 * GPU memory, one block: records | slots | hold counts | ring tail.
 * Pinned host memory the GPU maps, one block: holds | ring | answers |
 * record numbers | completed | unlanded.  A pinned image of the GPU block
 * is what the table's copies read: it is what the device holds once the
 * last copy is done. */
#ifndef RC_DEVICE_TABLE_H
#define RC_DEVICE_TABLE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "device_memory.h"
#include "key_table.h"
#include "regcache.h"
#include "regcache_device.h"

/* Hold slots the drain reads at once (key_drain.c): one line.  The slots
 * are laid out, and the drain's lists sized, in whole lines. */
#define RC_HOLD_LINE 16

/* A write changes a span of records in up to three steps (key_flush.c). */
#define RC_KT_STEPS 3

/* A write rests the writer four nanoseconds for each byte it copied: the
 * table's writes take a quarter of a gigabyte a second of the bus at most,
 * however fast entries come (a stream of misses scatters its slots over
 * the whole table, and each write would copy most of it), and the
 * application's own calls into the driver meet few of them: on the H200
 * host the table added 2-14% to an invalidation of dmabuf exports at a
 * nanosecond a byte, 0.4-1.5% at four (bench/README.md). */
#define RC_REST_NS_PER_BYTE 4

struct rc_dtable {
    regcache_t *cache;
    int device;
    struct regcache_device_keys_params p;
    struct rc_key_table kt;

    struct rc_devmem mem;
    uint64_t dev_block; /* GPU memory */
    size_t dev_bytes;
    void *image; /* pinned, dev_bytes: what the GPU block holds */
    struct regcache_device_record *image_records;
    struct regcache_device_slot *image_slots;
    void *host_block;   /* pinned, mapped into the GPU */
    uint64_t host_dptr; /* the same, as the GPU sees it */
    uint32_t *holds;
    struct regcache_device_request *ring;
    struct regcache_device_answer *answers;
    uint64_t *record_seqs, *completed, *unlanded;
    struct regcache_device_table desc;

    /* The flush: one at a time; its snapshot of the records and its list
     * of copies.  Applying the queue: one at a time, under applier. */
    pthread_mutex_t writer, applier;
    struct regcache_device_record *want;
    struct rc_copy *copies; /* [ncopies]: a write's, the records' steps first */
    size_t ncopies;
    struct regcache_device_record *stage; /* pinned, 2 x records: steps A and B */
    uint32_t *removed;                    /* [records]: the removals a write takes */
    atomic_bool dirty;                    /* published since the last flush */
    atomic_uint_fast64_t numbered;        /* removals numbered (kt.removals) */
    atomic_uint_fast64_t drained;         /* removals whose sections ended */
    uint32_t *given_up;                   /* per hold slot: a section a drain
                                             waited for in vain (+1), or 0 */
    /* A drain's list of the sections open when it began (one drain at a
     * time: each waits at most for the sections open then). */
    pthread_mutex_t drain_lock;
    struct open {
        uint32_t slot, seq;
    } * open;

    /* The ring's reader (regcache-keys) and the table's writer
     * (regcache-kwrite), which sleeps until the reader kicks it: kicks
     * counts the kicks, under nap; asleep says the writer waits for one.
     * Both sleep on `kicked`, which stopping broadcasts. */
    pthread_t reader, writer_thread;
    bool reading, writing;
    atomic_bool stop;
    uint64_t next_ticket;
    pthread_mutex_t nap;
    pthread_cond_t kicked;
    uint64_t kicks;
    atomic_bool asleep;
    /* Bytes the table's copies wrote, and until when the writer rests
     * after its last write (RC_REST_NS_PER_BYTE a byte it copied). */
    atomic_uint_fast64_t bytes_written, rest_until;

    atomic_uint_fast64_t flushes, flush_failures, flush_ns_total, flush_ns_max, requests,
        request_failures, answer_ns_total, answer_ns_max, register_ns_total, register_ns_max,
        drains, drain_ns_total, drain_ns_max, drain_timeouts;
};

/* Make the table of `device` (params resolved): its memory, written empty.
 * REGCACHE_OK, or the status of what failed (the last error says why). */
int rc_dtable_create(struct rc_dtable **out, regcache_t *cache, int device,
                     const struct regcache_device_keys_params *p);

/* Free it (its thread stopped; nothing uses it any more).  In a fork child
 * (`child`), the GPU and pinned memory, which are the parent's, are left. */
void rc_dtable_destroy(struct rc_dtable *t, bool child);

/* Apply what was published and left to the host's copy, and return with
 * t->kt.lock held. */
void rc_dtable_apply_lock(struct rc_dtable *t);

/* Apply what was published and left, and write it to the device; return
 * once the device holds it.  REGCACHE_OK or ERR_CUDA (counted). */
int rc_dtable_flush(struct rc_dtable *t);

/* Every removal numbered so far reads on the device (its record empty),
 * and nothing else is written: how the writer lands removals when nothing
 * was published.  Returns once the device holds it; REGCACHE_OK or
 * ERR_CUDA (counted as a failed write). */
int rc_dtable_write_removals(struct rc_dtable *t);

/* Before a deregistration (removal number `removal`) or the return of a
 * free notice: every hold section open now has ended, or drain_timeout_ns
 * passed - unless a drain did so already since `removal` was numbered.
 * The caller read `numbered` (at least `removal`) after those removals
 * were numbered: it is what this drain covers. */
void rc_dtable_drain(struct rc_dtable *t, uint64_t removal, uint64_t numbered);

/* The writer's write: rc_dtable_flush(), then a rest of
 * RC_REST_NS_PER_BYTE for each byte it copied - or, while the last rest
 * lasts, rc_dtable_write_removals(). */
void rc_dtable_write_and_rest(struct rc_dtable *t);

/* Whether the ring's reader kicks the writer at time `now` (the clock's),
 * having last kicked it at `last`: the writer sleeps, poll_ns passed since
 * the last kick, and either removals are not on the device yet or
 * something was published and the writer has rested as long as its last
 * write asked. */
bool rc_dtable_writer_due(struct rc_dtable *t, uint64_t now, uint64_t last);

/* Start and stop the table's threads: the ring's reader and the writer. */
int rc_dtable_start(struct rc_dtable *t);
void rc_dtable_stop(struct rc_dtable *t);

/* The monotonic clock, in ns. */
uint64_t rc_dtable_clock(void);

/* *max = the larger of *max and v. */
void rc_dtable_raise(atomic_uint_fast64_t *max, uint64_t v);

#endif
