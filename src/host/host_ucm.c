/* UCX's memory events as the monitor's ears (host_ucm.h).
 *
 * A handler runs inside ucm's hook, wherever the call was made (inside
 * malloc, in a signal handler, under ucm's event lock): like a libc hook it
 * only posts (rc_host_libc_post), and allocates and locks nothing. */
#include "host_ucm.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "host_libc.h"
#include "resident.h"

/* ucm's API (ucm/api/ucm.h), the part used here; its layout is UCX's
 * ABI. */
enum {
    UCM_EVENT_MMAP = 1 << 0,
    UCM_EVENT_MUNMAP = 1 << 1,
    UCM_EVENT_MREMAP = 1 << 2,
    UCM_EVENT_SHMAT = 1 << 3,
    UCM_EVENT_SHMDT = 1 << 4,
    UCM_EVENT_SBRK = 1 << 5,
    UCM_EVENT_MADVISE = 1 << 6,
    UCM_EVENT_BRK = 1 << 7,
    UCM_EVENT_VM_UNMAPPED = 1 << 17,
    UCM_EVENT_FLAG_NO_INSTALL = 1 << 24,
};
#define CALLS                                                                                   \
    (UCM_EVENT_MMAP | UCM_EVENT_MUNMAP | UCM_EVENT_MREMAP | UCM_EVENT_SHMAT | UCM_EVENT_SHMDT | \
     UCM_EVENT_SBRK | UCM_EVENT_MADVISE | UCM_EVENT_BRK)

union ucm_event {
    struct {
        void *result, *address;
        size_t size;
        int prot, flags, fd;
        off_t offset;
    } mmap;
    struct {
        int result;
        void *address;
        size_t size;
    } munmap;
    struct {
        void *result, *address;
        size_t old_size, new_size;
        int flags;
    } mremap;
    struct {
        void *result;
        int shmid;
        const void *shmaddr;
        int shmflg;
    } shmat;
    struct {
        int result;
        const void *shmaddr;
    } shmdt;
    struct {
        void *result;
        intptr_t increment;
    } sbrk;
    struct {
        int result;
        void *addr;
        size_t length;
        int advice;
    } madvise;
    struct {
        int result;
        void *addr;
    } brk;
    struct {
        void *address;
        size_t size;
    } vm_unmapped;
};

typedef void (*ucm_callback)(int type, union ucm_event *event, void *arg);
typedef int (*ucm_set_fn)(int events, int priority, ucm_callback cb, void *arg);
typedef void (*ucm_unset_fn)(int events, ucm_callback cb, void *arg);

/* The self-test's calls: whether this thread's reached the handler before
 * the call and the one after it.  Initial-exec, as in the libc hooks. */
enum { BEFORE = 1, AFTER = 2 };
static atomic_int probing;
static _Thread_local volatile unsigned reached __attribute__((tls_model("initial-exec")));

/* The range ucm said a call of this thread takes away, kept for the
 * handler after the call where the call's own arguments do not say it (a
 * segment's size, the break before brk). */
static _Thread_local uintptr_t said_start __attribute__((tls_model("initial-exec")));
static _Thread_local uintptr_t said_end __attribute__((tls_model("initial-exec")));

static void mark(unsigned when)
{
    if (__builtin_expect(atomic_load_explicit(&probing, memory_order_relaxed) != 0, 0))
        reached |= when;
}

static void post(uintptr_t start, size_t len)
{
    rc_host_libc_post(start, start + len);
}

static void before(int type, union ucm_event *e, void *arg)
{
    (void)type, (void)arg;
    mark(BEFORE);
    said_start = (uintptr_t)e->vm_unmapped.address;
    said_end = said_start + e->vm_unmapped.size;
    post(said_start, e->vm_unmapped.size);
}

/* What ucm said before the call, if it began at `start`; else everything
 * from `start` up (over-invalidating, never missing). */
static void post_said(uintptr_t start)
{
    rc_host_libc_post(start, said_start == start ? said_end : UINTPTR_MAX);
}

