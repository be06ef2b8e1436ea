/* regcache-driver-tag: what a TAG_CHECK hit adds to the driver's own tag
 * query, for the build of the library it finds (LD_LIBRARY_PATH), on the
 * GPU machine:
 *
 *   regcache-driver-tag N ROUNDS
 *
 * N entries, one per 64 KiB region of one cuMemAlloc allocation, in a
 * TAG_CHECK cache whose backend registers nothing, so that its memory
 * query is the driver's.  Each round times OPS bare
 * cuPointerGetAttribute(BUFFER_ID) calls, then OPS get+put pairs, both on
 * random regions.  Prints the medians and the median over rounds of the
 * difference, which a frequency step or a busy sibling core moves far less
 * than either.  A process holds one driver, so that builds are compared
 * process by process (bench/ab/run.sh driver-tag), not in one process as
 * regcache-ab compares them. */
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "cuda_api.h"

#define OPS 4000
#define WARM 50

/* The allocation's base, aligned to a region, or 0 without a GPU. */
static uintptr_t gpu_regions(size_t n)
{
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p;
    if (bench_cu_open(&dev, &ctx) || bench_cu.cuMemAlloc(&p, (n + 1) * BENCH_REGION))
        return 0;
    return ((uintptr_t)p + BENCH_REGION - 1) & ~(uintptr_t)(BENCH_REGION - 1);
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), bench_cmp_double);
    return v[n / 2];
}

int main(int argc, char **argv)
{
    size_t n = argc == 3 ? strtoul(argv[1], NULL, 0) : 0;
    size_t rounds = argc == 3 ? strtoul(argv[2], NULL, 0) : 0;
    if (!n || rounds < 4) {
        fputs("usage: regcache-driver-tag N ROUNDS (N > 0, ROUNDS >= 4)\n", stderr);
        return 2;
    }
    uintptr_t base = gpu_regions(n);
    if (!base) {
        fputs("regcache-driver-tag: no GPU (libcuda, a device or its memory is missing)\n", stderr);
        return 1;
    }
    regcache_t *c = bench_null_cache(REGCACHE_VALIDATE_TAG_CHECK, NULL, base, n);
    regcache_entry_t *e;
    if (!c) {
        fprintf(stderr, "regcache-driver-tag: %s\n", regcache_last_error());
        return 1;
    }
    double *query = calloc(rounds, sizeof(double)), *hit = calloc(rounds, sizeof(double)),
           *diff = calloc(rounds, sizeof(double));
    if (!query || !hit || !diff) {
        fputs("regcache-driver-tag: out of memory\n", stderr);
        return 1;
    }
    uint64_t rng = 0x9e3779b97f4a7c15ull, failed = 0;
    for (size_t r = 0; r < WARM + rounds; r++) {
        uint64_t t0 = bench_now_ns();
        for (int o = 0; o < OPS; o++) {
            unsigned long long id;
            CUdeviceptr p = (CUdeviceptr)(uintptr_t)bench_pick(base, n, &rng);
            failed += bench_cu.cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p) != 0;
        }
        uint64_t t1 = bench_now_ns();
        for (int o = 0; o < OPS; o++) {
            if (regcache_get(c, bench_pick(base, n, &rng), BENCH_GET, &e) == REGCACHE_OK)
                regcache_put(c, e);
            else
                failed++;
        }
        uint64_t t2 = bench_now_ns();
        if (r >= WARM) {
            query[r - WARM] = (double)(t1 - t0) / OPS;
            hit[r - WARM] = (double)(t2 - t1) / OPS;
            diff[r - WARM] = hit[r - WARM] - query[r - WARM];
        }
    }
    if (failed) {
        fprintf(stderr, "regcache-driver-tag: %llu queries or gets failed\n",
                (unsigned long long)failed);
        return 1;
    }
    printf("n %zu  query %6.1f  hit %6.1f  hit - query %6.2f ns\n", n, median(query, rounds),
           median(hit, rounds), median(diff, rounds));
    regcache_destroy(c);
    return 0;
}
