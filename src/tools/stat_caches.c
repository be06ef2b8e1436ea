/* regcache-stat: every cache of every process of this user, GPU or host,
 * from the per-process statistics segments (stats_segment.h), as a table,
 * JSON or Prometheus text. */
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "regcache.h"
#include "stat_tool.h"

static void add_error(struct caches *cs, const char *why)
{
    char **grown = realloc(cs->errors, (cs->nerrors + 1) * sizeof *grown);
    if (!grown)
        return;
    cs->errors = grown;
    if ((cs->errors[cs->nerrors] = strdup(why)) != NULL)
        cs->nerrors++;
}

static void add_row(struct caches *cs, const struct cache_row *row)
{
    struct cache_row *grown = realloc(cs->rows, (cs->n + 1) * sizeof *grown);
    if (!grown)
        return;
    cs->rows = grown;
    cs->rows[cs->n++] = *row;
}

/* The records of one process's segment. */
static void read_segment(const char *name, uint64_t pidns, struct caches *cs)
{
    char why[256];
    struct rc_statseg *s = rc_statseg_map(name, why, sizeof why);
    if (!s) {
        if (why[0]) /* else its process ended since the listing */
            add_error(cs, why);
        return;
    }
    struct cache_row row = { 0 };
    struct rc_ledger_record owner = { 0 };
    atomic_store_explicit(&owner.pidns, s->hdr.pidns, memory_order_relaxed);
    enum rc_ledger_owner_state state = rc_ledger_owner_state(&owner, s->hdr.owner, pidns);
    if (state == RC_LEDGER_GONE) {
        rc_statseg_unmap(s);
        return; /* a process that died; its next namesake sweeps it */
    }
    row.pid = rc_ledger_owner_pid(s->hdr.owner);
    memcpy(row.process, s->hdr.comm, 16);
    row.state = state == RC_LEDGER_LIVE ? "live" : "unknown";
    for (unsigned i = 0; i < RC_STATSEG_CACHES; i++) {
        if (rc_statseg_read(s, i, &row.c, why, sizeof why))
            add_row(cs, &row);
        else if (why[0]) {
            char full[400];
            snprintf(full, sizeof full, "%s/%s: %s", RC_LEDGER_DIR, name, why);
            add_error(cs, full);
        }
    }
    rc_statseg_unmap(s);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void caches_read(const char *prefix, struct caches *cs)
{
    memset(cs, 0, sizeof *cs);
    DIR *dir = opendir(RC_LEDGER_DIR);
    if (!dir)
        return;
    size_t len = strlen(prefix), n = 0, cap = 0;
    char **names = NULL;
    for (struct dirent *d; (d = readdir(dir)) != NULL;) {
        if (strncmp(d->d_name, prefix, len) != 0 || !rc_statseg_name_ok(d->d_name + len))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            char **grown = realloc(names, cap * sizeof *names);
            if (!grown)
                break;
            names = grown;
        }
        if ((names[n] = strdup(d->d_name)) != NULL)
            n++;
    }
    closedir(dir);
    if (n)
        qsort(names, n, sizeof *names, by_name);
    uint64_t pidns = rc_ledger_pid_namespace();
    for (size_t i = 0; i < n; i++) {
        read_segment(names[i], pidns, cs);
        free(names[i]);
    }
    free(names);
}

void caches_free(struct caches *cs)
{
    for (size_t i = 0; i < cs->nerrors; i++)
        free(cs->errors[i]);
    free(cs->errors);
    free(cs->rows);
}

/* "host,0,3": the devices a cache has seen. */
static const char *devices_text(const struct rc_statseg_cache *c, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    if (c->host)
        at += (size_t)snprintf(buf, n, "host");
    for (int g = 0; g < 64 && at < n; g++)
        if (c->gpus >> g & 1)
            at += (size_t)snprintf(buf + at, n - at, "%s%d", at ? "," : "", g);
    if (!buf[0])
        snprintf(buf, n, "-");
    return buf;
}

static const char *const mapping_names[] = { "none", "pcie", "default" };

/* "pcie+dd,default": each rail's dmabuf mapping, "+dd" when data-direct. */
static const char *rails_text(const struct rc_statseg_cache *c, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (unsigned r = 0; r < c->rails && at < n; r++)
        at += (size_t)snprintf(buf + at, n - at, "%s%s%s", r ? "," : "",
                               mapping_names[c->rail[r].mapping],
                               c->rail[r].data_direct ? "+dd" : "");
    return buf;
}

