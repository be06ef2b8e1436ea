/* Hit cost (get+put) against the number of cached entries, in NOTIFY (no
 * tag check: the bench notifies itself) and TAG_CHECK mode, beside the bare tag source a TAG_CHECK
 * hit adds and, on the null source, UCX's hit.  The goals compare them at each count, so the four
 * are measured interleaved, in blocks of samples, each on its own cache; in each round a TAG_CHECK
 * block follows its tag query's and a UCX block its NOTIFY hit's, the pairs the goals take.  On
 * the null source, up to 1k entries, a fifth: the fenced skeleton of the hit's protocol
 * (skeleton.h), the least a NOTIFY hit can cost on this machine. */
#include <stdio.h>

#include "bench.h"
#include "skeleton.h"

/* Above this many entries the skeleton's tables would add hundreds of MiB
 * to the run, for goals that are set at 1 and 1k entries. */
#define SKELETON_MAX 1000

struct skeleton_arm {
    struct bench_skeleton *s;
    uintptr_t base;
    size_t regions;
    uint64_t missed;
};

static void skeleton_run(void *ctx, struct bench_lane *l, uint64_t n)
{
    struct skeleton_arm *k = ctx;
    uint64_t rng = l->rng;
    for (uint64_t i = 0; i < n; i++) {
        void *h;
        if (bench_skeleton_get[BENCH_SKELETON_FENCED](
                k->s, (uintptr_t)bench_pick(k->base, k->regions, &rng), BENCH_GET, &h) != 0)
            k->missed++;
        else
            bench_skeleton_put(k->s, h);
    }
    l->rng = rng;
}

static int skeleton_check(void *ctx, char *why, size_t len)
{
    const struct skeleton_arm *k = ctx;
    snprintf(why, len, "%llu skeleton gets missed", (unsigned long long)k->missed);
    return k->missed ? -1 : 0;
}

void bench_hits(const struct bench_src *s)
{
    static const int modes[2] = { REGCACHE_VALIDATE_TAG_CHECK, REGCACHE_VALIDATE_NOTIFY };
    for (size_t k = 0; k < BENCH_NELEM(bench_entries); k++) {
        struct bench_src span = *s; /* the first entries' regions */
        struct bench_op tag = s->tag, ucx;
        struct bench_target t[2];
        struct bench_row r[5] = { { .workload = "hits", .impl = "tag", .what = "query" },
                                  { .workload = "hits", .what = "hit" },
                                  { .workload = "hits", .what = "hit" },
                                  { .workload = "ucx", .what = "hit" },
                                  { .workload = "hits", .impl = "skeleton", .what = "hit" } };
        struct bench_arm arms[5];
        struct skeleton_arm sk = { .base = s->base, .regions = bench_entries[k] };
        struct bench_op skeleton = { skeleton_run, NULL, skeleton_check, &sk };
        struct bench_ucx *u = NULL;
        size_t n = 0;
        for (size_t i = 0; i < BENCH_NELEM(r); i++) {
            r[i].source = s->name;
            r[i].entries = bench_entries[k];
        }
        span.regions = bench_entries[k];
        tag.ctx = &span;
        /* Before each block, twice the entries: the arms' sets at 100k and
         * 1M entries evict each other from the last-level cache. */
        unsigned warm = (unsigned)(2 * bench_entries[k]);
        if (span.regions > s->regions)
            bench_note(&r[0], "the %s source has room for %zu regions only", s->name, s->regions);
        else
            arms[n++] = (struct bench_arm){
                .row = &r[0], .op = &tag, .ops = bench.batch, .warm_ops = warm
            };
        for (size_t i = 0; i < 2; i++)
            if (bench_target_open(&t[i], &r[i + 1], s, modes[i], span.regions, 0) == 0)
                arms[n++] = (struct bench_arm){
                    .row = &r[i + 1], .op = &t[i].op, .ops = bench.batch, .warm_ops = warm
                };
        /* UCX is compared on CPU address space only: it checks the mapping. */
        if (!s->driver && (u = bench_ucx_open(&r[3], s, span.regions, &ucx)))
            arms[n++] = (struct bench_arm){
                .row = &r[3], .op = &ucx, .ops = bench.batch, .warm_ops = warm
            };
        if (!s->driver && bench_entries[k] <= SKELETON_MAX && bench_entries[k] <= s->regions) {
            if ((sk.s = bench_skeleton_new(s->base, bench_entries[k])))
                arms[n++] = (struct bench_arm){
                    .row = &r[4], .op = &skeleton, .ops = bench.batch, .warm_ops = warm
                };
            else
                bench_note(&r[4], "no memory for the skeleton's tables");
        }
        bench_interleave(arms, n);
        bench_skeleton_free(sk.s);
        bench_ucx_close(u);
        bench_target_close(&t[0]);
        bench_target_close(&t[1]);
    }
}
