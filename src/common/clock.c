/* The miss path's clock (clock.h): whether the time-stamp counter stands
 * for time here, and its rate. */
#include "clock.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

struct rc_clock rc_clock = { false, (uint64_t)1 << 32, 100000000u };

/* Does the file's first line read `want`? */
static bool first_line_is(const char *path, const char *want)
{
    char line[64];
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    bool is = fgets(line, sizeof line, f) && strcmp(line, want) == 0;
    fclose(f);
    return is;
}

/* Does the word stand in the line after a space, before a space or the
 * line's end? */
static bool has_word(const char *line, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = strstr(line, word); p; p = strstr(p + 1, word))
        if (p > line && p[-1] == ' ' && (p[n] == ' ' || p[n] == '\n' || p[n] == 0))
            return true;
    return false;
}

bool rc_clock_tsc_usable(const char *clocksource_path, const char *cpuinfo_path)
{
    if (!first_line_is(clocksource_path, "tsc\n"))
        return false;
    FILE *f = fopen(cpuinfo_path, "re");
    if (!f)
        return false;
    /* The first CPU's flags line: the kernel clears these flags on every
     * CPU alike.  Lines of a few kilobytes; longer ones are read in parts,
     * and a flag split between two parts is missed (it then reads as
     * unset, the safe side). */
    char line[4096];
    bool flags = false, constant = false, nonstop = false;
    while (fgets(line, sizeof line, f)) {
        bool start = strncmp(line, "flags", 5) == 0;
        if (!start && !flags)
            continue;
        flags = true;
        constant |= has_word(line, "constant_tsc");
        nonstop |= has_word(line, "nonstop_tsc");
        if (strchr(line, '\n'))
            break;
    }
    fclose(f);
    return constant && nonstop;
}

#if defined(__x86_64__)
/* A counter reading beside a CLOCK_MONOTONIC one: of a few tries, the one
 * whose counter readings bracket the clock's most tightly, at their
 * middle. */
static void pair(uint64_t *count, uint64_t *ns)
{
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 8; i++) {
        uint64_t a = __builtin_ia32_rdtsc();
        uint64_t t = rc_clock_ns_of(CLOCK_MONOTONIC);
        uint64_t b = __builtin_ia32_rdtsc();
        if (b >= a && b - a < best) {
            best = b - a;
            *count = a + (b - a) / 2;
            *ns = t;
        }
    }
}

/* The counter's rate over 200 us: the pairs' brackets (tens of ns) make
 * an error of a few hundredths of a percent. */
static void measure(void)
{
    if (!rc_clock_tsc_usable("/sys/devices/system/clocksource/clocksource0/current_clocksource",
                             "/proc/cpuinfo"))
        return;
    uint64_t c0 = 0, t0 = 0, c1 = 0, t1 = 0; /* pair() leaves them so if every try failed */
    pair(&c0, &t0);
    while (rc_clock_ns_of(CLOCK_MONOTONIC) - t0 < 200000)
        ;
    pair(&c1, &t1);
    if (c1 <= c0 || t1 <= t0)
        return;
    uint64_t mult = (uint64_t)(((unsigned __int128)(t1 - t0) << 32) / (c1 - c0));
    if (!mult)
        return;
    rc_clock.mult = mult;
    rc_clock.ns_100 = (uint64_t)(((unsigned __int128)100000000u << 32) / mult);
    rc_clock.tsc = true;
}
#else
static void measure(void)
{
}
#endif

void rc_clock_setup(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, measure);
}