static double hit_rate(const struct rc_statseg_cache *c)
{
    uint64_t gets = c->hits + c->misses;
    return gets ? 100.0 * (double)c->hits / (double)gets : 0.0;
}

/* 1234567 ns -> "1.2ms" */
static const char *ns_text(uint64_t ns, char *buf, size_t n)
{
    if (!ns)
        snprintf(buf, n, "-");
    else if (ns < 1000)
        snprintf(buf, n, "%lluns", (unsigned long long)ns);
    else if (ns < 1000000)
        snprintf(buf, n, "%.1fus", (double)ns / 1e3);
    else if (ns < 1000000000)
        snprintf(buf, n, "%.1fms", (double)ns / 1e6);
    else
        snprintf(buf, n, "%.1fs", (double)ns / 1e9);
    return buf;
}

void caches_text(const struct caches *cs)
{
    printf("%zu cache%s in %s:\n", cs->n, cs->n == 1 ? "" : "s", RC_LEDGER_DIR);
    printf("%8s %-16s %-20s %-10s %8s %9s %6s %9s %9s %4s %s\n", "pid", "process", "name",
           "devices", "entries", "bytes", "hit%", "reg p50", "reg p99", "fds", "rails");
    for (size_t i = 0; i < cs->n; i++) {
        const struct cache_row *r = &cs->rows[i];
        char proc[4 * 16 + 1], dev[200], bytes[16], p50[16], p99[16], rails[120];
        printf("%8d %-16s %-20s %-10s %8llu %9s %5.1f%% %9s %9s %4llu %s\n", r->pid,
               printable(r->process, proc, sizeof proc), rc_statseg_cache_name(&r->c),
               devices_text(&r->c, dev, sizeof dev), (unsigned long long)r->c.entries,
               size_text(r->c.bytes, bytes, sizeof bytes), hit_rate(&r->c),
               ns_text(r->c.p50_ns, p50, sizeof p50), ns_text(r->c.p99_ns, p99, sizeof p99),
               (unsigned long long)r->c.fds, rails_text(&r->c, rails, sizeof rails));
    }
    for (size_t i = 0; i < cs->nerrors; i++)
        printf("%s\n", cs->errors[i]);
    putchar('\n');
}

void caches_json(const struct caches *cs)
{
    printf("[");
    for (size_t i = 0; i < cs->n; i++) {
        const struct cache_row *r = &cs->rows[i];
        const struct rc_statseg_cache *c = &r->c;
        printf("%s{\"pid\":%d,\"process\":", i ? "," : "", r->pid);
        json_string(r->process);
        printf(",\"state\":\"%s\",\"name\":", r->state);
        json_string(rc_statseg_cache_name(c));
        printf(",\"devices\":[%s", c->host ? "\"host\"" : "");
        for (int g = 0, first = !c->host; g < 64; g++)
            if (c->gpus >> g & 1) {
                printf("%s%d", first ? "" : ",", g);
                first = 0;
            }
        printf("],\"entries\":%llu,\"bytes\":%llu,\"hits\":%llu,\"misses\":%llu,"
               "\"hit_rate\":%.4f,\"evictions\":%llu,\"invalidations\":%llu,"
               "\"reg_failures\":%llu,\"reg_latency_p50_ns\":%llu,\"reg_latency_p99_ns\":%llu,"
               "\"fds\":%llu,\"mrs\":%llu,\"budget\":%llu,\"rails\":[",
               (unsigned long long)c->entries, (unsigned long long)c->bytes,
               (unsigned long long)c->hits, (unsigned long long)c->misses, hit_rate(c) / 100.0,
               (unsigned long long)c->evictions, (unsigned long long)c->invalidations,
               (unsigned long long)c->reg_failures, (unsigned long long)c->p50_ns,
               (unsigned long long)c->p99_ns, (unsigned long long)c->fds,
               (unsigned long long)c->mrs, (unsigned long long)c->budget);
        for (unsigned k = 0; k < c->rails; k++) {
            const struct rc_statseg_rail *rl = &c->rail[k];
            printf("%s{\"rail\":%u,\"registrations\":%llu,\"failures\":%llu,\"bytes\":%llu,"
                   "\"dmabuf_mapping\":\"%s\",\"data_direct\":%s,\"reg_latency_p50_ns\":%llu,"
                   "\"reg_latency_p99_ns\":%llu}",
                   k ? "," : "", k, (unsigned long long)rl->registrations,
                   (unsigned long long)rl->failures, (unsigned long long)rl->bytes,
                   mapping_names[rl->mapping], rl->data_direct ? "true" : "false",
                   (unsigned long long)rl->p50_ns, (unsigned long long)rl->p99_ns);
        }
        printf("]}");
    }
    printf("]");
}

