/* The host memory monitor (host_monitor.h).
 *
 * A userfaultfd registered over a range in write-protect mode, with no page
 * ever protected, raises no fault: it only reports what happens to the
 * range's mappings (UFFD_EVENT_UNMAP, _REMOVE, _REMAP).  The kernel sees
 * those wherever they come from - a call through the PLT, libc's own
 * internal munmap in free(), a raw system call - so nothing is patched and
 * nothing interferes with other libraries that patch libc (UCX's ucm,
 * libfabric's memhooks).  A range another userfaultfd already watches
 * cannot be registered again (EBUSY): that range stays unwatched.
 *
 * The unmapping thread blocks in the kernel until the monitor has read its
 * event; the events word (host_monitor.h) closes the gap between that read
 * and the invalidation.  The monitor therefore never waits for anything an
 * unmapping thread may hold before it reads: it takes no lock between
 * poll() and read(), and the claims lock, taken by others around their
 * ioctl()s only, is never held across an allocation, a free or a munmap.
 *
 * Locks: life_lock (start and stop of the thread, opening and closing the
 * fd; never taken by the monitor thread) before claims_lock (the tree of
 * claims and the ioctl()s on the fd). */
#include "host_monitor.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cache.h"

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef UFFD_FEATURE_WP_HUGETLBFS_SHMEM
#define UFFD_FEATURE_WP_HUGETLBFS_SHMEM 0
#endif

#define EVENTS (UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP)

struct rc_host_claim {
    struct rc_itree_node node;
    unsigned generation; /* claims of a fork's parent are no claims here */
};

struct rc_host_monitor_line rc_host_monitor_line;

static pthread_mutex_t life_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t claims_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static int uffd = -1, stop_fd = -1; /* under both locks to change */
static bool running;                /* under life_lock */
static pthread_t thread;
static struct rc_itree claims; /* under claims_lock */
static unsigned generation;
static _Thread_local bool on_monitor;

/* The child has no monitor thread, and the parent's fd reports the
 * parent's mappings (the child's lost their registration at the fork):
 * forget both; the child's first cache opens its own. */
static void atfork_child(void)
{
    if (uffd >= 0)
        close(uffd);
    if (stop_fd >= 0)
        close(stop_fd);
    uffd = stop_fd = -1;
    running = false;
    rc_itree_init(&claims);
    generation++;
    atomic_store(&rc_host_monitor_line.events, 0);
    pthread_mutex_init(&life_lock, NULL);
    pthread_mutex_init(&claims_lock, NULL);
}

static void install_atfork(void)
{
    pthread_atfork(NULL, NULL, atfork_child);
}

/* A userfaultfd that reports the events, with write-protect registration
 * of shared memory too where the kernel has it; -1 and errno otherwise. */
