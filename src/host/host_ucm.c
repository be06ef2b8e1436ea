/* UCX's memory events as the monitor's ears (host_ucm.h).
 *
 * A handler runs inside ucm's hook, wherever the call was made (inside
 * malloc, in a signal handler, under ucm's event lock): like a libc hook it
 * only does what host_leave.h says with the range, and allocates and locks
 * nothing. */
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

#include "host_leave.h"
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

static void mark(unsigned when)
{
    if (__builtin_expect(atomic_load_explicit(&probing, memory_order_relaxed) != 0, 0))
        reached |= when;
}

/* The ranges this thread's calls take away, from ucm's word before each
 * call (VM_UNMAPPED, which says a segment's size and the break where the
 * call's own arguments do not) to the event of the call after it.  A
 * stack: a call made inside another's handlers (another handler's own
 * allocation, a signal handler's unmap) begins and ends within it.  The
 * after-event finds its call's range by where it starts; one that finds
 * none (ucm_vm_munmap() called by hand says no call follows) is ended
 * when the stack is full, oldest first, or by a later call's event that
 * starts where it does. */
#define DEPTH 4
static _Thread_local struct rc_host_leave begun[DEPTH] __attribute__((tls_model("initial-exec")));
static _Thread_local unsigned n_begun __attribute__((tls_model("initial-exec")));

static void before(int type, union ucm_event *e, void *arg)
{
    (void)type, (void)arg;
    mark(BEFORE);
    uintptr_t at = (uintptr_t)e->vm_unmapped.address;
    struct rc_host_leave l;
    rc_host_leave_begin(&l, at, at + e->vm_unmapped.size);
    if (l.token == RC_HOST_NO_TOKEN)
        return;
    if (n_begun == DEPTH) {
        rc_host_leave_end(&begun[0]);
        for (unsigned i = 1; i < DEPTH; i++)
            begun[i - 1] = begun[i];
        n_begun--;
    }
    begun[n_begun] = l;
    atomic_signal_fence(memory_order_seq_cst);
    n_begun++;
}

/* The call that began at `at` returned: its range, and any begun after
 * it, end.  False when none began there. */
static bool end_at(uintptr_t at)
{
    at &= ~rc_host_page_mask();
    unsigned i = n_begun;
    while (i > 0 && begun[i - 1].start != at)
        i--;
    if (i == 0)
        return false;
    while (n_begun >= i) {
        unsigned top = n_begun - 1;
        struct rc_host_leave l = begun[top];
        n_begun = top;
        atomic_signal_fence(memory_order_seq_cst);
        rc_host_leave_end(&l);
    }
    return true;
}

/* After the call: what began before it ends; a range that leaves and
 * began nowhere (nothing said it before the call) is posted now. */
static void after(int type, union ucm_event *e, void *arg)
{
    (void)arg;
    switch (type) {
    case UCM_EVENT_MUNMAP:
        mark(AFTER);
        if (!end_at((uintptr_t)e->munmap.address))
            rc_host_leave_post((uintptr_t)e->munmap.address,
                               (uintptr_t)e->munmap.address + e->munmap.size);
        break;
    case UCM_EVENT_MREMAP:
        if (!end_at((uintptr_t)e->mremap.address))
            rc_host_leave_post((uintptr_t)e->mremap.address,
                               (uintptr_t)e->mremap.address + e->mremap.old_size);
        /* The target it replaced: ucm says it before the call to nobody,
         * so it is known only now (it is the result). */
        if ((e->mremap.flags & MREMAP_FIXED) && e->mremap.result != MAP_FAILED)
            rc_host_leave_post((uintptr_t)e->mremap.result,
                               (uintptr_t)e->mremap.result + e->mremap.new_size);
        break;
    case UCM_EVENT_MMAP:
        if ((e->mmap.flags & MAP_FIXED) && !end_at((uintptr_t)e->mmap.address))
            rc_host_leave_post((uintptr_t)e->mmap.address,
                               (uintptr_t)e->mmap.address + e->mmap.size);
        break;
    case UCM_EVENT_MADVISE:
        /* Whatever advice ucm said before the call for, that ends. */
        if (!end_at((uintptr_t)e->madvise.addr) && rc_host_advice_drops(e->madvise.advice))
            rc_host_leave_post((uintptr_t)e->madvise.addr,
                               (uintptr_t)e->madvise.addr + e->madvise.length);
        break;
    case UCM_EVENT_SHMAT:
        /* Without ucm's word before: everything from there up
         * (over-invalidating, never missing). */
        if ((e->shmat.shmflg & SHM_REMAP) && e->shmat.shmaddr) {
            uintptr_t at = (uintptr_t)e->shmat.shmaddr -
                           ((e->shmat.shmflg & SHM_RND) ? (uintptr_t)e->shmat.shmaddr % SHMLBA : 0);
            if (!end_at(at))
                rc_host_leave_post(at, UINTPTR_MAX);
        }
        break;
    case UCM_EVENT_SHMDT:
        end_at((uintptr_t)e->shmdt.shmaddr); /* a shared mapping: never watched */
        break;
    case UCM_EVENT_BRK:
        end_at((uintptr_t)e->brk.addr); /* none began where the break moved up */
        break;
    case UCM_EVENT_SBRK:
        if (e->sbrk.increment < 0)
            end_at((uintptr_t)syscall(SYS_brk, 0)); /* where it moved down to */
        break;
    default:
        break;
    }
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