static void labels(const struct cache_row *r)
{
    printf("{pid=\"%d\",process=", r->pid);
    prometheus_label(r->process);
    printf(",cache=");
    prometheus_label(rc_statseg_cache_name(&r->c));
}

/* One metric family, a sample per cache. */
static void family(const struct caches *cs, const char *name, const char *type, const char *help,
                   size_t offset)
{
    printf("# HELP regcache_%s %s\n# TYPE regcache_%s %s\n", name, help, name, type);
    for (size_t i = 0; i < cs->n; i++) {
        const struct cache_row *r = &cs->rows[i];
        printf("regcache_%s", name);
        labels(r);
        printf("} %llu\n", (unsigned long long)*(const uint64_t *)((const char *)&r->c + offset));
    }
}

/* One metric family, a sample per cache and rail. */
static void rail_family(const struct caches *cs, const char *name, const char *type,
                        const char *help, size_t offset)
{
    printf("# HELP regcache_%s %s\n# TYPE regcache_%s %s\n", name, help, name, type);
    for (size_t i = 0; i < cs->n; i++)
        for (unsigned k = 0; k < cs->rows[i].c.rails; k++) {
            printf("regcache_%s", name);
            labels(&cs->rows[i]);
            printf(",rail=\"%u\"} %llu\n", k,
                   (unsigned long long)*(const uint64_t *)((const char *)&cs->rows[i].c.rail[k] +
                                                           offset));
        }
}

#define FAMILY(name, type, help, field) \
    family(cs, name, type, help, offsetof(struct rc_statseg_cache, field))
#define RAIL_FAMILY(name, type, help, field) \
    rail_family(cs, name, type, help, offsetof(struct rc_statseg_rail, field))

void caches_prometheus(const struct caches *cs)
{
    FAMILY("entries", "gauge", "Entries in the cache.", entries);
    FAMILY("bytes", "gauge", "Registered bytes in the cache.", bytes);
    FAMILY("hits_total", "counter", "Gets served by a cached entry.", hits);
    FAMILY("misses_total", "counter", "Gets that needed a registration.", misses);
    FAMILY("evictions_total", "counter", "Entries evicted.", evictions);
    FAMILY("invalidations_total", "counter", "Entries dropped because their memory went away.",
           invalidations);
    FAMILY("registration_failures_total", "counter", "Failed registration calls.", reg_failures);
    FAMILY("registration_latency_p50_nanoseconds", "gauge",
           "Median registration time in nanoseconds (log2 bucket upper bound).", p50_ns);
    FAMILY("registration_latency_p99_nanoseconds", "gauge",
           "99th percentile registration time in nanoseconds (log2 bucket upper bound).", p99_ns);
    FAMILY("fds", "gauge", "File descriptors the cache holds now.", fds);
    FAMILY("mrs", "gauge", "Memory registrations held now, one per rail.", mrs);
    printf("# HELP regcache_device_info A device the cache has seen.\n"
           "# TYPE regcache_device_info gauge\n");
    for (size_t i = 0; i < cs->n; i++) {
        const struct cache_row *r = &cs->rows[i];
        for (int g = -1; g < 64; g++) {
            if (g < 0 ? !r->c.host : !(r->c.gpus >> g & 1))
                continue;
            printf("regcache_device_info");
            labels(r);
            if (g < 0)
                printf(",device=\"host\"} 1\n");
            else
                printf(",device=\"%d\"} 1\n", g);
        }
    }
    RAIL_FAMILY("rail_registrations_total", "counter", "Successful registrations on the rail.",
                registrations);
    RAIL_FAMILY("rail_registration_failures_total", "counter", "Failed registrations on the rail.",
                failures);
    RAIL_FAMILY("rail_bytes", "gauge", "Bytes registered on the rail now.", bytes);
    printf("# HELP regcache_rail_dmabuf_info How the rail registers GPU memory.\n"
           "# TYPE regcache_rail_dmabuf_info gauge\n");
    for (size_t i = 0; i < cs->n; i++)
        for (unsigned k = 0; k < cs->rows[i].c.rails; k++) {
            const struct rc_statseg_rail *rl = &cs->rows[i].c.rail[k];
            printf("regcache_rail_dmabuf_info");
            labels(&cs->rows[i]);
            printf(",rail=\"%u\",mapping=\"%s\",data_direct=\"%s\"} 1\n", k,
                   mapping_names[rl->mapping], rl->data_direct ? "true" : "false");
        }
}
