/* The queue of unmaps (host_events.h).
 *
 * A slot's `lap` says whose turn it is: 2k, free for the k-th round of
 * positions through the ring; 2k + 1, filled in round k and not yet read.
 * A producer claims the position at the tail whose slot is free for its
 * round (a compare-and-swap), fills it, then marks it filled; the drainer
 * reads filled slots from the head in order and frees them for the next
 * round.  A slot still unread from the previous round means the ring is
 * full: the producer sets `overflow` instead, and the drain then
 * invalidates every watched range. */
#include "host_events.h"

#include <pthread.h>
#include <sched.h>
#include <string.h>

#define RING 1024

struct slot {
    _Atomic uint64_t lap;
    uintptr_t start, end;
};

static struct slot ring[RING];
static _Atomic uint64_t tail;
static uint64_t head; /* under drain_lock */
/* What the drain is invalidating now, once its slot is free again: the
 * range, or everything (an overflow); an odd `taken_seq` while it changes. */
static _Atomic uint64_t taken_seq;
static _Atomic uintptr_t taken_start, taken_end;
static atomic_bool overflow;
static pthread_mutex_t drain_lock = PTHREAD_MUTEX_INITIALIZER;

/* Bump the posted half; the low half is the drainer's. */
static void count(void)
{
    atomic_fetch_add_explicit(&rc_host_monitor_line.events, (uint64_t)1 << 32,
                              memory_order_seq_cst);
}

static atomic_int readers;

void rc_host_events_read_begin(void)
{
    atomic_fetch_add_explicit(&readers, 1, memory_order_seq_cst);
    count();
}

void rc_host_events_read_end(void)
{
    atomic_fetch_sub_explicit(&readers, 1, memory_order_release);
}

void rc_host_events_post(uintptr_t start, uintptr_t end)
{
    uint64_t pos = atomic_load_explicit(&tail, memory_order_relaxed);
    for (;;) {
        struct slot *s = &ring[pos % RING];
        uint64_t lap = atomic_load_explicit(&s->lap, memory_order_acquire);
        uint64_t free_lap = 2 * (pos / RING);
        if (lap == free_lap) {
            if (atomic_compare_exchange_weak_explicit(&tail, &pos, pos + 1, memory_order_relaxed,
                                                      memory_order_relaxed)) {
                /* Atomic: rc_host_events_concern() may read them now. */
                __atomic_store_n(&s->start, start, __ATOMIC_RELAXED);
                __atomic_store_n(&s->end, end, __ATOMIC_RELAXED);
                atomic_store_explicit(&s->lap, free_lap + 1, memory_order_release);
                break;
            }
        } else if (lap < free_lap) {
            rc_host_events_post_all();
            return;
        } else {
            pos = atomic_load_explicit(&tail, memory_order_relaxed);
        }
    }
    count();
}

void rc_host_events_post_all(void)
{
    atomic_store_explicit(&overflow, true, memory_order_release);
    count();
}

bool rc_host_events_crowded(void)
{
    uint64_t t = atomic_load_explicit(&tail, memory_order_relaxed);
    uint64_t h = __atomic_load_n(&head, __ATOMIC_RELAXED);
    return t - h >= RING / 2;
}

/* Mark everything up to `upto` handled (the low half never goes back). */
static void handled(uint32_t upto)
{
    uint64_t w = atomic_load_explicit(&rc_host_monitor_line.events, memory_order_relaxed);
    for (;;) {
        if ((int32_t)(upto - (uint32_t)w) <= 0)
            return;
        uint64_t next = (w & ~(uint64_t)UINT32_MAX) | upto;
        if (atomic_compare_exchange_weak_explicit(&rc_host_monitor_line.events, &w, next,
                                                  memory_order_release, memory_order_relaxed))
            return;
    }
}

/* Under drain_lock: say that [start, end) is being invalidated (end 0:
 * nothing is). */
static void take(uintptr_t start, uintptr_t end)
{
    uint64_t seq = atomic_load_explicit(&taken_seq, memory_order_relaxed);
    atomic_store_explicit(&taken_seq, seq + 1, memory_order_seq_cst);
    atomic_store_explicit(&taken_start, start, memory_order_seq_cst);
    atomic_store_explicit(&taken_end, end, memory_order_seq_cst);
    atomic_store_explicit(&taken_seq, seq + 2, memory_order_seq_cst);
}

/* Under drain_lock: read every slot claimed so far.  A producer between
 * its claim and its mark is a few stores from done: waited for.  A range
 * is taken before its slot is free again (rc_host_events_concern()).  True
 * when a cache has deregistrations or notices to give. */
