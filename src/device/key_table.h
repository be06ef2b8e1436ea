/* The host's copy of a device key table: what the table on the GPU must
 * say (records and page slots, laid out as in regcache_device.h), which
 * entry each record mirrors, and what changed since the last write to the
 * GPU.  Plain memory and one mutex; key_flush.c writes it to the device.
 *
 * Entries reach the table in two steps, so that the cache lock is never
 * held for more than a queue append: publishing (under the cache lock)
 * queues the entry, and the flush applies the queue - a record, and a slot
 * for every 64 KiB page the entry's range touches.  Leaving (also under the
 * cache lock) makes the record empty at once in this copy (its sequence
 * number odd) and numbers the removal, which the deregistration waits for;
 * the flush then deletes its slots and frees the record.  A record's
 * sequence number only grows, and every slot carries the number its record
 * had when the slot was written: a lookup on the device accepts a record
 * only while it still has that number.  Every change of a number is also
 * shown at once in `shown` (host memory the device maps), where a kernel
 * checks a key the host answered a miss with before the table holds it,
 * and a key of any kind while removals are on their way to the device:
 * how many are is shown in `unlanded`, raised after the record's number
 * changed in `shown`, and lowered once the device holds them. */
#ifndef RC_KEY_TABLE_H
#define RC_KEY_TABLE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "regcache_device.h"

/* An entry published and not yet applied. */
struct rc_kt_insert {
    const void *id;
    uint64_t start, end;
    uint32_t rails;
    uint32_t lkey[REGCACHE_DEVICE_RAILS];
    bool cancelled; /* it left before the flush applied it */
};

/* What the table knows of an entry, by its id. */
struct rc_kt_member {
    const void *id;   /* NULL: empty */
    uint32_t record;  /* its record, or 0: none (queued, or no room) */
    uint32_t queued;  /* 1 + its insert's index in the queue, or 0 */
    uint64_t removal; /* left: the number of its removal, else 0 */
};

struct rc_key_table {
    pthread_mutex_t lock; /* everything below */
    uint32_t slot_bits, max_probe, nrecords;
    size_t nslots;
    struct regcache_device_slot *slots;     /* [nslots] */
    struct regcache_device_record *records; /* [nrecords]; 0 is never used */
    const void **owner;                     /* [nrecords]: the entry mirrored */
    uint64_t *shown;                        /* [nrecords]: each record's number, as
                                               kernels read it (set by the caller) */
    uint32_t *free_records, nfree;
    /* Records whose entry left: their slots go and they are freed at the
     * next apply. */
    uint32_t *leaving, nleaving;
    /* Records whose entry left since the device was last written, once
     * each (unsent_mark[r]): the removals a free notice waits for. */
    uint32_t *unsent, nunsent;
    uint8_t *unsent_mark;
    struct rc_kt_member *members; /* open addressing by id */
    size_t nmembers, member_cap, member_tombs;
    struct rc_kt_insert *queue;
    size_t nqueue, queue_cap;
    /* Changed since the last snapshot: a span of records, slot chunks (what
     * the device is sent) and the slot lines in them (what the snapshot
     * copies, under the lock). */
    uint32_t dirty_lo, dirty_hi; /* dirty_lo > dirty_hi: none */
    size_t nchunks;              /* nslots / RC_KT_CHUNK */
    uint64_t *chunk_bits;        /* bit c: chunk c changed */
    uint16_t *line_bits;         /* [nchunks]: bit l: line l of the chunk changed */
    uint64_t removals;           /* removals numbered so far */
    uint64_t landed;             /* removals the device holds (all up to it) */
    uint64_t *unlanded;          /* removals - landed, as kernels read it */
    uint64_t live;               /* records holding an entry */
    uint64_t unmirrored;         /* entries or pages it had no room for */
    uint64_t published, removed;
};

