/* The host memory monitor (host_monitor.h): the claims, the choice of how
 * to hear of unmaps, and the thread regcache-mon, which drains the queue of
 * unmaps when no get does and gives the deregistrations and notices that
 * drains leave.
 *
 * An unmapping thread may hold anything while it waits for the userfaultfd
 * to be read: its reader (host_reader.h) takes no lock.  claims_lock (the
 * tree of claims, the ioctl()s on the userfaultfd) is never held across an
 * allocation, a free or a munmap all the same.
 *
 * Locks: life_lock (start and stop of the threads, opening and closing the
 * fds; never taken by the threads) before claims_lock. */
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
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "exiting.h"
#include "host_leave.h"
#include "host_libc.h"
#include "host_mapping.h"
#include "host_objects.h"
#include "host_reader.h"
#include "host_ucm.h"
#include "host_uffd.h"
#include "host_unmapping.h"
#include "range_filter.h"

/* How long the posts of the hooks (libc's or UCX's) may wait for a drain when the wake
 * that each post gives was lost: the pages their entries pin are held that
 * long. */
#define HOOKS_DRAIN_MS 50
/* While unmaps come, the thread looks this often instead of being woken
 * by each (a write, some hundreds of nanoseconds of the unmapping
 * thread's), and keeps doing so for this many looks after the last. */
#define POLL_NS 100000
#define QUIET_POLLS 100

struct rc_host_claim {
    struct rc_itree_node node;
    unsigned generation; /* claims of a fork's parent are no claims here */
    bool by_uffd;
};

static pthread_mutex_t life_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t claims_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static atomic_int kick_fd = -1; /* an eventfd: wakes the thread */
/* A wake is on its way, or the thread looks soon anyway: the hooks need
 * not write. */
static atomic_bool kicked;
/* A drain left deregistrations or notices for the thread to give. */
static atomic_bool release_due;
/* What the caches' side does with what the monitor hears (set at open). */
static _Atomic(const struct rc_host_sink *) sink;
static atomic_bool stopping;
static bool running; /* under life_lock */
static pthread_t thread;
static struct rc_itree claims; /* under claims_lock */
static unsigned generation;
/* Under claims_lock: the claims hooks watch (libc's or UCX's). */
static size_t hook_claims;
static atomic_bool hooks_watching; /* hook_claims != 0, for the thread */
/* The ranges of the claims hooks watch, for the hooks to ask
 * without a lock (written under claims_lock); `watched_ready` once its
 * first table is there. */
static struct rc_range_filter watched;
static atomic_bool watched_ready;

/* The child has none of the monitor's threads, and the parent's fd reports
 * the parent's mappings (the child's lost their registration at the fork):
 * forget them, the claims, and the unmaps other threads had in flight;
 * the child's first cache opens its own.  libc stays patched. */
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
    hook_claims = 0;
    atomic_store(&hooks_watching, false);
    if (atomic_load(&watched_ready))
        rc_filter_clear(&watched);
    atomic_store(&kicked, false);
    rc_host_reader_forget();
    rc_host_unmapping_forget();
    atomic_store(&release_due, false);
    rc_host_events_reset();
    pthread_mutex_init(&life_lock, NULL);
    pthread_mutex_init(&claims_lock, NULL);
}

static void install_atfork(void)
{
    pthread_atfork(NULL, NULL, atfork_child);
}

/* Under life_lock: the eventfd that wakes the thread and the filter of
 * watched ranges, made with the first cache that watches (as the
 * userfaultfd is), not at its first range. */
static bool open_kick_locked(void)
{
    if (!atomic_load(&watched_ready)) {
        if (rc_filter_init(&watched) != REGCACHE_OK)
            return false;
        atomic_store_explicit(&watched_ready, true, memory_order_release);
    }
    if (atomic_load(&kick_fd) < 0) {
        int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (fd < 0)
            return false;
        atomic_store(&kick_fd, fd);
    }
    return true;
}

/* What each way sees, and what it cannot watch (design.md "Host memory monitor"). */
#define CALLS_SEEN "munmap, mremap, MAP_FIXED, madvise, brk and shmat(SHM_REMAP)"
#define LIBC_SEES                                                                       \
    CALLS_SEEN " through libc, free and realloc included; not seen: system calls made " \
               "without libc"
#define UCM_SEES                                                                    \
    CALLS_SEEN " through libucm's hooks, free and realloc included, and UCX's own " \
               "allocator's; not seen: system calls made without libc"
#define UFFD_SEES                                                                              \
    "every unmap, system calls included, but not shmat(SHM_REMAP), and a get racing an unmap " \
    "may cache the pages it takes"
