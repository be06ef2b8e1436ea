/* The one timing loop (single thread, in samples) and the one thread runner
 * (fixed time, aggregate rate) that every figure comes from. */
#include "bench.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

const unsigned bench_thread_counts[7] = { 1, 2, 4, 8, 16, 24, 32 };
void (*bench_thread_start)(void);
volatile uint64_t bench_sink;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest rank: the smallest sample with at least q of them at or below it,
 * so the p99 of 100 samples is the 99th, not an interpolation. */
static double rank(const double *sorted, size_t n, double q)
{
    size_t k = (size_t)(q * (double)n + 0.999999);
    return sorted[(k ? k : 1) - 1];
}

/* Seeds differ per thread so that threads do not walk the regions in step. */
static struct bench_lane lane(unsigned index)
{
    return (struct bench_lane){ 0x9E3779B97F4A7C15ULL * (index + 1) | 1, index };
}

/* Fill r from the samples v[0..n) (tail: 0.99 for times, 0.01 for rates,
 * whose bad tail is the low end), check op and emit r. */
static void finish(struct bench_row *r, const struct bench_op *op, double *v, size_t n, double tail)
{
    char why[160];
    qsort(v, n, sizeof(v[0]), cmp_double);
    r->median = rank(v, n, 0.5);
    r->p99 = rank(v, n, tail);
    r->note[0] = '\0';
    if (op->check && op->check(op->ctx, why, sizeof(why)) != 0)
        snprintf(r->note, sizeof(r->note), "invalid: %s", why);
    bench_emit(r);
}

void bench_measure(struct bench_row *r, const struct bench_op *op, unsigned ops)
{
    unsigned warm = bench.samples / 10 + 1;
    double v[bench.samples];
    struct bench_lane l = lane(0);
    /* The warm-up samples settle the CPU caches, the branch predictors and
     * the clock speed; they are timed like the rest and thrown away. */
    for (unsigned k = 0; k < warm + bench.samples; k++) {
        if (op->reset)
            op->reset(op->ctx);
        uint64_t t0 = now_ns();
        op->run(op->ctx, &l, ops);
        if (k >= warm)
            v[k - warm] = (double)(now_ns() - t0) / ops;
    }
    finish(r, op, v, bench.samples, 0.99);
}

/* Each on lines of its own (twice 64 bytes: the adjacent-line prefetcher
 * pairs lines): every operation writes its lane, and workers sharing a line
 * would measure that line moving between cores, not the cache. */
struct worker {
    const struct bench_op *op;
    pthread_barrier_t *start;
    atomic_int *stop;
    struct bench_lane lane;
    double mops; /* over this thread's own run */
} __attribute__((aligned(128)));

/* Operations between looks at the stop flag: enough that the look costs
 * nothing, few enough to stop promptly. */
#define CHUNK 256

static void *work(void *arg)
{
    struct worker *w = arg;
    uint64_t ops = 0;
    bench_cpus_pin_worker(w->lane.index);
    if (bench_thread_start)
        bench_thread_start();
    pthread_barrier_wait(w->start);
    uint64_t t0 = now_ns();
    while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
        w->op->run(w->op->ctx, &w->lane, CHUNK);
        ops += CHUNK;
    }
    w->mops = (double)ops * 1e3 / (double)(now_ns() - t0);
    return NULL;
}

/* One run: the sum of the threads' own rates, which is the aggregate since
 * they start at one barrier and stop at one flag. */
static double run_once(const struct bench_op *op, unsigned threads, double seconds)
{
    pthread_t tid[threads];
    struct worker w[threads];
    pthread_barrier_t start;
    atomic_int stop = 0;
    double mops = 0;

    pthread_barrier_init(&start, NULL, threads + 1);
    for (unsigned i = 0; i < threads; i++) {
        w[i] = (struct worker){ op, &start, &stop, lane(i), 0 };
        /* The barrier counts on every thread: without one, no run. */
        if (pthread_create(&tid[i], NULL, work, &w[i]) != 0) {
            fputs("regcache-bench: pthread_create failed\n", stderr);
            exit(1);
        }
    }
    pthread_barrier_wait(&start);
    nanosleep(
        &(struct timespec){ (time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9) },
        NULL);
    atomic_store(&stop, 1);
    for (unsigned i = 0; i < threads; i++) {
        pthread_join(tid[i], NULL);
        mops += w[i].mops;
    }
    pthread_barrier_destroy(&start);
    return mops;
}

void bench_series(struct bench_row *r, const struct bench_op *op)
{
    for (size_t k = 0; k < BENCH_NELEM(bench_thread_counts); k++) {
        double v[bench.runs];
        r->threads = bench_thread_counts[k];
        run_once(op, r->threads, bench.run_seconds / 4); /* warm-up */
        for (unsigned i = 0; i < bench.runs; i++)
            v[i] = run_once(op, r->threads, bench.run_seconds);
        finish(r, op, v, bench.runs, 0.01);
    }
}
