/* The host memory monitor's libc hooks (host_libc.h).
 *
 * A hook runs wherever libc's function would: inside malloc with an arena
 * locked, in a signal handler, in a thread that holds a cache's lock.  So
 * it takes no lock, allocates nothing and calls nothing but lock-free
 * stores and the write that wakes the monitor thread (async-signal-safe);
 * the invalidation itself, which deregisters and may free, runs later in
 * threads of the library's.  A range that may be watched is posted before
 * libc unmaps it, so that once the call returns a get finds the queue
 * ahead of the drain and drains first, and again after, for a
 * registration made meanwhile; between the two the range is listed in
 * flight (host_unmapping.h), whatever it is, so that such a registration
 * is never cached. */
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
#include "host_unmapping.h"
#include "patch_set.h"

#ifndef MADV_DONTNEED_LOCKED
#define MADV_DONTNEED_LOCKED 24
#endif
#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif

enum { MUNMAP, MREMAP, MMAP, MADVISE, BRK, SBRK, SHMAT, SHMDT, FNS };

typedef int (*munmap_fn)(void *, size_t);
typedef void *(*mremap_fn)(void *, size_t, size_t, int, ...);
typedef void *(*mmap_fn)(void *, size_t, int, int, int, off_t);
typedef int (*madvise_fn)(void *, size_t, int);
typedef int (*brk_fn)(void *);
typedef void *(*sbrk_fn)(intptr_t);
typedef void *(*shmat_fn)(int, const void *, int);
typedef int (*shmdt_fn)(const void *);

static _Atomic(void *) originals[FNS];
#define REAL(fn, type) ((type)atomic_load_explicit(&originals[fn], memory_order_acquire))

static uintptr_t page_mask;
/* Set once the self-test has proven the hooks: until then (and for good
 * after a failed one, with a sanitizer's allocator, whose threads may
 * reach a hook where its runtime no longer tracks them) a hook only counts
 * itself reached and calls on. */
static atomic_bool live;

/* The self-test's calls: which hooks this thread reached.  Initial-exec:
 * a hook must never enter the TLS resolver, which may allocate.  Volatile:
 * the compiler cannot know that a call into libc comes back to a hook. */
static atomic_int probing;
static _Thread_local volatile unsigned reached __attribute__((tls_model("initial-exec")));

static void reach(int fn)
{
    if (__builtin_expect(atomic_load_explicit(&probing, memory_order_relaxed) != 0, 0))
        reached |= 1u << fn;
}

/* Whether the hooks act: what they ask the kernel to find their range
 * (the break, a segment's size) is not asked before. */
static bool acting(void)
{
    return atomic_load_explicit(&live, memory_order_relaxed);
}

/* A range that may be watched is posted, and the monitor woken: its leave
 * notices then come without waiting for the next get. */
static void post_if_watched(uintptr_t start, uintptr_t end)
{
    if (rc_host_monitor_may_watch(start, end)) {
        rc_host_events_post(start, end);
        rc_host_monitor_kick();
    }
}

#define NO_TOKEN INT32_MIN

/* One range a hook's call takes away. */
struct leave {
    uintptr_t start, end;
    int token; /* rc_host_unmapping_begin()'s, or NO_TOKEN: nothing leaves */
};

/* Before the call: the range is in flight from now on (host_unmapping.h),
 * and posted if it may be watched, so that the entries over its pages go
 * before the call returns. */
static void leave_begin(struct leave *l, int fn, uintptr_t start, uintptr_t end)
{
    reach(fn);
    start &= ~page_mask;
    if (end < start) /* wrapped: to the top */
        end = UINTPTR_MAX & ~page_mask;
    else
        end = (end + page_mask) & ~page_mask;
    l->start = start;
    l->end = end;
    l->token = NO_TOKEN;
    if (start >= end || !acting())
        return;
    int saved = errno;
    l->token = rc_host_unmapping_begin(start, end);
    post_if_watched(start, end);
    errno = saved;
}

/* After the call: posted again if it may be watched now - a registration
 * made meanwhile may have pinned the pages that left, under a watch made
 * after leave_begin() looked - and no longer in flight. */
