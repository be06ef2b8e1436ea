/* How soon a leave notice arrives once watched host memory is unmapped and
 * the transport makes no further call: a cache per way the monitor hears
 * of unmaps (UCX's events, where UCX's memory hooks are loaded; libc's
 * hooks; the userfaultfd), null backend, host_memory on.
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
    static struct regcache_backend b = { .reg = bench_null_reg, .dereg = bench_null_dereg };
    struct regcache_params p;
    regcache_t *c = NULL;
    regcache_params_init(&p);
    p.backend = &b;
    p.host_memory = 1;
    p.alignment = RANGE;
    p.host_monitor = monitor;
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

static void emit(struct way *w)
{
    if (!w->row.note[0] && w->n) {
        double *sorted = malloc(w->n * sizeof *sorted);
        if (sorted) {
            memcpy(sorted, w->samples, w->n * sizeof *sorted);
            qsort(sorted, w->n, sizeof *sorted, bench_cmp_double);
            w->row.median = sorted[(w->n - 1) / 2];
            w->row.p99 = sorted[(w->n * 99 + 99) / 100 - 1];
            w->row.nsamples = w->n;
            w->row.samples = w->samples;
            w->row.slots = w->slots;
            free(sorted);
        } else {
            bench_note(&w->row, "no memory for the samples");
        }
    }
    bench_emit(&w->row);
}

#define WAYS 3
static const enum regcache_host_monitor monitors[WAYS] = { REGCACHE_HOST_MONITOR_UCM,
                                                           REGCACHE_HOST_MONITOR_LIBC,
                                                           REGCACHE_HOST_MONITOR_UFFD };
static const char *const names[WAYS] = { "ucm", "libc", "uffd" };

void bench_leave_notice(void)
{
    struct way ways[WAYS];
    unsigned warm = bench.samples / 10, total = bench.samples + warm;
    for (size_t k = 0; k < WAYS; k++) {
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
        w->cache = w->samples && w->slots ? host_cache(w, monitors[k]) : NULL;
        if (!w->samples || !w->slots)
            bench_note(&w->row, "no memory for the samples");
    }
    for (unsigned i = 0; i < total; i++)
        for (size_t k = 0; k < WAYS; k++) {
            struct way *w = &ways[k];
            if (!w->cache || w->row.note[0])
                continue;
            double ns = one(w);
            if (ns >= 0 && i >= warm) {
                w->slots[w->n] = i;
                w->samples[w->n++] = ns;
            }
        }
    for (size_t k = 0; k < WAYS; k++) {
        emit(&ways[k]);
        regcache_destroy(ways[k].cache);
        free(ways[k].samples);
        free(ways[k].slots);
    }
}
