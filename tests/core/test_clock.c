/* The miss path's clock: the time-stamp counter is taken only where the
 * kernel's clocksource is tsc and both its constant_tsc and nonstop_tsc
 * flags are set (whole words, in the flags line); and whichever clock
 * this machine gets, spans of its readings convert to the nanoseconds
 * CLOCK_MONOTONIC saw, a reading compared with an earlier one is never
 * negative, and the 100 ms pace holds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "clock.h"

static char dir[] = "/tmp/regcache-clock-XXXXXX";
static char source[64], cpuinfo[64];

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

#define FLAGS_BOTH "flags\t\t: fpu tsc constant_tsc rep_good nopl nonstop_tsc cpuid\n"

/* What the kernel says: the clocksource file and cpuinfo's text. */
static bool usable(const char *clocksource, const char *info)
{
    put(source, clocksource);
    put(cpuinfo, info);
    return rc_clock_tsc_usable(source, cpuinfo);
}

static void tsc_only_where_the_kernel_keeps_time_by_it(void **state)
{
    (void)state;
    const char *cpu = "processor\t: 0\nvendor_id\t: GenuineIntel\n";
    char text[512];
    snprintf(text, sizeof text, "%s" FLAGS_BOTH "bugs\t\t: spectre_v1\n", cpu);
    assert_true(usable("tsc\n", text));
    /* The flag last on the line, before its end. */
    assert_true(usable("tsc\n", "flags\t\t: constant_tsc nonstop_tsc\n"));
    /* Another clocksource: the kernel does not trust the counter. */
    assert_false(usable("kvm-clock\n", text));
    assert_false(usable("hpet\n", text));
    assert_false(usable("tsc-early\n", text));
    /* A flag missing, or only inside another word. */
    assert_false(usable("tsc\n", "flags\t\t: fpu constant_tsc cpuid\n"));
    assert_false(usable("tsc\n", "flags\t\t: fpu nonstop_tsc cpuid\n"));
    assert_false(usable("tsc\n", "flags\t\t: xconstant_tsc nonstop_tsc_x\n"));
    /* Only the flags line counts. */
    assert_false(usable("tsc\n", "model name\t: constant_tsc nonstop_tsc\nflags\t\t: fpu\n"));
    /* No files. */
    assert_false(rc_clock_tsc_usable("/nonexistent/clocksource", cpuinfo));
    put(source, "tsc\n");
    assert_false(rc_clock_tsc_usable(source, "/nonexistent/cpuinfo"));
}

static uint64_t monotonic(void)
{
    return rc_clock_ns_of(CLOCK_MONOTONIC);
}

static void spans_in(const char *which)
{
    printf("clock: %s\n", which);
    uint64_t m0 = monotonic(), r0 = rc_clock_now();
    nanosleep(&(struct timespec){ .tv_nsec = 20000000 }, NULL);
    uint64_t r1 = rc_clock_now(), m1 = monotonic();
    uint64_t span = rc_clock_ns_between(r0, r1), seen = m1 - m0;
    /* What the clock saw around them, to the counter's measured rate (a
     * preempted reader only widens the outer pair). */
    assert_true(span <= seen + seen / 100);
    assert_true(span >= seen - seen / 10);
    assert_int_equal(rc_clock_ns_between(r1, r0), 0);
    assert_int_equal(rc_clock_ns_between(r1, r1), 0);
}

/* This machine's clock, and the fallback too where that is the counter. */
static void spans_read_as_monotonic_nanoseconds(void **state)
{
    (void)state;
    rc_clock_setup();
    struct rc_clock mine = rc_clock;
    spans_in(rc_clock.tsc ? "time-stamp counter" : "CLOCK_MONOTONIC");
    rc_clock = (struct rc_clock){ false, (uint64_t)1 << 32, 100000000u };
    spans_in("CLOCK_MONOTONIC");
    rc_clock = mine;
}

static void the_pace_is_100ms(void **state)
{
    (void)state;
    rc_clock_setup();
    uint64_t r0 = rc_clock_now_coarse(), pace = rc_clock.ns_100;
    uint64_t ns = rc_clock_ns_between(r0, r0 + pace);
    assert_true(ns >= 99999000 && ns <= 100001000);
    assert_true(rc_clock_100ms_since(0, r0)); /* never published */
    assert_false(rc_clock_100ms_since(r0, r0));
    assert_false(rc_clock_100ms_since(r0, r0 + pace - 1));
    assert_true(rc_clock_100ms_since(r0, r0 + pace));
    assert_false(rc_clock_100ms_since(r0 + 1000, r0)); /* a reading behind */
}

int main(void)
{
    assert_non_null(mkdtemp(dir));
    snprintf(source, sizeof source, "%s/clocksource", dir);
    snprintf(cpuinfo, sizeof cpuinfo, "%s/cpuinfo", dir);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tsc_only_where_the_kernel_keeps_time_by_it),
        cmocka_unit_test(spans_read_as_monotonic_nanoseconds),
        cmocka_unit_test(the_pace_is_100ms),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(source);
    unlink(cpuinfo);
    rmdir(dir);
    return failed;
}
