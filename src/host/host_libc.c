/* The host memory monitor's libc hooks (host_libc.h).
 *
 * A hook runs wherever libc's function would: inside malloc with an arena
 * locked, in a signal handler, in a thread that holds a cache's lock.  So
 * it takes no lock, allocates nothing and calls nothing but the lock-free
 * post to the queue (and, when the queue fills, a write to the monitor
 * thread's eventfd); the invalidation itself, which deregisters and may
 * free, runs later in a thread of the library's choosing.  The range is
 * posted before libc unmaps it: once the call returns, a get finds the
 * queue ahead of the drain and drains first. */
#include "host_libc.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cuda_seam.h"
#include "host_events.h"
#include "host_monitor.h"
#include "host_rendezvous.h"
#include "patch_set.h"

#ifndef MADV_DONTNEED_LOCKED
#define MADV_DONTNEED_LOCKED 24
#endif

enum { MUNMAP, MREMAP, MMAP, MADVISE, BRK, SBRK, SHMDT, FNS };

typedef int (*munmap_fn)(void *, size_t);
typedef void *(*mremap_fn)(void *, size_t, size_t, int, ...);
typedef void *(*mmap_fn)(void *, size_t, int, int, int, off_t);
typedef int (*madvise_fn)(void *, size_t, int);
typedef int (*brk_fn)(void *);
typedef void *(*sbrk_fn)(intptr_t);
typedef int (*shmdt_fn)(const void *);

static _Atomic(void *) originals[FNS];
#define REAL(fn, type) ((type)atomic_load_explicit(&originals[fn], memory_order_acquire))

static _Atomic uintptr_t watch_lo = UINTPTR_MAX, watch_hi;
/* The page size less one: set at load, before any hook or UCX handler of
 * the library can run, and never changed (relaxed loads). */
static _Atomic uintptr_t page_mask;

__attribute__((constructor)) static void learn_page_size(void)
{
    atomic_store_explicit(&page_mask, (uintptr_t)sysconf(_SC_PAGESIZE) - 1, memory_order_relaxed);
}

/* The self-test's calls: which hooks this thread reached (bit POSTED: a
 * range reached rc_host_libc_post, through this copy's hooks or through
 * those of the copy it joined), and whether its calls of brk and sbrk stop
 * at their hooks.  Initial-exec: a hook must never enter the TLS
 * resolver, which may allocate.  Volatile: the compiler cannot know that a
 * call into libc comes back to a hook. */
#define POSTED FNS
static atomic_int probing;
static _Thread_local volatile unsigned reached __attribute__((tls_model("initial-exec")));
static _Thread_local volatile bool probe_stops __attribute__((tls_model("initial-exec")));

void rc_host_libc_watch(uintptr_t lo, uintptr_t hi)
{
    atomic_store_explicit(&watch_lo, lo, memory_order_relaxed);
    atomic_store_explicit(&watch_hi, hi, memory_order_release);
}

void rc_host_libc_post(uintptr_t start, uintptr_t end)
{
    if (__builtin_expect(atomic_load_explicit(&probing, memory_order_relaxed) != 0, 0))
        reached |= 1u << POSTED;
    uintptr_t mask = atomic_load_explicit(&page_mask, memory_order_relaxed);
    if (end < start) /* wrapped: to the top */
        end = UINTPTR_MAX & ~mask;
    else
        end = (end + mask) & ~mask;
    if (start < atomic_load_explicit(&watch_hi, memory_order_acquire) &&
        end > atomic_load_explicit(&watch_lo, memory_order_relaxed) && start < end) {
        rc_host_events_post(start, end);
        if (rc_host_events_crowded())
            rc_host_monitor_kick();
    }
}

static void leaving(int fn, uintptr_t start, uintptr_t end)
{
    if (__builtin_expect(atomic_load_explicit(&probing, memory_order_relaxed) != 0, 0))
        reached |= 1u << fn;
    rc_host_libc_post(start, end);
    rc_rendezvous_forward(start, end);
}

/* The self-test's calls of brk and sbrk end at their hooks: reaching them
 * is all the test asks, and passed on they would set libc's idea of the
 * break while malloc may be moving it in another thread. */
