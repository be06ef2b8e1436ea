/* The threads that run background registrations: started at a cache's
 * first queued range, named regcache-reg, joined at its destroy.  Several
 * of them take jobs at once, so a range queued on several rails registers
 * them side by side (the miss path lets each rail's registration of an
 * entry go on beside the others); how many at most, measurement decides
 * (worker_sizer.h). */
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

#include "cache.h"
#include "cpu_relax.h"
#include "exiting.h"
#include "prefetch.h"

__thread bool rc_in_worker __attribute__((tls_model("initial-exec")));

/* Looks at the queue by an idle worker before it sleeps, about 50 us: in a
 * burst of queued ranges (a non-blocking get per transfer, a model's
 * tensors allocated one after the other) the queueing threads then find
 * a worker awake and need not wake one with a system call.  One worker
 * watches at a time: more would only take CPUs from the application. */
#define IDLE_LOOKS 2048

static bool job_soon(struct rc_prefetch *p)
{
    for (unsigned i = 0; i < IDLE_LOOKS; i++) {
        if (atomic_load_explicit(&p->waiting, memory_order_relaxed))
            return true;
        rc_cpu_relax();
    }
    return false;
}

/* May one more worker register now? */
static bool room(const struct rc_prefetch *p)
{
    return p->busy < p->sizer.limit;
}

void rc_workers_wake_locked(struct rc_prefetch *p)
{
    size_t queued = atomic_load_explicit(&p->waiting, memory_order_relaxed);
    while (p->sleeping > p->woken) {
        /* Idle and awake: watching the queue, about to look, or woken. */
        unsigned awake = p->started - (p->sleeping - p->woken) - p->busy;
        if (queued <= awake || p->busy + awake >= p->sizer.limit)
            return;
        p->woken++;
        rc_cond_signal(&p->work);
    }
}

/* Under p's lock: the next job, or NULL when the workers must stop.  A
 * worker beyond the limit sleeps, and does not watch the queue. */
static struct rc_job *next_job(struct rc_prefetch *p)
{
    struct rc_job *j = NULL;
    bool looked = false;
    while (!p->stopping && !(room(p) && (j = rc_queue_next_locked(p)))) {
        if (!looked && !p->watching && room(p)) {
            p->watching = true;
            rc_unlock(&p->lock);
            looked = !job_soon(p);
            rc_lock(&p->lock);
            p->watching = false;
            continue;
        }
        p->sleeping++;
        rc_cond_wait(&p->work, &p->lock);
        p->sleeping--;
        if (p->woken)
            p->woken--;
        looked = false;
    }
    if (j) {
        p->busy++;
        rc_sizer_started(&p->sizer, rc_clock_now());
    }
    return j;
}

/* Under p's lock: a worker's job ended (a failure kept already); its
 * listing goes. */
static void job_ended(struct rc_prefetch *p, struct rc_job *job)
{
    rc_queue_unlist_locked(p, job);
    p->busy--;
    size_t queued = atomic_load_explicit(&p->waiting, memory_order_relaxed);
    if (rc_sizer_ended(&p->sizer, rc_clock_now(), queued > UINT_MAX ? UINT_MAX : (unsigned)queued))
        rc_workers_wake_locked(p);
}

/* An allocation the hooks reported may be one mapping of a larger VMM
 * reservation: PyTorch's expandable segments map one chunk at a time, and
 * tensors then straddle a chunk and the one mapped before it, which a
 * registration of the chunk alone does not serve.  So the request starts
 * one byte early: across adjacent mappings the cache registers them
 * together; across two allocations, or from unmapped memory, it refuses,
 * and the allocation alone is registered.  Pinned host memory is never a
 * mapping, and the byte before it may be pageable memory, which the cache
 * would register together with it. */
static int register_job(struct regcache *c, const struct rc_job *j)
{
    if (j->from == RC_EAGER_ALLOC && j->start > 1) {
        int rc = rc_slow_get(c, j->start - 1, j->end, (struct rc_req){ j->rail, j->want }, NULL);
        if (rc == REGCACHE_OK || rc == RC_NO_ROOM)
            return rc;
    }
    return rc_slow_get(c, j->start, j->end, (struct rc_req){ j->rail, j->want }, NULL);
}

static void *worker(void *arg)
{
    struct rc_prefetch *p = arg;
    struct regcache *c = p->cache;
    rc_in_worker = true;
    rc_lock(&p->lock);
    for (;;) {
        struct rc_job *j = next_job(p);
        if (!j)
            break;
        rc_unlock(&p->lock);
        /* A registration calls the backend and the callbacks: not once
         * the process is exiting (exiting.h); the range is dropped. */
        int rc = rc_exiting() ? RC_NO_ROOM : register_job(c, j);
        if (rc == RC_NO_ROOM)
            rc_count(&p->dropped);
        else if (rc < 0)
            rc_failure_keep(p, j, rc);
        rc_lock(&p->lock);
        job_ended(p, j);
    }
    rc_unlock(&p->lock);
    return NULL;
}

int rc_workers_start_locked(struct rc_prefetch *p)
{
    const struct regcache *c = p->cache;
    if (!p->threads) {
        p->nthreads = c->opts.params.workers ? c->opts.params.workers : c->rails;
        p->threads = calloc(p->nthreads, sizeof(*p->threads));
        if (!p->threads)
            return REGCACHE_ERR_NO_MEMORY;
        rc_sizer_init(&p->sizer, c->rails, p->nthreads);
    }
    rc_exiting_watch();
    /* Signals are the application's threads' business: the workers block
     * them all (a new thread inherits the creator's mask). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    while (p->started < p->nthreads &&
           pthread_create(&p->threads[p->started], NULL, worker, p) == 0)
        pthread_setname_np(p->threads[p->started++], "regcache-reg");
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return p->started ? REGCACHE_OK : REGCACHE_ERR_NO_MEMORY;
}

void rc_workers_join(struct rc_prefetch *p)
{
    for (unsigned i = 0; i < p->started; i++)
        pthread_join(p->threads[i], NULL);
    p->started = 0;
}
