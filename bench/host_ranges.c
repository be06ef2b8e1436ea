/* Pageable host memory as a transport meets it: gets of random sub-ranges
 * of two 16 MiB mappings, through the null backend (host_memory on).  What
 * counts is what stays pinned: registrations alive at the end, all made,
 * and the peak of registered bytes, at the default alignment and at 2 MiB.
 * Each figure is one count, its own median and p99. */
#include "bench.h"

#include <sys/mman.h>

#define MAPPING ((size_t)16 << 20)
#define GETS 400

static void one_alignment(char *const map[2], size_t alignment)
{
    struct bench_row r = {
        .workload = "host_ranges", .source = "null", .impl = "regcache", .size = alignment
    };
    struct regcache_params p;
    regcache_t *c;
    bench_host_params(&p, alignment, REGCACHE_HOST_MONITOR_AUTO);
    int st = regcache_create(&p, &c);
    if (st != REGCACHE_OK) {
        bench_note(&r, "regcache_create: %s (%s)", regcache_strerror(st), regcache_last_error());
        bench_emit(&r);
        return;
    }
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < GETS; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        size_t len = 1 + (size_t)(rng >> 40) % ((size_t)1 << 20);
        size_t off = (size_t)(rng & 0xffffffu) % (MAPPING - len);
        regcache_entry_t *e;
        st = regcache_get(c, map[i & 1] + off, len, &e);
        if (st != REGCACHE_OK) {
            bench_note(&r, "invalid: get %d: %s (%s)", i, regcache_strerror(st),
                       regcache_last_error());
            bench_emit(&r);
            regcache_destroy(c);
            return;
        }
        regcache_put(c, e);
    }
    struct regcache_stats s;
    regcache_get_stats(c, &s);
    bench_emit_count(&r, "entries", "count", (double)s.entries);
    bench_emit_count(&r, "registrations", "count", (double)s.registrations);
    bench_emit_count(&r, "pinned_peak", "MiB", (double)s.peak_bytes / (1 << 20));
    regcache_destroy(c);
}

void bench_host_ranges(void)
{
    char *map[2];
    for (int m = 0; m < 2; m++) {
        map[m] = mmap(NULL, MAPPING, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (map[m] == MAP_FAILED) {
            struct bench_row r = { .workload = "host_ranges", .source = "null" };
            bench_note(&r, "cannot map 2 x 16 MiB");
            bench_emit(&r);
            if (m)
                munmap(map[0], MAPPING);
            return;
        }
    }
    one_alignment(map, 65536);
    one_alignment(map, (size_t)2 << 20);
    munmap(map[0], MAPPING);
    munmap(map[1], MAPPING);
}
