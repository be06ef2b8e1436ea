/* Workloads 2 and 3 side by side: hit cost against the number of cached
 * entries, and hit throughput against threads, for regcache (TAG_CHECK and
 * HOOKS) and UCX's ucs_rcache, with the goals that compare them. */
#include "bench.h"

#include <stdio.h>

const size_t bench_entry_counts[4] = {1, 1000, 100000, 1000000};
const unsigned bench_thread_counts[5] = {1, 2, 4, 8, 16};

enum impl { RC_TAG, RC_HOOKS, UCX, NIMPL };
static const char *const impl_name[NIMPL] = {"regcache", "regcache", "ucx"};
static const char *const impl_mode[NIMPL] = {"TAG_CHECK", "HOOKS", ""};

static int open_target(enum impl i, struct bench_target *t,
                       const struct bench_space *s, char *why, size_t len)
{
    if (i == UCX)
        return bench_ucx_target(t, s, why, len);
    return bench_rc_target(t, s, i == RC_HOOKS ? BENCH_HOOKS : BENCH_TAG_CHECK,
                           why, len);
}

static struct bench_row *row_for(const char *section, enum impl i,
                                 const char *what)
{
    char name[96];
    snprintf(name, sizeof(name), "%s%s%s %s", i == UCX ? "ucs_rcache" : "regcache",
             impl_mode[i][0] ? " " : "", impl_mode[i], what);
    struct bench_row *r = bench_row_add(section, name);
    snprintf(r->impl, sizeof(r->impl), "%s", impl_name[i]);
    snprintf(r->mode, sizeof(r->mode), "%s", impl_mode[i]);
    return r;
}

static void entries_rows(const struct bench_opts *o, const struct bench_space *all,
                         int ucx)
{
    for (size_t k = 0; k < BENCH_NELEM(bench_entry_counts); k++) {
        struct bench_space s = *all;
        struct bench_target t;
        char why[160];
        s.regions = bench_entry_counts[k];
        for (enum impl i = 0; i < NIMPL; i++) {
            if (i == UCX && !ucx)
                continue;
            struct bench_row *r = row_for("entries", i, "hit, get+put");
            r->entries = s.regions;
            if (open_target(i, &t, &s, why, sizeof(why)) != 0) {
                snprintf(r->note, sizeof(r->note), "failed: %s", why);
                continue;
            }
            bench_measure_hit(r, &t, o);
            bench_target_close(&t);
        }
        /* The bare tag source, beside the TAG_CHECK hit at this size. */
        struct bench_row *r = bench_row_add("entries", "trivial query callback alone");
        snprintf(r->impl, sizeof(r->impl), "query");
        r->entries = s.regions;
        bench_query_target(&t, &s);
        bench_measure_hit(r, &t, o);
    }
}

/* The same thread counts when each thread has entries of its own: what
 * the shared rows lose to entries' lines moving between cores. */
static void private_thread_rows(const struct bench_opts *o, const struct bench_space *s)
{
    struct bench_target t;
    char why[160];
    int opened = bench_rc_private_target(&t, s, BENCH_HOOKS, why, sizeof(why)) == 0;
    double one = 0;
    for (size_t k = 0; k < BENCH_NELEM(bench_thread_counts); k++) {
        struct bench_row *r = bench_row_add("threads", "regcache HOOKS hits, thread-private entries");
        snprintf(r->impl, sizeof(r->impl), "regcache");
        snprintf(r->mode, sizeof(r->mode), "HOOKS, private");
        r->entries = s->regions;
        r->threads = bench_thread_counts[k];
        if (!opened) {
            snprintf(r->note, sizeof(r->note), "failed: %s", why);
            continue;
        }
        bench_measure_scaling(r, &t, o, &one);
    }
    if (opened)
        bench_target_close(&t);
}

static void thread_rows(const struct bench_opts *o, const struct bench_space *all,
                        int ucx)
{
    struct bench_space s = *all;
    s.regions = BENCH_THREAD_ENTRIES;
    for (enum impl i = 0; i < NIMPL; i++) {
        struct bench_target t;
        char why[160];
        if (i == UCX && !ucx)
            continue;
        int opened = open_target(i, &t, &s, why, sizeof(why)) == 0;
        for (size_t k = 0; k < BENCH_NELEM(bench_thread_counts); k++) {
            struct bench_row *r = row_for("threads", i, "hits");
            r->entries = s.regions;
            r->threads = bench_thread_counts[k];
            if (opened)
                bench_measure_threads(r, &t, o);
            else
                snprintf(r->note, sizeof(r->note), "failed: %s", why);
        }
        if (opened)
            bench_target_close(&t);
    }
    private_thread_rows(o, &s);
}

