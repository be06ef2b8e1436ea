/* regcache-ab: two or more builds of libregcache compared in one process.
 *
 *   regcache-ab MODE N ROUNDS OPS LIB...
 *
 * Each LIB is loaded into a link namespace of its own (dlmopen), so that
 * builds exporting the same symbols live side by side, each with its own
 * cache of the null backend.  Round by round every build times one sample
 * of OPS get+put pairs, the order rotating, so that whatever the host does
 * meanwhile (a busy sibling hyperthread, a frequency step) lands on all of
 * them alike: on a shared 2-core VM a single build's median moved by 50%
 * between runs, while the paired difference of two identical builds stayed
 * within 3 ns per evicting get+put (of about 160) and 0.2 ns per hit.  MODE
 * is churn (every get misses and evicts: N entries allowed, 2N regions
 * walked in a cycle, as bench/churn.c), hooks or tag (random hits over N
 * cached entries, in that validation mode), or access (hooks with the
 * transport's options: gets through regcache_get_access() with the
 * cache's access given, 64 bytes of private data per entry; a build
 * without them takes regcache_get() without private data, today's hit).
 *
 * Prints per build the median, 10th percentile and least ns per get+put,
 * then the median difference to the first build over all rounds and over
 * the quiet quarter (the rounds whose sum over all builds is least).
 * bench/ab/run.sh builds git revisions and runs this on them. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dlmopen */
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench.h"

#define MAX_LIBS 8
/* Rounds run before any is kept: the caches and the CPU settle. */
#define WARM 20

struct build {
    const char *path;
    void (*params_init)(struct regcache_params *);
    int (*create)(const struct regcache_params *, regcache_t **);
    int (*get)(regcache_t *, const void *, size_t, regcache_entry_t **);
    int (*get_access)(regcache_t *, unsigned, const void *, size_t, int, unsigned,
                      regcache_entry_t **); /* access mode, where the build has it */
    int access;
    void (*put)(regcache_t *, regcache_entry_t *);
    regcache_t *cache;
    char *base;
    size_t next;  /* churn: the region the next get asks for */
    uint64_t rng; /* hits: xorshift state */
    double *ns;   /* per kept round */
};

struct run {
    int churn;
    size_t n, span, ops;
};

static void *noop(void *arg)
{
    return arg;
}

static int fail(const char *what, const char *why)
{
    fprintf(stderr, "regcache-ab: %s: %s\n", what, why);
    return 1;
}

static int get_put(struct build *b, size_t region)
{
    regcache_entry_t *e;
    const char *addr = b->base + region * BENCH_REGION;
    int rc = b->get_access ? b->get_access(b->cache, 0, addr, BENCH_GET, b->access, 0, &e)
                           : b->get(b->cache, addr, BENCH_GET, &e);
    if (rc != REGCACHE_OK)
        return -1;
    b->put(b->cache, e);
    return 0;
}