static void leave_end(const struct leave *l)
{
    if (l->token == NO_TOKEN)
        return;
    int saved = errno;
    post_if_watched(l->start, l->end);
    rc_host_unmapping_end(l->token);
    errno = saved;
}

static const struct leave nothing_leaves = { 0, 0, NO_TOKEN };

static int hook_munmap(void *addr, size_t len)
{
    struct leave l;
    leave_begin(&l, MUNMAP, (uintptr_t)addr, (uintptr_t)addr + len);
    int rc = REAL(MUNMAP, munmap_fn)(addr, len);
    leave_end(&l);
    return rc;
}

/* The old pages leave wherever the mapping goes (even growing in place is
 * counted: the hook cannot know); MREMAP_FIXED also replaces whatever was
 * at the new address. */
static void *hook_mremap(void *old, size_t old_len, size_t new_len, int flags, ...)
{
    void *to = NULL;
    struct leave at_to = nothing_leaves, l;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        to = va_arg(ap, void *);
        va_end(ap);
        leave_begin(&at_to, MREMAP, (uintptr_t)to, (uintptr_t)to + new_len);
    }
    leave_begin(&l, MREMAP, (uintptr_t)old, (uintptr_t)old + old_len);
    void *moved = REAL(MREMAP, mremap_fn)(old, old_len, new_len, flags, to);
    leave_end(&l);
    leave_end(&at_to);
    return moved;
}

static void *hook_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    struct leave l = nothing_leaves;
    if (flags & MAP_FIXED)
        leave_begin(&l, MMAP, (uintptr_t)addr, (uintptr_t)addr + len);
    else
        reach(MMAP);
    void *mapped = REAL(MMAP, mmap_fn)(addr, len, prot, flags, fd, off);
    leave_end(&l);
    return mapped;
}

/* The advice that drops pages: the next touch maps new ones (or, behind a
 * guard, faults). */
static int hook_madvise(void *addr, size_t len, int advice)
{
    struct leave l = nothing_leaves;
    if (advice == MADV_DONTNEED || advice == MADV_FREE || advice == MADV_REMOVE ||
        advice == MADV_DONTNEED_LOCKED || advice == MADV_GUARD_INSTALL)
        leave_begin(&l, MADVISE, (uintptr_t)addr, (uintptr_t)addr + len);
    else
        reach(MADVISE);
    int rc = REAL(MADVISE, madvise_fn)(addr, len, advice);
    leave_end(&l);
    return rc;
}

/* The break moving down to `to` takes the pages from there to where it is
 * now (none when it moves up). */
static void break_to(struct leave *l, int fn, uintptr_t to)
{
    uintptr_t now = to && acting() ? (uintptr_t)syscall(SYS_brk, 0) : 0;
    leave_begin(l, fn, to, to < now ? now : to);
}

static int hook_brk(void *addr)
{
    struct leave l;
    break_to(&l, BRK, (uintptr_t)addr);
    int rc = REAL(BRK, brk_fn)(addr);
    leave_end(&l);
    return rc;
}

/* libc's sbrk (and malloc's trimming through it) calls brk; another
 * patcher's sbrk (UCX's ucm) makes the system call itself. */
static void *hook_sbrk(intptr_t increment)
{
    struct leave l = nothing_leaves;
    if (increment < 0 && acting())
        break_to(&l, SBRK, (uintptr_t)syscall(SYS_brk, 0) + (uintptr_t)increment);
    else
        reach(SBRK);
    void *was = REAL(SBRK, sbrk_fn)(increment);
    leave_end(&l);
    return was;
}

/* A segment attached over a range replaces its pages; its size is asked
 * of the kernel, and when it cannot be, everything from there up is
 * counted as leaving. */
static void *hook_shmat(int id, const void *addr, int flags)
{
    struct leave l = nothing_leaves;
    if (flags & SHM_REMAP && acting()) {
        uintptr_t at = (uintptr_t)addr & ~(flags & SHM_RND ? page_mask : 0);
        struct shmid_ds ds;
        int saved = errno;
        uintptr_t end = shmctl(id, IPC_STAT, &ds) == 0 ? at + ds.shm_segsz : 0;
        errno = saved;
        leave_begin(&l, SHMAT, at, end);
    } else {
        reach(SHMAT);
    }
    void *attached = REAL(SHMAT, shmat_fn)(id, addr, flags);
    leave_end(&l);
    return attached;
}