#define NOT_WATCHED "not watched (invalidate those yourself): shared mappings"
#define NOR_OBJECTS " and the segments of objects dlopen() loads"

/* UCX's events: where libucm is loaded and AUTO or UCM asks. */
static bool open_ucm(int mode, const char *asked, char *why, size_t n, char *ucm_why, size_t ucm_n)
{
    if (mode != REGCACHE_HOST_MONITOR_UCM &&
        (mode != REGCACHE_HOST_MONITOR_AUTO || !rc_host_ucm_loaded()))
        return false;
    if (!rc_host_ucm_ensure(ucm_why, ucm_n))
        return false;
    snprintf(why, n,
             "monitored by UCX's memory events (%s): " UCM_SEES "; " NOT_WATCHED NOR_OBJECTS,
             asked);
    return true;
}

/* Why not, every way that was tried. */
static void not_monitored(const char *asked, const char *const reasons[], size_t count, char *why,
                          size_t n)
{
    int k = snprintf(why, n, "not monitored (%s", asked);
    for (size_t i = 0; i < count; i++)
        if (reasons[i][0] && k > 0 && (size_t)k < n)
            k += snprintf(why + k, n - (size_t)k, "; %s", reasons[i]);
    if (k > 0 && (size_t)k < n)
        snprintf(why + k, n - (size_t)k, "): invalidate before unmapping");
}

/* What a get of host memory asks while the monitor is behind. */
static const struct rc_host_seam seam = {
    .catch_up = rc_host_monitor_catch_up,
    .concern = rc_host_events_concern,
};

/* What the hooks ask of it. */
static const struct rc_host_watcher watcher = {
    .may_watch = rc_host_monitor_may_watch,
    .kick = rc_host_monitor_kick,
};

enum rc_host_by rc_host_monitor_open(int mode, const char *asked, char *why, size_t n,
                                     const struct rc_host_sink *to)
{
    pthread_once(&atfork_once, install_atfork);
    atomic_store_explicit(&sink, to, memory_order_release);
    rc_host_seam_install(&seam);
    rc_host_leave_tell(&watcher);
    pthread_mutex_lock(&life_lock);
    bool kick = open_kick_locked();
    pthread_mutex_unlock(&life_lock);
    if (!kick) {
        snprintf(why, n, "not monitored (%s; eventfd: %s)", asked, strerror(errno));
        return RC_HOST_BY_NONE;
    }
    char ucm_why[200] = "", libc_why[200] = "", uffd_why[160] = "";
    if (open_ucm(mode, asked, why, n, ucm_why, sizeof ucm_why))
        return RC_HOST_BY_UCM;
    bool libc = mode == REGCACHE_HOST_MONITOR_LIBC || mode == REGCACHE_HOST_MONITOR_AUTO;
    if (libc && rc_host_libc_ensure(libc_why, sizeof libc_why)) {
        snprintf(why, n, "monitored by patching libc (%s): " LIBC_SEES "; " NOT_WATCHED NOR_OBJECTS,
                 asked);
        return RC_HOST_BY_LIBC;
    }
    /* The userfaultfd cannot close the unmap window, and changes how the
     * mappings it watches merge: only when asked. */
    int err = 1;
    if (mode == REGCACHE_HOST_MONITOR_UFFD) {
        pthread_mutex_lock(&life_lock);
        err = rc_host_uffd_open(uffd_why, sizeof uffd_why);
        pthread_mutex_unlock(&life_lock);
    }
    if (!err) {
        snprintf(why, n, "monitored by userfaultfd (%s): " UFFD_SEES "; " NOT_WATCHED, asked);
        return RC_HOST_BY_UFFD;
    }
    if (mode == REGCACHE_HOST_MONITOR_AUTO)
        snprintf(uffd_why, sizeof uffd_why,
                 "AUTO never takes the userfaultfd, which cannot close the unmap window");
    const char *const reasons[] = { ucm_why, libc_why, uffd_why };
    not_monitored(asked, reasons, sizeof reasons / sizeof reasons[0], why, n);
    return RC_HOST_BY_NONE;
}

/* Wake the thread (async-signal-safe). */
static void wake(void)
{
    uint64_t one = 1;
    int fd = atomic_load_explicit(&kick_fd, memory_order_acquire);
    if (fd >= 0 && write(fd, &one, sizeof one) < 0) {
        /* A counter already at its maximum has woken the thread. */
    }
}

void rc_host_monitor_kick(void)
{
    /* A queue half full is drained now, whatever the thread is doing: it
     * would overflow before the next look. */
    if ((!atomic_load_explicit(&kicked, memory_order_seq_cst) &&
         !atomic_exchange_explicit(&kicked, true, memory_order_seq_cst)) ||
        rc_host_events_crowded())
        wake();
}

