/* The table's two threads.
 *
 * regcache-keys serves the misses kernels post: it reads the ring in
 * ticket order, registers each range through the cache's normal miss path
 * (a get and a put: the entry stays cached, and publishing it queues it for
 * the table), applies the queue to the host's copy of the table, and
 * answers the ticket with the key and record that serve it - in host
 * memory, then the count of tickets answered, which the kernels poll - one
 * ticket at a time, so that a burst's first miss does not wait for its
 * last.  It submits no work to the GPU: the table's copies are GPU work,
 * which can queue behind the application's (a synchronous copy of a
 * kernel's result waits for that kernel, and the driver may hold back
 * other threads' copies meanwhile), and that kernel may be the one waiting
 * for the answer.  Between looks at an idle ring it sleeps, a little longer
 * each time, up to poll_ns: a miss after a quiet spell waits that long for
 * the thread to look.
 *
 * regcache-kwrite writes to the GPU what was published since the last
 * write.  It sleeps until regcache-keys, looking at the ring, finds
 * something published and kicks it - at most once a poll_ns, only when it
 * sleeps, and after a rest as long as its last write was large
 * (rc_dtable_writer_due()): publishing (under the cache lock) only sets a
 * flag, so a miss pays no system call and wakes no thread, and a burst of
 * them is written in a few writes instead of one each.  A write that waits
 * behind the application's work delays later lookups' hits, never an
 * answer. */
#include "device_table.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

/* Tickets served in one batch. */
#define BATCH 64

struct ask {
    uint64_t addr, len;
    unsigned rail;
    int status;
    uint64_t start, end; /* the answer, with key, when status is OK */
    struct regcache_device_key key;
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
        asks[n] = (struct ask){ .addr = __atomic_load_n(&cell->addr, __ATOMIC_RELAXED),
                                .len = __atomic_load_n(&cell->len, __ATOMIC_RELAXED),
                                .rail = __atomic_load_n(&cell->rail, __ATOMIC_RELAXED) };
        __atomic_store_n(&cell->seq, tk + t->p.ring_slots, __ATOMIC_RELEASE);
        n++;
    }
    return n;
}

static void count_ns(atomic_uint_fast64_t *total, atomic_uint_fast64_t *max, uint64_t ns)
{
    atomic_fetch_add_explicit(total, ns, memory_order_relaxed);
    rc_dtable_raise(max, ns);
}

/* Registered: the record that serves it, as the host's copy has it once
 * the queue is applied - or no room in the table. */
static void find_key(struct rc_dtable *t, struct ask *a)
{
    rc_dtable_apply_lock(t);
    if (a->status == REGCACHE_OK &&
        !rc_kt_find_locked(&t->kt, a->addr, a->len, a->rail, &a->key, &a->start, &a->end))
        a->status = REGCACHE_ERR_NO_SPACE;
    pthread_mutex_unlock(&t->kt.lock);
}

/* The answer's fields, then its word; the word reads busy while the fields
 * change, so that a kernel still reading the cell's older answer sees it
 * change (regcache_device_answer()). */
