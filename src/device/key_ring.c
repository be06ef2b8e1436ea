/* The thread that serves the misses kernels post (regcache-keys): it reads
 * the ring in ticket order, registers each range through the cache's
 * normal miss path (a get and a put: the entry stays cached, and
 * publishing it queues it for the table), writes the table, and only then
 * answers - each ticket's status, then the count of tickets answered, which
 * the kernels poll.  Between looks at an idle ring it sleeps, a little
 * longer each time, up to poll_ns: a miss after a quiet spell waits that
 * long for the thread to look. */
#include "device_table.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

/* Tickets served in one batch, each answered after one write of the table. */
#define BATCH 64

struct ask {
    uint64_t addr, len;
    unsigned rail;
    int status;
};

/* The posted cells from t->next_ticket on, freed for their next tickets. */
static size_t take(struct rc_dtable *t, struct ask *asks)
{
    size_t n = 0;
    uint64_t mask = t->p.ring_slots - 1;
    while (n < BATCH) {
        uint64_t tk = t->next_ticket + n;
        struct regcache_device_request *cell = &t->ring[tk & mask];
        if (__atomic_load_n(&cell->seq, __ATOMIC_ACQUIRE) != tk + 1)
            break;
        asks[n] = (struct ask){ __atomic_load_n(&cell->addr, __ATOMIC_RELAXED),
                                __atomic_load_n(&cell->len, __ATOMIC_RELAXED),
                                __atomic_load_n(&cell->rail, __ATOMIC_RELAXED), 0 };
        __atomic_store_n(&cell->seq, tk + t->p.ring_slots, __ATOMIC_RELEASE);
        n++;
    }
    return n;
}

static size_t serve(struct rc_dtable *t)
{
    struct ask asks[BATCH];
    size_t n = take(t, asks);
    if (!n)
        return 0;
    for (size_t i = 0; i < n; i++) {
        regcache_entry_t *e = NULL;
        asks[i].status = regcache_get_rail(t->cache, asks[i].rail,
                                           (const void *)(uintptr_t)asks[i].addr, asks[i].len, &e);
        regcache_put(t->cache, e);
    }
    int written = rc_dtable_flush(t);
    pthread_mutex_lock(&t->kt.lock);
    for (size_t i = 0; i < n; i++) {
        if (asks[i].status == REGCACHE_OK && written != REGCACHE_OK)
            asks[i].status = written;
        else if (asks[i].status == REGCACHE_OK &&
                 !rc_kt_serves_locked(&t->kt, asks[i].addr, asks[i].len, asks[i].rail))
            asks[i].status = REGCACHE_ERR_NO_SPACE; /* registered, but no room in the table */
    }
    pthread_mutex_unlock(&t->kt.lock);
    uint64_t mask = t->p.ring_slots - 1, failures = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t tk = t->next_ticket + i;
        failures += asks[i].status != REGCACHE_OK;
        __atomic_store_n(&t->status[tk & mask], tk << 16 | ((uint64_t)-asks[i].status & 0xffff),
                         __ATOMIC_RELAXED);
    }
    t->next_ticket += n;
    __atomic_store_n(t->completed, t->next_ticket, __ATOMIC_RELEASE);
    atomic_fetch_add_explicit(&t->requests, n, memory_order_relaxed);
    atomic_fetch_add_explicit(&t->request_failures, failures, memory_order_relaxed);
    return n;
}

static void *reader(void *arg)
{
    struct rc_dtable *t = arg;
    pthread_setname_np(pthread_self(), "regcache-keys");
    uint64_t nap = 1000;
    while (!atomic_load_explicit(&t->stop, memory_order_acquire)) {
        size_t served = serve(t);
        if (atomic_load_explicit(&t->dirty, memory_order_acquire))
            rc_dtable_flush(t);
        if (served) {
            nap = 1000;
            continue;
        }
        struct timespec ts = { (time_t)(nap / 1000000000u), (long)(nap % 1000000000u) };
        nanosleep(&ts, NULL);
        nap = nap * 2 > t->p.poll_ns ? t->p.poll_ns : nap * 2;
    }
    return NULL;
}

int rc_dtable_start(struct rc_dtable *t)
{
    atomic_store(&t->stop, false);
    if (pthread_create(&t->thread, NULL, reader, t) != 0)
        return REGCACHE_ERR_NO_MEMORY;
    t->started = true;
    return REGCACHE_OK;
}

void rc_dtable_stop(struct rc_dtable *t)
{
    if (!t->started)
        return;
    atomic_store_explicit(&t->stop, true, memory_order_release);
    pthread_join(t->thread, NULL);
    t->started = false;
}
