/* The monitor does not change how the application's own mappings behave.
 * A 64 KiB buffer inside a 2 MiB mapping is cached (so watched); then the
 * mapping is still one mapping in /proc/self/maps, and the application's
 * mremap of its first 1 MiB to 2 MiB (MREMAP_MAYMOVE), mprotect of a part
 * of it and munmap of a part of it all work; pages that left are
 * invalidated, those that stayed are not.  Under each way
 * (REGCACHE_HOST_MONITOR=libc, uffd or ucm). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cmocka.h>

#include "host_case.h"
#include "proc_maps.h"

#define MAPPING (2 * MiB)
#define BUF (64 * KiB)

static int count(const struct rc_mapping *m, void *arg)
{
    (void)m;
    ++*(int *)arg;
    return 0;
}

/* How many mappings /proc/self/maps lists over [p, p + len). */
static int mappings_over(const char *p, size_t len)
{
    int n = 0;
    assert_int_equal(rc_maps_visit((uintptr_t)p, (uintptr_t)p + len, count, &n), 0);
    return n;
}

/* A 2 MiB mapping whose buffer at +512 KiB is cached. */
static char *watched_mapping(struct fx *f)
{
    char *m = mmap(NULL, MAPPING, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    memset(m, 1, MAPPING);
    fx_use(f, (uintptr_t)m + 512 * KiB, BUF);
    fx_assert_stats(f, FX_STAT(host_unmonitored, 0), NULL);
    return m;
}

static void assert_one_mapping(const char *m)
{
    if (mappings_over(m, MAPPING) != 1)
        fail_msg("watching a buffer split its mapping in %d", mappings_over(m, MAPPING));
}

static void mremap_moves_the_mapping(void **state)
{
    struct fx *f = *state;
    host_create(f);
    char *m = watched_mapping(f);
    char *q = mremap(m, MiB, MAPPING, MREMAP_MAYMOVE);
    if (q == MAP_FAILED)
        fail_msg("mremap(%p, 1 MiB -> 2 MiB, MREMAP_MAYMOVE): %s (the mapping is %d in "
                 "/proc/self/maps)",
                 (void *)m, strerror(errno), mappings_over(m, MAPPING));
    assert_int_equal(q[512 * KiB], 1);
    fx_use(f, (uintptr_t)q + 512 * KiB, BUF);
    fx_assert_stats(f, FX_STAT(misses, 2), FX_STAT(invalidations_monitor, 1),
                    FX_STAT(deregistrations, 1), NULL);
    regcache_destroy(f->c);
    f->c = NULL;
    munmap(q, MAPPING);
    munmap(m + MiB, MiB);
}

static void mprotect_of_a_part_works(void **state)
{
    struct fx *f = *state;
    host_create(f);
    char *m = watched_mapping(f);
    assert_one_mapping(m);
    assert_int_equal(mprotect(m + MiB, MiB, PROT_READ), 0);
    assert_int_equal(mprotect(m + 512 * KiB, BUF, PROT_READ), 0);
    assert_int_equal(mprotect(m, MAPPING, PROT_READ | PROT_WRITE), 0);
    m[MAPPING - 1] = 2;
    fx_use(f, (uintptr_t)m + 512 * KiB, BUF);
    fx_assert_stats(f, FX_STAT(hits, 1), FX_STAT(deregistrations, 0), NULL);
    regcache_destroy(f->c);
    f->c = NULL;
    munmap(m, MAPPING);
}

static void munmap_of_a_part_works(void **state)
{
    struct fx *f = *state;
    host_create(f);
    char *m = watched_mapping(f);
    assert_one_mapping(m);
    assert_int_equal(munmap(m + MiB, MiB), 0);
    fx_use(f, (uintptr_t)m + 512 * KiB, BUF);
    fx_assert_stats(f, FX_STAT(hits, 1), FX_STAT(deregistrations, 0), NULL);
    /* The buffer's own part replaced in one call: a munmap and then a map
     * at the same address leave a hole that another thread's mapping may
     * take first (a CI run saw it taken). */
    char *n = mmap(m, MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    assert_true(n == m);
    fx_use(f, (uintptr_t)m + 512 * KiB, BUF);
    fx_assert_stats(f, FX_STAT(misses, 2), FX_STAT(invalidations_monitor, 1),
                    FX_STAT(deregistrations, 1), NULL);
    regcache_destroy(f->c);
    f->c = NULL;
    munmap(m, MiB);
}

int main(void)
{
    if (strcmp(getenv("REGCACHE_HOST_MONITOR"), "ucm") == 0)
        if (!hx_load_ucm())
            return 1;
    return FX_RUN(fx_setup, fx_teardown, mremap_moves_the_mapping, mprotect_of_a_part_works,
                  munmap_of_a_part_works);
}
