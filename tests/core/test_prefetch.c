/* Background registration: regcache_prefetch(), the non-blocking get,
 * eager registration of new allocations, and what the worker threads leave
 * behind - for the gets that follow, at destroy, and across fork().  A
 * registration is held in flight by a gate in the fake backend's reg. */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <infiniband/verbs.h>

#include "cache.h"
#include "cache_fixture.h"
#include "prefetch.h"
#include "test_sync.h"

#define A FX_ALLOC(0)
#define B FX_ALLOC(1)
#define C FX_ALLOC(2)

static struct gate reg_gate;

/* Every reg waits at the gate until the test opens it. */
static void hold_reg(void *arg)
{
    (void)arg;
    gate_pass(&reg_gate);
}

static void hold_regs(struct fx *f)
{
    gate_init(&reg_gate);
    f->fb.during_reg = hold_reg;
}

static void await_idle(struct fx *f)
{
    assert_int_equal(regcache_prefetch_wait(f->c), REGCACHE_OK);
}

static bool one_waiter(const void *arg)
{
    struct regcache *c = (struct regcache *)arg;
    rc_lock(&c->lock);
    bool waiting = c->registration_waiters == 1;
    rc_unlock(&c->lock);
    return waiting;
}

/* A prefetched range is a hit for the get that follows, and that get is
 * what makes it used. */
static void prefetch_then_hit(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    fx_create(f);
    assert_int_equal(regcache_prefetch(f->c, 0, (void *)A, 4096), REGCACHE_OK);
    await_idle(f);
    fx_assert_stats(f, FX_STAT(entries, 1), FX_STAT(registrations, 1), FX_STAT(prefetches, 1),
                    FX_STAT(misses, 0), NULL);
    regcache_entry_t *e = fx_get(f, A + 100, 100);
    regcache_put(f->c, e);
    fx_assert_stats(f, FX_STAT(hits, 1), FX_STAT(misses, 0), FX_STAT(registrations, 1), NULL);
    assert_int_equal(f->fb.regs, 1);
}

struct getter {
    struct fx *f;
    int rc;
    regcache_entry_t *e;
};

static void get_a(void *arg)
{
    struct getter *g = arg;
    g->rc = regcache_get(g->f->c, (void *)A, 4096, &g->e);
}

/* A get of a range whose background registration is in flight waits for
 * it, and the range is registered once. */
static void get_waits_for_prefetch(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    hold_regs(f);
    fx_create(f);
    assert_int_equal(regcache_prefetch(f->c, 0, (void *)A, 4096), REGCACHE_OK);
    assert_true(gate_await(&reg_gate, 1, HANG_SECONDS));
    struct getter g = { .f = f };
    struct dthread t;
    dthread_start(&t, get_a, &g);
    assert_true(wait_until(one_waiter, f->c, HANG_SECONDS));
    gate_open(&reg_gate);
    assert_true(dthread_join(&t, HANG_SECONDS));
    assert_int_equal(g.rc, REGCACHE_OK);
    regcache_put(f->c, g.e);
    await_idle(f);
    assert_int_equal(f->fb.regs, 1);
    fx_assert_stats(f, FX_STAT(entries, 1), FX_STAT(registrations, 1), FX_STAT(misses, 0), NULL);
}

/* The memory is freed and reallocated while the worker registers it: that
 * registration never enters the cache, and the next get registers the new
 * memory. */
static void free_during_prefetch(void *arg)
{
    struct fx *f = arg;
    f->fb.during_reg = NULL;
    fake_realloc(&f->fb, A);
    regcache_notify_alloc((const void *)A, MiB);
}

static void prefetch_racing_free(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    f->p.validation = REGCACHE_VALIDATE_NOTIFY;
    f->fb.during_reg = free_during_prefetch;
    f->fb.during_reg_arg = f;
    fx_create(f);
    assert_int_equal(regcache_prefetch(f->c, 0, (void *)A, 4096), REGCACHE_OK);
    await_idle(f);
    fx_assert_stats(f, FX_STAT(entries, 0), FX_STAT(registrations, 1), FX_STAT(mrs, 0), NULL);
    assert_int_equal(f->fb.deregs, 1);
    regcache_entry_t *e = fx_get(f, A, 4096);
    assert_int_equal(fx_handle(e)->id, fake_id_at(&f->fb, A));
    regcache_put(f->c, e);
    assert_int_equal(f->fb.regs, 2);
}

