/* Registration off the critical path: ranges queued for background worker
 * threads (regcache_prefetch, a non-blocking get's miss, eager registration
 * of new allocations), and what those registrations leave for the gets
 * that follow.
 *
 * A queued range is registered by a worker through the miss path itself
 * (rc_slow_get without an entry to hand out), so everything a get racing
 * another get gets comes with it: a get of a range whose registration is
 * in flight waits for it, a registration that an invalidation overlapped
 * never enters the cache.  Its entry is speculative until a get uses it:
 * stamped with LRU epoch 0, the oldest there is, it is evicted first, and
 * its registration evicts no entry that a get ever used.
 *
 * Each job of the queue stays listed (by range and rail) from its queueing
 * to the end of its registration, so the same range is not queued twice;
 * the listing's size bounds the queue.  A worker's failure is kept for the
 * next get of that range and rail, which returns it (with its message)
 * instead of registering again; an invalidation of the range forgets it,
 * and a get that finds other memory there (struct rc_memory_id) drops it. */
#ifndef RC_PREFETCH_H
#define RC_PREFETCH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache_lock.h"
#include "entry.h"
#include "worker_sizer.h"

struct regcache;

/* Failures kept for the gets that follow; older ones give way. */
#define RC_PREFETCH_FAILURES 32

/* Which allocation a notice reports, and so what an eager registration of
 * it may assume (workers.c). */
enum rc_eager {
    RC_EAGER_NONE,  /* no allocation: a free, or a range asked for */
    RC_EAGER_ALLOC, /* memory of any kind (regcache_notify_alloc) */
    RC_EAGER_HOST   /* pinned host memory (regcache_notify_host_alloc) */
};

struct rc_job {
    uintptr_t start, end;
    unsigned rail;
    unsigned want;            /* the access asked for (struct rc_req) */
    enum rc_eager from;       /* the allocation the hooks reported, if any */
    struct rc_job *next;      /* the queue, or the free list */
    struct rc_job *hash_next; /* its bucket: queued or being registered */
};

/* What identified the memory a failure was about: the buffer id at its
 * start (device and pinned memory), and, for memory without one, whether
 * its pages were mapped.  A failure is kept while they stay the same. */
struct rc_memory_id {
    uint64_t tag;
    bool mapped;
};

struct rc_failure {
    uintptr_t start, end; /* end == 0: an empty record */
    unsigned rail;
    int status;
    struct rc_memory_id memory;
    char message[200];
};

struct rc_prefetch {
    struct rc_lock lock; /* everything below but the counters */
    struct rc_cond work; /* a job was queued, or the workers must stop */
    struct rc_cond idle; /* the last listed job ended */
    size_t listed;       /* jobs queued or being registered */
    unsigned idle_waiters;
    struct rc_job *jobs, *free, *head, *tail;
    /* Jobs in the queue (changed under the lock): what idle workers watch
     * without it before they sleep (workers.c). */
    atomic_size_t waiting;
    struct rc_job **buckets;
    size_t capacity, nbuckets;
    pthread_t *threads;
    unsigned nthreads, started, sleeping;
    /* Workers registering now, at most sizer.limit (worker_sizer.h), and
     * sleepers signalled that have not woken yet. */
    unsigned busy, woken;
    struct rc_sizer sizer;
    bool watching; /* an idle worker watches the queue before it sleeps */
    bool stopping;
    /* RC_PREFETCH_FAILURES of them, made with the queue; how many are
     * kept is struct regcache's prefetch_failures_kept. */
    struct rc_failure *failed;
    unsigned failed_next;
    atomic_uint_fast64_t queued, failures, dropped;
};

/* Set in the workers: a backend callback there must not wait for the
 * queue it is part of. */
extern __thread bool rc_in_worker __attribute__((tls_model("initial-exec")));

/* Set around a get with REGCACHE_GET_NONBLOCK: its miss queues the range
 * and returns REGCACHE_ERR_AGAIN (rc_nonblock_miss). */
extern __thread bool rc_get_nonblocking __attribute__((tls_model("initial-exec")));

/* Queue [start, end) on `rail` for a worker; REGCACHE_OK when queued or
 * already queued or in flight, ERR_QUEUE_FULL, ERR_NO_MEMORY (the queue or
 * the first worker could not be made), ERR_INVALID after the cache began
 * to stop. */
int rc_prefetch_queue(struct regcache *c, uintptr_t start, uintptr_t end, struct rc_req rq,
                      enum rc_eager from);

/* A miss of a non-blocking get: a failure kept for the range, or the range
 * queued and REGCACHE_ERR_AGAIN (or why it could not be). */
int rc_nonblock_miss(struct regcache *c, uintptr_t start, uintptr_t end, struct rc_req rq);

/* The status of a failed background registration of a range overlapping
 * [start, end) on `rail`, taken (with its message), or REGCACHE_OK; a
 * failure about memory that is no longer there is dropped instead.  Asks
 * the memory query (or, for host memory, the kernel) only when a failure
 * is kept for the range. */
int rc_prefetch_take_failure(struct regcache *c, uintptr_t start, uintptr_t end, unsigned rail);

/* The memory of [start, end) went away: its kept failures no longer say
 * anything of what may be allocated there next. */
void rc_prefetch_forget(struct regcache *c, uintptr_t start, uintptr_t end);

/* regcache_notify_alloc()'s per-cache step: with eager registration on, a
 * large enough allocation is queued on the chosen rails; pinned host
 * memory only where the cache takes host memory. */
void rc_eager_notify(struct regcache *c, uintptr_t start, uintptr_t end, enum rc_eager from);

/* Destroy: queued jobs are dropped, the worker threads finish the
 * registrations they are in and are joined; in a fork child, whose
 * workers were the parent's, nothing is waited for. */
void rc_prefetch_stop(struct regcache *c);

/* ---- workers (workers.c) ------------------------------------------------ */

/* Under p's lock: start the cache's workers unless they run (a thread
 * that cannot start is left out while one runs); REGCACHE_OK or
 * ERR_NO_MEMORY. */
int rc_workers_start_locked(struct regcache *c);

/* Join the workers of c, which were told to stop. */
void rc_workers_join(struct regcache *c);

/* Under p's lock, after jobs were queued or the limit rose: wake sleeping
 * workers for the queued jobs that no awake one will take and the limit
 * lets run.  A wake is a system call: none while awake workers suffice. */
void rc_workers_wake_locked(struct rc_prefetch *p);

/* A worker's job ended (registered, failed, or nothing to do): let go of
 * its listing; `status` and the thread's last error are kept for the next
 * get when it failed.  Takes p's lock. */
void rc_prefetch_done(struct regcache *c, struct rc_job *job, int status);

/* Under p's lock: the next queued job, or NULL. */
struct rc_job *rc_prefetch_next_locked(struct rc_prefetch *p);

#endif