static int open_build(struct build *b, const char *mode, const struct run *r)
{
    void *h = dlmopen(LM_ID_NEWLM, b->path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return fail(b->path, dlerror());
    b->params_init = (void (*)(struct regcache_params *))dlsym(h, "regcache_params_init");
    b->create = (int (*)(const struct regcache_params *, regcache_t **))dlsym(h, "regcache_create");
    b->get =
        (int (*)(regcache_t *, const void *, size_t, regcache_entry_t **))dlsym(h, "regcache_get");
    b->put = (void (*)(regcache_t *, regcache_entry_t *))dlsym(h, "regcache_put");
    if (!b->params_init || !b->create || !b->get || !b->put)
        return fail(b->path, "a regcache_ symbol is missing");
    /* Untouched address space, aligned to a region. */
    char *p = mmap(NULL, (r->span + 1) * BENCH_REGION, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return fail(b->path, "mmap failed");
    b->base = (char *)(((uintptr_t)p + BENCH_REGION - 1) & ~(uintptr_t)(BENCH_REGION - 1));
    struct regcache_backend backend = { .reg = bench_null_reg,
                                        .dereg = bench_null_dereg,
                                        .query = bench_null_query };
    struct regcache_params params;
    b->params_init(&params);
    params.backend = &backend;
    params.validation =
        strcmp(mode, "tag") == 0 ? REGCACHE_VALIDATE_TAG_CHECK : REGCACHE_VALIDATE_NOTIFY;
    b->get_access = (int (*)(regcache_t *, unsigned, const void *, size_t, int, unsigned,
                             regcache_entry_t **))dlsym(h, "regcache_get_access");
    if (!b->get_access) {
        /* A build from before 0.3 takes the params of 0.2: those before
         * the first field 0.3 added. */
        params.size = offsetof(struct regcache_params, eager_min_bytes);
    } else if (strcmp(mode, "access") == 0) {
        params.priv_size = 64;
        b->access = params.access;
    } else {
        b->get_access = NULL;
    }
    /* As bench/backend.c: each region an entry of its own, no byte limit. */
    params.whole_allocation = 0;
    params.max_bytes = (size_t)1 << 56;
    params.max_entries = r->churn ? r->n : 0;
    int rc = b->create(&params, &b->cache);
    /* Before 0.4 the cache that trusts its user's notices was HOOKS. */
    if (rc == REGCACHE_ERR_INVALID && params.validation == REGCACHE_VALIDATE_NOTIFY) {
        params.validation = REGCACHE_VALIDATE_HOOKS;
        rc = b->create(&params, &b->cache);
    }
    if (rc != REGCACHE_OK)
        return fail(b->path, "regcache_create failed");
    for (size_t i = 0; i < r->span; i++)
        if (get_put(b, i) != 0)
            return fail(b->path, "a get failed while filling the cache");
    b->rng = 0x9e3779b97f4a7c15ull;
    return 0;
}

static int sample(struct build *b, const struct run *r, double *ns)
{
    uint64_t t0 = bench_now_ns();
    for (size_t o = 0; o < r->ops; o++) {
        size_t region;
        if (r->churn) {
            region = b->next;
            b->next = (b->next + 1) % r->span;
        } else {
            b->rng ^= b->rng << 13;
            b->rng ^= b->rng >> 7;
            b->rng ^= b->rng << 17;
            region = b->rng % r->n;
        }
        if (get_put(b, region) != 0)
            return fail(b->path, "a timed get failed");
    }
    *ns = (double)(bench_now_ns() - t0) / (double)r->ops;
    return 0;
}

/* The median difference to build 0 over the rounds `keep` selects. */
static double paired(struct build *b, const struct build *first, size_t rounds, const bool *keep,
                     double *scratch)
{
    size_t n = 0;
    for (size_t i = 0; i < rounds; i++)
        if (keep[i])
            scratch[n++] = b->ns[i] - first->ns[i];
    qsort(scratch, n, sizeof(*scratch), bench_cmp_double);
    return scratch[n / 2];
}

int main(int argc, char **argv)
{
    if (argc < 6 || argc - 5 > MAX_LIBS ||
        (strcmp(argv[1], "churn") && strcmp(argv[1], "hooks") && strcmp(argv[1], "tag") &&
         strcmp(argv[1], "access")))
        return fail("usage", "regcache-ab churn|hooks|tag|access N ROUNDS OPS LIB... (at most 8)");
    /* One thread more, once: from then on glibc takes its locks with
     * locked instructions, as in any process that ever ran a second thread
     * (every MPI or CUDA process). */
    pthread_t th;
    if (pthread_create(&th, NULL, noop, NULL) == 0)
        pthread_join(th, NULL);
    struct run r = { strcmp(argv[1], "churn") == 0, strtoul(argv[2], NULL, 0), 0,
                     strtoul(argv[4], NULL, 0) };
    size_t rounds = strtoul(argv[3], NULL, 0);
    int nb = argc - 5;
    if (!r.n || !r.ops || rounds < 4)
        return fail("usage", "N and OPS must be positive and ROUNDS at least 4");
    r.span = r.churn ? 2 * r.n : r.n;
    struct build b[MAX_LIBS] = { 0 };
    double *sum = calloc(rounds, sizeof(double)), *sorted = calloc(rounds, sizeof(double));
    bool *all = calloc(rounds, sizeof(bool)), *quiet = calloc(rounds, sizeof(bool));
    if (!sum || !sorted || !all || !quiet)
        return fail("regcache-ab", "out of memory");
    for (int k = 0; k < nb; k++) {
        b[k].path = argv[5 + k];
        if (!(b[k].ns = calloc(rounds, sizeof(double))) || open_build(&b[k], argv[1], &r) != 0)
            return 1;
    }
    for (size_t i = 0; i < WARM + rounds; i++)
        for (int j = 0; j < nb; j++) {
            struct build *x = &b[(j + i) % (size_t)nb];
            double ns;
            if (sample(x, &r, &ns) != 0)
                return 1;
            if (i >= WARM)
                x->ns[i - WARM] = ns;
        }
    for (size_t i = 0; i < rounds; i++) {
        all[i] = true;
        for (int k = 0; k < nb; k++)
            sum[i] += b[k].ns[i];
        sorted[i] = sum[i];
    }
    qsort(sorted, rounds, sizeof(double), bench_cmp_double);
    for (size_t i = 0; i < rounds; i++)
        quiet[i] = sum[i] <= sorted[rounds / 4];
    printf("%s %zu, %zu rounds of %zu get+put, ns per get+put\n", argv[1], r.n, rounds, r.ops);
    for (int k = 0; k < nb; k++) {
        double d_all = paired(&b[k], &b[0], rounds, all, sorted);
        double d_quiet = paired(&b[k], &b[0], rounds, quiet, sorted);
        memcpy(sorted, b[k].ns, rounds * sizeof(double));
        qsort(sorted, rounds, sizeof(double), bench_cmp_double);
        printf("  median %6.1f  p10 %6.1f  min %6.1f  vs first %+6.1f (quiet %+6.1f)  %s\n",
               sorted[rounds / 2], sorted[rounds / 10], sorted[0], d_all, d_quiet, b[k].path);
    }
    return 0;
}
