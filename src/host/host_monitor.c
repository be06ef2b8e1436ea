/* The host memory monitor (host_monitor.h): the claims, the choice of how
 * to hear of unmaps, and the thread regcache-mon, which reads the
 * userfaultfd and drains the queue of unmaps when no get does.
 *
 * Nothing that an unmapping thread may hold while it waits for the
 * userfaultfd to be read is ever waited for by the thread before its read:
 * it takes no lock between poll() and read(), drains only when the drain
 * lock is free, and claims_lock (the tree of claims, the ioctl()s on the
 * userfaultfd) is never held across an allocation, a free or a munmap.
 *
 * Locks: life_lock (start and stop of the thread, opening and closing the
 * fds; never taken by the thread) before claims_lock. */
#include "host_monitor.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "cache.h"
#include "exiting.h"
#include "host_libc.h"
#include "host_mapping.h"
#include "host_ucm.h"
#include "host_uffd.h"

/* How long the posts of libc's hooks may wait for a drain when no get of
 * host memory comes: the pages their entries pin are held that long. */
#define LIBC_DRAIN_MS 50

struct rc_host_claim {
    struct rc_itree_node node;
    unsigned generation; /* claims of a fork's parent are no claims here */
    bool by_uffd;
};

static pthread_mutex_t life_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t claims_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static atomic_int kick_fd = -1; /* an eventfd: wakes the thread */
static atomic_bool stopping;
static bool running; /* under life_lock */
static pthread_t thread;
static struct rc_itree claims; /* under claims_lock */
static unsigned generation;
/* Under claims_lock: the claims libc's hooks watch, and the union of their
 * ranges, which only grows until there are none. */
static size_t libc_claims;
static uintptr_t libc_lo = UINTPTR_MAX, libc_hi;
static atomic_bool libc_watching; /* libc_claims != 0, for the thread */

/* The child has no monitor thread, and the parent's fd reports the
 * parent's mappings (the child's lost their registration at the fork):
 * forget both; the child's first cache opens its own.  libc stays
 * patched. */
static void atfork_child(void)
{
    int fd = atomic_exchange(&kick_fd, -1);
    if (fd >= 0)
        close(fd);
    rc_host_uffd_close();
    running = false;
    atomic_store(&stopping, false);
    rc_itree_init(&claims);
    generation++;
    libc_claims = 0;
    libc_lo = UINTPTR_MAX, libc_hi = 0;
    rc_host_libc_watch(libc_lo, libc_hi);
    atomic_store(&libc_watching, false);
    rc_host_events_reset();
    pthread_mutex_init(&life_lock, NULL);
    pthread_mutex_init(&claims_lock, NULL);
}

static void install_atfork(void)
{
    pthread_atfork(NULL, NULL, atfork_child);
}

/* Under life_lock: the eventfd that wakes the thread, opened with the
 * first cache that watches (as the userfaultfd is), not at its first
 * range. */
static bool open_kick_locked(void)
{
    if (atomic_load(&kick_fd) < 0) {
        int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (fd < 0)
            return false;
        atomic_store(&kick_fd, fd);
    }
    return true;
}

#define LIBC_WAYS                                                                       \
    "munmap, mremap, MAP_FIXED, madvise, brk, shmdt, and libc's own unmapping in free " \
    "and realloc"

/* UCX's events: where libucm is loaded and AUTO or UCM asks. */
static enum rc_host_by open_ucm(int mode, char *why, size_t n, char *ucm_why, size_t ucm_n)
{
    if (mode != REGCACHE_HOST_MONITOR_UCM &&
        (mode != REGCACHE_HOST_MONITOR_AUTO || !rc_host_ucm_loaded()))
        return RC_HOST_BY_NONE;
    if (!rc_host_ucm_ensure(ucm_why, ucm_n))
        return RC_HOST_BY_NONE;
    snprintf(why, n,
             "monitored by UCX's memory events (libucm's hooks: " LIBC_WAYS
             ", and UCX's own allocator; a system call made without libc is not seen)");
    return RC_HOST_BY_UCM;
}

