/* Instructions per get+put rather than time: a figure that a busy host
 * does not move, so that every change to the hot paths shows its cost.
 * Three loops on the null source: a NOTIFY and a TAG_CHECK hit on a cache
 * of one entry, and an evicting get+put (the churn of 1000 entries under
 * an entry budget); each figure is the loop's count over its operations,
 * the harness's loop (a random page, two calls) included.  The CPU counts
 * them (perf_event_open, user mode only) where its counter can be read;
 * elsewhere (a virtual machine without one, perf_event_paranoid) callgrind
 * does, where valgrind is installed: this program runs each loop again
 * under it (`--count LOOP OPS`), collecting only inside
 * bench_counted_loop(), so that set-up and warm-up count nothing.  Where
 * neither can, the rows say why. */
#include "bench.h"

#include <errno.h>
#include <linux/perf_event.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define OPS 100000
/* Under callgrind every instruction costs some 50 of its own: fewer. */
#define CALLGRIND_OPS 20000
#define CHURN 1000
#define LOOPS 3 /* the NOTIFY hit, the TAG_CHECK hit, the evicting get+put */

struct loop {
    struct bench_row row;
    struct bench_op op;
    struct bench_target target; /* the hits' */
    struct bench_cycle cycle;   /* the evicting one's */
    bool open;
};

/* Loop `which` on source s, ready to run; loop->open says whether it is
 * (else its row was emitted with why). */
static void open_loop(struct loop *l, int which, const struct bench_src *s)
{
    static const int modes[2] = { REGCACHE_VALIDATE_NOTIFY, REGCACHE_VALIDATE_TAG_CHECK };
    char why[160];
    *l = (struct loop){ .row = { .workload = "instructions", .source = s->name, .what = "hit" } };
    if (which < 2) {
        l->open = bench_target_open(&l->target, &l->row, s, modes[which], 1, 0) == 0;
        l->op = l->target.op;
        return;
    }
    l->row.impl = "regcache";
    l->row.what = "evicting get+put";
    l->row.asked = bench_mode_name(REGCACHE_VALIDATE_NOTIFY);
    l->row.entries = CHURN;
    l->cycle = (struct bench_cycle){ .use.counter = offsetof(struct regcache_stats, misses),
                                     .base = s->base,
                                     .regions = 2 * CHURN };
    l->cycle.use.cache = bench_cache(s, NULL, REGCACHE_VALIDATE_NOTIFY, CHURN, 0, why, sizeof why);
    if (!l->cycle.use.cache) {
        bench_note(&l->row, "failed: %s", why);
        return;
    }
    l->row.mode = regcache_validation_mode(l->cycle.use.cache);
    bench_cycle_run(&l->cycle, NULL, 2 * CHURN);
    l->cycle.use.expect = bench_counter(&l->cycle.use);
    l->op = (struct bench_op){ bench_cycle_run, NULL, bench_use_check, &l->cycle };
    l->open = true;
}

static void close_loop(struct loop *l, int which)
{
    if (!l->open)
        return;
    if (which < 2)
        bench_target_close(&l->target);
    else
        regcache_destroy(l->cycle.use.cache);
}

/* What callgrind counts: n operations of op, nothing else. */
__attribute__((noinline)) void bench_counted_loop(const struct bench_op *op,
                                                  struct bench_lane *lane, uint64_t n)
{
    op->run(op->ctx, lane, n);
}

static void run_counted(const struct bench_op *op, uint64_t n)
{
    struct bench_lane lane = { .rng = 0x9e3779b97f4a7c15ull };
    op->run(op->ctx, &lane, n / 10); /* a warm-up */
    bench_counted_loop(op, &lane, n);
}

int bench_instructions_child(int which, uint64_t ops)
{
    struct bench_src cpu;
    struct loop l;
    char check[160];
    if (which < 0 || which >= LOOPS || bench_null_source(&cpu) != 0)
        return 2;
    open_loop(&l, which, &cpu);
    if (!l.open)
        return 1;
    run_counted(&l.op, ops);
    int rc = l.op.check(l.op.ctx, check, sizeof check) == 0 ? 0 : 1;
    close_loop(&l, which);
    return rc;
}

static int counter(char *why, size_t len)
{
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.type = PERF_TYPE_HARDWARE;
    a.size = sizeof a;
    a.config = PERF_COUNT_HW_INSTRUCTIONS;
    a.disabled = 1;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    int fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
    if (fd < 0)
        snprintf(why, len, "the CPU's instruction counter cannot be read here (%s)",
                 strerror(errno));
    return fd;
}

/* Instructions per operation of `ops` calls of op, counted by the CPU, or
 * -1. */
static double cpu_count(int fd, const struct bench_op *op, uint64_t ops)
{
    struct bench_lane lane = { .rng = 0x9e3779b97f4a7c15ull };
    uint64_t n = 0;
    op->run(op->ctx, &lane, ops / 10); /* a warm-up */
    ioctl(fd, PERF_EVENT_IOC_RESET, 0);
    ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
    op->run(op->ctx, &lane, ops);
    ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
    if (read(fd, &n, sizeof n) != (ssize_t)sizeof n || !n)
        return -1;
    return (double)n / (double)ops;
}

/* Instructions per operation of loop `which`, counted by callgrind in a
 * run of this program under valgrind, or -1. */
static double callgrind_count(int which)
{
    char cmd[512], line[256], self[256];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0)
        return -1;
    self[len] = '\0';
    snprintf(cmd, sizeof cmd,
             "valgrind --tool=callgrind --callgrind-out-file=/dev/null "
             "--toggle-collect='bench_counted_loop*' '%s' --count %d %d 2>&1",
             self, which, CALLGRIND_OPS);
    FILE *p = popen(cmd, "r");
    unsigned long long n = 0;
    bool counted = false;
    while (p && fgets(line, sizeof line, p)) {
        const char *at = strstr(line, "Collected : ");
        if (at)
            counted = sscanf(at, "Collected : %llu", &n) == 1;
    }
    if (!p || pclose(p) != 0 || !counted || !n)
        return -1;
    return (double)n / CALLGRIND_OPS;
}

static void emit(struct bench_row *r, double v, const char *unit)
{
    double sample = v;
    size_t slot = 0;
    r->unit = unit;
    r->median = r->p99 = v;
    r->nsamples = 1;
    r->samples = &sample;
    r->slots = &slot;
    bench_emit(r);
}

void bench_instructions(const struct bench_src *s)
{
    char uncounted[160], check[160];
    int fd = counter(uncounted, sizeof uncounted);
    for (int which = 0; which < LOOPS; which++) {
        struct loop l;
        open_loop(&l, which, s);
        if (!l.open)
            continue;
        double v = -1;
        if (fd >= 0 && (v = cpu_count(fd, &l.op, OPS)) >= 0 &&
            l.op.check(l.op.ctx, check, sizeof check) == 0)
            emit(&l.row, v, "instructions");
        else if (fd >= 0)
            bench_note(&l.row, "invalid: %s", v < 0 ? "the counter read nothing" : check);
        else if ((v = callgrind_count(which)) >= 0)
            emit(&l.row, v, "instructions (callgrind)");
        else
            bench_note(&l.row, "%s, and callgrind did not count (valgrind missing?)", uncounted);
        close_loop(&l, which);
    }
    if (fd >= 0)
        close(fd);
}
