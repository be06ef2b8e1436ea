/* regcache_entry_invalidate(): the registration of a token leaves the cache
 * at once (no more hits, on_leave told "invalidate" while held) and its
 * callback runs exactly once, after the deregistration that the put of its
 * last token makes, with no cache lock held; the caller's own token stays
 * valid until that put.  Also when the entry had left already, from
 * on_register, at destroy, and racing puts on other threads and the host
 * memory monitor. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>
#include <infiniband/verbs.h>

#include "cache_fixture.h"
#include "test_sync.h"

#define A FX_ALLOC(0)
#define B FX_ALLOC(1)

/* Generous: sanitizers on a loaded machine.  Only a deadlock takes this. */
#define ALARM_SECONDS 60

static void hung(int sig)
{
    (void)sig;
    static const char msg[] = "deadlock: a completion callback ran under a cache lock\n";
    ssize_t n = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)n;
    _exit(1);
}

/* What the callbacks saw. */
struct seen {
    struct fx *f;
    atomic_int done;         /* completion callbacks run */
    atomic_long deregs_then; /* the backend's deregistrations at the last one */
    int order[4], n;         /* which callbacks ran, in order */
    atomic_int leaves, leave_reason, leave_held;
    /* Make a get and put of B from the callback (it would wait forever
     * for a lock the cache held). */
    bool get_from_callback;
};

static struct seen seen;

static void completed(void *arg)
{
    struct seen *s = &seen;
    if (arg && s->n < 4)
        s->order[s->n++] = *(int *)arg;
    atomic_store(&s->deregs_then, atomic_load(&s->f->fb.deregs));
    if (s->get_from_callback)
        fx_use(s->f, B, 4096);
    atomic_fetch_add(&s->done, 1);
}

static void on_leave(void *arg, const struct regcache_leave *l)
{
    struct seen *s = arg;
    atomic_store(&s->leave_reason, l->reason);
    atomic_store(&s->leave_held, l->held);
    atomic_fetch_add(&s->leaves, 1);
}

static void listen(struct fx *f)
{
    memset(&seen, 0, sizeof(seen));
    seen.f = f;
    f->p.on_leave = on_leave;
    f->p.callback_arg = &seen;
}

static regcache_entry_t *hold(struct fx *f, regcache_entry_t *e)
{
    regcache_entry_t *t = NULL;
    assert_int_equal(regcache_entry_hold(f->c, e, &t), REGCACHE_OK);
    return t;
}

/* The entry leaves now; the callback waits for the last of its tokens,
 * and comes after the deregistration. */
static void callback_once_at_the_last_put(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    listen(f);
    fx_create(f);
    regcache_entry_t *e = fx_get(f, A, 4096), *t = hold(f, e);
    struct fake_handle *h = fx_handle(e);
    assert_int_equal(regcache_entry_invalidate(f->c, e, completed, NULL), REGCACHE_OK);
    assert_int_equal(atomic_load(&seen.done), 0);
    assert_int_equal(atomic_load(&seen.leaves), 1);
    assert_string_equal(regcache_reason_name(atomic_load(&seen.leave_reason)), "invalidate");
    assert_int_equal(atomic_load(&seen.leave_held), 1);
    fx_assert_stats(f, FX_STAT(entries, 0), FX_STAT(invalidations_explicit, 1), NULL);
    /* Left the cache: a get registers anew. */
    regcache_entry_t *fresh = fx_get(f, A, 4096);
    assert_ptr_not_equal(fx_handle(fresh), h);
    regcache_put(f->c, fresh);
    /* The caller's token still holds the old registration. */
    assert_ptr_equal(fx_handle(e), h);
    assert_int_equal(h->magic != 0, 1);
    regcache_put(f->c, e);
    assert_int_equal(atomic_load(&seen.done), 0);
    long deregs = atomic_load(&f->fb.deregs);
    regcache_put(f->c, t);
    assert_int_equal(atomic_load(&seen.done), 1);
    assert_int_equal(atomic_load(&seen.deregs_then), deregs + 1);
    assert_int_equal(atomic_load(&seen.leaves), 1);
    fx_assert_stats(f, FX_STAT(entries, 1), FX_STAT(registrations, 2), NULL);
}

/* The callback may call the cache (no lock of it is held); several calls
 * each get theirs, once, in the order they came; a NULL one only
 * invalidates. */
static void several_callbacks_without_the_lock(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 2);
    listen(f);
    fx_create(f);
    seen.get_from_callback = true;
    signal(SIGALRM, hung);
    alarm(ALARM_SECONDS);
    regcache_entry_t *e = fx_get(f, A, 4096);
    static int one = 1, two = 2;
    assert_int_equal(regcache_entry_invalidate(f->c, e, completed, &one), REGCACHE_OK);
    assert_int_equal(regcache_entry_invalidate(f->c, e, NULL, NULL), REGCACHE_OK);
    assert_int_equal(regcache_entry_invalidate(f->c, e, completed, &two), REGCACHE_OK);
    assert_int_equal(atomic_load(&seen.leaves), 1);
    regcache_put(f->c, e);
    alarm(0);
    assert_int_equal(atomic_load(&seen.done), 2);
    assert_int_equal(seen.n, 2);
    assert_int_equal(seen.order[0], 1);
    assert_int_equal(seen.order[1], 2);
    /* Each callback's get of B was served (one registration, then hits). */
    fx_assert_stats(f, FX_STAT(invalidations_explicit, 1), NULL);
    assert_int_equal(atomic_load(&f->fb.live), 1);
}

