/* The result rows and the list of skipped parts, kept in run order. */
#include "bench.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct bench_row **rows;
static size_t nrows, cap_rows;

struct skip {
    char what[64];
    char why[192];
};
static struct skip *skips;
static size_t nskips, cap_skips;

/* Grow *v to hold n+1 elements of `size`; the harness cannot go on without
 * its results, so running out of memory ends it. */
static void *grow(void *v, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return v;
    *cap = *cap ? *cap * 2 : 64;
    v = realloc(v, *cap * size);
    if (!v) {
        fputs("bench: out of memory\n", stderr);
        exit(1);
    }
    return v;
}

struct bench_row *bench_row_add(const char *section, const char *name)
{
    struct bench_row *r = calloc(1, sizeof(*r));
    rows = grow(rows, &cap_rows, nrows, sizeof(*rows));
    if (!r) {
        fputs("bench: out of memory\n", stderr);
        exit(1);
    }
    snprintf(r->section, sizeof(r->section), "%s", section);
    snprintf(r->name, sizeof(r->name), "%s", name);
    r->median_ns = r->p99_ns = r->mops = r->mops_low = r->derived = -1.0;
    rows[nrows++] = r;
    return r;
}

size_t bench_row_count(void)
{
    return nrows;
}

struct bench_row *bench_row_at(size_t i)
{
    return i < nrows ? rows[i] : NULL;
}

struct bench_row *bench_row_find(const char *section, const char *impl,
                                 const char *mode, uint64_t entries,
                                 unsigned threads, uint64_t size)
{
    for (size_t i = 0; i < nrows; i++) {
        struct bench_row *r = rows[i];
        if (strcmp(r->section, section) == 0 && strcmp(r->impl, impl) == 0 &&
            (!mode || strcmp(r->mode, mode) == 0) && r->entries == entries &&
            r->threads == threads && r->size == size)
            return r;
    }
    return NULL;
}

void bench_row_goal(struct bench_row *row, enum bench_verdict verdict,
                    const char *fmt, ...)
{
    va_list ap;
    if (row->goals == BENCH_MAX_GOALS) {
        fputs("bench: too many goals on one row\n", stderr);
        exit(1);
    }
    va_start(ap, fmt);
    vsnprintf(row->goal[row->goals].text, sizeof(row->goal[0].text), fmt, ap);
    va_end(ap);
    row->goal[row->goals++].verdict = verdict;
}

void bench_skip(const char *what, const char *fmt, ...)
{
    va_list ap;
    skips = grow(skips, &cap_skips, nskips, sizeof(*skips));
    snprintf(skips[nskips].what, sizeof(skips[nskips].what), "%s", what);
    va_start(ap, fmt);
    vsnprintf(skips[nskips].why, sizeof(skips[nskips].why), fmt, ap);
    va_end(ap);
    nskips++;
}

size_t bench_skip_count(void)
{
    return nskips;
}

const char *bench_skip_what(size_t i)
{
    return skips[i].what;
}

const char *bench_skip_why(size_t i)
{
    return skips[i].why;
}