static bool drain_ring(const struct rc_host_drain *d)
{
    bool later = false;
    uint64_t end = atomic_load_explicit(&tail, memory_order_acquire);
    while (head != end) {
        struct slot *s = &ring[head % RING];
        uint64_t filled = 2 * (head / RING) + 1;
        while (atomic_load_explicit(&s->lap, memory_order_acquire) != filled)
            sched_yield();
        uintptr_t start = s->start, stop = s->end;
        take(start, stop);
        atomic_store_explicit(&s->lap, filled + 1, memory_order_release);
        __atomic_store_n(&head, head + 1, __ATOMIC_RELAXED);
        later |= d->range(start, stop);
        take(0, 0);
    }
    return later;
}

/* A slot of the ring that holds an unread range overlapping [start, end):
 * its lap read around the range, so that a range being replaced is not
 * taken for it. */
static bool slot_overlaps(uint64_t pos, uintptr_t start, uintptr_t end)
{
    struct slot *s = &ring[pos % RING];
    uint64_t filled = 2 * (pos / RING) + 1;
    if (atomic_load_explicit(&s->lap, memory_order_acquire) != filled)
        return false;
    uintptr_t lo = __atomic_load_n(&s->start, __ATOMIC_RELAXED);
    uintptr_t hi = __atomic_load_n(&s->end, __ATOMIC_RELAXED);
    atomic_thread_fence(memory_order_acquire);
    return atomic_load_explicit(&s->lap, memory_order_relaxed) == filled && lo < end && start < hi;
}

/* The range being taken now overlaps [start, end). */
static bool taken_overlaps(uintptr_t start, uintptr_t end)
{
    for (;;) {
        uint64_t seq = atomic_load_explicit(&taken_seq, memory_order_seq_cst);
        uintptr_t lo = atomic_load_explicit(&taken_start, memory_order_seq_cst);
        uintptr_t hi = atomic_load_explicit(&taken_end, memory_order_seq_cst);
        if (!(seq & 1) && atomic_load_explicit(&taken_seq, memory_order_seq_cst) == seq)
            return lo < end && start < hi;
        sched_yield();
    }
}

bool rc_host_events_concern(uintptr_t start, uintptr_t end)
{
    if (atomic_load_explicit(&overflow, memory_order_seq_cst) ||
        atomic_load_explicit(&readers, memory_order_seq_cst))
        return true;
    uint64_t t = atomic_load_explicit(&tail, memory_order_seq_cst);
    uint64_t h = __atomic_load_n(&head, __ATOMIC_SEQ_CST);
    if (t - h > RING)
        h = t - RING;
    for (uint64_t pos = h; pos != t; pos++)
        if (slot_overlaps(pos, start, end))
            return true;
    /* After the slots: a range taken from its slot since was taken first. */
    return taken_overlaps(start, end);
}

bool rc_host_events_drain(bool wait, const struct rc_host_drain *d)
{
    if (wait)
        pthread_mutex_lock(&drain_lock);
    else if (pthread_mutex_trylock(&drain_lock) != 0)
        return false;
    uint32_t upto =
        (uint32_t)(atomic_load_explicit(&rc_host_monitor_line.events, memory_order_seq_cst) >> 32);
    /* A reader that counted before upto was taken and has not posted its
     * ranges yet: this drain cannot vouch for them.  One that has posted
     * did so before the ring's tail is read below. */
    bool complete = atomic_load_explicit(&readers, memory_order_seq_cst) == 0;
    bool later = false;
    if (atomic_load_explicit(&overflow, memory_order_acquire)) {
        take(0, UINTPTR_MAX); /* before the flag falls (rc_host_events_concern()) */
        if (atomic_exchange_explicit(&overflow, false, memory_order_acq_rel))
            later = d->everything();
        take(0, 0);
    }
    later |= drain_ring(d);
    if (complete)
        handled(upto);
    pthread_mutex_unlock(&drain_lock);
    if (later)
        d->later();
    return true;
}

void rc_host_events_reset(void)
{
    for (size_t i = 0; i < RING; i++)
        atomic_store_explicit(&ring[i].lap, 0, memory_order_relaxed);
    atomic_store(&tail, 0);
    head = 0;
    atomic_store(&overflow, false);
    atomic_store(&readers, 0);
    atomic_store(&taken_seq, 0);
    atomic_store(&taken_start, 0);
    atomic_store(&taken_end, 0);
    atomic_store(&rc_host_monitor_line.events, 0);
    pthread_mutex_init(&drain_lock, NULL);
}
