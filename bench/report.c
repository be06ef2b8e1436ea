/* The readable table on stdout and the JSON file. */
#include "bench.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *section;
    const char *title;
} sections[] = {
    {"pin", "1. Pin/unpin latency per size (miss: first get+put; hit: get+put)"},
    {"entries", "2. Hit cost against cached entries (random 4 KiB gets over 64 KiB regions)"},
    {"threads", "3. Multi-threaded hits (1000 entries, aggregate throughput)"},
    {"churn", "4. Eviction churn (working set = 2x budget, cyclic: every get evicts)"},
    {"notify", "5. Invalidation: regcache_notify_free"},
};
#define NSECTIONS (sizeof(sections) / sizeof(sections[0]))

static const char *verdict_text(enum bench_verdict v)
{
    return v == BENCH_MET ? "met" : v == BENCH_MISSED ? "MISSED" : "not judged";
}

/* A duration with a unit that keeps it short. */
static const char *dur(char *buf, size_t len, double ns)
{
    if (ns < 0)
        snprintf(buf, len, "-");
    else if (ns < 1e3)
        snprintf(buf, len, "%.1f ns", ns);
    else if (ns < 1e6)
        snprintf(buf, len, "%.2f us", ns / 1e3);
    else
        snprintf(buf, len, "%.2f ms", ns / 1e6);
    return buf;
}

const char *bench_bytes_label(char *buf, size_t len, uint64_t b)
{
    if (b >= (1u << 30) && b % (1u << 30) == 0)
        snprintf(buf, len, "%llu GiB", (unsigned long long)(b >> 30));
    else if (b >= (1u << 20) && b % (1u << 20) == 0)
        snprintf(buf, len, "%llu MiB", (unsigned long long)(b >> 20));
    else
        snprintf(buf, len, "%llu KiB", (unsigned long long)(b >> 10));
    return buf;
}

const char *bench_count_label(char *buf, size_t len, uint64_t n)
{
    if (n >= 1000000 && n % 1000000 == 0)
        snprintf(buf, len, "%lluM", (unsigned long long)(n / 1000000));
    else if (n >= 1000 && n % 1000 == 0)
        snprintf(buf, len, "%lluk", (unsigned long long)(n / 1000));
    else
        snprintf(buf, len, "%llu", (unsigned long long)n);
    return buf;
}

/* The column that tells rows of a section apart. */
static const char *key(char *buf, size_t len, const struct bench_row *r)
{
    char n[24];
    if (r->size)
        return bench_bytes_label(buf, len, r->size);
    if (r->threads)
        snprintf(buf, len, "%u thr", r->threads);
    else
        snprintf(buf, len, "%s ent", bench_count_label(n, sizeof(n), r->entries));
    return buf;
}

static void print_row(const struct bench_row *r)
{
    char k[40], med[24], p99[24], mops[48] = "", der[80] = "";
    if (r->mops >= 0 && r->mops_low >= 0)
        snprintf(mops, sizeof(mops), "%8.2f Mops/s (low %.2f)", r->mops, r->mops_low);
    else if (r->mops >= 0)
        snprintf(mops, sizeof(mops), "%8.2f Mops/s", r->mops);
    if (r->derived >= 0)
        snprintf(der, sizeof(der), "%.2f %s", r->derived, r->derived_what);
    printf("  %-9s %-50s %10s %10s %s%s%s\n", key(k, sizeof(k), r), r->name,
           dur(med, sizeof(med), r->median_ns), dur(p99, sizeof(p99), r->p99_ns), mops,
           mops[0] && der[0] ? "  " : "", der);
    for (unsigned g = 0; g < r->goals; g++)
        printf("  %9s   goal: %s -> %s\n", "", r->goal[g].text,
               verdict_text(r->goal[g].verdict));
    if (r->note[0])
        printf("  %9s   note: %s\n", "", r->note);
}

/* The UCX comparison as one block: ratio regcache/UCX per row. */
static void print_ucx(void)
{
    static const char *const modes[2] = {"HOOKS", "TAG_CHECK"};
    int any = 0;
    for (size_t i = 0; i < bench_row_count(); i++) {
        const struct bench_row *u = bench_row_at(i), *r;
        char k[40], a[24], b[24];
        if (strcmp(u->impl, "ucx") != 0)
            continue;
        if (!any++)
            printf("\n== 6. regcache vs UCX ucs_rcache (same null backend, same workload) ==\n"
                   "  %-9s %-10s %14s %14s %14s   (speed: higher is better for regcache)\n",
                   "row", "figure", "UCX", "rc HOOKS", "rc TAG_CHECK");
        if (u->threads)
            snprintf(a, sizeof(a), "%.2f", u->mops);
        else
            dur(a, sizeof(a), u->median_ns);
        printf("  %-9s %-10s %14s", key(k, sizeof(k), u),
               u->threads ? "Mops/s" : "ns/hit", a);
        for (size_t mi = 0; mi < 2; mi++) {
            r = bench_row_find(u->section, "regcache", modes[mi], u->entries,
                               u->threads, 0);
            if (r && r->derived > 0)
                snprintf(b, sizeof(b), "%.2fx", r->derived);
            else
                snprintf(b, sizeof(b), "-");
            printf(" %14s", b);
        }
        printf("\n");
    }
}