static void answer(struct rc_dtable *t, uint64_t tk, const struct ask *a)
{
    struct regcache_device_answer *ans = &t->answers[tk & (t->p.ring_slots - 1)];
    __atomic_store_n(&ans->word, REGCACHE_DEVICE_ANSWER_BUSY, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    if (a->status == REGCACHE_OK) {
        __atomic_store_n(&ans->start, a->start, __ATOMIC_RELAXED);
        __atomic_store_n(&ans->end, a->end, __ATOMIC_RELAXED);
        __atomic_store_n(&ans->seq, a->key.seq, __ATOMIC_RELAXED);
        __atomic_store_n(&ans->key, (uint64_t)a->key.lkey << 32 | a->key.record, __ATOMIC_RELAXED);
        __atomic_store_n(&ans->rail, a->rail, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&ans->word, tk << 16 | ((uint64_t)-a->status & 0xffff), __ATOMIC_RELEASE);
}

static size_t serve(struct rc_dtable *t)
{
    struct ask asks[BATCH];
    size_t n = take(t, asks);
    if (!n)
        return 0;
    uint64_t taken = rc_dtable_clock(), failures = 0;
    for (size_t i = 0; i < n; i++) {
        struct ask *a = &asks[i];
        regcache_entry_t *e = NULL;
        uint64_t begun = rc_dtable_clock();
        a->status =
            regcache_get_rail(t->cache, a->rail, (const void *)(uintptr_t)a->addr, a->len, &e);
        regcache_put(t->cache, e);
        count_ns(&t->register_ns_total, &t->register_ns_max, rc_dtable_clock() - begun);
        find_key(t, a);
        failures += a->status != REGCACHE_OK;
        answer(t, t->next_ticket, a);
        __atomic_store_n(t->completed, ++t->next_ticket, __ATOMIC_RELEASE);
        count_ns(&t->answer_ns_total, &t->answer_ns_max, rc_dtable_clock() - taken);
    }
    atomic_fetch_add_explicit(&t->requests, n, memory_order_relaxed);
    atomic_fetch_add_explicit(&t->request_failures, failures, memory_order_relaxed);
    /* What the answers applied is for the writer to write. */
    atomic_store_explicit(&t->dirty, true, memory_order_release);
    return n;
}

/* Sleep nap ns (less when the table stops), and double it up to poll_ns
 * for the next time. */
static void doze(struct rc_dtable *t, uint64_t *nap)
{
    uint64_t until = rc_dtable_clock() + *nap;
    struct timespec ts = { (time_t)(until / 1000000000u), (long)(until % 1000000000u) };
    pthread_mutex_lock(&t->nap);
    if (!atomic_load_explicit(&t->stop, memory_order_acquire))
        pthread_cond_timedwait(&t->kicked, &t->nap, &ts);
    pthread_mutex_unlock(&t->nap);
    *nap = *nap * 2 > t->p.poll_ns ? t->p.poll_ns : *nap * 2;
}

static bool rested(struct rc_dtable *t, uint64_t now)
{
    return now >= atomic_load_explicit(&t->rest_until, memory_order_relaxed);
}

/* Removals do not wait for the rest: sections confirm keys until they
 * land, and their words are few. */
void rc_dtable_write_and_rest(struct rc_dtable *t)
{
    if (!rested(t, rc_dtable_clock())) {
        rc_dtable_write_removals(t);
        return;
    }
    uint64_t bytes = atomic_load_explicit(&t->bytes_written, memory_order_relaxed);
    rc_dtable_flush(t);
    bytes = atomic_load_explicit(&t->bytes_written, memory_order_relaxed) - bytes;
    atomic_store_explicit(&t->rest_until, rc_dtable_clock() + bytes * RC_REST_NS_PER_BYTE,
                          memory_order_relaxed);
}

bool rc_dtable_writer_due(struct rc_dtable *t, uint64_t now, uint64_t last)
{
    return atomic_load_explicit(&t->asleep, memory_order_acquire) && now - last >= t->p.poll_ns &&
           (__atomic_load_n(t->unlanded, __ATOMIC_RELAXED) ||
            (atomic_load_explicit(&t->dirty, memory_order_acquire) && rested(t, now)));
}

/* The writer sleeps: kick it when it is due (`last`: when this thread last
 * did). */
static void kick(struct rc_dtable *t, uint64_t *last)
{
    uint64_t now = rc_dtable_clock();
    if (!rc_dtable_writer_due(t, now, *last))
        return;
    *last = now;
    pthread_mutex_lock(&t->nap);
    t->kicks++;
    pthread_cond_signal(&t->kicked);
    pthread_mutex_unlock(&t->nap);
}

static void *reader(void *arg)
{
    struct rc_dtable *t = arg;
    pthread_setname_np(pthread_self(), "regcache-keys");
    /* Attach wrote everything there was: the first kick can wait. */
    uint64_t nap = 1000, last = rc_dtable_clock();
    while (!atomic_load_explicit(&t->stop, memory_order_acquire)) {
        size_t served = serve(t);
        kick(t, &last);
        if (served)
            nap = 1000;
        else
            doze(t, &nap);
    }
    return NULL;
}

/* Sleep until the next kick (*seen: the kicks taken); false at stop. */
static bool await_kick(struct rc_dtable *t, uint64_t *seen)
{
    pthread_mutex_lock(&t->nap);
    atomic_store_explicit(&t->asleep, true, memory_order_release);
    while (t->kicks == *seen && !atomic_load_explicit(&t->stop, memory_order_acquire))
        pthread_cond_wait(&t->kicked, &t->nap);
    atomic_store_explicit(&t->asleep, false, memory_order_relaxed);
    *seen = t->kicks;
    pthread_mutex_unlock(&t->nap);
    return !atomic_load_explicit(&t->stop, memory_order_acquire);
}

static void *writer(void *arg)
{
    struct rc_dtable *t = arg;
    pthread_setname_np(pthread_self(), "regcache-kwrite");
    uint64_t seen = 0;
    while (await_kick(t, &seen))
        rc_dtable_write_and_rest(t);
    return NULL;
}

int rc_dtable_start(struct rc_dtable *t)
{
    atomic_store(&t->stop, false);
    t->reading = pthread_create(&t->reader, NULL, reader, t) == 0;
    t->writing = t->reading && pthread_create(&t->writer_thread, NULL, writer, t) == 0;
    if (t->writing)
        return REGCACHE_OK;
    rc_dtable_stop(t);
    return REGCACHE_ERR_NO_MEMORY;
}

void rc_dtable_stop(struct rc_dtable *t)
{
    pthread_mutex_lock(&t->nap);
    atomic_store_explicit(&t->stop, true, memory_order_release);
    pthread_cond_broadcast(&t->kicked);
    pthread_mutex_unlock(&t->nap);
    if (t->reading)
        pthread_join(t->reader, NULL);
    if (t->writing)
        pthread_join(t->writer_thread, NULL);
    t->reading = t->writing = false;
}