bool rc_host_monitor_may_watch(uintptr_t start, uintptr_t end)
{
    return atomic_load_explicit(&watched_ready, memory_order_acquire) &&
           rc_filter_may_overlap(&watched, start, end);
}

/* What a drain does with what it takes: handed to the queue. */
static bool unmapped(uintptr_t start, uintptr_t end);
static bool everything(void);
static void release_later(void);
static const struct rc_host_drain drain = {
    .range = unmapped,
    .everything = everything,
    .later = release_later,
};

/* Handle what was posted; false when a get was draining (it began before
 * those posts): then the thread looks again soon.  It never waits for the
 * drain lock, which a get's drain holds while it takes the caches'
 * locks. */
static bool drained(void)
{
    return !rc_host_monitor_behind() || rc_host_events_drain(false, &drain) ||
           !rc_host_monitor_behind();
}

static void release_later(void)
{
    atomic_store_explicit(&release_due, true, memory_order_seq_cst);
    rc_host_monitor_kick();
}

/* What the drains left: given here, where no lock is held, no drain is
 * under way and nobody waits (the userfaultfd has its own reader), so a
 * callback that waits for an application's lock stalls nothing but this
 * thread. */
static bool release(void)
{
    if (!atomic_exchange_explicit(&release_due, false, memory_order_seq_cst))
        return false;
    /* Those call the application: not once it is exiting (exiting.h).  The
     * entries stay out of the caches, and their destroy deregisters them. */
    if (rc_exiting())
        return false;
    atomic_load_explicit(&sink, memory_order_acquire)->release();
    return true;
}

static void *monitor(void *arg)
{
    (void)arg;
    /* Busy: unmaps came lately, and the thread looks every POLL_NS, which
     * the hooks know by `kicked` (they write nothing then); after
     * QUIET_POLLS looks that found nothing it sleeps until woken. */
    bool busy = false;
    unsigned quiet = 0;
    /* Looks every POLL_NS, not the 50 us later the default slack allows. */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    for (;;) {
        struct pollfd p = { .fd = atomic_load(&kick_fd), .events = POLLIN };
        struct timespec soon = { 0, POLL_NS }, later = { 0, HOOKS_DRAIN_MS * 1000000L };
        const struct timespec *timeout =
            busy                                                          ? &soon
            : atomic_load_explicit(&hooks_watching, memory_order_relaxed) ? &later
                                                                          : NULL;
        if (ppoll(&p, 1, timeout, NULL) < 0)
            continue; /* EINTR */
        bool woken = p.revents & POLLIN;
        if (woken) {
            uint64_t count;
            if (read(p.fd, &count, sizeof count) < 0) {
                /* Another wake read it: nothing to do. */
            }
            if (atomic_load(&stopping))
                return NULL;
        }
        if (atomic_load_explicit(&hooks_watching, memory_order_relaxed))
            rc_host_libc_check();
        bool work = rc_host_monitor_behind();
        bool left = !drained();
        if (release() || left || work || woken) {
            busy = true, quiet = 0;
            atomic_store_explicit(&kicked, true, memory_order_relaxed);
        } else if (busy && ++quiet == QUIET_POLLS) {
            /* A post or a drain after this store writes; one before it is
             * seen by the looks that follow (all seq_cst). */
            atomic_store_explicit(&kicked, false, memory_order_seq_cst);
            busy = rc_host_monitor_behind() ||
                   atomic_load_explicit(&release_due, memory_order_seq_cst);
            quiet = 0;
            if (busy)
                atomic_store_explicit(&kicked, true, memory_order_relaxed);
        }
    }
}

/* Under life_lock: the thread, with every signal blocked (the
 * application's handlers run on its threads).  Started once for good: it
 * stops only when no range is watched. */