enum rc_host_by rc_host_monitor_open(int mode, char *why, size_t n)
{
    pthread_once(&atfork_once, install_atfork);
    pthread_mutex_lock(&life_lock);
    bool kick = open_kick_locked();
    pthread_mutex_unlock(&life_lock);
    if (!kick) {
        snprintf(why, n, "not monitored (eventfd: %s)", strerror(errno));
        return RC_HOST_BY_NONE;
    }
    char ucm_why[200] = "", libc_why[200] = "", uffd_why[160] = "";
    if (open_ucm(mode, why, n, ucm_why, sizeof ucm_why) == RC_HOST_BY_UCM)
        return RC_HOST_BY_UCM;
    bool libc = mode == REGCACHE_HOST_MONITOR_LIBC || mode == REGCACHE_HOST_MONITOR_AUTO;
    if (libc && rc_host_libc_ensure(libc_why, sizeof libc_why)) {
        snprintf(why, n,
                 "monitored by patching libc (" LIBC_WAYS "; a system call made without libc "
                 "is not seen: REGCACHE_HOST_MONITOR=uffd sees those too)");
        return RC_HOST_BY_LIBC;
    }
    int err = 1;
    if (mode == REGCACHE_HOST_MONITOR_UFFD) {
        pthread_mutex_lock(&life_lock);
        err = rc_host_uffd_open(uffd_why, sizeof uffd_why);
        pthread_mutex_unlock(&life_lock);
    }
    if (!err) {
        snprintf(why, n, "monitored by userfaultfd (" LIBC_WAYS ", and system calls)");
        return RC_HOST_BY_UFFD;
    }
    const char *reasons[] = { ucm_why, libc_why, uffd_why };
    int k = snprintf(why, n, "not monitored (");
    bool first = true;
    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++)
        if (reasons[i][0] && k > 0 && (size_t)k < n) {
            k += snprintf(why + k, n - (size_t)k, "%s%s", first ? "" : "; ", reasons[i]);
            first = false;
        }
    if (k > 0 && (size_t)k < n)
        snprintf(why + k, n - (size_t)k, ")");
    return RC_HOST_BY_NONE;
}

void rc_host_monitor_kick(void)
{
    uint64_t one = 1;
    int fd = atomic_load_explicit(&kick_fd, memory_order_acquire);
    if (fd >= 0 && write(fd, &one, sizeof one) < 0) {
        /* A counter already at its maximum has woken the thread. */
    }
}

static void *monitor(void *arg)
{
    (void)arg;
    for (;;) {
        struct pollfd p[2] = { { .fd = atomic_load(&kick_fd), .events = POLLIN },
                               { .fd = rc_host_uffd_fd(), .events = POLLIN } };
        int timeout =
            atomic_load_explicit(&libc_watching, memory_order_relaxed) ? LIBC_DRAIN_MS : -1;
        if (poll(p, 2, timeout) < 0)
            continue; /* EINTR */
        if (p[0].revents & POLLIN) {
            uint64_t count;
            if (read(p[0].fd, &count, sizeof count) < 0) {
                /* Another wake read it: nothing to do. */
            }
            if (atomic_load(&stopping))
                return NULL;
        }
        if (p[1].revents & POLLIN)
            rc_host_uffd_read();
        if (atomic_load_explicit(&libc_watching, memory_order_relaxed))
            rc_host_libc_check();
        /* Draining calls the application (deregistrations, notices): not
         * once it is exiting (exiting.h).  The userfaultfd is still read:
         * unmapping threads wait for that. */
        if (rc_host_monitor_behind() && !rc_exiting())
            rc_host_events_drain(false);
    }
}

/* Under life_lock: the thread, with every signal blocked (the
 * application's handlers run on its threads). */