/* Slots per chunk: what a change of one slot rewrites on the device.
 * Slots per line: what it copies into the snapshot, under the lock that
 * publishing and the ring's answers wait for - a burst of entries spreads
 * its slots over most chunks of a large table. */
#define RC_KT_CHUNK 256
#define RC_KT_LINE 16
_Static_assert(RC_KT_CHUNK / RC_KT_LINE == 16, "a chunk's lines are the bits of a uint16_t");

int rc_kt_init(struct rc_key_table *t, unsigned slot_bits, unsigned max_probe, uint32_t nrecords);
void rc_kt_fini(struct rc_key_table *t);

/* Under t->lock.  The entry id, serving [start, end) with keys lkey[r] for
 * each rail r in rails, was published (or gained a rail): queued, or -
 * when the queue cannot grow - counted unmirrored. */
void rc_kt_publish_locked(struct rc_key_table *t, const void *id, uint64_t start, uint64_t end,
                          uint32_t rails, const uint32_t *lkey);

/* Under t->lock.  The entry left the cache: its record reads empty from
 * the next write on.  Returns its removal's number, or 0 when the device
 * never had it (nothing to wait for before its deregistration). */
uint64_t rc_kt_leave_locked(struct rc_key_table *t, const void *id);

/* Under t->lock.  The entry is being deregistered: forget it; returns the
 * number rc_kt_leave_locked() gave it, or 0. */
uint64_t rc_kt_forget_locked(struct rc_key_table *t, const void *id);

/* Leaving records applied in one step, at most. */
#define RC_KT_LEAVE_STEP 8

/* Under t->lock.  Apply a few leaving records (RC_KT_LEAVE_STEP), or when
 * none is left one insert of the queue; false when both are done (each step
 * is short, so the lock can be let go between them). */
bool rc_kt_apply_step_locked(struct rc_key_table *t, size_t *next);

/* Under t->lock, after the queue was applied to its end: empty it. */
void rc_kt_queue_done_locked(struct rc_key_table *t);

/* Under t->lock.  The records whose entry left since this was last asked
 * (or the device last written) go to out[] (room for nrecords), or
 * nowhere when out is NULL: how many. */
uint32_t rc_kt_take_unsent_locked(struct rc_key_table *t, uint32_t *out);

/* The slots, and what changed of them, change only in
 * rc_kt_apply_step_locked() and rc_kt_clear_locked(): a caller that keeps
 * those from running (device_table.h: the applier's lock) reads them and
 * takes their changes without t->lock, which publishing and leaving take.
 *
 * The first chunk changed since it was last taken, from chunk `from` on;
 * t->nchunks when none. */
size_t rc_kt_next_chunk(const struct rc_key_table *t, size_t from);

/* The lines of chunk c that changed are copied to the same place of `to`
 * (an image of the slots), and the chunk reads unchanged. */
void rc_kt_take_chunk(struct rc_key_table *t, size_t c, struct regcache_device_slot *to);

/* Under t->lock.  Every record empty, every slot unused (the table is
 * being detached). */
void rc_kt_clear_locked(struct rc_key_table *t);

/* Where kernels read each record's number (nrecords words) and the
 * removals not on the device yet (one word), from now on: filled with what
 * holds now.  Before the table is shared. */
void rc_kt_show(struct rc_key_table *t, uint64_t *shown, uint64_t *unlanded);

/* Under t->lock.  The device holds every removal up to number `removals`
 * (a write that took them completed): kernels stop confirming keys once it
 * holds all numbered so far. */
void rc_kt_landed_locked(struct rc_key_table *t, uint64_t removals);

/* Under t->lock.  The record that serves [addr, addr+len) on rail, as a
 * lookup on the device will find it once written: true with *key (and the
 * record's range in *start, *end), or false. */
bool rc_kt_find_locked(const struct rc_key_table *t, uint64_t addr, uint64_t len, unsigned rail,
                       struct regcache_device_key *key, uint64_t *start, uint64_t *end);

#endif