void bench_print_table(const struct bench_machine *m, const struct bench_opts *o)
{
    printf("regcache benchmark (%s run)\n", o->quick ? "quick" : "full");
    printf("  regcache %s | CPU: %s, %ld cores | GPU: %s%s%s | UCX: %s\n",
           m->regcache_version, m->cpu, m->cores, m->gpu[0] ? m->gpu : "none",
           m->driver[0] ? ", driver " : "", m->driver,
           m->ucx_version[0] ? m->ucx_version : "not built in");
    if (m->load >= 0)
        printf("  load average at start: %.2f on %ld cores%s\n", m->load, m->cores,
               m->load > 0.5 * (double)m->cores ? " (busy: expect noisy figures)" : "");
    printf("  figures are per get+put (or per call) unless Mops/s; median and p99\n"
           "  over %u batches of %u (hit rows) or %u single calls (pin, notify)\n",
           o->batches, o->batch_ops, o->pin_reps);
    for (size_t s = 0; s < NSECTIONS; s++) {
        int any = 0;
        for (size_t i = 0; i < bench_row_count(); i++) {
            const struct bench_row *r = bench_row_at(i);
            if (strcmp(r->section, sections[s].section) != 0)
                continue;
            if (!any++)
                printf("\n== %s ==\n  %-9s %-50s %10s %10s\n", sections[s].title, "",
                       "", "median", "p99");
            print_row(r);
        }
    }
    print_ucx();
    printf("\n== Skipped ==\n");
    if (!bench_skip_count())
        printf("  nothing\n");
    for (size_t i = 0; i < bench_skip_count(); i++)
        printf("  %s: %s\n", bench_skip_what(i), bench_skip_why(i));
    printf("\n== Goals ==\n");
    for (size_t i = 0; i < bench_row_count(); i++) {
        const struct bench_row *r = bench_row_at(i);
        char k[40];
        for (unsigned g = 0; g < r->goals; g++)
            printf("  [%-10s] %-7s %-9s %s: %s\n", verdict_text(r->goal[g].verdict),
                   r->section, key(k, sizeof(k), r), r->name, r->goal[g].text);
    }
}

/* ---- JSON ---------------------------------------------------------------- */

static void jstr(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* n/a figures (negative) are null. */
static void jnum(FILE *f, double v)
{
    if (v < 0)
        fputs("null", f);
    else
        fprintf(f, "%.3f", v);
}

/* ", "key": value" -- every field after a record's first. */
static void jfield_str(FILE *f, const char *key, const char *v)
{
    fprintf(f, ", \"%s\": ", key);
    jstr(f, v);
}

static void jfield_num(FILE *f, const char *key, double v)
{
    fprintf(f, ", \"%s\": ", key);
    jnum(f, v);
}

static void jrow(FILE *f, const struct bench_row *r)
{
    fputs("    {\"section\": ", f);
    jstr(f, r->section);
    jfield_str(f, "name", r->name);
    jfield_str(f, "impl", r->impl);
    jfield_str(f, "mode", r->mode);
    fprintf(f, ", \"size_bytes\": %llu, \"entries\": %llu, \"threads\": %u",
            (unsigned long long)r->size, (unsigned long long)r->entries, r->threads);
    jfield_num(f, "median_ns", r->median_ns);
    jfield_num(f, "p99_ns", r->p99_ns);
    jfield_num(f, "mops", r->mops);
    jfield_num(f, "mops_low", r->mops_low);
    jfield_num(f, "derived", r->derived);
    jfield_str(f, "derived_what", r->derived_what);
    fputs(", \"goals\": [", f);
    for (unsigned g = 0; g < r->goals; g++) {
        fputs(g ? ", {\"goal\": " : "{\"goal\": ", f);
        jstr(f, r->goal[g].text);
        jfield_str(f, "verdict", verdict_text(r->goal[g].verdict));
        fputc('}', f);
    }
    fputs("], \"note\": ", f);
    jstr(f, r->note);
    fputc('}', f);
}

int bench_write_json(const char *path, const struct bench_machine *m,
                     const struct bench_opts *o)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "{\n  \"run\": \"%s\",\n  \"machine\": {\"cpu\": ", o->quick ? "quick" : "full");
    jstr(f, m->cpu);
    fprintf(f, ", \"cores\": %ld, \"load_avg_1min\": ", m->cores);
    jnum(f, m->load);
    jfield_str(f, "gpu", m->gpu);
    jfield_str(f, "driver", m->driver);
    jfield_str(f, "regcache_version", m->regcache_version);
    jfield_str(f, "ucx_version", m->ucx_version);
    fprintf(f, "},\n  \"settings\": {\"batches\": %u, \"batch_ops\": %u, \"pin_reps\": %u, "
               "\"mt_seconds\": %.3f, \"mt_runs\": %u},\n  \"skipped\": [",
            o->batches, o->batch_ops, o->pin_reps, o->mt_seconds, o->mt_runs);
    for (size_t i = 0; i < bench_skip_count(); i++) {
        fputs(i ? ",\n    {\"what\": " : "\n    {\"what\": ", f);
        jstr(f, bench_skip_what(i));
        jfield_str(f, "why", bench_skip_why(i));
        fputc('}', f);
    }
    fputs("],\n  \"results\": [\n", f);
    for (size_t i = 0; i < bench_row_count(); i++) {
        jrow(f, bench_row_at(i));
        fputs(i + 1 < bench_row_count() ? ",\n" : "\n", f);
    }
    fputs("  ]\n}\n", f);
    return fclose(f) == 0 ? 0 : -1;
}