static bool start_locked(void)
{
    if (running)
        return true;
    if (!open_kick_locked())
        return false;
    atomic_store(&stopping, false);
    rc_exiting_watch();
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    running = !pthread_create(&thread, NULL, monitor, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (running)
        pthread_setname_np(thread, "regcache-mon");
    return running;
}

/* Under claims_lock: a claim for libc's hooks. */
static bool watch_libc_locked(uintptr_t start, uintptr_t end)
{
    libc_lo = start < libc_lo ? start : libc_lo;
    libc_hi = end > libc_hi ? end : libc_hi;
    rc_host_libc_watch(libc_lo, libc_hi);
    bool first = libc_claims++ == 0;
    atomic_store(&libc_watching, true);
    return first;
}

/* The mappings a userfaultfd claim registers: whole, so that watching part
 * of a mapping never splits it (a mapping split in three can no longer be
 * mremap()ed as one).  Found before any lock is taken (finding them may
 * allocate).  False when there are none, or more than fit. */
#define CLAIM_MAPPINGS 16
struct mappings {
    uintptr_t at[CLAIM_MAPPINGS][2];
    int n;
};

static bool mappings_of(uintptr_t start, uintptr_t end, struct mappings *m)
{
    m->n = rc_host_mappings(start, end, m->at, CLAIM_MAPPINGS);
    if (m->n < CLAIM_MAPPINGS)
        return m->n > 0;
    m->n = 0;
    return false;
}

/* Under claims_lock. */
static bool register_mappings_locked(const struct mappings *m)
{
    for (int i = 0; i < m->n; i++)
        if (!rc_host_uffd_register(m->at[i][0], m->at[i][1]))
            return false;
    return true;
}

struct rc_host_claim *rc_host_monitor_watch(uintptr_t start, uintptr_t end, enum rc_host_by by)
{
    struct rc_host_claim *claim = malloc(sizeof *claim);
    if (!claim)
        return NULL;
    claim->node.start = start;
    claim->node.end = end;
    claim->by_uffd = by == RC_HOST_BY_UFFD;
    if (by == RC_HOST_BY_LIBC && !rc_host_libc_check())
        by = RC_HOST_BY_NONE; /* the hooks lost the front for good */
    struct mappings maps;
    if (claim->by_uffd && !mappings_of(start, end, &maps))
        by = RC_HOST_BY_NONE;
    bool first = false;
    pthread_mutex_lock(&life_lock);
    bool ok = by != RC_HOST_BY_NONE && start_locked();
    if (ok) {
        pthread_mutex_lock(&claims_lock);
        ok = !claim->by_uffd || register_mappings_locked(&maps);
        if (ok) {
            claim->generation = generation;
            rc_itree_insert(&claims, &claim->node);
            if (!claim->by_uffd)
                first = watch_libc_locked(start, end);
        }
        pthread_mutex_unlock(&claims_lock);
    }
    pthread_mutex_unlock(&life_lock);
    if (first) /* from now on the thread drains on a timer */
        rc_host_monitor_kick();
    if (ok)
        return claim;
    free(claim);
    return NULL;
}

static int uffd_claim(struct rc_itree_node *n, void *arg)
{
    (void)arg;
    return rc_container_of(n, struct rc_host_claim, node)->by_uffd;
}

void rc_host_monitor_unwatch(struct rc_host_claim *claim)
{
    if (!claim)
        return;
    /* The mappings that hold what is left of the range now (they may have
     * moved, shrunk or gone since the claim was made). */
    struct mappings maps = { .n = 0 };
    if (claim->by_uffd)
        mappings_of(claim->node.start, claim->node.end, &maps);
    pthread_mutex_lock(&claims_lock);
    if (claim->generation == generation) {
        rc_itree_remove(&claims, &claim->node);
        if (claim->by_uffd) {
            for (int i = 0; i < maps.n; i++)
                if (!rc_itree_visit_overlaps(&claims, maps.at[i][0], maps.at[i][1], uffd_claim,
                                             NULL))
                    rc_host_uffd_unregister(maps.at[i][0], maps.at[i][1]);
        } else if (--libc_claims == 0) {
            libc_lo = UINTPTR_MAX, libc_hi = 0;
            rc_host_libc_watch(libc_lo, libc_hi);
            atomic_store(&libc_watching, false);
        }
    }
    pthread_mutex_unlock(&claims_lock);
    free(claim);
}

struct ranges {
    uintptr_t (*at)[2];
    size_t n, room;
};

static int collect(struct rc_itree_node *n, void *arg)
{
    struct ranges *r = arg;
    if (r->n < r->room) {
        r->at[r->n][0] = n->start;
        r->at[r->n][1] = n->end;
        r->n++;
    }
    return 0;
}

void rc_host_monitor_invalidate_watched(void)
{
    pthread_mutex_lock(&claims_lock);
    size_t room = claims.count;
    uintptr_t lo = libc_lo, hi = libc_hi;
    pthread_mutex_unlock(&claims_lock);
    struct ranges r = { malloc(room * sizeof *r.at + 1), 0, room };
    if (!r.at) { /* every range libc's hooks watch, and what lies between */
        if (lo < hi)
            rc_registry_invalidate(lo, hi, REGCACHE_REASON_FREED_MONITOR);
        return;
    }
    pthread_mutex_lock(&claims_lock);
    rc_itree_visit_overlaps(&claims, 0, UINTPTR_MAX, collect, &r);
    pthread_mutex_unlock(&claims_lock);
    for (size_t i = 0; i < r.n; i++)
        rc_registry_invalidate(r.at[i][0], r.at[i][1], REGCACHE_REASON_FREED_MONITOR);
    free(r.at);
}

void rc_host_monitor_catch_up(void)
{
    if (rc_host_events_draining())
        return;
    uint64_t w = atomic_load_explicit(&rc_host_monitor_line.events, memory_order_acquire);
    uint32_t target = (uint32_t)(w >> 32);
    while ((int32_t)((uint32_t)w - target) < 0) {
        rc_host_events_drain(true);
        w = atomic_load_explicit(&rc_host_monitor_line.events, memory_order_acquire);
        if ((int32_t)((uint32_t)w - target) < 0) /* a read of the userfaultfd under way */
            sched_yield();
    }
}

/* Stop the thread and close the fds when nothing is watched, or `always`
 * (at unload: closing the userfaultfd lets every waiter go, and the kernel
 * forgets every registration with it). */
static void stop(bool always)
{
    pthread_mutex_lock(&life_lock);
    pthread_mutex_lock(&claims_lock);
    bool watching = claims.count != 0;
    pthread_mutex_unlock(&claims_lock);
    /* A watched range's unmap waits for a reader: the thread stays. */
    if (watching && !always) {
        pthread_mutex_unlock(&life_lock);
        return;
    }
    if (running) {
        atomic_store(&stopping, true);
        rc_host_monitor_kick();
        pthread_join(thread, NULL);
        running = false;
    }
    int fd = atomic_exchange(&kick_fd, -1);
    if (fd >= 0)
        close(fd);
    pthread_mutex_lock(&claims_lock);
    rc_host_uffd_close();
    pthread_mutex_unlock(&claims_lock);
    pthread_mutex_unlock(&life_lock);
}

void rc_host_monitor_idle(void)
{
    if (!regcache_cache_count())
        stop(false);
}

__attribute__((destructor)) static void unload(void)
{
    stop(true);
}