/* An explicit invalidation while the worker registers does the same. */
static void invalidate_during_prefetch(void *arg)
{
    struct fx *f = arg;
    f->fb.during_reg = NULL;
    assert_int_equal(regcache_invalidate(f->c, (const void *)A, 4096), REGCACHE_OK);
}

static void prefetch_racing_invalidate(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    f->fb.during_reg = invalidate_during_prefetch;
    f->fb.during_reg_arg = f;
    fx_create(f);
    assert_int_equal(regcache_prefetch(f->c, 0, (void *)A, 4096), REGCACHE_OK);
    await_idle(f);
    fx_assert_stats(f, FX_STAT(entries, 0), FX_STAT(mrs, 0), NULL);
    assert_int_equal(f->fb.deregs, 1);
}

/* Ranges queued or in flight are bounded: the one beyond is refused with
 * its own status, a range already queued is not queued again. */
static void queue_full(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 3);
    f->p.prefetch_queue = 2;
    f->p.workers = 1;
    hold_regs(f);
    fx_create(f);
    assert_int_equal(regcache_prefetch(f->c, 0, (void *)A, 4096), REGCACHE_OK);
    assert_true(gate_await(&reg_gate, 1, HANG_SECONDS));
    assert_int_equal(regcache_prefetch(f->c, 0, (void *)B, 4096), REGCACHE_OK);
    assert_int_equal(regcache_prefetch(f->c, 0, (void *)B, 4096), REGCACHE_OK);
    assert_int_equal(regcache_prefetch(f->c, 0, (void *)C, 4096), REGCACHE_ERR_QUEUE_FULL);
    fx_assert_error_says("queue", NULL);
    struct regcache_range batch[] = { { (void *)B, 4096, 0 }, { (void *)C, 4096, 0 } };
    size_t queued = 99;
    assert_int_equal(regcache_prefetch_batch(f->c, batch, 2, &queued), REGCACHE_ERR_QUEUE_FULL);
    assert_int_equal(queued, 1);
    gate_open(&reg_gate);
    await_idle(f);
    assert_int_equal(regcache_prefetch_batch(f->c, batch, 2, &queued), REGCACHE_OK);
    assert_int_equal(queued, 2);
    await_idle(f);
    /* B again too: cached by then, which only its worker finds out. */
    fx_assert_stats(f, FX_STAT(entries, 3), FX_STAT(prefetches, 4), FX_STAT(registrations, 3),
                    NULL);
}

/* A failed background registration is counted, and the next get of the
 * range learns of it - once. */
static void failure_reported_to_next_get(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    f->fb.fail_errno = EIO;
    f->fb.fail_count = 1;
    f->fb.fail_rail = -1;
    fx_create(f);
    assert_int_equal(regcache_prefetch(f->c, 0, (void *)A, 4096), REGCACHE_OK);
    await_idle(f);
    fx_assert_stats(f, FX_STAT(prefetch_failures, 1), FX_STAT(entries, 0), NULL);
    fx_get_fails(f, A + 100, 100, REGCACHE_ERR_BACKEND);
    fx_assert_error_says("background registration", "reg returned 5", NULL);
    regcache_entry_t *e = fx_get(f, A + 100, 100);
    regcache_put(f->c, e);
}

/* An invalidation of the range forgets the failure: what is there next is
 * other memory. */
static void failure_forgotten_by_invalidation(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    f->fb.fail_errno = EIO;
    f->fb.fail_count = 1;
    f->fb.fail_rail = -1;
    fx_create(f);
    regcache_entry_t *e;
    assert_int_equal(
        regcache_get_access(f->c, 0, (void *)A, 4096, f->p.access, REGCACHE_GET_NONBLOCK, &e),
        REGCACHE_ERR_AGAIN);
    await_idle(f);
    assert_int_equal(
        regcache_get_access(f->c, 0, (void *)A, 4096, f->p.access, REGCACHE_GET_NONBLOCK, &e),
        REGCACHE_ERR_BACKEND);
    assert_null(e);
    f->fb.fail_count = 1;
    assert_int_equal(regcache_prefetch(f->c, 0, (void *)A, 4096), REGCACHE_OK);
    await_idle(f);
    regcache_notify_free((const void *)A, MiB);
    e = fx_get(f, A, 4096);
    regcache_put(f->c, e);
    fx_assert_stats(f, FX_STAT(prefetch_failures, 2), NULL);
}

