#include "asym_fence.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

atomic_bool rc_heavy_fence_works;
/* Every fast side fences now, and those that read rc_heavy_fence_works
 * before it fell are covered (demote()): a heavy fence is a seq_cst fence. */
static atomic_bool symmetric;
static pthread_once_t setup_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t demote_lock = PTHREAD_MUTEX_INITIALIZER;

static long system_membarrier(int cmd)
{
    return syscall(__NR_membarrier, cmd, 0, 0);
}

long (*rc_membarrier)(int cmd) = system_membarrier;

static _Atomic(void (*)(void)) demoted_fn;

/* Tries of an expedited membarrier before the fast sides are made to
 * fence: the kernel documents ENOMEM, which passes. */
#define TRIES 8

/* A parent thread may have held the lock at the fork. */
static void atfork_child(void)
{
    pthread_mutex_init(&demote_lock, NULL);
}

static void setup(void)
{
    pthread_atfork(NULL, NULL, atfork_child);
    long cmds = rc_membarrier(MEMBARRIER_CMD_QUERY);
    bool ok = cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
              rc_membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
    /* Light fences start relying on heavy ones only once the process is
     * registered. */
    atomic_store_explicit(&symmetric, !ok, memory_order_seq_cst);
    atomic_store_explicit(&rc_heavy_fence_works, ok, memory_order_seq_cst);
}

void rc_fence_setup(void (*demoted)(void))
{
    if (demoted)
        atomic_store_explicit(&demoted_fn, demoted, memory_order_release);
    pthread_once(&setup_once, setup);
}

/* Wait a little longer after each failed try: a yield, then sleeps that
 * double from a microsecond. */
static void back_off(unsigned try)
{
    if (try < 2) {
        sched_yield();
        return;
    }
    nanosleep(&(struct timespec){ .tv_nsec = 1000L << (try - 2) }, NULL);
}

/* How long the switch waits when no barrier succeeds (demote()). */
#define GRACE_NS 10000000L

static bool barrier(void)
{
    return rc_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0;
}

/* membarrier keeps failing: from now on every fast side fences.  A fast
 * side reads its flag after its store (asym_fence.h): one that read it
 * before the flags fell had made its store before, and a barrier that
 * succeeds after they fell makes that store visible to every later scan.
 * The switch tries a few; it runs under a cache's lock, so it must not
 * wait for the kernel for ever.  When none succeeds it waits GRACE_NS
 * instead, and leans on the hardware: a store leaves its core's store
 * buffer within microseconds, and a core that stops running the thread
 * (an interrupt, a preemption, a VM exit) drains the buffer as it stops.
 * So a store made before the flags fell is visible to every scan after
 * the wait.  Once, for the life of the process. */
static void demote(void)
{
    rc_fence_setup(NULL);
    pthread_mutex_lock(&demote_lock);
    if (!atomic_load_explicit(&symmetric, memory_order_seq_cst)) {
        atomic_store_explicit(&rc_heavy_fence_works, false, memory_order_seq_cst);
        void (*demoted)(void) = atomic_load_explicit(&demoted_fn, memory_order_acquire);
        if (demoted)
            demoted();
        bool covered = false;
        for (unsigned try = 0; try < TRIES && !(covered = barrier()); try++)
            back_off(try);
        struct timespec grace = { .tv_nsec = GRACE_NS };
        while (!covered && nanosleep(&grace, &grace) != 0 && errno == EINTR)
            continue;
        atomic_store_explicit(&symmetric, true, memory_order_seq_cst);
    }
    pthread_mutex_unlock(&demote_lock);
}

void rc_fence_heavy(void)
{
    if (atomic_load_explicit(&rc_heavy_fence_works, memory_order_seq_cst)) {
        for (unsigned try = 0; try < TRIES; try++) {
            if (barrier())
                return;
            back_off(try);
        }
        demote();
    } else if (!atomic_load_explicit(&symmetric, memory_order_seq_cst)) {
        demote(); /* under way in another thread: wait for it */
    }
    atomic_thread_fence(memory_order_seq_cst);
}
