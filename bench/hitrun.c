/* Timing the hit path of any target: one thread in batches, or many threads
 * for a fixed time. */
#include "bench.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Seeds differ per thread so threads do not walk the same regions in step. */
static uint64_t seed(unsigned i)
{
    return 0x9E3779B97F4A7C15ULL * (i + 1) | 1;
}

int bench_hit_cost(const struct bench_target *t, const struct bench_opts *o,
                   struct bench_summary *ns, char *why, size_t why_len)
{
    double *v = malloc(o->batches * sizeof(*v));
    uint64_t rng = seed(0);
    if (!v) {
        snprintf(why, why_len, "out of memory");
        return -1;
    }
    /* Warm-up: caches, branch predictors and the CPU clock settle. */
    t->loop(t->ctx, &rng, (uint64_t)o->batch_ops * 32);
    for (unsigned b = 0; b < o->batches; b++) {
        uint64_t t0 = bench_now_ns();
        t->loop(t->ctx, &rng, o->batch_ops);
        v[b] = (double)(bench_now_ns() - t0) / o->batch_ops;
    }
    *ns = bench_summarize(v, o->batches);
    free(v);
    return t->check ? t->check(t->ctx, why, why_len) : 0;
}

struct worker {
    const struct bench_target *t;
    pthread_barrier_t *start;
    atomic_int *stop;
    unsigned index;
    double rate; /* ops per ns over this thread's own run */
};

/* How many get+put pairs a worker runs between looks at the stop flag: long
 * enough that the look costs nothing, short enough to stop promptly. */
#define CHUNK 256

static void *work(void *arg)
{
    struct worker *w = arg;
    uint64_t rng = seed(w->index), ops = 0;
    pthread_barrier_wait(w->start);
    uint64_t t0 = bench_now_ns();
    while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
        w->t->loop(w->t->ctx, &rng, CHUNK);
        ops += CHUNK;
    }
    w->rate = (double)ops / (double)(bench_now_ns() - t0);
    return NULL;
}

/* One timed run: the sum of the threads' own rates, which is the aggregate
 * when the threads ran at the same time (they start at one barrier and stop
 * at one flag). */
static void run_once(const struct bench_target *t, unsigned threads,
                     double seconds, double *mops)
{
    pthread_t tid[threads];
    struct worker w[threads];
    pthread_barrier_t start;
    atomic_int stop = 0;

    pthread_barrier_init(&start, NULL, threads + 1);
    for (unsigned i = 0; i < threads; i++) {
        w[i] = (struct worker){t, &start, &stop, i, 0.0};
        /* The barrier waits for every thread: without one the run cannot
         * be measured at all. */
        if (pthread_create(&tid[i], NULL, work, &w[i]) != 0) {
            fputs("bench: pthread_create failed\n", stderr);
            exit(1);
        }
    }
    pthread_barrier_wait(&start);
    struct timespec ts = {(time_t)seconds,
                          (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&ts, NULL);
    atomic_store(&stop, 1);
    *mops = 0.0;
    for (unsigned i = 0; i < threads; i++) {
        pthread_join(tid[i], NULL);
        *mops += w[i].rate * 1e3;
    }
    pthread_barrier_destroy(&start);
}

int bench_hit_threads(const struct bench_target *t, const struct bench_opts *o,
                      unsigned threads, struct bench_summary *mops, char *why,
                      size_t why_len)
{
    double v[o->mt_runs], warm;
    run_once(t, threads, o->mt_seconds / 4, &warm);
    for (unsigned r = 0; r < o->mt_runs; r++)
        run_once(t, threads, o->mt_seconds, &v[r]);
    mops->median = bench_summarize(v, o->mt_runs).median;
    /* For a throughput the bad tail is the low end: the 1st percentile,
     * nearest rank, of the sorted runs. */
    mops->p99 = v[(o->mt_runs + 99) / 100 - 1];
    return t->check ? t->check(t->ctx, why, why_len) : 0;
}

void bench_measure_hit(struct bench_row *r, const struct bench_target *t,
                       const struct bench_opts *o)
{
    struct bench_summary ns;
    char why[160];
    if (bench_hit_cost(t, o, &ns, why, sizeof(why)) != 0) {
        snprintf(r->note, sizeof(r->note), "invalid: %s", why);
        return;
    }
    r->median_ns = ns.median;
    r->p99_ns = ns.p99;
}

void bench_measure_threads(struct bench_row *r, const struct bench_target *t,
                           const struct bench_opts *o)
{
    struct bench_summary m;
    char why[160];
    if (bench_hit_threads(t, o, r->threads, &m, why, sizeof(why)) != 0) {
        snprintf(r->note, sizeof(r->note), "invalid: %s", why);
        return;
    }
    r->mops = m.median;
    r->mops_low = m.p99;
}

void bench_measure_scaling(struct bench_row *r, const struct bench_target *t,
                           const struct bench_opts *o, double *one)
{
    bench_measure_threads(r, t, o);
    if (r->threads == 1)
        *one = r->mops;
    if (*one > 0 && r->mops > 0) {
        r->derived = r->mops / *one;
        snprintf(r->derived_what, sizeof(r->derived_what), "x one thread");
    }
}
