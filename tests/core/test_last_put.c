/* The last put of an entry invalidated while held deregisters it: six
 * threads each get their own allocation, notify its free while they hold
 * it, and put it, 10,000 rounds each.  No put returns with its
 * registration still registered, and no deregistration runs on a thread
 * other than the putter's (another thread's get or notice).  The fake
 * backend counts registrations and deregistrations by allocation, and
 * which thread deregistered. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache_fixture.h"

#define THREADS 6
#define ROUNDS 10000

struct owner {
    atomic_long regs, deregs;
} __attribute__((aligned(64)));

static struct owner owners[THREADS];
static atomic_long live_after_put, foreign_deregs, failed_gets;
static _Thread_local int me = -1;

/* Allocation i is FX_ALLOC(i): thread i's. */
static int owner_of(uintptr_t addr)
{
    return (int)((addr - FX_BASE) / (2 * MiB));
}

static void count_reg(void *arg, struct fake_handle *h)
{
    (void)arg;
    atomic_fetch_add(&owners[owner_of(h->start)].regs, 1);
}

static void count_dereg(void *arg, const struct fake_handle *h)
{
    (void)arg;
    int owner = owner_of(h->start);
    if (owner != me)
        atomic_fetch_add(&foreign_deregs, 1);
    atomic_fetch_add(&owners[owner].deregs, 1);
}

struct worker {
    struct fx *f;
    int id;
};

static void *rounds(void *arg)
{
    struct worker *w = arg;
    struct owner *o = &owners[w->id];
    me = w->id;
    for (int r = 0; r < ROUNDS; r++) {
        regcache_entry_t *e = NULL;
        if (regcache_get(w->f->c, (const void *)FX_ALLOC(w->id), 4096, &e) != REGCACHE_OK) {
            atomic_fetch_add(&failed_gets, 1);
            continue;
        }
        regcache_notify_free((const void *)FX_ALLOC(w->id), MiB);
        regcache_put(w->f->c, e);
        if (atomic_load(&o->deregs) != atomic_load(&o->regs))
            atomic_fetch_add(&live_after_put, 1);
    }
    return NULL;
}

static void last_put_deregisters_on_the_putters_thread(void **state)
{
    struct fx *f = *state;
    for (int i = 0; i < THREADS; i++)
        fx_device_alloc(f, i);
    f->fb.on_handle = count_reg;
    f->fb.during_dereg = count_dereg;
    fx_create(f);
    alarm(300);
    pthread_t t[THREADS];
    struct worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){ f, i };
        assert_int_equal(pthread_create(&t[i], NULL, rounds, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    alarm(0);
    assert_int_equal(atomic_load(&failed_gets), 0);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(atomic_load(&owners[i].regs), ROUNDS);
    print_message("puts that returned with their registration live: %ld; deregistrations on "
                  "another thread: %ld\n",
                  atomic_load(&live_after_put), atomic_load(&foreign_deregs));
    assert_int_equal(atomic_load(&live_after_put), 0);
    assert_int_equal(atomic_load(&foreign_deregs), 0);
}

FX_MAIN(last_put_deregisters_on_the_putters_thread)
