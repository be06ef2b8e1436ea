/* regcache-floor: what this machine allows a hit, beside what the library's
 * hit costs on it.
 *
 *   regcache-floor N ROUNDS
 *
 * The floor is a skeleton of the hit's protocol (skeleton.h), the least a
 * hit can do and keep its guarantees, with and without the fence of a
 * NOTIFY or HOOKS hit, and as a TAG_CHECK hit.
 *
 * Rounds of OPS get+put pairs each, on random pages of N entries (the
 * stream bench/hits.c draws), rotate over the bare null query, the
 * skeleton with and without the fence, its TAG_CHECK hit, and the
 * library's NOTIFY and TAG_CHECK hits on the null backend (the build
 * LD_LIBRARY_PATH finds: bench/ab/run.sh floor).  Prints each row's
 * median, and medians over rounds of the differences a goal takes. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "bench.h"
#include "skeleton.h"

#define OPS 20000
#define WARM 20

/* Never taken in these runs: every get hits. */
static __attribute__((noinline, cold)) void missed(void)
{
    fputs("regcache-floor: a get missed\n", stderr);
    exit(1);
}

static int (*volatile null_query)(void *, const void *, size_t,
                                  struct regcache_mem_info *) = bench_null_query;

enum row { QUERY, FENCED, UNFENCED, TAGGED, NOTIFY, TAG_CHECK, ROWS };

static const char *const names[ROWS] = {
    "bare null query",
    "skeleton, fenced (NOTIFY, HOOKS)",
    "skeleton without the fence",
    "skeleton TAG_CHECK",
    "regcache NOTIFY",
    "regcache TAG_CHECK",
};

struct run {
    uintptr_t base;
    size_t n;
    struct bench_skeleton *s;
    regcache_t *c[2]; /* NOTIFY, TAG_CHECK */
    uint64_t rng;
};

static double sample(struct run *r, enum row row)
{
    uint64_t t0 = bench_now_ns();
    for (int o = 0; o < OPS; o++) {
        void *addr = bench_pick(r->base, r->n, &r->rng), *h;
        regcache_entry_t *e;
        if (row == QUERY) {
            struct regcache_mem_info info;
            null_query(NULL, addr, BENCH_GET, &info);
        } else if (row < NOTIFY) {
            if (bench_skeleton_get[row - FENCED](r->s, (uintptr_t)addr, BENCH_GET, &h) != 0)
                missed();
            bench_skeleton_put(r->s, h);
        } else {
            regcache_t *c = r->c[row - NOTIFY];
            if (regcache_get(c, addr, BENCH_GET, &e) != REGCACHE_OK)
                missed();
            regcache_put(c, e);
        }
    }
    return (double)(bench_now_ns() - t0) / OPS;
}

static double median(const double *v, size_t n, double *scratch)
{
    for (size_t i = 0; i < n; i++)
        scratch[i] = v[i];
    qsort(scratch, n, sizeof(*scratch), bench_cmp_double);
    return scratch[n / 2];
}

/* The median over rounds of ns[a] - ns[b]. */
static double paired(double *const ns[ROWS], enum row a, enum row b, size_t rounds, double *scratch)
{
    for (size_t i = 0; i < rounds; i++)
        scratch[i] = ns[a][i] - ns[b][i];
    qsort(scratch, rounds, sizeof(*scratch), bench_cmp_double);
    return scratch[rounds / 2];
}

int main(int argc, char **argv)
{
    size_t n = argc == 3 ? strtoul(argv[1], NULL, 0) : 0;
    size_t rounds = argc == 3 ? strtoul(argv[2], NULL, 0) : 0;
    if (!n || n > ((size_t)1 << 24) || rounds < 4) {
        fputs("usage: regcache-floor N ROUNDS (0 < N <= 2^24, ROUNDS >= 4)\n", stderr);
        return 2;
    }
    struct run r = { .n = n, .rng = 0x9e3779b97f4a7c15ull };
    void *p = mmap(NULL, (n + 1) * BENCH_REGION, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        perror("regcache-floor: mmap");
        return 1;
    }
    r.base = ((uintptr_t)p + BENCH_REGION - 1) & ~(uintptr_t)(BENCH_REGION - 1);
    r.s = bench_skeleton_new(r.base, n);
    r.c[0] = bench_null_cache(REGCACHE_VALIDATE_NOTIFY, bench_null_query, r.base, n);
    r.c[1] = bench_null_cache(REGCACHE_VALIDATE_TAG_CHECK, bench_null_query, r.base, n);
    double *ns[ROWS], *scratch = calloc(rounds, sizeof(double));
    bool allocated = scratch != NULL;
    for (int k = 0; k < ROWS; k++)
        allocated &= (ns[k] = calloc(rounds, sizeof(double))) != NULL;
    if (!r.s || !r.c[0] || !r.c[1] || !allocated) {
        fprintf(stderr, "regcache-floor: set-up failed (%s)\n", regcache_last_error());
        return 1;
    }
    for (size_t i = 0; i < WARM + rounds; i++)
        for (int k = 0; k < ROWS; k++) {
            enum row row = (enum row)((k + i) % ROWS);
            double v = sample(&r, row);
            if (i >= WARM)
                ns[row][i - WARM] = v;
        }
    printf("%zu entries, %zu rounds of %d get+put, ns per get+put (median)\n", n, rounds, OPS);
    for (int k = 0; k < ROWS; k++)
        printf("  %-34s %6.2f\n", names[k], median(ns[k], rounds, scratch));
    printf(
        "medians of paired differences:\n"
        "  the fence (skeleton)                 %+6.2f\n"
        "  skeleton TAG_CHECK over the query    %+6.2f\n"
        "  regcache TAG_CHECK over the query    %+6.2f\n"
        "  regcache NOTIFY over its skeleton    %+6.2f\n"
        "  regcache TAG_CHECK over its skeleton %+6.2f\n",
        paired(ns, FENCED, UNFENCED, rounds, scratch), paired(ns, TAGGED, QUERY, rounds, scratch),
        paired(ns, TAG_CHECK, QUERY, rounds, scratch), paired(ns, NOTIFY, FENCED, rounds, scratch),
        paired(ns, TAG_CHECK, TAGGED, rounds, scratch));
    regcache_destroy(r.c[0]);
    regcache_destroy(r.c[1]);
    bench_skeleton_free(r.s);
    return 0;
}
