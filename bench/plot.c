/* PNG plots through gnuplot: each plot is a section's rows grouped into one
 * line per (implementation, mode).  The data and the script (with paths
 * relative to the directory) are written even where gnuplot is missing, so
 * that `cd DIR && gnuplot *.gp` draws them on another machine. */
#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct plot {
    const char *file;    /* base name in the directory */
    const char *section;
    const char *title;
    const char *xlabel;
    const char *ylabel;
    int logx, logy;
    int throughput;      /* y is Mops/s, else median ns */
};

static const struct plot plots[] = {
    {"hit_vs_entries", "entries", "Hit cost (get+put) against cached entries",
     "cached entries", "ns per get+put (median)", 1, 0, 0},
    {"thread_scaling", "threads", "Aggregate hit throughput against threads",
     "threads", "Mops/s (median)", 1, 0, 1},
    {"latency_per_size", "pin", "Pin/unpin latency per size",
     "bytes", "ns (median)", 1, 1, 0},
};

static double xval(const struct bench_row *r)
{
    return r->size ? (double)r->size : r->threads ? r->threads : (double)r->entries;
}

static double yval(const struct plot *p, const struct bench_row *r)
{
    return p->throughput ? r->mops : r->median_ns;
}

/* Tics at the measured x values, labelled as in the table. */
static void xtics(FILE *gp, const struct plot *p)
{
    double done[64];
    size_t ndone = 0;
    fputs("set xtics (", gp);
    for (size_t i = 0; i < bench_row_count() && ndone < 64; i++) {
        const struct bench_row *r = bench_row_at(i);
        char label[24];
        double x = xval(r);
        size_t k = 0;
        if (strcmp(r->section, p->section) != 0)
            continue;
        while (k < ndone && done[k] != x)
            k++;
        if (k < ndone)
            continue;
        if (r->size)
            bench_bytes_label(label, sizeof(label), r->size);
        else
            bench_count_label(label, sizeof(label), (uint64_t)x);
        fprintf(gp, "%s'%s' %.0f", ndone ? ", " : "", label, x);
        done[ndone++] = x;
    }
    fputs(")\n", gp);
}

static int same_series(const struct bench_row *a, const struct bench_row *b)
{
    return strcmp(a->impl, b->impl) == 0 && strcmp(a->mode, b->mode) == 0;
}

/* Writes one gnuplot data block per series (blocks are separated by two
 * blank lines, so "index i" picks one) and the matching plot clauses. */
static int write_data(const struct plot *p, FILE *data, char *clauses, size_t len)
{
    int series = 0;
    size_t used = 0;
    for (size_t i = 0; i < bench_row_count(); i++) {
        const struct bench_row *first = bench_row_at(i);
        int seen = 0, points = 0;
        if (strcmp(first->section, p->section) != 0)
            continue;
        for (size_t j = 0; j < i && !seen; j++)
            seen = strcmp(bench_row_at(j)->section, p->section) == 0 &&
                   same_series(bench_row_at(j), first);
        if (seen)
            continue;
        for (size_t j = i; j < bench_row_count(); j++) {
            const struct bench_row *r = bench_row_at(j);
            if (strcmp(r->section, p->section) != 0 || !same_series(r, first) ||
                yval(p, r) <= 0)
                continue;
            fprintf(data, "%.0f %g\n", xval(r), yval(p, r));
            points++;
        }
        if (!points)
            continue;
        fputs("\n\n", data);
        used += (size_t)snprintf(clauses + used, used < len ? len - used : 0,
                                 "%s'%s.dat' index %d with linespoints title '%s%s%s'",
                                 series ? ", " : "", p->file, series, first->impl,
                                 first->mode[0] ? " " : "", first->mode);
        series++;
    }
    return used < len ? series : -1;
}

/* Writes DIR/<file>.dat and DIR/<file>.gp; 0 when there was nothing to
 * plot, 1 when a script was written, -1 on error. */
static int write_plot(const char *dir, const struct plot *p)
{
    char path[512], clauses[4096];
    snprintf(path, sizeof(path), "%s/%s.dat", dir, p->file);
    FILE *data = fopen(path, "w");
    if (!data)
        return -1;
    int series = write_data(p, data, clauses, sizeof(clauses));
    if (fclose(data) != 0 || series < 0)
        return -1;
    if (series == 0)
        return 0;
    snprintf(path, sizeof(path), "%s/%s.gp", dir, p->file);
    FILE *gp = fopen(path, "w");
    if (!gp)
        return -1;
    fprintf(gp,
            "reset\nset terminal pngcairo size 1000,650 noenhanced\n"
            "set output '%s.png'\n"
            "set title '%s'\nset xlabel '%s'\nset ylabel '%s'\n"
            "set key outside right\nset grid\nset offsets graph 0.03, graph 0.03, 0, 0\n%s%s",
            p->file, p->title, p->xlabel, p->ylabel, p->logx ? "set logscale x 2\n" : "",
            p->logy ? "set logscale y 10\n" : "set yrange [0:*]\n");
    xtics(gp, p);
    fprintf(gp, "plot %s\n", clauses);
    return fclose(gp) == 0 ? 1 : -1;
}

int bench_write_plots(const char *dir)
{
    int gnuplot = system("command -v gnuplot >/dev/null 2>&1") == 0;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return -1;
    for (size_t i = 0; i < BENCH_NELEM(plots); i++) {
        char cmd[600];
        int w = write_plot(dir, &plots[i]);
        if (w < 0)
            return -1;
        if (w == 0 || !gnuplot)
            continue;
        snprintf(cmd, sizeof(cmd), "cd '%s' && gnuplot '%s.gp'", dir, plots[i].file);
        if (system(cmd) != 0) {
            bench_skip("plots", "gnuplot failed on %s/%s.gp", dir, plots[i].file);
            return -1;
        }
    }
    if (!gnuplot)
        bench_skip("plots", "gnuplot not found: data and scripts are in %s; "
                   "run `gnuplot *.gp` there on a machine with gnuplot", dir);
    return 0;
}
