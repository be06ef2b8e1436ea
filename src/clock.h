/* The LRU stamp.  put() stamps every release, so the clock must cost a few
 * cycles and must not be a shared counter (a global fetch_add would put every
 * thread's put on one cache line).  The x86 TSC is invariant and synchronized
 * across cores on the machines this library targets; elsewhere the
 * monotonic clock serves. */
#ifndef RC_CLOCK_H
#define RC_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t rc_now(void)
{
#if defined(__x86_64__)
    return __builtin_ia32_rdtsc();
#elif defined(__aarch64__)
    uint64_t v;
    __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v));
    return v;
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
}

#endif