static enum bench_verdict verdict(int met)
{
    return met ? BENCH_MET : BENCH_MISSED;
}

/* Hit cost: BENCH_GOAL_UCX_SPEEDUP times faster than UCX up to 100k entries
 * (1M is shown, not judged); TAG_CHECK within BENCH_GOAL_TAG_NS of the bare
 * query.  Here the query is the trivial callback (no GPU), so the cache's
 * own path shows; the GPU rows judge it against the driver's query. */
static void judge_entries(void)
{
    for (size_t k = 0; k < BENCH_NELEM(bench_entry_counts); k++) {
        size_t n = bench_entry_counts[k];
        struct bench_row *u = bench_row_find("entries", "ucx", NULL, n, 0, 0);
        struct bench_row *q = bench_row_find("entries", "query", NULL, n, 0, 0);
        for (enum impl i = RC_TAG; i <= RC_HOOKS; i++) {
            struct bench_row *r = bench_row_find("entries", "regcache",
                                                 impl_mode[i], n, 0, 0);
            if (!r || r->median_ns <= 0)
                continue;
            if (u && u->median_ns > 0) {
                r->derived = u->median_ns / r->median_ns;
                snprintf(r->derived_what, sizeof(r->derived_what), "x faster than UCX");
                if (n <= BENCH_GOAL_UCX_ENTRIES_MAX)
                    bench_row_goal(r, verdict(r->derived >= BENCH_GOAL_UCX_SPEEDUP),
                                   ">= %.1fx faster than UCX", BENCH_GOAL_UCX_SPEEDUP);
            }
            if (i == RC_TAG && q && q->median_ns > 0) {
                double over = r->median_ns - q->median_ns;
                bench_row_goal(r, verdict(over <= BENCH_GOAL_TAG_NS),
                               "<= trivial query + %.0f ns, CPU stand-in for "
                               "BUFFER_ID (is + %.1f ns)",
                               BENCH_GOAL_TAG_NS, over);
            }
        }
    }
}

/* At the top thread count: BENCH_GOAL_UCX_MT times UCX's aggregate, and
 * BENCH_GOAL_SCALING times one thread, the latter judged only where every
 * thread has a core of its own. */
static void judge_threads(long cores)
{
    unsigned top = bench_thread_counts[BENCH_NELEM(bench_thread_counts) - 1];
    for (enum impl i = RC_TAG; i <= RC_HOOKS; i++) {
        struct bench_row *one = bench_row_find("threads", "regcache", impl_mode[i],
                                               BENCH_THREAD_ENTRIES, 1, 0);
        for (size_t k = 0; k < BENCH_NELEM(bench_thread_counts); k++) {
            unsigned n = bench_thread_counts[k];
            struct bench_row *r = bench_row_find("threads", "regcache", impl_mode[i],
                                                 BENCH_THREAD_ENTRIES, n, 0);
            struct bench_row *u = bench_row_find("threads", "ucx", NULL,
                                                 BENCH_THREAD_ENTRIES, n, 0);
            if (!r || r->mops <= 0)
                continue;
            if (u && u->mops > 0) {
                r->derived = r->mops / u->mops;
                snprintf(r->derived_what, sizeof(r->derived_what), "x UCX throughput");
                if (n == top)
                    bench_row_goal(r, verdict(r->derived >= BENCH_GOAL_UCX_MT),
                                   ">= %.0fx UCX's aggregate", BENCH_GOAL_UCX_MT);
            }
            if (n == top && one && one->mops > 0) {
                double scale = r->mops / one->mops;
                bench_row_goal(r,
                               cores < BENCH_GOAL_SCALING_CORES
                                   ? BENCH_NOT_JUDGED
                                   : verdict(scale >= BENCH_GOAL_SCALING),
                               ">= %.0fx one thread on %d cores (is %.1fx on %ld)",
                               BENCH_GOAL_SCALING, BENCH_GOAL_SCALING_CORES, scale,
                               cores);
            }
        }
    }
}

void bench_entries_and_threads(const struct bench_opts *o, long cores)
{
    size_t most = bench_entry_counts[BENCH_NELEM(bench_entry_counts) - 1];
    struct bench_space all;
    char why[192];
    int ucx = bench_ucx_available(why, sizeof(why));
    if (!ucx)
        bench_skip("UCX comparison", "%s", why);
    if (bench_space_map(&all, most) != 0) {
        bench_skip("hit cost and threads", "cannot map %zu regions", most);
        return;
    }
    entries_rows(o, &all, ucx);
    thread_rows(o, &all, ucx);
    bench_space_unmap(&all);
    judge_entries();
    judge_threads(cores);
}
