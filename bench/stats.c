/* Clock and order statistics. */
#include "bench.h"

#include <stdlib.h>
#include <time.h>

uint64_t bench_now_ns(void)
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

/* Nearest rank: the smallest value with at least q of the samples at or
 * below it, so p99 of 100 samples is the 99th, not an interpolation. */
static double rank(const double *sorted, size_t n, double q)
{
    size_t k = (size_t)(q * (double)n + 0.999999);
    if (k == 0)
        k = 1;
    if (k > n)
        k = n;
    return sorted[k - 1];
}

struct bench_summary bench_summarize(double *v, size_t n)
{
    struct bench_summary s = {-1.0, -1.0};
    if (n == 0)
        return s;
    qsort(v, n, sizeof(*v), cmp_double);
    s.median = rank(v, n, 0.5);
    s.p99 = rank(v, n, 0.99);
    return s;
}
