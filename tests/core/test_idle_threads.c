/* Threads that used the cache and then sleep (a PyTorch process runs
 * hundreds) must not make every eviction dearer: their records leave the
 * scan of holds once they idled between two looks (threads.h), and come
 * back with the thread's next get, whose hold then protects its entry from
 * eviction as any other. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache_fixture.h"
#include "threads.h"

#define IDLE 32
#define LIMIT 16
/* Evicting gets enough for two looks at the records, wherever the count
 * of scans stands. */
#define CHURN (3 * RC_PARK_EVERY)
#define HELD FX_ALLOC(0)

struct idlers {
    struct fx *f;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int arrived, phase;
    int holding; /* the waking thread holds HELD */
    atomic_int failures;
    atomic_bool held;          /* HELD is held: no dereg of it may come */
    atomic_int deregs_of_held; /* deregs of HELD while it was */
};

static void wait_phase(struct idlers *s, int phase)
{
    while (s->phase < phase)
        pthread_cond_wait(&s->cond, &s->lock);
}

static void *idler(void *arg)
{
    struct idlers *s = arg;
    regcache_entry_t *e;
    if (regcache_get(s->f->c, (const void *)HELD, 4096, &e) == REGCACHE_OK)
        regcache_put(s->f->c, e);
    else
        atomic_fetch_add(&s->failures, 1);
    pthread_mutex_lock(&s->lock);
    bool waker = s->arrived++ == 0;
    pthread_cond_broadcast(&s->cond);
    wait_phase(s, 1);
    if (waker) {
        pthread_mutex_unlock(&s->lock);
        /* A hit from a parked record. */
        if (regcache_get(s->f->c, (const void *)HELD, 4096, &e) != REGCACHE_OK) {
            atomic_fetch_add(&s->failures, 1);
            e = NULL;
        }
        atomic_store(&s->held, e != NULL);
        pthread_mutex_lock(&s->lock);
        s->holding = 1;
        pthread_cond_broadcast(&s->cond);
        wait_phase(s, 2);
        pthread_mutex_unlock(&s->lock);
        atomic_store(&s->held, false);
        regcache_put(s->f->c, e);
        return NULL;
    }
    wait_phase(s, 2);
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static void note_dereg(void *arg, const struct fake_handle *h)
{
    struct idlers *s = arg;
    if (h->start == HELD && atomic_load(&s->held))
        atomic_fetch_add(&s->deregs_of_held, 1);
}

static void set_phase(struct idlers *s, int phase)
{
    pthread_mutex_lock(&s->lock);
    s->phase = phase;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

/* Evicting gets over twice the limit, none of them on HELD. */
static void churn(struct fx *f, int n)
{
    for (int i = 0; i < n; i++)
        fx_use(f, FX_ALLOC(1 + i % (2 * LIMIT)), 10);
}

static void idle_records_leave_the_scan_and_come_back(void **state)
{
    struct fx *f = *state;
    struct idlers s = { .f = f };
    pthread_t t[IDLE];
    fx_device_allocs(f, 1 + 2 * LIMIT);
    f->p.max_entries = LIMIT;
    f->fb.during_dereg = note_dereg;
    f->fb.during_dereg_arg = &s;
    fx_create(f);
    fx_use(f, HELD, 4096);
    size_t before = rc_thread_live_span();
    pthread_mutex_init(&s.lock, NULL);
    pthread_cond_init(&s.cond, NULL);
    alarm(120);
    for (int i = 0; i < IDLE; i++)
        assert_int_equal(pthread_create(&t[i], NULL, idler, &s), 0);
    pthread_mutex_lock(&s.lock);
    while (s.arrived < IDLE)
        pthread_cond_wait(&s.cond, &s.lock);
    pthread_mutex_unlock(&s.lock);
    assert_int_equal(rc_thread_live_span(), before + IDLE);

    churn(f, CHURN);
    assert_int_equal(rc_thread_live_span(), before);

    /* HELD cached again, the least recent entry: held by a thread whose
     * record was parked, it must survive evictions all the same. */
    fx_use(f, HELD, 4096);
    set_phase(&s, 1);
    pthread_mutex_lock(&s.lock);
    while (!s.holding)
        pthread_cond_wait(&s.cond, &s.lock);
    pthread_mutex_unlock(&s.lock);
    assert_true(atomic_load(&s.held));
    assert_int_equal(rc_thread_live_span(), before + 1);
    churn(f, 4 * LIMIT);
    assert_int_equal(atomic_load(&s.deregs_of_held), 0);

    set_phase(&s, 2);
    for (int i = 0; i < IDLE; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    alarm(0);
    assert_int_equal(atomic_load(&s.failures), 0);
    f->fb.during_dereg = NULL;
    pthread_cond_destroy(&s.cond);
    pthread_mutex_destroy(&s.lock);
}

FX_MAIN(idle_records_leave_the_scan_and_come_back)
