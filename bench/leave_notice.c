/* How soon a leave notice arrives once watched host memory is unmapped and
 * the transport makes no further call: a cache per way the monitor hears
 * of unmaps (libc's hooks, the userfaultfd; then UCX's events, in a child
 * with UCX's memory hooks live), null backend, host_memory on.
 * Each sample maps a 2 MiB range, caches it (get+put), then times from its
 * munmap to the notice, which the callback stamps; the thread that
 * unmapped only waits on a condition variable meanwhile.  The ways take
 * turns sample by sample. */
#include "bench.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define RANGE ((size_t)2 << 20)
/* A notice later than this is a failure, not a figure. */
#define GIVE_UP_NS 1000000000ull

struct way {
    struct bench_row row;
    regcache_t *cache;
    pthread_mutex_t lock;
    pthread_cond_t noticed;
    uint64_t at; /* when the notice came, 0 while none */
    double *samples;
    size_t *slots;
    size_t n;
};

static void stamp(void *arg, const struct regcache_leave *l)
{
    (void)l;
    struct way *w = arg;
    pthread_mutex_lock(&w->lock);
    w->at = bench_now_ns();
    pthread_cond_signal(&w->noticed);
    pthread_mutex_unlock(&w->lock);
}

static regcache_t *host_cache(struct way *w, enum regcache_host_monitor monitor)
{
    struct regcache_params p;
    regcache_t *c = NULL;
    bench_host_params(&p, RANGE, monitor);
    p.on_leave = stamp;
    p.callback_arg = w;
    if (regcache_create(&p, &c) != REGCACHE_OK) {
        bench_note(&w->row, "regcache_create: %s", regcache_last_error());
        return NULL;
    }
    if (!strstr(regcache_validation_reason(c), "host memory: monitored")) {
        bench_note(&w->row, "%s", strstr(regcache_validation_reason(c), "host memory"));
        regcache_destroy(c);
        return NULL;
    }
    return c;
}

/* One sample: ns from the munmap to the notice, or -1 (the row noted). */
static double one(struct way *w)
{
    char *p = mmap(NULL, RANGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    regcache_entry_t *e;
    if (p == MAP_FAILED || regcache_get(w->cache, p, RANGE, &e) != REGCACHE_OK) {
        bench_note(&w->row, "invalid: cannot map and cache a range: %s", regcache_last_error());
        if (p != MAP_FAILED)
            munmap(p, RANGE);
        return -1;
    }
    regcache_put(w->cache, e);
    pthread_mutex_lock(&w->lock);
    w->at = 0;
    uint64_t from = bench_now_ns();
    munmap(p, RANGE);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += GIVE_UP_NS / 1000000000u;
    int rc = 0;
    while (!w->at && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&w->noticed, &w->lock, &until);
    uint64_t at = w->at;
    pthread_mutex_unlock(&w->lock);
    if (!at) {
        bench_note(&w->row, "invalid: no notice within %llu s of the unmap",
                   GIVE_UP_NS / 1000000000ull);
        return -1;
    }
    return (double)(at - from);
}

/* A row with a note went out with it (bench_note()). */
static void emit(struct way *w)
{
    if (w->row.note[0])
        return;
    if (!w->n) {
        bench_note(&w->row, "no samples");
        return;
    }
    double *sorted = malloc(w->n * sizeof *sorted);
    if (!sorted) {
        bench_note(&w->row, "no memory for the samples");
        return;
    }
    memcpy(sorted, w->samples, w->n * sizeof *sorted);
    qsort(sorted, w->n, sizeof *sorted, bench_cmp_double);
    w->row.median = sorted[(w->n - 1) / 2];
    w->row.p99 = sorted[(w->n * 99 + 99) / 100 - 1];
    w->row.nsamples = w->n;
    w->row.samples = w->samples;
    w->row.slots = w->slots;
    free(sorted);
    bench_emit(&w->row);
}

enum { UCM, LIBC, UFFD, WAYS };
static const enum regcache_host_monitor monitors[WAYS] = {
    [UCM] = REGCACHE_HOST_MONITOR_UCM,
    [LIBC] = REGCACHE_HOST_MONITOR_LIBC,
    [UFFD] = REGCACHE_HOST_MONITOR_UFFD,
};
static const char *const names[WAYS] = { [UCM] = "ucm", [LIBC] = "libc", [UFFD] = "uffd" };

/* The ways [first, end), taking turns sample by sample. */
static void measure(int first, int end)
{
    struct way ways[WAYS];
    unsigned warm = bench.samples / 10, total = bench.samples + warm;
    for (int k = first; k < end; k++) {
        struct way *w = &ways[k];
        *w = (struct way){ .row = { .workload = "leave_notice",
                                    .source = "null",
                                    .impl = "regcache",
                                    .what = names[k],
                                    .size = RANGE } };
        pthread_mutex_init(&w->lock, NULL);
        pthread_cond_init(&w->noticed, NULL);
        w->samples = calloc(total, sizeof *w->samples);
        w->slots = calloc(total, sizeof *w->slots);
        if (!w->samples || !w->slots)
            bench_note(&w->row, "no memory for the samples");
        else
            w->cache = host_cache(w, monitors[k]);
    }
    for (unsigned i = 0; i < total; i++)
        for (int k = first; k < end; k++) {
            struct way *w = &ways[k];
            if (!w->cache || w->row.note[0])
                continue;
            double ns = one(w);
            if (ns >= 0 && i >= warm) {
                w->slots[w->n] = i;
                w->samples[w->n++] = ns;
            }
        }
    for (int k = first; k < end; k++) {
        emit(&ways[k]);
        regcache_destroy(ways[k].cache);
        free(ways[k].samples);
        free(ways[k].slots);
    }
}

static void measure_ucm(void)
{
    measure(UCM, UCM + 1);
}

void bench_leave_notice(void)
{
    measure(LIBC, UFFD + 1);
    struct bench_row skipped = { .workload = "leave_notice",
                                 .source = "null",
                                 .impl = "regcache",
                                 .what = names[UCM],
                                 .size = RANGE };
    bench_beside_ucx_hooks(measure_ucm, &skipped);
}