/* An entry that left the cache already (a held entry replaced by an
 * access upgrade) keeps its reason; the callback comes at its last put. */
static void entry_that_left_already(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    listen(f);
    fx_create(f);
    regcache_entry_t *ro;
    assert_int_equal(
        regcache_get_access(f->c, 0, (const void *)A, 4096, IBV_ACCESS_REMOTE_READ, 0, &ro),
        REGCACHE_OK);
    regcache_entry_t *wide;
    assert_int_equal(
        regcache_get_access(f->c, 0, (const void *)A, 4096, IBV_ACCESS_REMOTE_ATOMIC, 0, &wide),
        REGCACHE_OK);
    assert_int_equal(regcache_entry_invalidate(f->c, ro, completed, NULL), REGCACHE_OK);
    /* The wider entry stays cached; the replaced one is noticed once, as
     * replaced, at its last put. */
    fx_assert_stats(f, FX_STAT(entries, 1), FX_STAT(invalidations_explicit, 0), NULL);
    regcache_put(f->c, ro);
    assert_int_equal(atomic_load(&seen.done), 1);
    assert_int_equal(atomic_load(&seen.leaves), 1);
    assert_string_equal(regcache_reason_name(atomic_load(&seen.leave_reason)), "replaced");
    regcache_put(f->c, wide);
    assert_int_equal(atomic_load(&f->fb.live), 1);
}

static int invalidate_in_register_rc;

static int invalidate_in_on_register(void *arg, regcache_entry_t *entry, unsigned rail,
                                     void *handle, void *priv)
{
    struct fx *f = arg;
    (void)rail, (void)handle, (void)priv;
    invalidate_in_register_rc = regcache_entry_invalidate(f->c, entry, completed, NULL);
    return 0;
}

/* From on_register: the get is served the registration once, and the
 * callback comes at its put. */
static void invalidated_while_registered(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    memset(&seen, 0, sizeof(seen));
    seen.f = f;
    f->p.on_register = invalidate_in_on_register;
    f->p.callback_arg = f;
    fx_create(f);
    regcache_entry_t *e = fx_get(f, A, 4096);
    assert_int_equal(invalidate_in_register_rc, REGCACHE_OK);
    fx_assert_stats(f, FX_STAT(entries, 0), FX_STAT(one_shots, 1), NULL);
    assert_int_equal(atomic_load(&seen.done), 0);
    regcache_put(f->c, e);
    assert_int_equal(atomic_load(&seen.done), 1);
    assert_int_equal(atomic_load(&f->fb.live), 0);
}

static int invalidate_in_deregister_rc;

static void invalidate_in_on_deregister(void *arg, regcache_entry_t *entry, unsigned rail,
                                        void *handle, void *priv)
{
    struct fx *f = arg;
    (void)rail, (void)handle, (void)priv;
    invalidate_in_deregister_rc = regcache_entry_invalidate(f->c, entry, completed, NULL);
}

/* on_deregister's token: the entry is on its way out already. */
static void refused_from_on_deregister(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    memset(&seen, 0, sizeof(seen));
    seen.f = f;
    f->p.on_deregister = invalidate_in_on_deregister;
    f->p.callback_arg = f;
    fx_create(f);
    fx_use(f, A, 4096);
    assert_int_equal(regcache_flush(f->c), REGCACHE_OK);
    assert_int_equal(invalidate_in_deregister_rc, REGCACHE_ERR_INVALID);
    assert_int_equal(atomic_load(&seen.done), 0);
}

/* Held at destroy: the callback runs with the deregistration there. */
static void callback_at_destroy(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    listen(f);
    fx_create(f);
    regcache_entry_t *e = fx_get(f, A, 4096);
    assert_int_equal(regcache_entry_invalidate(f->c, e, completed, NULL), REGCACHE_OK);
    regcache_destroy(f->c);
    f->c = NULL;
    assert_int_equal(atomic_load(&seen.done), 1);
    assert_int_equal(atomic_load(&f->fb.live), 0);
}