/* A failure is kept only while the memory it was about is there: pages
 * unmapped before the worker reached them (it fails, EFAULT), then mapped
 * again, register at the next get; while they stay as they were, the next
 * get learns of the failure. */
static void failure_of_pages_mapped_since_is_dropped(void **state)
{
    struct fx *f = *state;
    f->p.host_memory = 1;
    f->p.alignment = 4096;
    f->fb.fail_errno = EFAULT;
    f->fb.fail_rail = -1;
    fx_create(f);
    size_t len = 16 * 4096;
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);

    f->fb.fail_count = 1;
    assert_int_equal(regcache_prefetch(f->c, 0, p, len), REGCACHE_OK);
    await_idle(f);
    fx_get_fails(f, (uintptr_t)p, len, REGCACHE_ERR_BAD_ADDRESS);
    fx_assert_error_says("background registration", NULL);

    f->fb.fail_count = 1;
    assert_int_equal(munmap(p, len), 0);
    assert_int_equal(regcache_prefetch(f->c, 0, p, len), REGCACHE_OK);
    await_idle(f);
    assert_true(mmap(p, len, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) == p);
    regcache_entry_t *e = fx_get(f, (uintptr_t)p, len);
    regcache_put(f->c, e);
    fx_assert_stats(f, FX_STAT(prefetch_failures, 2), NULL);
    regcache_destroy(f->c);
    f->c = NULL;
    munmap(p, len);
}

/* The same for GPU memory freed and allocated again at the same address
 * with no notice (TAG_CHECK): its buffer id tells. */
static void failure_of_reallocated_memory_is_dropped(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    f->fb.fail_errno = EIO;
    f->fb.fail_count = 1;
    f->fb.fail_rail = -1;
    fx_create(f);
    assert_int_equal(regcache_prefetch(f->c, 0, (void *)A, 4096), REGCACHE_OK);
    await_idle(f);
    fake_realloc(&f->fb, A);
    regcache_entry_t *e = fx_get(f, A, 4096);
    assert_int_equal(fx_handle(e)->id, fake_id_at(&f->fb, A));
    regcache_put(f->c, e);
    fx_assert_stats(f, FX_STAT(prefetch_failures, 1), NULL);
}

/* A non-blocking get that misses returns at once and starts the
 * registration; once it ended the same get is a hit.  A rail the entry
 * lacks is no hit either. */
static void nonblocking_get(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    f->p.rails = 2;
    hold_regs(f);
    fx_create(f);
    regcache_entry_t *e = (regcache_entry_t *)1;
    assert_int_equal(
        regcache_get_access(f->c, 0, (void *)A, 4096, f->p.access, REGCACHE_GET_NONBLOCK, &e),
        REGCACHE_ERR_AGAIN);
    assert_null(e);
    assert_true(gate_await(&reg_gate, 1, HANG_SECONDS));
    /* In flight: still no waiting. */
    assert_int_equal(
        regcache_get_access(f->c, 0, (void *)A, 4096, f->p.access, REGCACHE_GET_NONBLOCK, &e),
        REGCACHE_ERR_AGAIN);
    gate_open(&reg_gate);
    await_idle(f);
    assert_int_equal(
        regcache_get_access(f->c, 0, (void *)A, 4096, f->p.access, REGCACHE_GET_NONBLOCK, &e),
        REGCACHE_OK);
    regcache_put(f->c, e);
    assert_int_equal(
        regcache_get_access(f->c, 1, (void *)A, 4096, f->p.access, REGCACHE_GET_NONBLOCK, &e),
        REGCACHE_ERR_AGAIN);
    await_idle(f);
    assert_int_equal(
        regcache_get_access(f->c, 1, (void *)A, 4096, f->p.access, REGCACHE_GET_NONBLOCK, &e),
        REGCACHE_OK);
    regcache_put(f->c, e);
    assert_int_equal(f->fb.regs, 2);
    fx_assert_stats(f, FX_STAT(hits, 2), FX_STAT(misses, 0), NULL);
    assert_int_equal(regcache_get_access(f->c, 0, (void *)A, 4096, f->p.access, 4, &e),
                     REGCACHE_ERR_INVALID);
    /* More access than the entry has: queued with that access, then a hit
     * on the wider registration. */
    int atomic = f->p.access | IBV_ACCESS_REMOTE_ATOMIC;
    assert_int_equal(
        regcache_get_access(f->c, 0, (void *)A, 4096, atomic, REGCACHE_GET_NONBLOCK, &e),
        REGCACHE_ERR_AGAIN);
    await_idle(f);
    assert_int_equal(
        regcache_get_access(f->c, 0, (void *)A, 4096, atomic, REGCACHE_GET_NONBLOCK, &e),
        REGCACHE_OK);
    assert_true(regcache_entry_access(e) & IBV_ACCESS_REMOTE_ATOMIC);
    regcache_put(f->c, e);
}

