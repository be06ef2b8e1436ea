/* Built instead of ucx_rcache.c when configure found no UCX. */
#include "bench.h"

#include <stdio.h>

int bench_ucx_available(char *why, size_t why_len)
{
    snprintf(why, why_len,
             "UCX (ucs/memory/rcache.h, libucs) not found at configure time; "
             "install libucx-dev and reconfigure");
    return 0;
}

int bench_ucx_target(struct bench_target *t, const struct bench_space *s,
                     char *why, size_t why_len)
{
    (void)t, (void)s;
    bench_ucx_available(why, why_len);
    return -1;
}