static bool probe_stopped(int fn)
{
    if (__builtin_expect(atomic_load_explicit(&probing, memory_order_relaxed) == 0, 1) ||
        !probe_stops)
        return false;
    reached |= 1u << fn;
    return true;
}

static int hook_munmap(void *addr, size_t len)
{
    leaving(MUNMAP, (uintptr_t)addr, (uintptr_t)addr + len);
    return REAL(MUNMAP, munmap_fn)(addr, len);
}

/* The old pages leave wherever the mapping goes (even growing in place is
 * counted: the hook cannot know); MREMAP_FIXED also replaces whatever was
 * at the new address. */
static void *hook_mremap(void *old, size_t old_len, size_t new_len, int flags, ...)
{
    void *to = NULL;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        to = va_arg(ap, void *);
        va_end(ap);
        leaving(MREMAP, (uintptr_t)to, (uintptr_t)to + new_len);
    }
    leaving(MREMAP, (uintptr_t)old, (uintptr_t)old + old_len);
    return REAL(MREMAP, mremap_fn)(old, old_len, new_len, flags, to);
}

static void *hook_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    if (flags & MAP_FIXED)
        leaving(MMAP, (uintptr_t)addr, (uintptr_t)addr + len);
    else if (atomic_load_explicit(&probing, memory_order_relaxed))
        reached |= 1u << MMAP;
    return REAL(MMAP, mmap_fn)(addr, len, prot, flags, fd, off);
}

bool rc_host_advice_drops(int advice)
{
    return advice == MADV_DONTNEED || advice == MADV_FREE || advice == MADV_REMOVE ||
           advice == MADV_DONTNEED_LOCKED;
}

static int hook_madvise(void *addr, size_t len, int advice)
{
    if (rc_host_advice_drops(advice))
        leaving(MADVISE, (uintptr_t)addr, (uintptr_t)addr + len);
    return REAL(MADVISE, madvise_fn)(addr, len, advice);
}

/* The break moving down to `to` takes the pages from there to where it is
 * now. */
static void break_to(int fn, uintptr_t to)
{
    uintptr_t now = to && to < atomic_load_explicit(&watch_hi, memory_order_acquire)
                        ? (uintptr_t)syscall(SYS_brk, 0)
                        : 0;
    leaving(fn, to, to < now ? now : to);
}

static int hook_brk(void *addr)
{
    if (probe_stopped(BRK))
        return 0;
    break_to(BRK, (uintptr_t)addr);
    return REAL(BRK, brk_fn)(addr);
}

/* libc's sbrk (and malloc's trimming through it) calls brk; another
 * patcher's sbrk (UCX's ucm) makes the system call itself. */
static void *hook_sbrk(intptr_t increment)
{
    if (probe_stopped(SBRK))
        return NULL;
    if (increment < 0)
        break_to(SBRK, (uintptr_t)syscall(SYS_brk, 0) + (uintptr_t)increment);
    else if (atomic_load_explicit(&probing, memory_order_relaxed))
        reached |= 1u << SBRK;
    return REAL(SBRK, sbrk_fn)(increment);
}

/* The segment's size is not among the arguments: everything watched from
 * its start up is counted as leaving. */
static int hook_shmdt(const void *addr)
{
    leaving(SHMDT, (uintptr_t)addr, atomic_load_explicit(&watch_hi, memory_order_acquire));
    return REAL(SHMDT, shmdt_fn)(addr);
}

static struct rc_patch_fn fns[FNS] = {
    [MUNMAP] = { .name = "munmap", .wrapper = (void *)hook_munmap },
    [MREMAP] = { .name = "mremap", .wrapper = (void *)hook_mremap },
    [MMAP] = { .name = "mmap", .wrapper = (void *)hook_mmap },
    [MADVISE] = { .name = "madvise", .wrapper = (void *)hook_madvise },
    [BRK] = { .name = "brk", .wrapper = (void *)hook_brk },
    [SBRK] = { .name = "sbrk", .wrapper = (void *)hook_sbrk },
    [SHMDT] = { .name = "shmdt", .wrapper = (void *)hook_shmdt },
};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char failure[200]; /* empty once installed and proven */
/* Another copy of the library patched libc: its hooks hand this copy every
 * range, and this copy's own patches (if it made any) are bypassed. */
