/* fork() while the parent's threads sit in every lock the
 * cache has - one inside reg (its registration pending), others waiting on
 * the cache's condition variable for it, threads getting and putting under
 * an entry limit (so puts trim under the cache lock), one walking the
 * registry in notify_free, one invalidating and flushing - 200 times.  Each
 * child uses the inherited cache as the README allows (get, invalidate and
 * flush answer FORKED; put of the parent's holds, one in a slot and one
 * counted, notify_free, statistics and destroy are harmless), deregisters nothing of
 * the parent's, then creates a cache of its own and uses it normally.  No
 * child may hang: each is given HANG_SECONDS, then killed.
 *
 * A child that inherits the cache lock held in the middle of a change (a
 * rotation of the tree, a heap growing) meets it only at some forks:
 * REGCACHE_FORKS sets how many (default 200).  Before that, the same
 * claims for a child of a quiet parent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache.h" /* the cache's lock, to report how often a child inherited it held */
#include "cache_fixture.h"
#include "test_sync.h"

#define FORKS_DEFAULT 200
#define HELD 0    /* held by the forking thread across every fork */
#define PENDING 1 /* its registration blocks until the end */
#define CHURN 2   /* FX_ALLOC(CHURN .. CHURN + NCHURN - 1): the others' */
#define NCHURN 128
#define PAGES 16 /* 64 KiB pages of each 1 MiB allocation */
#define WAITERS 2
#define GETTERS 2

/* What a child found wrong: one bit each, its exit status. */
enum child_fault {
    GET_NOT_FORKED = 1 << 0,
    INVALIDATE_NOT_FORKED = 1 << 1,
    FLUSH_NOT_FORKED = 1 << 2,
    STATS_FAILED = 1 << 3,
    PARENT_DEREGISTERED = 1 << 4,
    OWN_CACHE_FAILED = 1 << 5,
    OWN_CACHE_LEAKED = 1 << 6,
};

/* A sanitizer whose runtime does not lock its own allocator around fork()
 * can hang a fork child that allocates, when another thread of the parent
 * held one of the runtime's allocator locks at the fork: the child waits
 * for it forever.  The library's child allocates by design (regcache_destroy
 * frees the inherited cache, and the README lets a child create a cache of
 * its own), and glibc's malloc is safe there, but these runtimes are not:
 *   - TSan (gcc 12): its allocator lock;
 *   - ASan (gcc 12's libasan, and clang's before LLVM 18, which added the
 *     runtime's pthread_atfork handler, llvm-project PR 75290): the size
 *     class region locks of its primary allocator.  Seen under load (2 of
 *     30 runs with 4 busy loops on 2 cores): the child asleep in
 *     SizeClassAllocator64::GetFromAllocator, under the posix_memalign of
 *     regcache_create, with no parent thread left to release the lock.
 * Under these sanitizers the busy threads therefore stand still, outside the
 * cache, during each fork; the threads blocked in reg and on the condition
 * variable stay where they are (a waiter woken by a registration takes the
 * cache lock again, without allocating, so some children still inherit it
 * held).  The plain and clang builds fork amid everything, and keep proving
 * that a child which inherits the cache lock held mid-change does not hang. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define QUIESCE_AT_FORK 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define QUIESCE_AT_FORK 1
#endif
#endif
#ifndef QUIESCE_AT_FORK
#define QUIESCE_AT_FORK 0
#endif

struct world {
    struct fx *f;
    pthread_rwlock_t quiesce; /* busy threads shared, a fork exclusive */
    struct gate pending_gate;
    atomic_bool block_next_reg;
    atomic_bool stop;
    pid_t parent;
    atomic_long *deregs_in_children;  /* shared with every child */
    atomic_long *lock_held_at_fork;   /* ditto: children that found it so */
    regcache_entry_t *slot, *counted; /* the forking thread's holds */
};

static void block_armed_reg(void *arg)
{
    struct world *w = arg;
    if (atomic_exchange(&w->block_next_reg, false))
        gate_pass(&w->pending_gate);
}

