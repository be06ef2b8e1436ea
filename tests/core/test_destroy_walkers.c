/* regcache_destroy() of a cache waits for the notify_free walks that are
 * inside that cache, and for no other.  A walk running cache A's dereg,
 * which takes an application lock, and a thread that destroys cache B
 * while it holds that lock do not deadlock, whichever cache is older; the
 * destroy of A still waits for the walk inside A.  Under load, walks race
 * caches being created and destroyed (the sanitizer builds see any read of
 * a destroyed cache).  A hang is a failure: alarm() ends the test. */
#include <setjmp.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache_fixture.h"
#include "test_sync.h"

/* A's memory, whose dereg takes the application's lock; B's. */
#define X FX_ALLOC(0)
#define Y FX_ALLOC(1)

/* Generous: sanitizers on a loaded machine.  Only a deadlock takes this. */
#define ALARM_SECONDS 60

static void hung(int sig)
{
    (void)sig;
    static const char msg[] = "deadlock: a destroy waited for a walk it had no concern with\n";
    ssize_t n = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)n;
    _exit(1);
}

static void arm_alarm(void)
{
    signal(SIGALRM, hung);
    alarm(ALARM_SECONDS);
}

struct app {
    struct fx *f;
    pthread_mutex_t lock; /* the application's */
    atomic_int x_deregs_entered;
    regcache_t *b;
    struct dthread destroy_a;
    atomic_bool destroy_a_started;
    atomic_bool destroy_a_done_inside; /* seen by the dereg of X, at its end */
};

/* The dereg of X takes the application's lock; others do not. */
static void dereg_of_x_takes_app_lock(void *arg, const struct fake_handle *h)
{
    struct app *a = arg;
    if (h->start != X)
        return;
    atomic_fetch_add(&a->x_deregs_entered, 1);
    pthread_mutex_lock(&a->lock);
    pthread_mutex_unlock(&a->lock);
    if (atomic_load(&a->destroy_a_started) && atomic_load(&a->destroy_a.done))
        atomic_store(&a->destroy_a_done_inside, true);
}

static void app_init(struct app *a, struct fx *f)
{
    a->f = f;
    pthread_mutex_init(&a->lock, NULL);
    fake_alloc(&f->fb, X, MiB, 0, REGCACHE_MEM_DEVICE);
    fake_alloc(&f->fb, Y, MiB, 0, REGCACHE_MEM_DEVICE);
    f->p.validation = REGCACHE_VALIDATE_NOTIFY;
    f->fb.during_dereg = dereg_of_x_takes_app_lock;
    f->fb.during_dereg_arg = a;
}

static void use(regcache_t *c, uintptr_t addr)
{
    regcache_entry_t *e;
    assert_int_equal(regcache_get(c, (const void *)addr, 10, &e), REGCACHE_OK);
    regcache_put(c, e);
}

static void free_x(void *arg)
{
    (void)arg;
    regcache_notify_free((const void *)X, MiB);
}

static void destroy_a(void *arg)
{
    struct app *a = arg;
    regcache_destroy(a->f->c);
}

static bool x_dereg_entered(const void *arg)
{
    return atomic_load(&((const struct app *)arg)->x_deregs_entered) > 0;
}

static bool no_cache_left(const void *arg)
{
    (void)arg;
    return regcache_cache_count() == 0;
}

struct order_case {
    const char *name;
    bool b_first; /* B created before A: the walk meets A first */
};

static void destroy_of_another_cache_ignores_a_walk(void **state)
{
    struct fx *f = *state;
    const struct order_case *oc = f->param;
    struct app a = { 0 };
    app_init(&a, f);
    if (oc->b_first)
        assert_int_equal(regcache_create(&f->p, &a.b), REGCACHE_OK);
    fx_create(f);
    if (!oc->b_first)
        assert_int_equal(regcache_create(&f->p, &a.b), REGCACHE_OK);
    use(f->c, X);
    use(a.b, Y);

    /* The application holds its lock; a walk runs A's dereg of X, which
     * waits for it. */
    pthread_mutex_lock(&a.lock);
    struct dthread walker;
    dthread_start(&walker, free_x, NULL);
    assert_true(wait_until(x_dereg_entered, &a, HANG_SECONDS));
    assert_true(await_sleeping(dthread_tid(&walker), HANG_SECONDS));

    /* Under the lock, B goes: nothing of B concerns the walk. */
    arm_alarm();
    regcache_destroy(a.b);
    alarm(0);

    /* A's destroy waits for the walk inside A, until the lock is let go. */
    atomic_store(&a.destroy_a_started, true);
    dthread_start(&a.destroy_a, destroy_a, &a);
    assert_true(wait_until(no_cache_left, NULL, HANG_SECONDS));
    assert_false(dthread_join(&a.destroy_a, 0.2));
    pthread_mutex_unlock(&a.lock);
    assert_true(dthread_join(&walker, HANG_SECONDS));
    assert_true(dthread_join(&a.destroy_a, HANG_SECONDS));
    f->c = NULL;
    assert_false(atomic_load(&a.destroy_a_done_inside));
    assert_int_equal(atomic_load(&f->fb.live), 0);
}

static const struct order_case cases[] = {
    { .name = "the walk meets B before A", .b_first = false },
    { .name = "the walk meets A before B", .b_first = true },
};

/* ---- under load ------------------------------------------------------------ */

#define WALKERS 2
#define CYCLES 300

struct load {
    struct app a;
    atomic_bool stop;
    atomic_long walks;
};

/* Use A's memory and free it, and B's (whichever B lives now). */
static void *walker(void *arg)
{
    struct load *l = arg;
    while (!atomic_load(&l->stop)) {
        regcache_entry_t *e;
        if (regcache_get(l->a.f->c, (const void *)X, 10, &e) == REGCACHE_OK)
            regcache_put(l->a.f->c, e);
        regcache_notify_free((const void *)X, MiB);
        regcache_notify_free((const void *)Y, MiB);
        atomic_fetch_add(&l->walks, 1);
    }
    return NULL;
}

static void walks_race_creates_and_destroys(void **state)
{
    struct fx *f = *state;
    struct load *l = calloc(1, sizeof(*l));
    app_init(&l->a, f);
    fx_create(f);
    arm_alarm();
    pthread_t w[WALKERS];
    for (int i = 0; i < WALKERS; i++)
        pthread_create(&w[i], NULL, walker, l);
    /* The destroys race walks only once walkers run (on a busy machine
     * they may start late). */
    while (atomic_load(&l->walks) == 0)
        sched_yield();
    for (int i = 0; i < CYCLES; i++) {
        regcache_t *b;
        assert_int_equal(regcache_create(&f->p, &b), REGCACHE_OK);
        use(b, Y);
        pthread_mutex_lock(&l->a.lock);
        regcache_destroy(b);
        pthread_mutex_unlock(&l->a.lock);
    }
    /* No walker was left stuck by the destroys: the walks go on (the
     * alarm ends a wait for a stuck one). */
    long after = atomic_load(&l->walks);
    while (atomic_load(&l->walks) <= after + WALKERS)
        sched_yield();
    atomic_store(&l->stop, true);
    for (int i = 0; i < WALKERS; i++)
        pthread_join(w[i], NULL);
    alarm(0);
    free(l);
}

FX_MAIN_CASES(destroy_of_another_cache_ignores_a_walk, cases, walks_race_creates_and_destroys)
