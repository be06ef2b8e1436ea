/* regcache-stat: every cache of this user, read from the shared segments
 * without stopping anyone.
 *
 *   regcache-stat [--json | --prometheus] [--watch SECONDS]
 *
 * First every cache of every process, GPU or host (their statistics
 * segments, stat_caches.c): name, devices, entries, bytes, hit rate,
 * registration latency, fds, each rail's dmabuf mapping; a process that
 * ended since the listing is left out.  Then one table per GPU (one BAR1
 * ledger segment) in which some process holds a record, one row per
 * cache: process, entries, bytes, the budget it last computed, and its
 * counters.  --json prints one JSON document instead (one per line with
 * --watch), --prometheus the text exposition format.  Exit status: 0, 1
 * when a segment could not be read (it is listed with why), 2 for a usage
 * error (the message names the option or value). */
#include <dirent.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "budget_source.h"
#include "ledger_segment.h"
#include "stat_tool.h"

/* The per-cache columns, in the order shown; `size` ones get a unit in the
 * text table, where `zero`, if set, stands for 0. */
static const struct column {
    const char *name;
    size_t offset;
    bool size;
    const char *zero;
} columns[] = {
#define COLUMN(field, size, zero)                                    \
    {                                                                \
#field, offsetof(struct rc_ledger_record, field), size, zero \
    }
    COLUMN(entries, false, NULL),      COLUMN(bytes, true, NULL),
    COLUMN(budget, true, "-"), /* none computed yet, or unlimited */
    COLUMN(hits, false, NULL),         COLUMN(misses, false, NULL),
    COLUMN(evictions, false, NULL),    COLUMN(inval_tag, false, NULL),
    COLUMN(inval_notify, false, NULL), COLUMN(reg_failures, false, NULL),
#undef COLUMN
};
#define NCOLUMNS (sizeof columns / sizeof columns[0])

/* One cache's row, read while its owner stayed the same. */
struct row {
    pid_t pid;
    char process[17];
    uint64_t cache;
    const char *state; /* live, gone (not yet taken back), unknown (cannot be told) */
    uint64_t value[NCOLUMNS];
};

struct gpu {
    char segment[sizeof RC_LEDGER_DIR + RC_LEDGER_NAME_MAX];
    char key[RC_LEDGER_KEY_MAX];
    char error[256]; /* set when the segment could not be read */
    uint64_t budget, budget_source, pressure, in_use;
    size_t nrows;
    struct row rows[RC_LEDGER_RECORDS];
};

static uint64_t owner_of(const struct rc_ledger_record *r)
{
    return atomic_load_explicit((_Atomic uint64_t *)&r->owner, memory_order_acquire);
}

static bool read_row(const struct rc_ledger_record *r, uint64_t pidns, struct row *out)
{
    static const char *const states[] = {
        [RC_LEDGER_LIVE] = "live", [RC_LEDGER_GONE] = "gone", [RC_LEDGER_UNKNOWN] = "unknown"
    };
    uint64_t owner = owner_of(r);
    if (!owner || (owner & RC_LEDGER_CLAIMING))
        return false;
    uint64_t comm[2] = { rc_ledger_read(&r->comm[0]), rc_ledger_read(&r->comm[1]) };
    out->pid = rc_ledger_owner_pid(owner);
    memcpy(out->process, comm, sizeof comm);
    out->process[16] = '\0';
    out->cache = rc_ledger_read(&r->cache);
    for (size_t c = 0; c < NCOLUMNS; c++)
        out->value[c] =
            rc_ledger_read((const _Atomic uint64_t *)((const char *)r + columns[c].offset));
    out->state = states[rc_ledger_owner_state(r, owner, pidns)];
    /* Freed or taken over while read: the values may be anyone's. */
    return owner_of(r) == owner;
}

static uint64_t value_of(const struct row *r, size_t offset)
{
    size_t c = 0;
    while (columns[c].offset != offset)
        c++;
    return r->value[c];
}