/* The child must never deregister the parent's registrations: its verbs
 * context is the parent's. */
static void count_child_deregs(void *arg, const struct fake_handle *h)
{
    struct world *w = arg;
    (void)h;
    if (getpid() != w->parent)
        atomic_fetch_add(w->deregs_in_children, 1);
}

static void get_pending(void *arg)
{
    struct world *w = arg;
    regcache_entry_t *e;
    if (regcache_get(w->f->c, (const void *)FX_ALLOC(PENDING), 10, &e) == REGCACHE_OK)
        regcache_put(w->f->c, e);
}

/* One step of a thread that keeps the cache busy.  The getters sweep more
 * pages than the cache keeps, so that every get misses and evicts: the
 * tree changes at every step. */
static void churn(struct world *w, uint32_t *next)
{
    uint32_t page = (*next)++ % (NCHURN * PAGES);
    uintptr_t a = FX_ALLOC(CHURN + (int)(page / PAGES)) + page % PAGES * 64 * KiB;
    regcache_entry_t *e;
    if (regcache_get(w->f->c, (const void *)a, 10, &e) == REGCACHE_OK)
        regcache_put(w->f->c, e);
}

static void notify(struct world *w, uint32_t *seed)
{
    (void)w;
    regcache_notify_free((const void *)FX_ALLOC(CHURN + (int)(test_rand(seed) % NCHURN)), MiB);
}

static void invalidate_or_flush(struct world *w, uint32_t *seed)
{
    uint32_t r = test_rand(seed);
    if (r % 2)
        regcache_flush(w->f->c);
    else
        regcache_invalidate(w->f->c, (const void *)FX_ALLOC(CHURN + (int)(r / 2 % NCHURN)), MiB);
}

struct busy {
    struct world *w;
    void (*step)(struct world *w, uint32_t *seed);
    uint32_t seed;
};

static void keep_busy(void *arg)
{
    struct busy *b = arg;
    while (!atomic_load(&b->w->stop)) {
        if (QUIESCE_AT_FORK)
            pthread_rwlock_rdlock(&b->w->quiesce);
        b->step(b->w, &b->seed);
        if (QUIESCE_AT_FORK)
            pthread_rwlock_unlock(&b->w->quiesce);
    }
}

static int use_inherited_cache(struct world *w)
{
    regcache_t *c = w->f->c;
    int fault = 0;
    regcache_entry_t *e = (regcache_entry_t *)(uintptr_t)1;
    if (regcache_get(c, (const void *)FX_ALLOC(HELD), 10, &e) != REGCACHE_ERR_FORKED || e)
        fault |= GET_NOT_FORKED;
    regcache_put(c, w->slot);
    regcache_put(c, w->counted);
    if (regcache_invalidate(c, (const void *)FX_ALLOC(CHURN), MiB) != REGCACHE_ERR_FORKED)
        fault |= INVALIDATE_NOT_FORKED;
    if (regcache_flush(c) != REGCACHE_ERR_FORKED || regcache_reset_stats(c) != REGCACHE_ERR_FORKED)
        fault |= FLUSH_NOT_FORKED;
    regcache_notify_free((const void *)FX_ALLOC(HELD), 4 * MiB);
    struct regcache_stats s;
    if (regcache_get_stats(c, &s) != REGCACHE_OK)
        fault |= STATS_FAILED;
    regcache_destroy(c);
    return fault;
}

/* A cache of the child's own, over a backend of its own (the parent's may
 * have been locked by one of its threads at the fork). */
