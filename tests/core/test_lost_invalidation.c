/* An invalidation (regcache_notify_free, regcache_invalidate)
 * that lands while a miss is between its memory query and the moment its
 * entry becomes visible, or while it registers, is never lost: the get is
 * served a one-shot registration (counted in one_shots, never in entries,
 * deregistered by its put) and the next get registers the memory that is
 * there now.  Each interleaving is forced, not hoped for: the fake backend
 * runs the invalidation from inside the miss's query or reg. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "cache.h" /* the counts of misses in flight */
#include "cache_fixture.h"
#include "test_sync.h"

#define X FX_ALLOC(1)
#define X_SIZE MiB

enum moment { AT_QUERY, AT_REG };
enum memory { GPU, PAGEABLE };

struct race_case {
    const char *name;
    enum moment when;
    enum memory mem;
    int validation;
    /* The hook's order: notify_free before the real free, which (with the
     * reallocation) happens only after the get returned.  Else the memory
     * is freed and reallocated right after the notify, inside the miss. */
    bool realloc_later;
};

struct armed {
    struct fx *f;
    atomic_bool armed;
};

/* What a free hook does, once: tell the caches, then (unless the test does
 * it later) free and reallocate the memory at the same address. */
static void free_once(struct armed *a)
{
    const struct race_case *rc = a->f->param;
    if (!atomic_exchange(&a->armed, false))
        return;
    regcache_notify_free((const void *)X, X_SIZE);
    if (!rc->realloc_later)
        fake_realloc(&a->f->fb, X);
}

static void free_in_query(void *arg, const void *addr)
{
    (void)addr;
    free_once(arg);
}

static void free_in_reg(void *arg)
{
    free_once(arg);
}

static void set_memory(struct fx *f, enum memory mem)
{
    if (mem == GPU) {
        fake_alloc(&f->fb, X, X_SIZE, 0, REGCACHE_MEM_DEVICE);
    } else {
        fx_pageable_alloc(f, X, X_SIZE);
        f->p.host_memory = 1;
    }
}

static void invalidation_during_miss(void **state)
{
    struct fx *f = *state;
    const struct race_case *rc = f->param;
    struct armed a = { .f = f, .armed = true };
    set_memory(f, rc->mem);
    f->p.validation = rc->validation;
    if (rc->when == AT_QUERY) {
        f->fb.during_query = free_in_query;
        f->fb.during_query_arg = &a;
    } else {
        f->fb.during_reg = free_in_reg;
        f->fb.during_reg_arg = &a;
    }
    fx_create(f);
    uint64_t queried = fake_id_at(&f->fb, X);

    regcache_entry_t *e = fx_get(f, X + 100, 10);
    assert_false(atomic_load(&a.armed)); /* the invalidation did land */
    fx_assert_stats(f, FX_STAT(one_shots, 1), FX_STAT(entries, 0), FX_STAT(bytes, 0), NULL);
    assert_int_equal(atomic_load(&f->fb.live), 1);
    regcache_put(f->c, e);
    assert_int_equal(atomic_load(&f->fb.live), 0);
    assert_int_equal(atomic_load(&f->fb.deregs), 1);

    if (rc->realloc_later) {
        /* The real free and a new allocation, which no hook reports (a
         * hook's notify after the allocation would find nothing cached). */
        uint64_t now = fake_realloc(&f->fb, X);
        assert_true(now > queried);
    }
    /* The next get registers the memory that is there now, and keeps it. */
    e = fx_get(f, X + 100, 10);
    assert_int_equal(fx_handle(e)->id, fake_id_at(&f->fb, X));
    assert_int_equal(atomic_load(&f->fb.regs), 2);
    regcache_put(f->c, e);
    fx_assert_stats(f, FX_STAT(entries, 1), FX_STAT(one_shots, 1), NULL);
    assert_int_equal(atomic_load(&f->fb.live), 1);
    fx_use(f, X + 100, 10);
    assert_int_equal(atomic_load(&f->fb.regs), 2);
}

/* A second thread waits for the first one's registration of the same range
 * when the invalidation lands: neither may cache what it got. */
struct waiting {
    struct fx *f;
    struct gate reg_gate;
    atomic_int regs_seen;
    regcache_entry_t *got[2];
    int rc[2];
};

static void block_first_reg(void *arg)
{
    struct waiting *w = arg;
    if (atomic_fetch_add(&w->regs_seen, 1) == 0)
        gate_pass(&w->reg_gate);
}

static void get_into(struct waiting *w, int i)
{
    w->rc[i] = regcache_get(w->f->c, (const void *)(X + 100), 10, &w->got[i]);
}

static void first_getter(void *arg)
{
    get_into(arg, 0);
}

static void second_getter(void *arg)
{
    get_into(arg, 1);
}

static bool queried_twice(const void *arg)
{
    const struct waiting *w = arg;
    return atomic_load(&w->f->fb.queries) >= 2;
}