static int open_uffd(uint64_t features)
{
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    if (fd < 0 && errno == EINVAL) /* before Linux 5.11 */
        fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -1;
    struct uffdio_api api = { .api = UFFD_API, .features = features };
    if (ioctl(fd, UFFDIO_API, &api) || !(api.features & UFFD_FEATURE_PAGEFAULT_FLAG_WP) ||
        !(api.ioctls & (1ull << _UFFDIO_REGISTER))) {
        int e = errno ? errno : ENOSYS;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* Under life_lock: the fd, open; 0 or an errno. */
static int open_locked(void)
{
    int err = 0;
    if (uffd < 0) {
        errno = 0;
        int fd = open_uffd(EVENTS | UFFD_FEATURE_WP_HUGETLBFS_SHMEM);
        if (fd < 0 && errno == EINVAL) /* a kernel without it for shared memory */
            fd = open_uffd(EVENTS);
        int sfd = fd < 0 ? -1 : eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        err = fd < 0 || sfd < 0 ? errno : 0;
        if (!err) {
            pthread_mutex_lock(&claims_lock);
            uffd = fd, stop_fd = sfd;
            pthread_mutex_unlock(&claims_lock);
        } else if (fd >= 0) {
            close(fd);
        }
    }
    return err;
}

int rc_host_monitor_open(char *why, size_t n)
{
    pthread_once(&atfork_once, install_atfork);
    pthread_mutex_lock(&life_lock);
    int err = open_locked();
    pthread_mutex_unlock(&life_lock);
    if (err) {
        snprintf(why, n, "not monitored (userfaultfd: %s%s)", strerror(err),
                 err == EPERM ? "; vm.unprivileged_userfaultfd=0 or a seccomp filter" : "");
        return 0;
    }
    snprintf(why, n,
             "monitored by userfaultfd (munmap, mremap, MAP_FIXED, madvise, brk, "
             "and libc's own unmapping in free and realloc)");
    return 1;
}

static void handle(const struct uffd_msg *m)
{
    switch (m->event) {
    case UFFD_EVENT_UNMAP:
    case UFFD_EVENT_REMOVE:
        rc_registry_invalidate((uintptr_t)m->arg.remove.start, (uintptr_t)m->arg.remove.end,
                               REGCACHE_REASON_FREED_MONITOR);
        break;
    case UFFD_EVENT_REMAP:
        rc_registry_invalidate((uintptr_t)m->arg.remap.from,
                               (uintptr_t)(m->arg.remap.from + m->arg.remap.len), REGCACHE_REASON_FREED_MONITOR);
        break;
    default:
        break; /* no page is protected: no fault can come */
    }
}

/* Read the events the kernel queued and invalidate what they name.  The
 * read count goes up before the read: a thread that the read lets return
 * from its munmap finds the counts apart until the invalidation is done. */
static void drain(int fd)
{
    struct uffd_msg msgs[64];
    uint64_t w = atomic_load_explicit(&rc_host_monitor_line.events, memory_order_relaxed);
    uint64_t read_count = (w >> 32) + 1;
    atomic_store_explicit(&rc_host_monitor_line.events, read_count << 32 | (uint32_t)w,
                          memory_order_seq_cst);
    ssize_t got = read(fd, msgs, sizeof msgs);
    for (ssize_t i = 0; i < got / (ssize_t)sizeof msgs[0]; i++)
        handle(&msgs[i]);
    atomic_store_explicit(&rc_host_monitor_line.events, read_count << 32 | (uint32_t)read_count,
                          memory_order_release);
}

static void *monitor(void *arg)
{
    (void)arg;
    on_monitor = true;
    struct pollfd p[2] = { { .fd = uffd, .events = POLLIN }, { .fd = stop_fd, .events = POLLIN } };
    for (;;) {
        if (poll(p, 2, -1) < 0)
            continue; /* EINTR */
        if (p[1].revents)
            return NULL;
        if (p[0].revents & POLLIN)
            drain(p[0].fd);
    }
}

/* Under life_lock, with the fd open: the thread, named for `top`, with
 * every signal blocked (the application's handlers run on its threads). */
static bool start_locked(void)
{
    if (running)
        return true;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    running = !pthread_create(&thread, NULL, monitor, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (running)
        pthread_setname_np(thread, "regcache-mon");
    return running;
}

struct rc_host_claim *rc_host_monitor_watch(uintptr_t start, uintptr_t end)
{
    struct rc_host_claim *claim = malloc(sizeof *claim);
    if (!claim)
        return NULL;
    claim->node.start = start;
    claim->node.end = end;
    pthread_mutex_lock(&life_lock);
    bool ok = !open_locked() && start_locked();
    if (ok) {
        pthread_mutex_lock(&claims_lock);
        struct uffdio_register r = { .range = { start, end - start },
                                     .mode = UFFDIO_REGISTER_MODE_WP };
        ok = !ioctl(uffd, UFFDIO_REGISTER, &r);
        if (ok) {
            claim->generation = generation;
            rc_itree_insert(&claims, &claim->node);
        }
        pthread_mutex_unlock(&claims_lock);
    }
    pthread_mutex_unlock(&life_lock);
    if (ok)
        return claim;
    free(claim);
    return NULL;
}

/* The pages of [at, end) no remaining claim covers (claims come in order
 * of start) leave the userfaultfd. */
struct gaps {
    uintptr_t at, end;
};

static void unregister(uintptr_t start, uintptr_t end)
{
    struct uffdio_range r = { start, end - start };
    (void)ioctl(uffd, UFFDIO_UNREGISTER, &r); /* gone already: nothing to undo */
}

static int skip_claimed(struct rc_itree_node *n, void *arg)
{
    struct gaps *g = arg;
    if (n->start > g->at)
        unregister(g->at, n->start < g->end ? n->start : g->end);
    if (n->end > g->at)
        g->at = n->end;
    return 0;
}

void rc_host_monitor_unwatch(struct rc_host_claim *claim)
{
    if (!claim)
        return;
    pthread_mutex_lock(&claims_lock);
    if (claim->generation == generation && uffd >= 0) {
        rc_itree_remove(&claims, &claim->node);
        struct gaps g = { claim->node.start, claim->node.end };
        rc_itree_visit_overlaps(&claims, g.at, g.end, skip_claimed, &g);
        if (g.at < g.end)
            unregister(g.at, g.end);
    }
    pthread_mutex_unlock(&claims_lock);
    free(claim);
}

void rc_host_monitor_catch_up(void)
{
    if (on_monitor)
        return;
    uint64_t w = atomic_load_explicit(&rc_host_monitor_line.events, memory_order_acquire);
    uint32_t target = (uint32_t)(w >> 32);
    while ((int32_t)((uint32_t)w - target) < 0) {
        sched_yield();
        w = atomic_load_explicit(&rc_host_monitor_line.events, memory_order_acquire);
    }
}

/* Stop the thread and close the fd when nothing is watched, or `always`
 * (at unload: closing the fd lets every waiter go, and the kernel forgets
 * every registration with it). */
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
        uint64_t one = 1;
        if (write(stop_fd, &one, sizeof one) == sizeof one)
            pthread_join(thread, NULL);
        running = false;
    }
    pthread_mutex_lock(&claims_lock);
    if (uffd >= 0) {
        close(uffd);
        close(stop_fd);
        uffd = stop_fd = -1;
    }
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
