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
 * and a get that finds other memory there (struct rc_memory_id) drops it.
 *
 * A feature on the cache's edge (listeners.h): it hears a get's miss
 * before it registers (a kept failure, or a non-blocking get's range to
 * queue), allocations (eager registration), invalidations while it keeps
 * failures, and the destroy.  The room's files, from the top: the public
 * calls (prefetch_calls.c), the feature and the queueing of a range
 * (prefetch.c), the worker threads (workers.c) and how many register at
 * once (worker_sizer.c), the queue itself (prefetch_queue.c) and the kept
 * failures (kept_failures.c). */
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
struct regcache_entry;
struct rc_options;

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
    struct regcache *cache;
    int listener;        /* its number in the cache's listener table */
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
     * kept: changed under the lock, read by every miss of a get. */
    struct rc_failure *failed;
    unsigned failed_next;
    atomic_uint failures_kept;
    atomic_uint_fast64_t queued, failures, dropped;
};

/* Set in the workers: a backend callback there must not wait for the
 * queue it is part of. */
extern __thread bool rc_in_worker __attribute__((tls_model("initial-exec")));

/* ---- the feature and the queueing of a range (prefetch.c) --------------- */

/* At create: the feature joins the cache's edge.  REGCACHE_OK or
 * ERR_NO_MEMORY. */
int rc_prefetch_open(struct regcache *c, const struct rc_options *o);

/* The cache's background registration. */
struct rc_prefetch *rc_prefetch_of(const struct regcache *c);

/* Queue [start, end) on `rail` for a worker; REGCACHE_OK when queued or
 * already queued or in flight, ERR_QUEUE_FULL, ERR_NO_MEMORY (the queue or
 * the first worker could not be made), ERR_INVALID after the cache began
 * to stop. */
int rc_prefetch_queue(struct rc_prefetch *p, uintptr_t start, uintptr_t end, struct rc_req rq,
                      enum rc_eager from);

/* Ranges queued, failed and dropped since create (for the statistics). */
void rc_prefetch_counts(const struct regcache *c, uint64_t *queued, uint64_t *failed,
                        uint64_t *dropped);

/* ---- workers (workers.c) ------------------------------------------------ */

/* Under p's lock: start the cache's workers unless they run (a thread
 * that cannot start is left out while one runs); REGCACHE_OK or
 * ERR_NO_MEMORY. */
int rc_workers_start_locked(struct rc_prefetch *p);

/* Join the workers, which were told to stop. */
void rc_workers_join(struct rc_prefetch *p);

/* Under p's lock, after jobs were queued or the limit rose: wake sleeping
 * workers for the queued jobs that no awake one will take and the limit
 * lets run.  A wake is a system call: none while awake workers suffice. */
void rc_workers_wake_locked(struct rc_prefetch *p);

/* ---- the queue (prefetch_queue.c) --------------------------------------- */

/* Under p's lock: the jobs and their listing, made at the first use;
 * REGCACHE_OK or ERR_NO_MEMORY. */
int rc_queue_make_locked(struct rc_prefetch *p, size_t capacity);

/* Under p's lock: a job for [start, end) on rq queued and listed, or NULL
 * when capacity jobs are listed already.  `*already`: one is listed for
 * the same range, rail and access (then nothing is queued). */
struct rc_job *rc_queue_add_locked(struct rc_prefetch *p, uintptr_t start, uintptr_t end,
                                   struct rc_req rq, enum rc_eager from, bool *already);

/* Under p's lock: the next queued job, or NULL. */
struct rc_job *rc_queue_next_locked(struct rc_prefetch *p);

/* Under p's lock: a job taken from the queue ended; its listing goes. */
void rc_queue_unlist_locked(struct rc_prefetch *p, struct rc_job *job);

/* Under p's lock: every queued job is dropped (destroy). */
void rc_queue_drop_locked(struct rc_prefetch *p);

void rc_queue_free(struct rc_prefetch *p);

/* ---- kept failures (kept_failures.c) ------------------------------------ */

/* A job failed with `status`: counted, and - unless the memory is gone -
 * kept with the thread's last error for the next get of its range and
 * rail, while the memory there stays what it was.  Takes p's lock. */
void rc_failure_keep(struct rc_prefetch *p, const struct rc_job *job, int status);

/* Is some failure kept?  One load, without the lock. */
static inline bool rc_failures_kept(const struct rc_prefetch *p)
{
    return atomic_load_explicit(&((struct rc_prefetch *)p)->failures_kept, memory_order_relaxed) !=
           0;
}

/* The status of a failed background registration of a range overlapping
 * [start, end) on `rail`, taken (with its message), or REGCACHE_OK; a
 * failure about memory that is no longer there is dropped instead.  Asks
 * the memory query (or, for host memory, the kernel) only when a failure
 * is kept for the range. */
int rc_failure_take(struct rc_prefetch *p, uintptr_t start, uintptr_t end, unsigned rail);

/* The memory of [start, end) went away: its kept failures no longer say
 * anything of what may be allocated there next. */
void rc_failures_forget(struct rc_prefetch *p, uintptr_t start, uintptr_t end);

#endif