static void invalidation_while_another_get_waits(void **state)
{
    struct fx *f = *state;
    struct waiting w = { .f = f };
    gate_init(&w.reg_gate);
    fake_alloc(&f->fb, X, X_SIZE, 0, REGCACHE_MEM_DEVICE);
    f->p.validation = REGCACHE_VALIDATE_NOTIFY;
    f->fb.during_reg = block_first_reg;
    f->fb.during_reg_arg = &w;
    fx_create(f);

    struct dthread first, second;
    dthread_start(&first, first_getter, &w);
    assert_true(gate_await(&w.reg_gate, 1, HANG_SECONDS));
    dthread_start(&second, second_getter, &w);
    /* The second get has described the memory and sleeps: on the cache's
     * condition variable, waiting for the first one's registration (the
     * only lock it could otherwise sleep on is free). */
    assert_true(wait_until(queried_twice, &w, HANG_SECONDS));
    assert_true(await_sleeping(dthread_tid(&second), HANG_SECONDS));
    assert_int_equal(atomic_load(&w.regs_seen), 1);

    regcache_notify_free((const void *)X, X_SIZE);
    gate_open(&w.reg_gate);
    assert_true(dthread_join(&first, HANG_SECONDS));
    assert_true(dthread_join(&second, HANG_SECONDS));

    assert_int_equal(w.rc[0], REGCACHE_OK);
    assert_int_equal(w.rc[1], REGCACHE_OK);
    assert_ptr_not_equal(fx_handle(w.got[0]), fx_handle(w.got[1]));
    fx_assert_stats(f, FX_STAT(one_shots, 2), FX_STAT(entries, 0), NULL);
    assert_int_equal(atomic_load(&f->fb.regs), 2);
    regcache_put(f->c, w.got[0]);
    regcache_put(f->c, w.got[1]);
    assert_int_equal(atomic_load(&f->fb.live), 0);

    fx_use(f, X + 100, 10);
    assert_int_equal(fx_stats(f).entries, 1);
    assert_int_equal(atomic_load(&f->fb.regs), 3);
}

/* The misses a cache counts in flight (invalidate.c) must all end: one
 * that never did would send every later notify_free of memory the cache
 * never saw down the locked path.  Each way out of a get that goes past the
 * index - registered, served from the tree, one-shot, its query failed,
 * its registration failed, another rail registered or refused - takes one
 * miss in and out. */
static void step_leaves(struct fx *f, unsigned *begun)
{
    unsigned now = atomic_load(&f->c->misses_begun);
    assert_true(now > *begun);
    assert_int_equal(atomic_load(&f->c->misses_ended), now);
    *begun = now;
}

static void every_miss_leaves(void **state)
{
    struct fx *f = *state;
    struct armed a = { .f = f };
    unsigned begun = 0;
    fake_alloc(&f->fb, X, X_SIZE, 0, REGCACHE_MEM_DEVICE);
    f->p.validation = REGCACHE_VALIDATE_NOTIFY;
    f->p.rails = 2;
    f->p.whole_allocation = 1;
    fx_create(f);

    fx_use(f, X, 10); /* registered */
    step_leaves(f, &begun);
    fx_use(f, X + 64 * KiB, 10); /* in the tree, not yet indexed under this page */
    step_leaves(f, &begun);
    assert_int_equal(atomic_load(&f->fb.regs), 1);
    fx_use(f, X + 64 * KiB, 10); /* indexed there now: a hit, no miss */
    assert_int_equal(atomic_load(&f->c->misses_begun), begun);

    regcache_put(f->c, fx_get_rail(f, 1, X, 10)); /* rail 1 registered */
    step_leaves(f, &begun);
    f->fb.fail_count = 1;
    f->fb.fail_errno = EINVAL;
    f->fb.fail_rail = -1;
    assert_int_equal(regcache_invalidate(f->c, (const void *)X, 1), REGCACHE_OK);
    fx_get_fails(f, X, 10, REGCACHE_ERR_BACKEND); /* registration failed */
    step_leaves(f, &begun);
    f->fb.query_status = REGCACHE_ERR_NOT_GPU;
    fx_get_fails(f, X, 10, REGCACHE_ERR_NOT_GPU); /* query failed */
    step_leaves(f, &begun);
    f->fb.query_status = 0;

    static const struct race_case freed_at_query = { .when = AT_QUERY };
    f->param = &freed_at_query;
    f->fb.during_query = free_in_query;
    f->fb.during_query_arg = &a;
    atomic_store(&a.armed, true);
    regcache_entry_t *once = fx_get(f, X, 10); /* one-shot */
    step_leaves(f, &begun);
    assert_int_equal(fx_stats(f).one_shots, 1);
    regcache_put(f->c, once);
}

/* (a) right after the query, (b) during the registration, (c) the notify
 * before the real free with the reallocation later, (e) pageable host
 * memory under TAG_CHECK, (f) GPU memory under NOTIFY: every combination of
 * moment, memory, mode and reallocation time; and a free during the
 * registration in the default mode (AUTO). */
#define CASE(w, m, v, later)                                                        \
    {                                                                               \
        .name = #w ", " #m ", " #v ", realloc later: " #later, .when = w, .mem = m, \
        .validation = REGCACHE_VALIDATE_##v, .realloc_later = later                 \
    }
#define CASES(w, m)                                                                    \
    CASE(w, m, NOTIFY, false), CASE(w, m, NOTIFY, true), CASE(w, m, TAG_CHECK, false), \
        CASE(w, m, TAG_CHECK, true)
static const struct race_case cases[] = {
    CASES(AT_QUERY, GPU),           CASES(AT_REG, GPU),
    CASES(AT_QUERY, PAGEABLE),      CASES(AT_REG, PAGEABLE),
    CASE(AT_REG, GPU, AUTO, false),
};
#undef CASES
#undef CASE

FX_MAIN_CASES(invalidation_during_miss, cases, invalidation_while_another_get_waits,
              every_miss_leaves)
