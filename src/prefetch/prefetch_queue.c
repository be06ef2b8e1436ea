/* The queue of background registrations and the listing of its jobs, by
 * range and rail, from their queueing to the end of their registration
 * (prefetch.h).  Under the queue's lock throughout. */
#include <stdlib.h>

#include "cache.h"
#include "prefetch.h"

static size_t bucket_of(const struct rc_prefetch *p, uintptr_t start, unsigned rail)
{
    uint64_t h = ((uint64_t)start >> 12) * 0x9e3779b97f4a7c15ull + rail;
    return (size_t)(h >> 32) % p->nbuckets;
}

int rc_queue_make_locked(struct rc_prefetch *p, size_t capacity)
{
    p->jobs = calloc(capacity, sizeof(*p->jobs));
    p->buckets = calloc(2 * capacity, sizeof(*p->buckets));
    p->failed = calloc(RC_PREFETCH_FAILURES, sizeof(*p->failed));
    if (!p->jobs || !p->buckets || !p->failed) {
        rc_queue_free(p);
        return REGCACHE_ERR_NO_MEMORY;
    }
    p->capacity = capacity;
    p->nbuckets = 2 * capacity;
    for (size_t i = 0; i < capacity; i++) {
        p->jobs[i].next = p->free;
        p->free = &p->jobs[i];
    }
    return REGCACHE_OK;
}

static bool listed_locked(const struct rc_prefetch *p, uintptr_t start, uintptr_t end,
                          struct rc_req rq)
{
    for (const struct rc_job *j = p->buckets[bucket_of(p, start, rq.rail)]; j; j = j->hash_next)
        if (j->start == start && j->end == end && j->rail == rq.rail && j->want == rq.want)
            return true;
    return false;
}

struct rc_job *rc_queue_add_locked(struct rc_prefetch *p, uintptr_t start, uintptr_t end,
                                   struct rc_req rq, enum rc_eager from, bool *already)
{
    *already = listed_locked(p, start, end, rq);
    struct rc_job *j = p->free;
    if (*already || !j)
        return NULL;
    p->free = j->next;
    *j = (struct rc_job){
        .start = start, .end = end, .rail = rq.rail, .want = rq.want, .from = from
    };
    size_t b = bucket_of(p, start, rq.rail);
    j->hash_next = p->buckets[b];
    p->buckets[b] = j;
    if (p->tail)
        p->tail->next = j;
    else
        p->head = j;
    p->tail = j;
    p->listed++;
    rc_add_locked(&p->waiting, 1);
    rc_count(&p->queued);
    return j;
}

struct rc_job *rc_queue_next_locked(struct rc_prefetch *p)
{
    struct rc_job *j = p->head;
    if (j) {
        rc_add_locked(&p->waiting, (size_t)-1);
        p->head = j->next;
        if (!p->head)
            p->tail = NULL;
    }
    return j;
}

/* Out of its bucket. */
static void unhash_locked(struct rc_prefetch *p, struct rc_job *job)
{
    struct rc_job **at = &p->buckets[bucket_of(p, job->start, job->rail)];
    while (*at != job)
        at = &(*at)->hash_next;
    *at = job->hash_next;
}

void rc_queue_unlist_locked(struct rc_prefetch *p, struct rc_job *job)
{
    unhash_locked(p, job);
    job->next = p->free;
    p->free = job;
    if (--p->listed == 0 && p->idle_waiters)
        rc_cond_broadcast(&p->idle);
}

void rc_queue_drop_locked(struct rc_prefetch *p)
{
    for (struct rc_job *j; (j = rc_queue_next_locked(p));) {
        unhash_locked(p, j);
        p->listed--;
        rc_count(&p->dropped);
    }
}

void rc_queue_free(struct rc_prefetch *p)
{
    free(p->jobs);
    free(p->buckets);
    free(p->failed);
    p->jobs = NULL;
    p->buckets = NULL;
    p->failed = NULL;
}
