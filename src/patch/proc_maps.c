/* Reading /proc/self/maps (see proc_maps.h). */
#include "proc_maps.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* Below this the kernel refuses mappings (vm.mmap_min_addr); above it
 * addresses are not canonical with 4-level page tables. */
#define LOWEST ((uintptr_t)1 << 16)
#define HIGHEST ((uintptr_t)1 << 47)

/* Calls fn for each mapping, in address order, until it returns non-zero;
 * returns that, or -1 when the file cannot be read. */
static int each_mapping(int (*fn)(const struct rc_mapping *m, void *arg), void *arg)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return -1;
    char *line = NULL;
    size_t cap = 0;
    int stop = 0;
    while (!stop && getline(&line, &cap, f) > 0) {
        char *p;
        struct rc_mapping m;
        m.start = (uintptr_t)strtoull(line, &p, 16);
        if (*p != '-')
            continue;
        m.end = (uintptr_t)strtoull(p + 1, &p, 16);
        if (p[0] != ' ' || p[1] == '\0' || p[2] == '\0' || p[3] == '\0' || p[4] == '\0')
            continue;
        m.prot = (p[1] == 'r' ? PROT_READ : 0) | (p[2] == 'w' ? PROT_WRITE : 0) |
                 (p[3] == 'x' ? PROT_EXEC : 0);
        m.shared = p[4] == 's';
        stop = fn(&m, arg);
    }
    free(line);
    fclose(f);
    return stop;
}

struct find {
    uintptr_t addr;
    struct rc_mapping *out;
};

static int holds(const struct rc_mapping *m, void *arg)
{
    struct find *f = arg;
    if (f->addr < m->start || f->addr >= m->end)
        return 0;
    *f->out = *m;
    return 1;
}

int rc_maps_find(uintptr_t addr, struct rc_mapping *m)
{
    struct find f = { addr, m };
    return each_mapping(holds, &f) == 1 ? 0 : -1;
}

struct gap_search {
    uintptr_t lo, hi, near, prev_end, best, best_distance, page;
    size_t size;
};

/* The gap [from, to): its place closest to `near`, kept if the closest so
 * far. */
static void consider(struct gap_search *g, uintptr_t from, uintptr_t to)
{
    uintptr_t a = from > g->lo ? from : g->lo;
    uintptr_t b = to < g->hi ? to : g->hi;
    a = (a + g->page - 1) & ~(g->page - 1);
    if (a >= b || b - a < g->size)
        return;
    b = (b - g->size) & ~(g->page - 1);
    if (b < a)
        return;
    uintptr_t at = g->near <= a ? a : g->near >= b ? b : g->near & ~(g->page - 1);
    uintptr_t distance = at > g->near ? at - g->near : g->near - at;
    if (distance < g->best_distance) {
        g->best = at;
        g->best_distance = distance;
    }
}

static int gap_before(const struct rc_mapping *m, void *arg)
{
    struct gap_search *g = arg;
    if (m->start > g->prev_end)
        consider(g, g->prev_end, m->start);
    if (m->end > g->prev_end)
        g->prev_end = m->end;
    return 0;
}

int rc_maps_free_near(uintptr_t lo, uintptr_t hi, size_t size, uintptr_t near, uintptr_t *out)
{
    struct gap_search g = { .lo = lo,
                            .hi = hi,
                            .near = near,
                            .prev_end = LOWEST,
                            .best_distance = UINTPTR_MAX,
                            .page = (uintptr_t)sysconf(_SC_PAGESIZE),
                            .size = size };
    if (each_mapping(gap_before, &g) != 0)
        return -1;
    if (HIGHEST > g.prev_end)
        consider(&g, g.prev_end, HIGHEST);
    if (g.best_distance == UINTPTR_MAX)
        return -1;
    *out = g.best;
    return 0;
}

struct visit {
    uintptr_t lo, hi;
    int (*fn)(const struct rc_mapping *m, void *arg);
    void *arg;
};

static int overlapping(const struct rc_mapping *m, void *arg)
{
    struct visit *v = arg;
    if (m->start >= v->hi)
        return 1;
    return m->end > v->lo ? v->fn(m, v->arg) : 0;
}

int rc_maps_visit(uintptr_t lo, uintptr_t hi, int (*fn)(const struct rc_mapping *m, void *arg),
                  void *arg)
{
    struct visit v = { lo, hi, fn, arg };
    return each_mapping(overlapping, &v) < 0 ? -1 : 0;
}