static int use_own_cache(void)
{
    static struct fake_backend fb;
    struct regcache_params p;
    regcache_t *c;
    regcache_entry_t *e;
    fake_init(&fb);
    fake_alloc(&fb, FX_ALLOC(HELD), MiB, 0, REGCACHE_MEM_DEVICE);
    fake_params(&fb, &p);
    p.validation = REGCACHE_VALIDATE_NOTIFY;
    if (regcache_create(&p, &c) != REGCACHE_OK)
        return OWN_CACHE_FAILED;
    int fault = 0;
    for (int i = 0; i < 2; i++) {
        if (regcache_get(c, (const void *)FX_ALLOC(HELD), 10, &e) != REGCACHE_OK) {
            fault |= OWN_CACHE_FAILED;
            break;
        }
        regcache_put(c, e);
    }
    struct regcache_stats s;
    if (regcache_get_stats(c, &s) != REGCACHE_OK || s.hits != 1 || s.registrations != 1)
        fault |= OWN_CACHE_FAILED;
    regcache_notify_free((const void *)FX_ALLOC(HELD), MiB);
    regcache_destroy(c);
    if (atomic_load(&fb.live) != 0 || atomic_load(&fb.deregs) != 1)
        fault |= OWN_CACHE_LEAKED;
    return fault;
}

static void child(struct world *w)
{
    /* Only looked at: a lock this thread took would read as held to
     * regcache_destroy() as well, and the child would never drain a cache
     * that it inherited whole (nor show that the drain deregisters nothing
     * of the parent's). */
    if (!rc_trylock(&w->f->c->lock))
        atomic_fetch_add(w->lock_held_at_fork, 1);
    else
        rc_unlock(&w->f->c->lock);
    int fault = use_inherited_cache(w);
    if (atomic_load(w->deregs_in_children))
        fault |= PARENT_DEREGISTERED;
    fault |= use_own_cache();
    _exit(fault);
}

static int forks(void)
{
    const char *v = getenv("REGCACHE_FORKS");
    return v && atoi(v) > 0 ? atoi(v) : FORKS_DEFAULT;
}

