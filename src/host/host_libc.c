/* The host memory monitor's libc hooks (host_libc.h).
 *
 * A hook runs wherever libc's function would: inside malloc with an arena
 * locked, in a signal handler, in a thread that holds a cache's lock.  So
 * it takes no lock, allocates nothing and calls nothing but lock-free
 * stores and the write that wakes the monitor thread (async-signal-safe);
 * the invalidation itself, which deregisters and may free, runs later in
 * threads of the library's.  What a hook does with the range its call
 * takes away - listed in flight, posted before the call and after it - is
 * host_leave.h's, and it hands the same to every copy of the library that
 * joined this one (host_rendezvous.h). */
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
#include "host_leave.h"
#include "host_rendezvous.h"
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

/* Set once the self-test has proven the hooks (this copy's own, or those
 * of the copy it joined): until then (and for good after a failed one,
 * with a sanitizer's allocator, whose threads may reach a hook where its
 * runtime no longer tracks them) a hook only counts itself reached and
 * calls on. */
static atomic_bool live;

/* The self-test's calls: which hooks this thread reached (bit POSTED: a
 * range reached this copy's side of the hooks of the copy it joined), and
 * whether its calls of brk and sbrk stop at their hooks.  Initial-exec: a
 * hook must never enter the TLS resolver, which may allocate.  Volatile:
 * the compiler cannot know that a call into libc comes back to a hook. */
#define POSTED FNS
static atomic_int probing;
static _Thread_local volatile unsigned reached __attribute__((tls_model("initial-exec")));
static _Thread_local volatile bool probe_stops __attribute__((tls_model("initial-exec")));

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

/* One range a hook's call takes away: this copy's side, and that of every
 * copy that joined it. */
struct leave {
    struct rc_host_leave own;
    struct rc_rendezvous_marks peers;
};

static void leave_begin(struct leave *l, int fn, uintptr_t start, uintptr_t end)
{
    reach(fn);
    if (!acting()) {
        l->own.token = RC_HOST_NO_TOKEN;
        return;
    }
    rc_host_leave_begin(&l->own, start, end);
    if (l->own.token != RC_HOST_NO_TOKEN)
        rc_rendezvous_forward_begin(l->own.start, l->own.end, &l->peers);
}

static void leave_end(const struct leave *l)
{
    if (l->own.token == RC_HOST_NO_TOKEN)
        return;
    rc_host_leave_end(&l->own);
    rc_rendezvous_forward_end(l->own.start, l->own.end, &l->peers);
}

#define NOTHING_LEAVES                      \
    {                                       \
        .own = {.token = RC_HOST_NO_TOKEN } \
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
    struct leave at_to = NOTHING_LEAVES, l;
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
    struct leave l = NOTHING_LEAVES;
    if (flags & MAP_FIXED)
        leave_begin(&l, MMAP, (uintptr_t)addr, (uintptr_t)addr + len);
    else
        reach(MMAP);
    void *mapped = REAL(MMAP, mmap_fn)(addr, len, prot, flags, fd, off);
    leave_end(&l);
    return mapped;
}

bool rc_host_advice_drops(int advice)
{
    return advice == MADV_DONTNEED || advice == MADV_FREE || advice == MADV_REMOVE ||
           advice == MADV_DONTNEED_LOCKED || advice == MADV_GUARD_INSTALL;
}

static int hook_madvise(void *addr, size_t len, int advice)
{
    struct leave l = NOTHING_LEAVES;
    if (rc_host_advice_drops(advice))
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
    if (probe_stopped(BRK))
        return 0;
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
    if (probe_stopped(SBRK))
        return NULL;
    struct leave l = NOTHING_LEAVES;
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
    struct leave l = NOTHING_LEAVES;
    if (flags & SHM_REMAP && acting()) {
        uintptr_t at = (uintptr_t)addr - (flags & SHM_RND ? (uintptr_t)addr % SHMLBA : 0);
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

/* This copy's side of the hooks of the copy it joined: what its own hooks
 * would do, and the self-test's mark. */
static void joined_post(uintptr_t start, uintptr_t end)
{
    reach(POSTED);
    if (acting())
        rc_host_leave_post(start, end);
}

static int joined_begin(uintptr_t start, uintptr_t end)
{
    reach(POSTED);
    if (!acting())
        return RC_HOST_NO_TOKEN;
    struct rc_host_leave l;
    rc_host_leave_begin(&l, start, end);
    return l.token;
}

static void joined_end(uintptr_t start, uintptr_t end, int token)
{
    struct rc_host_leave l = { start, end, token };
    rc_host_leave_end(&l);
}

static const struct rc_rendezvous_peer me = { joined_post, joined_begin, joined_end };

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
        int j = rc_rendezvous_join(owner, &me);
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
    size_t page = rc_host_page_mask() + 1;
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

/* Joined: an unmap and free() reach this copy's side of the hooks of the
 * copy that patched libc. */
static int prove_joined(char *why, size_t n)
{
    size_t page = rc_host_page_mask() + 1;
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
    if (ok) {
        /* Before the copies that wait to join hear of it: the hooks act
         * for them too. */
        atomic_store_explicit(&live, true, memory_order_release);
    } else {
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
    if (owner && owner != rc_rendezvous_mine() && rc_rendezvous_join(owner, &me) == 1) {
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