/* With eager registration on, an allocation the hooks report is
 * registered on each chosen rail before its first get, which hits; small
 * allocations are not. */
static void eager_from_notify_alloc(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 2);
    f->p.rails = 2;
    f->p.eager_min_bytes = 512 * KiB;
    f->p.eager_rails = 3;
    fx_create(f);
    regcache_notify_alloc((const void *)A, MiB);
    regcache_notify_alloc((const void *)B, 256 * KiB);
    await_idle(f);
    fx_assert_stats(f, FX_STAT(prefetches, 2), FX_STAT(entries, 1), FX_STAT(registrations, 2),
                    NULL);
    regcache_entry_t *e = fx_get(f, A, MiB);
    regcache_put(f->c, e);
    e = fx_get_rail(f, 1, A + 4096, 4096);
    regcache_put(f->c, e);
    fx_assert_stats(f, FX_STAT(hits, 2), FX_STAT(misses, 0), NULL);
}

/* Memory mapped one chunk at a time (VMM, as PyTorch's expandable
 * segments grow): a tensor across the boundary of two chunks is served by
 * the eager registration of the second, which takes in the first. */
static void eager_across_mappings(void **state)
{
    struct fx *f = *state;
    struct fake_alloc chunk = { .base = A,
                                .size = MiB,
                                .device = 0,
                                .type = REGCACHE_MEM_DEVICE,
                                .flags = REGCACHE_MEM_MAPPING };
    fake_alloc_as(&f->fb, &chunk);
    f->p.eager_min_bytes = MiB;
    fx_create(f);
    regcache_notify_alloc((const void *)A, MiB);
    await_idle(f);
    chunk.base = A + MiB;
    fake_alloc_as(&f->fb, &chunk);
    regcache_notify_alloc((const void *)(A + MiB), MiB);
    await_idle(f);
    regcache_entry_t *e = fx_get(f, A + MiB - 4096, 8192);
    regcache_put(f->c, e);
    e = fx_get(f, A + 4096, 4096);
    regcache_put(f->c, e);
    fx_assert_stats(f, FX_STAT(hits, 2), FX_STAT(misses, 0), FX_STAT(prefetch_failures, 0), NULL);
}

/* Pinned host memory reported as such is registered as host memory, the
 * allocation alone: not from the byte before it, which is pageable memory
 * here (unknown to the backend) that a registration starting there would
 * pin too. */
static void eager_pinned_host(void **state)
{
    struct fx *f = *state;
    fake_alloc(&f->fb, A, MiB, REGCACHE_DEVICE_HOST, REGCACHE_MEM_HOST);
    f->p.host_memory = 1;
    f->p.eager_min_bytes = MiB;
    fx_create(f);
    regcache_notify_host_alloc((const void *)A, MiB);
    await_idle(f);
    fx_assert_stats(f, FX_STAT(prefetches, 1), FX_STAT(registrations, 1),
                    FX_STAT(prefetch_failures, 0), NULL);
    regcache_entry_t *e = fx_get(f, A, MiB);
    assert_int_equal(fx_handle(e)->device, REGCACHE_DEVICE_HOST);
    assert_int_equal(fx_handle(e)->start, A);
    assert_int_equal(fx_handle(e)->len, MiB);
    regcache_put(f->c, e);
    fx_assert_stats(f, FX_STAT(hits, 1), FX_STAT(misses, 0), NULL);
}