static void fork_amid_every_lock(void **state)
{
    struct fx *f = *state;
    struct world w = { .f = f, .parent = getpid() };
    atomic_long *shared = mmap(NULL, 2 * sizeof(atomic_long), PROT_READ | PROT_WRITE,
                               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(shared != MAP_FAILED);
    w.deregs_in_children = &shared[0];
    w.lock_held_at_fork = &shared[1];
    atomic_init(w.deregs_in_children, 0);
    atomic_init(w.lock_held_at_fork, 0);
    gate_init(&w.pending_gate);
    /* Writer first: a fork must not wait for readers that keep coming. */
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&w.quiesce, &attr);
    for (int i = 0; i < CHURN + NCHURN; i++)
        fx_device_alloc(f, i);
    f->p.validation = REGCACHE_VALIDATE_NOTIFY;
    /* Many entries, each a 64 KiB page, under a limit that misses and puts
     * keep reaching: the tree and the heaps change all the time. */
    f->p.whole_allocation = 0;
    f->p.max_entries = 1024;
    f->fb.during_reg = block_armed_reg;
    f->fb.during_reg_arg = &w;
    f->fb.during_dereg = count_child_deregs;
    f->fb.during_dereg_arg = &w;
    fx_create(f);

    /* The forking thread's holds, one of each kind (entry.h). */
    w.slot = fx_get(f, FX_ALLOC(HELD), 10);
    w.counted = get_counted_hold(f->c, FX_ALLOC(HELD), 10);
    assert_int_equal((uintptr_t)w.slot & 1, 1);
    assert_non_null(w.counted);

    struct dthread pending, waiters[WAITERS], busy[GETTERS + 2];
    struct busy work[GETTERS + 2];
    atomic_store(&w.block_next_reg, true);
    dthread_start(&pending, get_pending, &w);
    assert_true(gate_await(&w.pending_gate, 1, HANG_SECONDS));
    for (int i = 0; i < WAITERS; i++) {
        dthread_start(&waiters[i], get_pending, &w);
        assert_true(await_sleeping(dthread_tid(&waiters[i]), HANG_SECONDS));
    }
    for (int i = 0; i < GETTERS + 2; i++) {
        work[i] = (struct busy){ .w = &w,
                                 .step = i < GETTERS    ? churn
                                         : i == GETTERS ? notify
                                                        : invalidate_or_flush,
                                 .seed = 2u * (uint32_t)i + 1 };
        dthread_start(&busy[i], keep_busy, &work[i]);
    }

    /* A failure stops the forks but not the cleanup: the threads and hooks
     * of this test must be gone before cmocka's teardown runs. */
    char failure[128] = "";
    for (int i = 0; i < forks() && !failure[0]; i++) {
        if (QUIESCE_AT_FORK)
            pthread_rwlock_wrlock(&w.quiesce);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
            child(&w);
        if (QUIESCE_AT_FORK)
            pthread_rwlock_unlock(&w.quiesce);
        int status;
        if (!child_wait(pid, HANG_SECONDS, &status))
            snprintf(failure, sizeof(failure), "fork %d: the child hung and was killed", i);
        else if (!WIFEXITED(status) || WEXITSTATUS(status))
            snprintf(failure, sizeof(failure), "fork %d: the child %s %d", i,
                     WIFEXITED(status) ? "found faults" : "died of signal",
                     WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    }
    printf("# %d forks: %ld children inherited the cache lock held by a parent thread\n", forks(),
           atomic_load(w.lock_held_at_fork));
    atomic_store(&w.stop, true);
    gate_open(&w.pending_gate);
    bool joined = dthread_join(&pending, HANG_SECONDS);
    for (int i = 0; i < WAITERS; i++)
        joined &= dthread_join(&waiters[i], HANG_SECONDS);
    for (int i = 0; i < GETTERS + 2; i++)
        joined &= dthread_join(&busy[i], HANG_SECONDS);
    assert_true(joined);
    f->fb.during_dereg = NULL; /* w ends here; teardown deregisters the rest */
    f->fb.during_reg = NULL;
    long deregs_in_children = atomic_load(w.deregs_in_children);
    munmap(shared, 2 * sizeof(atomic_long));
    if (failure[0])
        fail_msg("%s", failure);

    /* The parent's cache is whole: its holds still serve and are released
     * once, by the parent. */
    assert_int_equal(deregs_in_children, 0);
    assert_ptr_equal(fx_handle(w.slot), fx_handle(w.counted));
    assert_int_equal(fx_handle(w.slot)->magic, 0x5ca1ab1eu);
    struct fake_handle *held = fx_handle(w.slot);
    regcache_put(f->c, w.slot);
    regcache_put(f->c, w.counted);
    regcache_entry_t *again = fx_get(f, FX_ALLOC(HELD), 10);
    assert_ptr_equal(fx_handle(again), held);
    regcache_put(f->c, again);
}

static void fork_child_does_not_touch_registrations(void **state)
{
    struct fx *f = *state;
    fx_device_alloc(f, 0);
    fx_create(f);
    fx_use(f, FX_ALLOC(0), 10);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        regcache_entry_t *e;
        int bad = 0;
        bad |= regcache_get(f->c, (void *)FX_ALLOC(0), 10, &e) != REGCACHE_ERR_FORKED;
        bad |= regcache_flush(f->c) != REGCACHE_ERR_FORKED;
        bad |= regcache_invalidate(f->c, (void *)FX_ALLOC(0), 1) != REGCACHE_ERR_FORKED;
        long deregs = atomic_load(&f->fb.deregs);
        regcache_destroy(f->c);
        bad |= atomic_load(&f->fb.deregs) != deregs;
        /* A cache created in the child works. */
        regcache_t *mine;
        bad |= regcache_create(&f->p, &mine) != REGCACHE_OK;
        bad |= regcache_get(mine, (void *)FX_ALLOC(0), 10, &e) != REGCACHE_OK;
        regcache_put(mine, e);
        regcache_destroy(mine);
        _exit(bad);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* The parent's cache is untouched. */
    fx_use(f, FX_ALLOC(0), 10);
    assert_int_equal(fx_stats(f).hits, 1);
    assert_int_equal(atomic_load(&f->fb.deregs), 0);
}

FX_MAIN(fork_child_does_not_touch_registrations, fork_amid_every_lock)
