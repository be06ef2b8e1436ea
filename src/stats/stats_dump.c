/* The REGCACHE_STATS dump at regcache_destroy(): every line starts with the
 * cache's name and address, so that several caches of one process (a
 * transport's and a collective library's) can be told apart. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "stats_dump.h"

#include "budget_source.h"
#include "cache.h"
#include "ledger.h"
#include "stats_read.h"

#define PREFIX "regcache %s (%p): "

/* The budget the device got, and from where: never unlimited unsaid. */
static void dump_budget(const struct regcache *c, int slot)
{
    const struct rc_device *d = &c->dev[slot];
    size_t bytes = atomic_load_explicit(&d->max_bytes, memory_order_relaxed);
    if (d->budget_source == RC_BUDGET_NONE)
        fprintf(stderr,
                PREFIX "device %d: budget unlimited: neither NVML nor the CUDA driver told this "
                       "GPU's BAR1 or memory size\n",
                c->opts.name, (const void *)c, slot);
    else
        fprintf(stderr, PREFIX "device %d: budget %zu bytes from %s\n", c->opts.name,
                (const void *)c, slot, bytes, rc_budget_source_name(d->budget_source));
}

/* The backend's account of how it registers, a line at a time. */
static void dump_backend(const struct regcache *c)
{
    if (!c->backend.describe)
        return;
    char how[2048];
    c->backend.describe(c->backend.arg, how, sizeof how);
    for (char *line = how, *next; line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        fprintf(stderr, PREFIX "%s\n", c->opts.name, (const void *)c, line);
    }
}

static void dump_rails(const struct regcache *c, const struct regcache_stats *s)
{
    for (unsigned r = 0; r < s->rails; r++) {
        struct regcache_latency l;
        rc_stats_latency(c, -1, (int)r, &l);
        fprintf(stderr,
                PREFIX "rail %u: registrations %" PRIu64 " failures %" PRIu64 " bytes %" PRIu64
                       " latency p50 %" PRIu64 " ns p99 %" PRIu64 " ns\n",
                c->opts.name, (const void *)c, r, s->rail_registrations[r], s->rail_reg_failures[r],
                s->rail_bytes[r], l.p50_ns, l.p99_ns);
    }
}

static void dump_leaves(const struct regcache *c, const struct regcache_stats *s)
{
    char line[512];
    size_t at = 0;
    for (int r = 0; r < REGCACHE_REASON_COUNT && at < sizeof line; r++) {
        int w = snprintf(line + at, sizeof line - at, " %s %" PRIu64, regcache_reason_name(r),
                         s->leaves[r]);
        at = w > 0 ? at + (size_t)w : sizeof line;
    }
    fprintf(stderr, PREFIX "left:%s\n", c->opts.name, (const void *)c, line);
}

void rc_stats_dump(const struct regcache *c, const char *record_note)
{
    struct regcache_stats s;
    regcache_get_stats(c, &s);
    fprintf(stderr,
            PREFIX "hits %" PRIu64 " misses %" PRIu64 " registrations %" PRIu64
                   " deregistrations %" PRIu64 " evictions %" PRIu64 " invalidations tag %" PRIu64
                   " notify %" PRIu64 " explicit %" PRIu64 " monitor %" PRIu64
                   " reg_failures %" PRIu64 " one_shots %" PRIu64 " entries %" PRIu64
                   " bytes %" PRIu64 " peak_bytes %" PRIu64 " fds %" PRIu64 " mrs %" PRIu64
                   " latency p50 %" PRIu64 " ns p99 %" PRIu64 " ns\n",
            c->opts.name, (const void *)c, s.hits, s.misses, s.registrations, s.deregistrations,
            s.evictions, s.invalidations_tag, s.invalidations_notify, s.invalidations_explicit,
            s.invalidations_monitor, s.reg_failures, s.one_shots, s.entries, s.bytes, s.peak_bytes,
            s.fds, s.mrs, s.reg_latency_p50_ns, s.reg_latency_p99_ns);
    /* In the order of enum regcache_validation; AUTO is always resolved. */
    static const char *const modes[] = { "AUTO", "TAG_CHECK", "HOOKS", "NOTIFY" };
    fprintf(stderr, PREFIX "validation %s: %s\n", c->opts.name, (const void *)c,
            modes[regcache_validation_mode(c)], regcache_validation_reason(c));
    if (c->opts.params.host_memory)
        fprintf(stderr, PREFIX "host memory: %s; %" PRIu64 " host entries unmonitored now\n",
                c->opts.name, (const void *)c, c->host_note, s.host_unmonitored);
    dump_leaves(c, &s);
    dump_backend(c);
    dump_rails(c, &s);
    if (record_note[0])
        fprintf(stderr, PREFIX "%s\n", c->opts.name, (const void *)c, record_note);
    if (c->ledger_note[0])
        fprintf(stderr, PREFIX "%s\n", c->opts.name, (const void *)c, c->ledger_note);
    for (int i = 0; i < RC_MAX_DEVICES; i++) {
        if (rc_stats_seen(c, i))
            dump_budget(c, i);
        const char *why = c->dev[i].ledger ? rc_ledger_failure(c->dev[i].ledger) : NULL;
        if (why)
            fprintf(stderr, PREFIX "device %d: %s\n", c->opts.name, (const void *)c, i, why);
    }
}