static void read_gpu(const char *name, uint64_t pidns, struct gpu *g)
{
    snprintf(g->segment, sizeof g->segment, "%s/%s", RC_LEDGER_DIR, name);
    char path[RC_LEDGER_NAME_MAX + 1];
    snprintf(path, sizeof path, "/%s", name);
    struct rc_ledger_segment *s = rc_ledger_map(path, NULL, g->error, sizeof g->error);
    if (!s)
        return;
    snprintf(g->key, sizeof g->key, "%s", s->hdr.key);
    g->budget = rc_ledger_read(&s->hdr.budget);
    g->budget_source = rc_ledger_read(&s->hdr.budget_source);
    g->pressure = rc_ledger_read(&s->hdr.pressure);
    uint64_t used = rc_ledger_read(&s->hdr.used);
    for (uint64_t i = 0; i < used && i < RC_LEDGER_RECORDS; i++) {
        struct row *row = &g->rows[g->nrows];
        if (!read_row(&s->rec[i], pidns, row))
            continue;
        if (strcmp(row->state, "gone") != 0)
            g->in_use += value_of(row, offsetof(struct rc_ledger_record, bytes));
        g->nrows++;
    }
    rc_ledger_unmap(s);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* This user's (and namespace's) segments, sorted by name, into *names.
 * -1 when the directory cannot be read. */
static int segment_names(const char *prefix, char ***names, size_t *n)
{
    DIR *dir = opendir(RC_LEDGER_DIR);
    if (!dir)
        return -1;
    size_t len = strlen(prefix), cap = 0;
    *names = NULL;
    *n = 0;
    for (struct dirent *d; (d = readdir(dir)) != NULL;) {
        if (strncmp(d->d_name, prefix, len) != 0 || !rc_ledger_name_ok(d->d_name + len))
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            char **grown = realloc(*names, cap * sizeof **names);
            if (!grown)
                break;
            *names = grown;
        }
        if (((*names)[*n] = strdup(d->d_name)) != NULL)
            (*n)++;
    }
    closedir(dir);
    if (*n)
        qsort(*names, *n, sizeof **names, by_name);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Output                                                                    */
/* ------------------------------------------------------------------------ */

static void json_gpu(const struct gpu *g)
{
    printf("{\"segment\":");
    json_string(g->segment);
    if (g->error[0]) {
        printf(",\"error\":");
        json_string(g->error);
        printf("}");
        return;
    }
    printf(",\"gpu\":");
    json_string(g->key);
    printf(",\"budget\":%llu,\"budget_source\":\"%s\",\"in_use\":%llu,\"pressure\":%llu,"
           "\"caches\":[",
           (unsigned long long)g->budget, rc_budget_source_name(g->budget_source),
           (unsigned long long)g->in_use, (unsigned long long)g->pressure);
    for (size_t i = 0; i < g->nrows; i++) {
        const struct row *r = &g->rows[i];
        printf("%s{\"pid\":%d,\"process\":", i ? "," : "", (int)r->pid);
        json_string(r->process);
        printf(",\"cache\":%llu,\"state\":\"%s\"", (unsigned long long)r->cache, r->state);
        for (size_t c = 0; c < NCOLUMNS; c++)
            printf(",\"%s\":%llu", columns[c].name, (unsigned long long)r->value[c]);
        printf("}");
    }
    printf("]}");
}

/* 1536 -> "1.5K" */
static int width(const struct column *c)
{
    int len = (int)strlen(c->name);
    return len > 9 ? len : 9;
}

static void text_gpu(const struct gpu *g)
{
    char a[16], b[16], name[4 * sizeof g->rows[0].process + 1];
    if (g->error[0]) {
        printf("%s: %s\n\n", g->segment, g->error);
        return;
    }
    printf("GPU %s: budget %s (%s), in use %s by %zu cache%s, pressure raised %llu times (%s)\n",
           g->key, g->budget ? size_text(g->budget, a, sizeof a) : "unknown",
           rc_budget_source_name(g->budget_source), size_text(g->in_use, b, sizeof b), g->nrows,
           g->nrows == 1 ? "" : "s", (unsigned long long)g->pressure, g->segment);
    printf("%8s %-16s %5s %-7s", "pid", "process", "cache", "state");
    for (size_t c = 0; c < NCOLUMNS; c++)
        printf(" %*s", width(&columns[c]), columns[c].name);
    putchar('\n');
    for (size_t i = 0; i < g->nrows; i++) {
        const struct row *r = &g->rows[i];
        printf("%8d %-16s %5llu %-7s", (int)r->pid, printable(r->process, name, sizeof name),
               (unsigned long long)r->cache, r->state);
        for (size_t c = 0; c < NCOLUMNS; c++) {
            const struct column *col = &columns[c];
            if (!r->value[c] && col->zero)
                printf(" %*s", width(col), col->zero);
            else if (col->size)
                printf(" %*s", width(col), size_text(r->value[c], a, sizeof a));
            else
                printf(" %*llu", width(col), (unsigned long long)r->value[c]);
        }
        putchar('\n');
    }
    putchar('\n');
}

enum format { TEXT, JSON, PROMETHEUS };