/* A cache that refuses host memory queues no pinned host allocation and
 * starts no worker for one. */
static void eager_pinned_host_refused(void **state)
{
    struct fx *f = *state;
    fake_alloc(&f->fb, A, MiB, REGCACHE_DEVICE_HOST, REGCACHE_MEM_HOST);
    f->p.eager_min_bytes = MiB;
    fx_create(f);
    regcache_notify_host_alloc((const void *)A, MiB);
    await_idle(f);
    fx_assert_stats(f, FX_STAT(prefetches, 0), FX_STAT(prefetch_failures, 0), NULL);
    assert_int_equal(rc_prefetch_of(f->c)->started, 0);
    assert_int_equal(f->fb.queries, 0);
}

/* Off by default: the same notice registers nothing. */
static void eager_off_by_default(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    fx_create(f);
    regcache_notify_alloc((const void *)A, MiB);
    fx_assert_stats(f, FX_STAT(prefetches, 0), FX_STAT(entries, 0), NULL);
    assert_int_equal(f->fb.regs, 0);
}

/* With the budget full, a get's miss evicts the speculative entry before
 * the least recently used one that was got. */
static void speculative_evicted_first(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 3);
    f->p.max_entries = 2;
    fx_create(f);
    fx_use(f, A, 4096);
    assert_int_equal(regcache_prefetch(f->c, 0, (void *)B, 4096), REGCACHE_OK);
    await_idle(f);
    fx_use(f, C, 4096); /* evicts one */
    fx_assert_stats(f, FX_STAT(entries, 2), FX_STAT(evictions, 1), NULL);
    regcache_entry_t *e = fx_get(f, A, 4096);
    regcache_put(f->c, e);
    fx_assert_stats(f, FX_STAT(hits, 1), FX_STAT(registrations, 3), NULL);
}

/* A speculative registration evicts no entry that a get used, held or
 * not: without room it is dropped. */
static void speculative_never_evicts_used(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 3);
    f->p.max_entries = 2;
    fx_create(f);
    fx_use(f, A, 4096);
    regcache_entry_t *held = fx_get(f, B, 4096);
    assert_int_equal(regcache_prefetch(f->c, 0, (void *)C, 4096), REGCACHE_OK);
    await_idle(f);
    fx_assert_stats(f, FX_STAT(entries, 2), FX_STAT(evictions, 0), FX_STAT(prefetch_dropped, 1),
                    FX_STAT(registrations, 2), NULL);
    regcache_put(f->c, held);
    regcache_entry_t *e = fx_get(f, A, 4096);
    regcache_put(f->c, e);
    fx_assert_stats(f, FX_STAT(hits, 1), NULL);
}

/* Destroy with one registration in flight and more queued: the queued
 * ones are dropped, the one in flight ends, nothing stays registered
 * (the fixture's teardown checks the backend). */
static void open_when_stopping(void *arg)
{
    struct regcache *c = arg;
    for (;;) {
        struct rc_prefetch *p = rc_prefetch_of(c);
        rc_lock(&p->lock);
        bool stopping = p->stopping;
        rc_unlock(&p->lock);
        if (stopping)
            break;
        sched_yield();
    }
    gate_open(&reg_gate);
}

static void destroy_with_prefetches_in_flight(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 8);
    f->p.workers = 1;
    hold_regs(f);
    fx_create(f);
    for (int i = 0; i < 8; i++)
        assert_int_equal(regcache_prefetch(f->c, 0, (void *)FX_ALLOC(i), 4096), REGCACHE_OK);
    assert_true(gate_await(&reg_gate, 1, HANG_SECONDS));
    struct dthread opener;
    dthread_start(&opener, open_when_stopping, f->c);
    regcache_destroy(f->c);
    f->c = NULL;
    assert_true(dthread_join(&opener, HANG_SECONDS));
    assert_int_equal(f->fb.regs, 1);
    assert_int_equal(f->fb.live, 0);
}

/* Destroy while a worker finishes its registration: the worker's last
 * steps (its statistics record's tick among them) and destroy's do not
 * race (ThreadSanitizer reports it where destroy gave the record back
 * before it stopped the workers). */
