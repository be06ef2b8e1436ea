/* Eviction churn: a working set twice the budget walked in a cycle, so that
 * under LRU every get misses and evicts; under an entry budget and under a
 * byte budget; and under the entry budget beside as many threads that used
 * the cache once and sleep, as a process of hundreds of threads has. */
#include "bench.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#define BUDGET 1000

void bench_cycle_run(void *ctx, struct bench_lane *l, uint64_t n)
{
    struct bench_cycle *c = ctx;
    (void)l;
    for (uint64_t i = 0; i < n; i++) {
        bench_get_put(&c->use, c->base + c->next * BENCH_REGION, BENCH_GET);
        c->next = (c->next + 1) % c->regions;
    }
    c->use.expect += n;
}

/* A cache filled by the cycle, so that every timed get evicts; -1 (r
 * emitted with a note) when it cannot be had. */
static int open_cycle(struct bench_cycle *c, struct bench_row *r, const struct bench_src *s,
                      int by_bytes)
{
    char why[160];
    *c = (struct bench_cycle){ .use.counter = offsetof(struct regcache_stats, misses),
                               .base = s->base,
                               .regions = 2 * BUDGET };
    c->use.cache = bench_cache(s, NULL, REGCACHE_VALIDATE_NOTIFY, by_bytes ? 0 : BUDGET,
                               by_bytes ? BUDGET * BENCH_REGION : 0, why, sizeof(why));
    if (!c->use.cache) {
        bench_note(r, "failed: %s", why);
        return -1;
    }
    bench_cycle_run(c, NULL, 2 * BUDGET);
    c->use.expect = bench_counter(&c->use);
    r->mode = regcache_validation_mode(c->use.cache);
    return 0;
}

/* Threads that made one get+put on a cache and sleep until told to leave:
 * started before each sample of the arm that wants them, gone before each
 * of the arm that does not. */
#define IDLE_THREADS 512

struct idlers {
    struct bench_cycle *cycle; /* whose cache they used */
    uintptr_t addr;            /* what they got: the cycle's newest entry */
    pthread_t t[IDLE_THREADS];
    unsigned started, used;
    int leave;
    pthread_mutex_t lock;
    pthread_cond_t cond;
};

static void *idle(void *arg)
{
    struct idlers *d = arg;
    bench_get_put(&d->cycle->use, d->addr, BENCH_GET);
    pthread_mutex_lock(&d->lock);
    d->used++;
    pthread_cond_broadcast(&d->cond);
    while (!d->leave)
        pthread_cond_wait(&d->cond, &d->lock);
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

/* Their gets hit the entry the cycle used last, which neither moves the
 * count of misses nor the order of the cycle's evictions. */
static void idlers_start(void *ctx)
{
    struct idlers *d = ctx;
    struct bench_cycle *c = d->cycle;
    if (d->started)
        return;
    d->addr = c->base + (c->next + 2 * BUDGET - 1) % (2 * BUDGET) * BENCH_REGION;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1 << 16);
    d->leave = 0;
    d->used = 0;
    for (; d->started < IDLE_THREADS; d->started++)
        if (pthread_create(&d->t[d->started], &attr, idle, d) != 0) {
            fputs("regcache-bench: pthread_create failed\n", stderr);
            exit(1);
        }
    pthread_attr_destroy(&attr);
    pthread_mutex_lock(&d->lock);
    while (d->used < IDLE_THREADS)
        pthread_cond_wait(&d->cond, &d->lock);
    pthread_mutex_unlock(&d->lock);
}

static void idlers_stop(void *ctx)
{
    struct idlers *d = ctx;
    pthread_mutex_lock(&d->lock);
    d->leave = 1;
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->lock);
    for (; d->started; d->started--)
        pthread_join(d->t[d->started - 1], NULL);
}

/* An arm of the idle-threads pair: the cycle first (bench_cycle_run and
 * bench_use_check take the context for it), and whether the idle threads
 * are to be there. */
struct idle_arm {
    struct bench_cycle cycle;
    struct idlers *idlers;
    int want;
};

static void idle_arm_reset(void *ctx)
{
    struct idle_arm *a = ctx;
    if (a->want)
        idlers_start(a->idlers);
    else
        idlers_stop(a->idlers);
}

/* The evicting get+put with none and with IDLE_THREADS idle threads,
 * interleaved (report.py judges their ratio), in samples of as many gets
 * as the misses' (the sanitizer builds run this too).  Each block starts
 * after a sample thrown away of a whole cycle's gets: as a process that
 * runs on after its threads went to sleep, where the cache has seen them
 * idle. */
static void churn_beside_idle_threads(const struct bench_src *s)
{
    static const char *const what[2] = { "beside 0 idle", "beside 512 idle" };
    struct bench_row r[2];
    struct idle_arm a[2];
    struct idlers d = { .cycle = &a[1].cycle };
    struct bench_op op[2];
    struct bench_arm arms[2];
    int open = 0;
    pthread_mutex_init(&d.lock, NULL);
    pthread_cond_init(&d.cond, NULL);
    for (int i = 0; i < 2; i++) {
        r[i] = (struct bench_row){ .workload = "churn",
                                   .source = s->name,
                                   .impl = "regcache",
                                   .what = what[i],
                                   .asked = bench_mode_name(REGCACHE_VALIDATE_NOTIFY),
                                   .entries = BUDGET };
        if (open_cycle(&a[i].cycle, &r[i], s, 0) != 0)
            break;
        open++;
        a[i].idlers = &d;
        a[i].want = i;
        op[i] = (struct bench_op){ bench_cycle_run, idle_arm_reset, bench_use_check, &a[i] };
        arms[i] = (struct bench_arm){ &r[i], &op[i], BENCH_MISS_BATCH, 2 * BUDGET };
    }
    if (open == 2) {
        bench_interleave(arms, 2);
        idlers_stop(&d);
    }
    while (open--)
        regcache_destroy(a[open].cycle.use.cache);
    pthread_cond_destroy(&d.cond);
    pthread_mutex_destroy(&d.lock);
}

void bench_churn(const struct bench_src *s)
{
    for (int by_bytes = 0; by_bytes < 2; by_bytes++) {
        struct bench_row r = { .workload = "churn",
                               .source = s->name,
                               .impl = "regcache",
                               .what = by_bytes ? "max_bytes" : "max_entries",
                               .asked = bench_mode_name(REGCACHE_VALIDATE_NOTIFY),
                               .entries = BUDGET };
        struct bench_cycle c;
        if (open_cycle(&c, &r, s, by_bytes) != 0)
            continue;
        struct bench_op op = { bench_cycle_run, NULL, bench_use_check, &c };
        bench_interleave(&(struct bench_arm){ .row = &r, .op = &op, .ops = bench.batch }, 1);
        regcache_destroy(c.use.cache);
    }
    churn_beside_idle_threads(s);
}