static bool start_locked(void)
{
    if (running)
        return true;
    if (!open_kick_locked())
        return false;
    atomic_store(&stopping, false);
    rc_exiting_watch();
    /* A thread that stopped busy left the flag set: this one sleeps until
     * the first post writes. */
    atomic_store(&kicked, false);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    running = !pthread_create(&thread, NULL, monitor, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (running)
        pthread_setname_np(thread, "regcache-mon");
    return running;
}

/* Under life_lock: the thread, and the userfaultfd's reader once it is
 * open. */
static bool start_all_locked(void)
{
    return start_locked() && (rc_host_uffd_fd() < 0 || rc_host_reader_start(rc_host_monitor_kick));
}

/* Under claims_lock: a claim that hooks watch. */
static bool watch_hooks_locked(void)
{
    bool first = hook_claims++ == 0;
    atomic_store(&hooks_watching, true);
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

/* The claims' filter asked to grow: a larger table, made without the lock
 * (claims_lock is never held across an allocation), filled with every
 * claim under it, unless another grew it meanwhile. */
static int refill(struct rc_itree_node *n, void *table)
{
    if (!rc_container_of(n, struct rc_host_claim, node)->by_uffd)
        rc_filter_refill(table, n->start, n->end);
    return 0;
}

static void grow_watched(void)
{
    struct rc_filter_table *t = rc_filter_grow_begin(&watched), *spare = t;
    if (!t)
        return;
    pthread_mutex_lock(&claims_lock);
    if (rc_filter_grows_into(&watched, t)) {
        rc_itree_visit_overlaps(&claims, 0, UINTPTR_MAX, refill, t);
        rc_filter_grow_end(&watched, t);
        spare = NULL;
    }
    pthread_mutex_unlock(&claims_lock);
    free(spare);
}

/* Whether the way can watch [start, end): not a shared mapping (its pages
 * may go through its file or another process), nor - through hooks,
 * libc's or UCX's - a loaded object's segment (dlclose() unmaps it with
 * the loader's own munmap; the userfaultfd sees that). */
static bool watchable(uintptr_t start, uintptr_t end, enum rc_host_by by,
                      enum rc_host_sharing sharing)
{
    bool private = sharing == RC_HOST_SHARING_UNKNOWN ? rc_host_mapping_private(start, end)
                                                      : sharing == RC_HOST_PRIVATE;
    return private && (by == RC_HOST_BY_UFFD || !rc_host_object_overlaps(start, end));
}

struct rc_host_claim *rc_host_monitor_watch(uintptr_t start, uintptr_t end, enum rc_host_by by,
                                            enum rc_host_sharing sharing)
{
    if (by == RC_HOST_BY_NONE || !watchable(start, end, by, sharing))
        return NULL;
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
    bool first = false, crowded = false;
    pthread_mutex_lock(&life_lock);
    bool ok = by != RC_HOST_BY_NONE && start_all_locked();
    if (ok) {
        pthread_mutex_lock(&claims_lock);
        ok = !claim->by_uffd || register_mappings_locked(&maps);
        if (ok) {
            claim->generation = generation;
            rc_itree_insert(&claims, &claim->node);
            if (!claim->by_uffd) {
                crowded = rc_filter_add(&watched, start, end);
                first = watch_hooks_locked();
            }
        }
        pthread_mutex_unlock(&claims_lock);
    }
    pthread_mutex_unlock(&life_lock);
    /* A hook that began before its range was in the filter and did not see
     * it is in flight (host_unmapping.h) when the caller looks next. */
    atomic_thread_fence(memory_order_seq_cst);
    if (first) /* from now on the thread drains on a timer */
        wake();
    if (crowded)
        grow_watched();
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
        } else {
            rc_filter_remove(&watched, claim->node.start, claim->node.end);
            if (--hook_claims == 0)
                atomic_store(&hooks_watching, false);
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

static bool unmapped(uintptr_t start, uintptr_t end)
{
    return atomic_load_explicit(&sink, memory_order_acquire)->unmapped(start, end);
}

/* Every watched range's entries leave (the queue overflowed). */
static bool everything(void)
{
    pthread_mutex_lock(&claims_lock);
    size_t room = claims.count;
    pthread_mutex_unlock(&claims_lock);
    struct ranges r = { malloc(room * sizeof *r.at + 1), 0, room };
    if (!r.at) /* every range, watched or not */
        return unmapped(0, UINTPTR_MAX);
    pthread_mutex_lock(&claims_lock);
    rc_itree_visit_overlaps(&claims, 0, UINTPTR_MAX, collect, &r);
    pthread_mutex_unlock(&claims_lock);
    bool later = false;
    for (size_t i = 0; i < r.n; i++)
        later |= unmapped(r.at[i][0], r.at[i][1]);
    free(r.at);
    return later;
}

bool rc_host_monitor_unsettled(const struct rc_host_claim *claim)
{
    return rc_host_unmapping_meets(claim->node.start, claim->node.end);
}

void rc_host_monitor_catch_up(void)
{
    uint64_t w = atomic_load_explicit(&rc_host_monitor_line.events, memory_order_acquire);
    uint32_t target = (uint32_t)(w >> 32);
    while ((int32_t)((uint32_t)w - target) < 0) {
        rc_host_events_drain(true, &drain);
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
        wake();
        pthread_join(thread, NULL);
        running = false;
    }
    rc_host_reader_stop();
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