static void destroy_as_a_registration_ends(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    f->p.workers = 1;
    hold_regs(f);
    fx_create(f);
    assert_int_equal(regcache_prefetch(f->c, 0, (void *)A, 4096), REGCACHE_OK);
    assert_true(gate_await(&reg_gate, 1, HANG_SECONDS));
    gate_open(&reg_gate);
    regcache_destroy(f->c);
    f->c = NULL;
    assert_int_equal(f->fb.regs, 1);
    assert_int_equal(f->fb.live, 0);
}

/* The workers are threads named regcache-reg. */
static void workers_named(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    f->p.workers = 3;
    fx_create(f);
    assert_int_equal(regcache_prefetch(f->c, 0, (void *)A, 4096), REGCACHE_OK);
    await_idle(f);
    int named = 0;
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    for (struct dirent *t; (t = readdir(d));) {
        char path[300], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", t->d_name);
        FILE *fp = fopen(path, "r");
        if (!fp)
            continue;
        if (fgets(comm, sizeof comm, fp))
            named += strcmp(comm, "regcache-reg\n") == 0;
        fclose(fp);
    }
    closedir(d);
    assert_int_equal(named, 3);
}

/* TSan's runtime cannot start threads in the child of a threaded process
 * (its thread registry keeps the parent's): there the child makes no cache
 * of its own. */
#if defined(__SANITIZE_THREAD__)
#define CHILD_THREADS 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CHILD_THREADS 0
#endif
#endif
#ifndef CHILD_THREADS
#define CHILD_THREADS 1
#endif

/* fork() with registrations in flight and queued: the child has no
 * workers, refuses to prefetch with the inherited cache, never registers
 * the parent's queue, and a cache of its own gets workers of its own. */
static int child_after_fork(struct fx *f)
{
    long regs = f->fb.regs;
    if (regcache_prefetch(f->c, 0, (void *)B, 4096) != REGCACHE_ERR_FORKED)
        return 1;
    regcache_destroy(f->c);
    usleep(10000); /* a parent's job, were it run here, would register */
    if (!CHILD_THREADS)
        return f->fb.regs == regs ? 0 : 4;
    struct fake_backend fb;
    fake_init(&fb);
    fake_alloc(&fb, C, MiB, 0, REGCACHE_MEM_DEVICE);
    struct regcache_params p;
    fake_params(&fb, &p);
    regcache_t *c;
    if (regcache_create(&p, &c) != REGCACHE_OK ||
        regcache_prefetch(c, 0, (void *)C, 4096) != REGCACHE_OK)
        return 2;
    if (regcache_prefetch_wait(c) != REGCACHE_OK)
        return 2;
    regcache_destroy(c);
    if (fb.regs != 1 || fb.live != 0)
        return 3;
    return f->fb.regs == regs ? 0 : 4;
}

static void fork_with_prefetches_in_flight(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 8);
    f->p.workers = 1;
    hold_regs(f);
    fx_create(f);
    for (int i = 0; i < 8; i++)
        assert_int_equal(regcache_prefetch(f->c, 0, (void *)FX_ALLOC(i), 4096), REGCACHE_OK);
    assert_true(gate_await(&reg_gate, 1, HANG_SECONDS));
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(child_after_fork(f));
    int status;
    bool ended = child_wait(pid, 4 * HANG_SECONDS, &status);
    gate_open(&reg_gate);
    assert_true(ended);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    await_idle(f);
    assert_int_equal(f->fb.regs, 8);
}

FX_MAIN(prefetch_then_hit, get_waits_for_prefetch, prefetch_racing_free, prefetch_racing_invalidate,
        queue_full, failure_reported_to_next_get, failure_forgotten_by_invalidation,
        failure_of_pages_mapped_since_is_dropped, failure_of_reallocated_memory_is_dropped,
        nonblocking_get, eager_from_notify_alloc, eager_across_mappings, eager_pinned_host,
        eager_pinned_host_refused, eager_off_by_default, speculative_evicted_first,
        speculative_never_evicts_used, destroy_with_prefetches_in_flight,
        destroy_as_a_registration_ends, workers_named, fork_with_prefetches_in_flight)