static void bad_input(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    listen(f);
    fx_create(f);
    struct fx other = { 0 };
    fake_init(&other.fb);
    fake_params(&other.fb, &other.p);
    assert_int_equal(regcache_create(&other.p, &other.c), REGCACHE_OK);
    regcache_entry_t *e = fx_get(f, A, 4096);
    assert_int_equal(regcache_entry_invalidate(NULL, e, completed, NULL), REGCACHE_ERR_INVALID);
    assert_int_equal(regcache_entry_invalidate(f->c, NULL, completed, NULL), REGCACHE_ERR_INVALID);
    assert_int_equal(regcache_entry_invalidate(other.c, e, completed, NULL), REGCACHE_ERR_INVALID);
    fx_assert_error_says("belongs to another cache", NULL);
    regcache_put(f->c, e);
    assert_int_equal(regcache_entry_invalidate(f->c, e, completed, NULL), REGCACHE_ERR_INVALID);
    fx_assert_error_says("already put", NULL);
    regcache_entry_t *c = get_counted_hold(f->c, A, 4096);
    regcache_put(f->c, c);
    assert_int_equal(regcache_entry_invalidate(f->c, c, completed, NULL), REGCACHE_ERR_INVALID);
    /* Nothing changed: still cached, no callback waiting or run. */
    fx_assert_stats(f, FX_STAT(entries, 1), FX_STAT(invalidations_explicit, 0), NULL);
    assert_int_equal(atomic_load(&seen.leaves), 0);
    regcache_destroy(other.c);
    regcache_destroy(f->c);
    f->c = NULL;
    assert_int_equal(atomic_load(&seen.done), 0);
}

/* ---- races ------------------------------------------------------------------ */

#define PUTTERS 4
#define TOKENS 8
#define ROUNDS 200

struct putter {
    struct fx *f;
    regcache_entry_t *tokens[TOKENS];
    struct gate *go;
};

static void put_all(void *arg)
{
    struct putter *p = arg;
    gate_pass(p->go);
    for (int i = 0; i < TOKENS; i++)
        regcache_put(p->f->c, p->tokens[i]);
}

/* Tokens put on other threads while the owner invalidates: whichever put
 * is the last runs the callback, once, after the deregistration. */
static void racing_puts(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    listen(f);
    fx_create(f);
    for (int round = 0; round < ROUNDS; round++) {
        regcache_entry_t *e = fx_get(f, A, 4096);
        struct gate go;
        gate_init(&go);
        struct putter p[PUTTERS];
        struct dthread t[PUTTERS];
        for (int i = 0; i < PUTTERS; i++) {
            p[i] = (struct putter){ .f = f, .go = &go };
            for (int k = 0; k < TOKENS; k++)
                p[i].tokens[k] = hold(f, e);
            dthread_start(&t[i], put_all, &p[i]);
        }
        assert_true(gate_await(&go, PUTTERS, HANG_SECONDS));
        long deregs = atomic_load(&f->fb.deregs);
        gate_open(&go);
        assert_int_equal(regcache_entry_invalidate(f->c, e, completed, NULL), REGCACHE_OK);
        regcache_put(f->c, e);
        for (int i = 0; i < PUTTERS; i++)
            assert_true(dthread_join(&t[i], HANG_SECONDS));
        assert_int_equal(atomic_load(&seen.done), round + 1);
        assert_int_equal(atomic_load(&seen.deregs_then), deregs + 1);
        assert_int_equal(atomic_load(&f->fb.live), 0);
    }
    assert_int_equal(atomic_load(&seen.leaves), ROUNDS);
}

struct unmapper {
    char *map;
    size_t len;
    struct gate *go;
};

static void unmap_it(void *arg)
{
    struct unmapper *u = arg;
    gate_pass(u->go);
    assert_int_equal(munmap(u->map, u->len), 0);
}

/* The host memory monitor invalidating the same entry (its pages
 * unmapped) while the owner invalidates it and others put: one leave,
 * one callback. */
static void racing_the_monitor(void **state)
{
    struct fx *f = *state;
    const size_t len = 64 * KiB;
    listen(f);
    f->p.host_memory = 1;
    fx_create(f);
    for (int round = 0; round < ROUNDS / 4; round++) {
        char *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        assert_true(map != MAP_FAILED);
        regcache_entry_t *e = fx_get(f, (uintptr_t)map, len);
        struct gate go;
        gate_init(&go);
        struct putter p = { .f = f, .go = &go };
        for (int k = 0; k < TOKENS; k++)
            p.tokens[k] = hold(f, e);
        struct unmapper u = { map, len, &go };
        struct dthread tp, tu;
        dthread_start(&tp, put_all, &p);
        dthread_start(&tu, unmap_it, &u);
        assert_true(gate_await(&go, 2, HANG_SECONDS));
        gate_open(&go);
        assert_int_equal(regcache_entry_invalidate(f->c, e, completed, NULL), REGCACHE_OK);
        assert_true(dthread_join(&tu, HANG_SECONDS));
        assert_true(dthread_join(&tp, HANG_SECONDS));
        regcache_put(f->c, e);
        assert_int_equal(atomic_load(&seen.done), round + 1);
        assert_int_equal(atomic_load(&seen.leaves), round + 1);
        assert_int_equal(atomic_load(&f->fb.live), 0);
    }
}

FX_MAIN(callback_once_at_the_last_put, several_callbacks_without_the_lock, entry_that_left_already,
        invalidated_while_registered, refused_from_on_deregister, callback_at_destroy, bad_input,
        racing_puts, racing_the_monitor)