static void prometheus_gpu(const struct gpu *g, bool first)
{
    if (first)
        printf("# HELP regcache_gpu_budget_bytes The BAR1 budget every cache of a GPU shares.\n"
               "# TYPE regcache_gpu_budget_bytes gauge\n");
    if (g->error[0])
        return;
    printf("regcache_gpu_budget_bytes{gpu=");
    prometheus_label(g->key);
    printf("} %llu\n", (unsigned long long)g->budget);
}

/* One look at every cache and ledger.  Returns 1 when one could not be
 * read. */
static int show(const char *prefix, enum format format)
{
    char **names;
    size_t n;
    struct gpu *g = malloc(sizeof *g);
    if (!g || segment_names(prefix, &names, &n) != 0) {
        fprintf(stderr, "regcache-stat: cannot read %s: %m\n", RC_LEDGER_DIR);
        free(g);
        return 1;
    }
    struct caches cs;
    caches_read(prefix, &cs);
    uint64_t pidns = rc_ledger_pid_namespace();
    int status = cs.nerrors != 0;
    if (format == JSON) {
        printf("{\"uid\":%u,\"prefix\":", (unsigned)geteuid());
        json_string(prefix);
        printf(",\"caches\":");
        caches_json(&cs);
        printf(",\"errors\":[");
        for (size_t i = 0; i < cs.nerrors; i++) {
            printf(i ? "," : "");
            json_string(cs.errors[i]);
        }
        printf("],\"gpus\":[");
    } else if (format == PROMETHEUS) {
        caches_prometheus(&cs);
    } else {
        caches_text(&cs);
    }
    size_t shown = 0;
    for (size_t i = 0; i < n; i++) {
        memset(g, 0, sizeof *g);
        read_gpu(names[i], pidns, g);
        free(names[i]);
        status |= g->error[0] != '\0';
        /* Every record free: its processes are gone, and the ledger waits
         * only for the next one to use that GPU. */
        if (!g->error[0] && !g->nrows)
            continue;
        if (format == JSON) {
            printf(shown ? "," : "");
            json_gpu(g);
        } else if (format == PROMETHEUS) {
            prometheus_gpu(g, shown == 0);
        } else {
            text_gpu(g);
        }
        shown++;
    }
    if (format == JSON)
        printf("]}\n");
    else if (format == TEXT && !shown)
        printf("no regcache ledger of uid %u in use (%s/%s*)\n", (unsigned)geteuid(), RC_LEDGER_DIR,
               prefix);
    caches_free(&cs);
    free(names);
    free(g);
    fflush(stdout);
    return status;
}

static void usage(FILE *to)
{
    fprintf(to,
            "usage: regcache-stat [--json | --prometheus] [--watch SECONDS]\n"
            "Show every regcache cache of this user (name, devices, entries, bytes, hit\n"
            "rate, registration latency, fds, each rail's dmabuf mapping) and what they\n"
            "hold on each GPU, from the shared segments in %s\n"
            "(REGCACHE_LEDGER_NAMESPACE selects a namespace).  --json prints JSON,\n"
            "--prometheus the Prometheus text format; --watch repeats every SECONDS\n"
            "(1 to 86400) until interrupted.\n",
            RC_LEDGER_DIR);
}

/* A usage error: what was wrong, then how it is used; exit status 2. */
static int bad_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "regcache-stat: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    usage(stderr);
    return 2;
}

int main(int argc, char **argv)
{
    enum format format = TEXT;
    long watch = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json") || !strcmp(a, "--prometheus")) {
            enum format f = a[2] == 'j' ? JSON : PROMETHEUS;
            if (format != TEXT && format != f)
                return bad_usage("%s: --json and --prometheus exclude each other", a);
            format = f;
        } else if (!strcmp(a, "--watch")) {
            if (i + 1 == argc)
                return bad_usage("%s needs a number of seconds", a);
            char *end;
            const char *v = argv[++i];
            watch = strtol(v, &end, 10);
            if (end == v || *end || watch < 1 || watch > 86400)
                return bad_usage("--watch %s: expected a whole number of seconds from 1 to 86400",
                                 v);
        } else {
            return bad_usage("unknown option '%s'", a);
        }
    }
    char prefix[RC_LEDGER_PREFIX_MAX], why[256];
    if (!rc_ledger_prefix(prefix, sizeof prefix, why, sizeof why)) {
        fprintf(stderr, "regcache-stat: %s\n", why);
        return 2;
    }
    int status = show(prefix, format);
    while (watch) {
        sleep((unsigned)watch);
        if (format == TEXT)
            printf("\n");
        status = show(prefix, format);
    }
    return status;
}
