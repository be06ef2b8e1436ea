/* The one measurement every figure comes from: arms timed in interleaved
 * rounds, an arm being a single-thread sample or a run of threads (fixed
 * time, aggregate rate).  The host the harness is judged on has whole
 * minutes at half speed; a goal compares two rows, and rows measured one
 * after the other then disagree by up to 2x.  Interleaved, a slow stretch
 * hits both alike, and report.py pairs their samples. */
#include "bench.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

void (*bench_thread_start)(void);

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
    return (struct bench_lane){ .rng = 0x9E3779B97F4A7C15ULL * (index + 1) | 1, .index = index };
}

/* Nothing to measure without memory; a group may have no arms at all. */
static void *alloc(size_t size)
{
    void *p = malloc(size ? size : 1);
    if (!p) {
        fputs("regcache-bench: out of memory\n", stderr);
        exit(1);
    }
    return p;
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
    uint64_t t0 = bench_now_ns();
    while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
        w->op->run(w->op->ctx, &w->lane, CHUNK);
        ops += CHUNK;
    }
    w->mops = (double)ops * 1e3 / (double)(bench_now_ns() - t0);
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

/* One sample of an arm: ns per operation on this thread (a warm-up sample
 * runs the arm's warm_ops), or Mops/s of a run of the row's threads (a
 * warm-up run a quarter as long: it only has to start the threads and fill
 * the caches). */
static double sample(const struct bench_arm *a, struct bench_lane *l, int warm)
{
    unsigned ops = warm && a->warm_ops ? a->warm_ops : a->ops;
    const struct bench_op *op = a->op;
    if (a->row->threads)
        return run_once(op, a->row->threads, bench.run_seconds / (warm ? 4 : 1));
    if (op->reset)
        op->reset(op->ctx);
    uint64_t t0 = bench_now_ns();
    op->run(op->ctx, l, ops);
    return (double)(bench_now_ns() - t0) / ops;
}

/* Fill the row of arms[first] from its arms' samples (v: n arms to a
 * slot, `per_arm` slots, so a sample's slot is its index in v), check every
 * one of its arms' ops and emit it.  The tail is the p99 of times and the
 * p1 of rates, whose bad end is the low one. */
static void finish(const struct bench_arm *arms, size_t n, size_t first, const double *v,
                   size_t per_arm, unsigned group)
{
    struct bench_row *r = arms[first].row;
    size_t *slots = alloc(n * per_arm * sizeof(*slots)), m = 0;
    char why[160];
    for (size_t k = 0; k < per_arm; k++)
        for (size_t i = first; i < n; i++)
            if (arms[i].row == r)
                slots[m++] = k * n + i;
    double *samples = alloc(m * sizeof(*samples)), *sorted = alloc(m * sizeof(*sorted));
    for (size_t i = 0; i < m; i++)
        samples[i] = sorted[i] = v[slots[i]];
    qsort(sorted, m, sizeof(sorted[0]), bench_cmp_double);
    r->median = rank(sorted, m, 0.5);
    r->p99 = rank(sorted, m, r->threads ? 0.01 : 0.99);
    r->group = group;
    r->nsamples = m;
    r->samples = samples;
    r->slots = slots;
    r->note[0] = '\0';
    for (size_t i = first; i < n && !r->note[0]; i++)
        if (arms[i].row == r && arms[i].op->check &&
            arms[i].op->check(arms[i].op->ctx, why, sizeof(why)) != 0)
            snprintf(r->note, sizeof(r->note), "invalid: %s", why);
    bench_emit(r);
    r->nsamples = 0; /* freed here */
    free(sorted);
    free(samples);
    free(slots);
}

void bench_interleave(const struct bench_arm *arms, size_t n)
{
    static unsigned groups;
    unsigned group = ++groups;
    int threaded = 0;
    for (size_t i = 0; i < n; i++)
        threaded |= arms[i].row->threads > 0;
    /* Runs of threads alternate run by run.  Single-thread samples alternate
     * in blocks: each arm takes `block` samples in a row, after one thrown
     * away, so that its samples run in the caches it warmed itself (at 100k
     * entries and more, an arm's working set does not survive one sample of
     * each neighbour: measured one by one, a hit at 100k read 50% slower).
     * A round of blocks takes milliseconds, the host's slow stretches take
     * minutes, so they still fall on both samples of a pair.  The j-th
     * sample of one arm's block pairs with the j-th of the next arm's: its
     * slot says so (report.py pairs the nearest slots). */
    size_t block = threaded ? 1 : bench.samples / 10 + 1;
    size_t rounds = threaded ? bench.runs : (bench.samples + block - 1) / block;
    size_t per_arm = rounds * block;
    double *v = alloc(n * per_arm * sizeof(*v));
    /* Each arm its own random stream, as if it were measured alone. */
    struct bench_lane *l = alloc(n * sizeof(*l));
    for (size_t i = 0; i < n; i++)
        l[i] = lane(0);
    /* A first round, thrown away, settles the clock speed and gives every
     * arm its caches and branch history once. */
    for (size_t i = 0; i < n; i++)
        sample(&arms[i], &l[i], 1);
    for (size_t k = 0; k < rounds; k++)
        for (size_t i = 0; i < n; i++) {
            if (block > 1)
                sample(&arms[i], &l[i], 1);
            for (size_t j = 0; j < block; j++)
                v[(k * block + j) * n + i] = sample(&arms[i], &l[i], 0);
        }
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (arms[j].row != arms[i].row)
            j++;
        if (j == i) /* the row's first arm */
            finish(arms, n, i, v, per_arm, group);
    }
    free(l);
    free(v);
}

void bench_series(const struct bench_row *protos, const struct bench_op *ops, size_t n)
{
    size_t counts = BENCH_NELEM(bench_thread_counts), a = 0;
    struct bench_row *rows = alloc(n * counts * sizeof(*rows));
    struct bench_arm *arms = alloc(2 * n * (counts - 1) * sizeof(*arms));
    for (size_t j = 0; j < n; j++)
        for (size_t k = 0; k < counts; k++) {
            rows[j * counts + k] = protos[j];
            rows[j * counts + k].threads = bench_thread_counts[k];
        }
    /* bench_thread_counts[0] is 1: each count beside a one-thread run. */
    for (size_t k = 1; k < counts; k++)
        for (size_t j = 0; j < n; j++) {
            arms[a++] = (struct bench_arm){ .row = &rows[j * counts], .op = &ops[j], .ops = 0 };
            arms[a++] = (struct bench_arm){ .row = &rows[j * counts + k], .op = &ops[j], .ops = 0 };
        }
    bench_interleave(arms, a);
    free(arms);
    free(rows);
}
