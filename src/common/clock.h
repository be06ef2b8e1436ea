/* The clock of the miss path: a registration's two ends (the latency
 * histogram), its entry's birth, and the paces of the statistics that
 * misses publish.
 *
 * A reading is the CPU's time-stamp counter where the kernel keeps its own
 * time by it and the CPU says it ticks at one rate through every power
 * state (the clocksource is tsc, and the constant_tsc and nonstop_tsc
 * flags are set): an instruction of a few nanoseconds, where a
 * CLOCK_MONOTONIC read costs 25-40 in the virtual machines this library
 * runs in.  Elsewhere a reading is CLOCK_MONOTONIC in nanoseconds.  The
 * counter's rate is measured against CLOCK_MONOTONIC once per process, so
 * that differences of readings convert to nanoseconds; they are meant for
 * spans (latencies, ages, paces), whose relative error that measurement
 * bounds (well under 0.1%). */
#ifndef RC_CLOCK_H
#define RC_CLOCK_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

struct rc_clock {
    bool tsc;        /* readings are time-stamp counts, else CLOCK_MONOTONIC ns */
    uint64_t mult;   /* ns per count, fixed point with 32 fraction bits */
    uint64_t ns_100; /* readings in 100 ms */
};

extern struct rc_clock rc_clock;

/* Decide and measure, once per process (regcache_create); thread safe.
 * Until then readings are CLOCK_MONOTONIC's. */
void rc_clock_setup(void);

/* Whether the counter may stand for time, by the kernel's clocksource file
 * and its cpuinfo flags (paths given, so that tests can say what the
 * kernel says). */
bool rc_clock_tsc_usable(const char *clocksource_path, const char *cpuinfo_path);

static inline uint64_t rc_clock_ns_of(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A precise reading: a registration's ends. */
static inline uint64_t rc_clock_now(void)
{
#if defined(__x86_64__)
    if (__builtin_expect(rc_clock.tsc, 1))
        return __builtin_ia32_rdtsc();
#endif
    return rc_clock_ns_of(CLOCK_MONOTONIC);
}

/* A reading good to a few milliseconds, for paces and ages: the counter,
 * or the coarse clock, which costs a few nanoseconds where the fine one
 * costs tens.  It may lag a precise reading taken just before by up to a
 * tick: compare readings with rc_clock_ns_between(), never subtract. */
static inline uint64_t rc_clock_now_coarse(void)
{
#if defined(__x86_64__)
    if (__builtin_expect(rc_clock.tsc, 1))
        return __builtin_ia32_rdtsc();
#endif
    return rc_clock_ns_of(CLOCK_MONOTONIC_COARSE);
}

/* Nanoseconds from reading `from` to reading `to`; 0 when `to` is not
 * later (a coarse reading behind a precise one, or counters of two CPUs
 * a few counts apart). */
static inline uint64_t rc_clock_ns_between(uint64_t from, uint64_t to)
{
    if (to <= from)
        return 0;
    if (!rc_clock.tsc)
        return to - from;
    return (uint64_t)(((unsigned __int128)(to - from) * rc_clock.mult) >> 32);
}

/* Has 100 ms passed from reading `last` to `now` (the paces of published
 * statistics)?  A `last` of 0 (never) has. */
static inline bool rc_clock_100ms_since(uint64_t last, uint64_t now)
{
    return !last || (now > last && now - last >= rc_clock.ns_100);
}

#endif
