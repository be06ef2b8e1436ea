/* A hold handed to another thread: short-lived threads get an entry, hand
 * it to a putter and exit, and the next short-lived thread takes over the
 * record (and hold slot) the last one left.  Only the slot orders the
 * putter's last reads of the hold (its note) before the new owner reuses
 * the slot: nothing else passes between those two threads.  Functionally
 * every get and put succeeds either way; under TSan (CI's TSan build) a
 * slot reuse that is not ordered after the put is reported as a race on
 * the note. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache_fixture.h"

#define X FX_ALLOC(0)
#define ROUNDS 50

struct handoff {
    struct fx *f;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    regcache_entry_t *mailbox; /* under lock: a hold for the putter */
    bool quit;
    /* Relaxed on purpose: the thread that starts the next getter must
     * learn that the put is done without synchronising with the putter,
     * so that only the library's own ordering stands between them. */
    atomic_int puts;
    atomic_int failures;
};

static void *getter(void *arg)
{
    struct handoff *h = arg;
    regcache_entry_t *e;
    if (regcache_get(h->f->c, (const void *)X, 4096, &e) != REGCACHE_OK) {
        atomic_fetch_add(&h->failures, 1);
        return NULL;
    }
    pthread_mutex_lock(&h->lock);
    h->mailbox = e;
    pthread_cond_signal(&h->cond);
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

static void *putter(void *arg)
{
    struct handoff *h = arg;
    pthread_mutex_lock(&h->lock);
    for (;;) {
        while (!h->mailbox && !h->quit)
            pthread_cond_wait(&h->cond, &h->lock);
        if (!h->mailbox)
            break;
        regcache_entry_t *e = h->mailbox;
        h->mailbox = NULL;
        pthread_mutex_unlock(&h->lock);
        regcache_put(h->f->c, e);
        atomic_store_explicit(&h->puts, atomic_load_explicit(&h->puts, memory_order_relaxed) + 1,
                              memory_order_relaxed);
        pthread_mutex_lock(&h->lock);
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

static void short_lived_getters_hand_holds_to_a_putter(void **state)
{
    struct fx *f = *state;
    fx_device_alloc(f, 0);
    fx_create(f);
    fx_use(f, X, 4096);
    struct handoff h = { .f = f };
    pthread_mutex_init(&h.lock, NULL);
    pthread_cond_init(&h.cond, NULL);
    pthread_t p;
    alarm(120);
    assert_int_equal(pthread_create(&p, NULL, putter, &h), 0);
    for (int i = 0; i < ROUNDS; i++) {
        pthread_t g;
        assert_int_equal(pthread_create(&g, NULL, getter, &h), 0);
        assert_int_equal(pthread_join(g, NULL), 0);
        assert_int_equal(atomic_load(&h.failures), 0);
        while (atomic_load_explicit(&h.puts, memory_order_relaxed) <= i)
            sched_yield();
    }
    pthread_mutex_lock(&h.lock);
    h.quit = true;
    pthread_cond_signal(&h.cond);
    pthread_mutex_unlock(&h.lock);
    assert_int_equal(pthread_join(p, NULL), 0);
    alarm(0);
    pthread_cond_destroy(&h.cond);
    pthread_mutex_destroy(&h.lock);
    fx_assert_stats(f, FX_STAT(hits, ROUNDS), FX_STAT(misses, 1), NULL);
}

FX_MAIN(short_lived_getters_hand_holds_to_a_putter)
