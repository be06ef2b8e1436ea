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

#include "cache.h"
#include "host_monitor.h"

#define RING 1024

struct slot {
    _Atomic uint64_t lap;
    uintptr_t start, end;
};

struct rc_host_monitor_line rc_host_monitor_line;

static struct slot ring[RING];
static _Atomic uint64_t tail;
static uint64_t head; /* under drain_lock */
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
                s->start = start;
                s->end = end;
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

/* Under drain_lock: read every slot claimed so far.  A producer between
 * its claim and its mark is a few stores from done: waited for.  True when
 * a cache has deregistrations or notices to give. */
static bool drain_ring(void)
{
    bool later = false;
    uint64_t end = atomic_load_explicit(&tail, memory_order_acquire);
    while (head != end) {
        struct slot *s = &ring[head % RING];
        uint64_t filled = 2 * (head / RING) + 1;
        while (atomic_load_explicit(&s->lap, memory_order_acquire) != filled)
            sched_yield();
        uintptr_t start = s->start, stop = s->end;
        atomic_store_explicit(&s->lap, filled + 1, memory_order_release);
        __atomic_store_n(&head, head + 1, __ATOMIC_RELAXED);
        later |= rc_host_watch_unmapped(start, stop);
    }
    return later;
}

bool rc_host_events_drain(bool wait)
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
    bool later = atomic_exchange_explicit(&overflow, false, memory_order_acq_rel) &&
                 rc_host_monitor_invalidate_watched();
    later |= drain_ring();
    if (complete)
        handled(upto);
    pthread_mutex_unlock(&drain_lock);
    if (later)
        rc_host_monitor_release_later();
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
    atomic_store(&rc_host_monitor_line.events, 0);
    pthread_mutex_init(&drain_lock, NULL);
}