static atomic_bool joined;

/* Under repatch_lock: how often the hooks were patched again on top of
 * another patcher.  A patcher that itself keeps patching on top of them
 * would make that go on for ever, each time one more mapping and one more
 * jump on every call: after REPATCHES the hooks give up. */
#define REPATCHES 16
static pthread_mutex_t repatch_lock = PTHREAD_MUTEX_INITIALIZER;
static int repatched;
static atomic_bool given_up;

/* libc patched, or the hooks another copy of the library patched there
 * joined: 0, 1 (try again: an entry changed meanwhile, or the other copy's
 * test failed and it is taking its patches back) or -1 with why. */
static int patch_or_join(char *why, size_t n)
{
    void *owner = rc_patch_owner(fns[MUNMAP].entry);
    if (owner) {
        int j = rc_rendezvous_join(owner, rc_host_libc_post);
        if (j == 1) {
            atomic_store(&joined, true);
            return 0;
        }
        if (j == 0) /* its patches are being taken back */
            return 1;
    }
    int patched;
    return rc_patch_set(fns, FNS, rc_rendezvous_mine(), &patched, why, n);
}

static int patch(char *why, size_t n)
{
#if !defined(__x86_64__)
    snprintf(why, n, "it patches x86-64 code only");
    return -1;
#endif
    rc_dlsym_fn sym = rc_cuda_real_dlsym();
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    if (!sym || !libc) {
        snprintf(why, n, "cannot find libc.so.6");
        return -1;
    }
    for (int i = 0; i < FNS; i++) {
        fns[i].entry = sym(libc, fns[i].name);
        fns[i].original = &originals[i];
        if (!fns[i].entry) {
            snprintf(why, n, "libc.so.6 has no %s", fns[i].name);
            return -1;
        }
    }
    for (int attempt = 0; attempt < 4; attempt++) {
        int rc = patch_or_join(why, n);
        if (rc <= 0)
            return rc;
    }
    snprintf(why, n, "libc's entries kept changing while they were being patched");
    return -1;
}

/* free() of a block large enough for a mapping of its own: which hooks it
 * reached (libc's internal calls go where its exports go).  Through a
 * volatile pointer: a compiler may drop a free(malloc()). */
static unsigned reached_by_free(void)
{
    void *volatile big = malloc((size_t)64 << 20);
    reached = 0; /* not what malloc reached: growing the heap calls brk */
    free(big);
    return reached;
}

#define UNSEEN_FREE                                                                      \
    "free() of a 64 MiB block reaches none of libc's unmapping functions (an allocator " \
    "that unmaps by system call?)"

/* Each hook reached through libc's export, and free() reaching one of
 * them.  The probe mapping is nobody's; brk and sbrk stop at their hooks. */