static void after(int type, union ucm_event *e, void *arg)
{
    (void)arg;
    switch (type) {
    case UCM_EVENT_MUNMAP:
        mark(AFTER);
        post((uintptr_t)e->munmap.address, e->munmap.size);
        break;
    case UCM_EVENT_MREMAP:
        post((uintptr_t)e->mremap.address, e->mremap.old_size);
        /* The target it replaced: known only now (it is the result). */
        if ((e->mremap.flags & MREMAP_FIXED) && e->mremap.result != MAP_FAILED)
            post((uintptr_t)e->mremap.result, e->mremap.new_size);
        break;
    case UCM_EVENT_MMAP:
        if (e->mmap.flags & MAP_FIXED)
            post((uintptr_t)e->mmap.address, e->mmap.size);
        break;
    case UCM_EVENT_MADVISE:
        if (rc_host_advice_drops(e->madvise.advice))
            post((uintptr_t)e->madvise.addr, e->madvise.length);
        break;
    case UCM_EVENT_SHMDT:
        post_said((uintptr_t)e->shmdt.shmaddr);
        break;
    case UCM_EVENT_SHMAT:
        if ((e->shmat.shmflg & SHM_REMAP) && e->shmat.shmaddr)
            post_said((uintptr_t)e->shmat.shmaddr -
                      ((e->shmat.shmflg & SHM_RND) ? (uintptr_t)e->shmat.shmaddr % SHMLBA : 0));
        break;
    case UCM_EVENT_BRK:
        if (said_start == (uintptr_t)e->brk.addr)
            post_said(said_start);
        break;
    case UCM_EVENT_SBRK:
        if (e->sbrk.increment < 0)
            post((uintptr_t)syscall(SYS_brk, 0), (size_t)-e->sbrk.increment);
        break;
    default:
        break;
    }
    said_start = said_end = 0;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char failure[200]; /* empty once installed and proven */

bool rc_host_ucm_loaded(void)
{
    void *ucm = dlopen("libucm.so.0", RTLD_LAZY | RTLD_NOLOAD);
    if (ucm)
        dlclose(ucm);
    return ucm != NULL;
}

/* An unmap reaches both handlers; free() of a 64 MiB block (through a
 * volatile pointer: a compiler may drop a free(malloc())) one of them. */
static int prove(char *why, size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    atomic_fetch_add(&probing, 1);
    reached = 0;
    void *p = mmap(NULL, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED)
        munmap(p, page);
    unsigned by_munmap = reached;
    void *volatile big = malloc((size_t)64 << 20);
    reached = 0;
    free(big);
    unsigned by_free = reached;
    atomic_fetch_sub(&probing, 1);
    if (by_munmap != (BEFORE | AFTER))
        snprintf(why, n, "munmap reaches %s", by_munmap ? "one of the handlers only" : "none");
    else if (!by_free)
        snprintf(why, n, "free() of a 64 MiB block reaches no handler");
    else
        return 1;
    return 0;
}

static void install(void)
{
    char why[sizeof failure - 32];
    void *ucm = dlopen("libucm.so.0", RTLD_LAZY | RTLD_NOLOAD);
    ucm_set_fn set = ucm ? (ucm_set_fn)(uintptr_t)dlsym(ucm, "ucm_set_event_handler") : NULL;
    ucm_unset_fn unset =
        ucm ? (ucm_unset_fn)(uintptr_t)dlsym(ucm, "ucm_unset_event_handler") : NULL;
    int status = 0;
    if (!set || !unset) {
        snprintf(why, sizeof why, "%s", ucm ? "libucm has no ucm_set_event_handler" : "no libucm");
    } else {
        /* ucm keeps pointers to the handlers for the rest of the process. */
        rc_stay_resident();
        /* The hooks that UCX's own registration cache asks for (installed
         * now if UCX has not yet); the calls' events come from the same
         * hooks.  ucm cannot install its sbrk hook late (its test of it
         * would move the break): asked for the calls' events, it would
         * refuse them all. */
        status = set(UCM_EVENT_VM_UNMAPPED, 0, before, NULL);
        if (status == 0 && (status = set(CALLS | UCM_EVENT_FLAG_NO_INSTALL, 1, after, NULL)) != 0)
            unset(UCM_EVENT_VM_UNMAPPED, before, NULL);
        if (status != 0)
            snprintf(why, sizeof why,
                     "ucm_set_event_handler failed (status %d; UCX_MEM_EVENTS=no?)", status);
        else if (!prove(why, sizeof why)) {
            unset(UCM_EVENT_VM_UNMAPPED, before, NULL);
            unset(CALLS, after, NULL);
            status = -1;
        }
    }
    if (!set || !unset || status != 0)
        snprintf(failure, sizeof failure, "UCX's events not used: %s", why);
    if (ucm)
        dlclose(ucm);
}

int rc_host_ucm_ensure(char *why, size_t n)
{
    pthread_once(&once, install);
    if (failure[0]) {
        snprintf(why, n, "%s", failure);
        return 0;
    }
    return 1;
}