/* A detach takes a System V segment's mapping, and the monitor never
 * watches a shared mapping: nothing it watches leaves. */
static int hook_shmdt(const void *addr)
{
    reach(SHMDT);
    return REAL(SHMDT, shmdt_fn)(addr);
}

static struct rc_patch_fn fns[FNS] = {
    [MUNMAP] = { .name = "munmap", .wrapper = (void *)hook_munmap },
    [MREMAP] = { .name = "mremap", .wrapper = (void *)hook_mremap },
    [MMAP] = { .name = "mmap", .wrapper = (void *)hook_mmap },
    [MADVISE] = { .name = "madvise", .wrapper = (void *)hook_madvise },
    [BRK] = { .name = "brk", .wrapper = (void *)hook_brk },
    [SBRK] = { .name = "sbrk", .wrapper = (void *)hook_sbrk },
    [SHMAT] = { .name = "shmat", .wrapper = (void *)hook_shmat },
    [SHMDT] = { .name = "shmdt", .wrapper = (void *)hook_shmdt },
};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char failure[200]; /* empty once installed and proven */

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
    int patched;
    return rc_patch_set(fns, FNS, &patched, why, n);
}

/* Each hook reached through libc's export, and free() of a block large
 * enough for a mapping of its own reaching one of them: libc's internal
 * calls go where its exports go.  The probe mapping is nobody's. */
static int prove(char *why, size_t n)
{
    size_t page = page_mask + 1;
    atomic_fetch_add(&probing, 1);
    reached = 0;
    char *p = mmap(NULL, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) {
        mmap(p, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        madvise(p, page, MADV_DONTNEED);
        mremap(p, page, page, 0);
        int saved = errno;
        shmat(-1, NULL, 0); /* no segment: EINVAL */
        shmdt(p);           /* not a segment: EINVAL */
        errno = saved;
        int moved = brk(sbrk(0)); /* the break where it is: nothing moves */
        (void)moved;
        munmap(p, page);
    }
    unsigned exported = reached;
    reached = 0;
    /* Through a volatile pointer: a compiler may drop a free(malloc()). */
    void *volatile big = malloc((size_t)64 << 20);
    free(big);
    unsigned from_free = reached;
    atomic_fetch_sub(&probing, 1);
    for (int i = 0; i < FNS; i++)
        if (!(exported & (1u << i))) {
            snprintf(why, n, "%s called through libc does not reach its hook", fns[i].name);
            return 0;
        }
    if (!(from_free & ((1u << MUNMAP) | (1u << BRK) | (1u << MADVISE)))) {
        snprintf(why, n,
                 "free() of a 64 MiB block reaches none of libc's unmapping functions "
                 "(an allocator that unmaps by system call?)");
        return 0;
    }
    return 1;
}

static void install(void)
{
    page_mask = (uintptr_t)sysconf(_SC_PAGESIZE) - 1;
    char why[sizeof failure - 32];
    if (patch(why, sizeof why) != 0 || !prove(why, sizeof why))
        snprintf(failure, sizeof failure, "libc not patched: %s", why);
    else
        atomic_store_explicit(&live, true, memory_order_release);
}

static pthread_mutex_t repatch_lock = PTHREAD_MUTEX_INITIALIZER;

void rc_host_libc_check(void)
{
    if (failure[0])
        return;
    pthread_mutex_lock(&repatch_lock);
    if (!rc_patch_set_lost(fns, FNS)) {
        pthread_mutex_unlock(&repatch_lock);
        return;
    }
    struct rc_patch_fn again[FNS];
    bool any = false;
    for (int i = 0; i < FNS; i++) {
        again[i] = fns[i];
        if (!rc_patch_set_lost(&fns[i], 1))
            again[i].entry = NULL;
        any |= again[i].entry != NULL;
    }
    char why[160];
    int patched;
    if (any && rc_patch_set(again, FNS, &patched, why, sizeof why) == 0)
        for (int i = 0; i < FNS; i++)
            if (again[i].entry)
                fns[i] = again[i];
    pthread_mutex_unlock(&repatch_lock);
    if (any)
        rc_host_events_post_all();
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
