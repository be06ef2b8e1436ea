/* The one JSON writer.  Rows go out as they are measured, each with a line
 * of progress on stderr; the machine and the settings come last, once the
 * run has found out about the GPU and UCX. */
#include "bench.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static FILE *out;
static int rows;

/* "key": "value" after a comma, or opening an object when key starts with
 * '{'. */
static void str(const char *key, const char *v)
{
    int first = key[0] == '{';
    fprintf(out, "%s\"%s\": \"", first ? "{" : ", ", key + first);
    for (; v && *v; v++) {
        unsigned char c = (unsigned char)*v;
        fprintf(out, c == '"' || c == '\\' ? "\\%c" : c < 0x20 ? "\\u%04x" : "%c", c);
    }
    fputc('"', out);
}

static void num(const char *key, double v)
{
    fprintf(out, ", \"%s\": %.6g", key, v);
}

/* Counts and sizes exactly: %g would round 1 MiB to 1.04858e+06. */
static void count(const char *key, unsigned long long v)
{
    fprintf(out, ", \"%s\": %llu", key, v);
}

const char *bench_mode_name(int validation)
{
    /* In the order of enum regcache_validation. */
    static const char *const names[] = { "AUTO", "TAG_CHECK", "HOOKS", "NOTIFY" };
    return names[validation];
}

int bench_json_open(const char *path)
{
    out = fopen(path, "w");
    return out && fputs("{\"rows\": [", out) >= 0 ? 0 : -1;
}

void bench_emit(const struct bench_row *r)
{
    const char *mode = r->mode ? bench_mode_name(r->mode) : "";
    fputs(rows++ ? ",\n  " : "\n  ", out);
    str("{workload", r->workload);
    str("source", r->source);
    if (!r->impl) {
        str("skipped", r->note);
        fputc('}', out);
        fprintf(stderr, "%-12s skipped: %s\n", r->workload, r->note);
        return;
    }
    str("impl", r->impl);
    str("what", r->what);
    str("asked", r->asked);
    str("mode", mode);
    str("ledger", r->ledger);
    count("entries", r->entries);
    count("size_bytes", r->size);
    count("threads", r->threads);
    if (!r->note[0]) {
        str("unit", r->unit ? r->unit : r->threads ? "Mops/s" : "ns");
        num("median", r->median);
        num("p99", r->p99);
        count("group", r->group);
        fputs(", \"samples\": [", out);
        for (size_t i = 0; i < r->nsamples; i++)
            fprintf(out, "%s%.5g", i ? ", " : "", r->samples[i]);
        fputs("], \"slots\": [", out);
        for (size_t i = 0; i < r->nsamples; i++)
            fprintf(out, "%s%zu", i ? ", " : "", r->slots[i]);
        fputc(']', out);
    }
    str("note", r->note);
    fputc('}', out);
    fprintf(stderr, "%-12s %-4s %-8s %-11s %-9s %-3s %7llu %2u thr  %.1f (p99 %.1f) %s\n",
            r->workload, r->source, r->impl, r->what, mode, r->ledger ? r->ledger : "",
            (unsigned long long)(r->entries ? r->entries : r->size), r->threads, r->median, r->p99,
            r->note[0]   ? r->note
            : r->unit    ? r->unit
            : r->threads ? "Mops/s"
                         : "ns");
}

void bench_json_flush(void)
{
    fflush(out);
}

void bench_note(struct bench_row *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->note, sizeof(r->note), fmt, ap);
    va_end(ap);
    bench_emit(r);
}

int bench_json_close(const struct bench_machine *m)
{
    fputs("\n],\n\"machine\": ", out);
    str("{cpu", m->cpu);
    num("cores", (double)m->cores);
    num("physical_cores", m->physical_cores);
    num("load_avg_1min", m->load);
    str("gpu", m->gpu);
    str("driver", m->driver);
    str("regcache_version", regcache_version());
    str("ucx_version", m->ucx);
    str("ld_preload", getenv("LD_PRELOAD"));
    fputs("},\n\"settings\": ", out);
    str("{run", bench.quick ? "quick" : "full");
    num("samples", bench.samples);
    num("batch", bench.batch);
    num("runs", bench.runs);
    num("run_seconds", bench.run_seconds);
    fputs("}}\n", out);
    return fclose(out) == 0 ? 0 : -1;
}

void bench_emit_count(const struct bench_row *r, const char *what, const char *unit, double value)
{
    struct bench_row row = *r;
    double sample = value;
    size_t slot = 0;
    row.what = what;
    row.unit = unit;
    row.median = row.p99 = value;
    row.nsamples = 1;
    row.samples = &sample;
    row.slots = &slot;
    bench_emit(&row);
}