static int prove(char *why, size_t n)
{
    size_t page = atomic_load_explicit(&page_mask, memory_order_relaxed) + 1;
    atomic_fetch_add(&probing, 1);
    reached = 0;
    char *p = mmap(NULL, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) {
        mmap(p, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        madvise(p, page, MADV_DONTNEED);
        mremap(p, page, page, 0);
        int saved = errno;
        shmdt(p); /* not a segment: EINVAL */
        errno = saved;
        munmap(p, page);
    }
    probe_stops = true;
    int stopped = brk(NULL);
    (void)stopped;
    sbrk(0);
    probe_stops = false;
    unsigned exported = reached;
    unsigned from_free = reached_by_free();
    atomic_fetch_sub(&probing, 1);
    for (int i = 0; i < FNS; i++)
        if (!(exported & (1u << i))) {
            snprintf(why, n, "%s called through libc does not reach its hook", fns[i].name);
            return 0;
        }
    if (!(from_free & ((1u << MUNMAP) | (1u << BRK) | (1u << MADVISE)))) {
        snprintf(why, n, UNSEEN_FREE);
        return 0;
    }
    return 1;
}

/* Joined: an unmap and free() reach this copy's post through the hooks of
 * the copy that patched libc. */
static int prove_joined(char *why, size_t n)
{
    size_t page = atomic_load_explicit(&page_mask, memory_order_relaxed) + 1;
    atomic_fetch_add(&probing, 1);
    reached = 0;
    char *p = mmap(NULL, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED)
        munmap(p, page);
    unsigned by_munmap = reached;
    unsigned by_free = reached_by_free();
    atomic_fetch_sub(&probing, 1);
    if (!(by_munmap & (1u << POSTED)))
        snprintf(why, n,
                 "munmap does not reach the hooks of the copy of the library that "
                 "patched libc");
    else if (!(by_free & (1u << POSTED)))
        snprintf(why, n, UNSEEN_FREE);
    else
        return 1;
    return 0;
}

/* A fork waits for a patch under way: the child gets the entries and what
 * the hooks call through as one patch left them. */
static void before_fork(void)
{
    pthread_mutex_lock(&repatch_lock);
}

static void after_fork(void)
{
    pthread_mutex_unlock(&repatch_lock);
}

static void install(void)
{
    pthread_atfork(before_fork, after_fork, after_fork);
    char why[sizeof failure - 32];
    int ok = patch(why, sizeof why) == 0 &&
             (atomic_load(&joined) ? prove_joined(why, sizeof why) : prove(why, sizeof why));
    if (!ok) {
        /* Nothing this copy wrote stays behind a test that failed. */
        rc_patch_set_undo(fns, FNS);
        snprintf(failure, sizeof failure, "libc not patched: %s", why);
    }
    rc_rendezvous_settle(ok);
}

/* Under repatch_lock, the entry of `lost` rewritten: join the copy of the
 * library that patched on top, else patch again on top of whoever did.
 * Whether the hooks still see every call. */
static bool take_the_front(const struct rc_patch_fn *lost)
{
    void *owner = rc_patch_owner(lost->entry);
    if (owner && owner != rc_rendezvous_mine() &&
        rc_rendezvous_join(owner, rc_host_libc_post) == 1) {
        /* Its trampolines lead through this copy's thunks: past its hooks
         * from now on, which would only see each range again. */
        for (int i = 0; i < FNS; i++) {
            rc_patch_bypass(&fns[i]);
            fns[i].written_len = 0;
        }
        atomic_store(&joined, true);
        return true;
    }
    if (repatched == REPATCHES)
        return false;
    struct rc_patch_fn again[FNS];
    for (int i = 0; i < FNS; i++) {
        again[i] = fns[i];
        if (!rc_patch_set_lost(&fns[i], 1))
            again[i].entry = NULL;
    }
    char why[160];
    int patched;
    int rc = rc_patch_set(again, FNS, rc_rendezvous_mine(), &patched, why, sizeof why);
    if (rc < 0)
        return false;
    if (rc > 0) /* another patcher at work: at the next check */
        return true;
    repatched++;
    /* The other patcher's trampoline may lead to the old thunk: from there
     * on to the function, not round to the hook again. */
    for (int i = 0; i < FNS; i++)
        if (again[i].entry) {
            rc_patch_bypass(&fns[i]);
            fns[i] = again[i];
        }
    return true;
}

bool rc_host_libc_check(void)
{
    if (atomic_load_explicit(&given_up, memory_order_acquire))
        return false;
    if (atomic_load_explicit(&joined, memory_order_acquire))
        return true;
    pthread_mutex_lock(&repatch_lock);
    const struct rc_patch_fn *lost = rc_patch_set_lost(fns, FNS);
    bool front = !lost || take_the_front(lost);
    if (!front)
        atomic_store_explicit(&given_up, true, memory_order_release);
    pthread_mutex_unlock(&repatch_lock);
    /* Unmaps went unseen meanwhile. */
    if (lost)
        rc_host_events_post_all();
    return front;
}

int rc_host_libc_ensure(char *why, size_t n)
{
    pthread_once(&once, install);
    if (failure[0]) {
        snprintf(why, n, "%s", failure);
        return 0;
    }
    return 1;
}
