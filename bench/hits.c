/* Hit cost (get+put) against the number of cached entries, in HOOKS and
 * TAG_CHECK mode, beside the bare tag source a TAG_CHECK hit adds. */
#include "bench.h"

const size_t bench_entries[4] = { 1, 1000, 100000, 1000000 };

void bench_hits(const struct bench_src *s)
{
    for (size_t k = 0; k < BENCH_NELEM(bench_entries); k++) {
        struct bench_src span = *s; /* the first entries' regions */
        struct bench_op tag = s->tag;
        struct bench_row r = { .workload = "hits",
                               .source = s->name,
                               .impl = "tag",
                               .what = "query",
                               .entries = bench_entries[k] };
        span.regions = bench_entries[k];
        tag.ctx = &span;
        if (span.regions > s->regions)
            bench_note(&r, "the %s source has room for %zu regions only", s->name, s->regions);
        else
            bench_measure(&r, &tag, bench.batch);
        for (int mode = REGCACHE_VALIDATE_TAG_CHECK; mode <= REGCACHE_VALIDATE_HOOKS; mode++) {
            struct bench_row h = { .workload = "hits", .source = s->name, .what = "hit" };
            bench_hit_rows(&h, s, mode, span.regions, 0, 0);
        }
    }
}
