/* Instructions per get+put, counted by the CPU (perf_event_open, user
 * mode only) rather than timed: a figure that a busy host does not move,
 * so that every change to the hot paths shows its cost.  Three loops on
 * the null source: a NOTIFY and a TAG_CHECK hit on a cache of one entry,
 * and an evicting get+put (the churn of 1000 entries under an entry
 * budget); each figure is the loop's count over its operations, the
 * harness's loop (a random page, two calls) included.  Where the CPU's
 * counters cannot be read (a virtual machine without them, or
 * perf_event_paranoid) the rows say why; bench/ab/run.sh instructions
 * counts the same through callgrind on any machine. */
#include "bench.h"

#include <errno.h>
#include <linux/perf_event.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define OPS 100000
#define CHURN 1000

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
        snprintf(why, len, "the CPU's instruction counter cannot be read here: %s",
                 strerror(errno));
    return fd;
}

/* Instructions per operation of `ops` calls of op, or -1. */
static double count(int fd, const struct bench_op *op, uint64_t ops)
{
    struct bench_lane lane = { .rng = 0x9e3779b97f4a7c15ull };
    uint64_t n = 0;
    ioctl(fd, PERF_EVENT_IOC_RESET, 0);
    ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
    op->run(op->ctx, &lane, ops);
    ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
    if (read(fd, &n, sizeof n) != (ssize_t)sizeof n || !n)
        return -1;
    return (double)n / (double)ops;
}

static void emit(struct bench_row *r, int fd, const struct bench_op *op, const char *why)
{
    char check[160];
    if (fd < 0) {
        bench_note(r, "%s", why);
        return;
    }
    count(fd, op, OPS / 10); /* a warm-up */
    double v = count(fd, op, OPS);
    if (v < 0 || op->check(op->ctx, check, sizeof check) != 0) {
        bench_note(r, "invalid: %s", v < 0 ? "the counter read nothing" : check);
        return;
    }
    double sample = v;
    size_t slot = 0;
    r->unit = "instructions";
    r->median = r->p99 = v;
    r->nsamples = 1;
    r->samples = &sample;
    r->slots = &slot;
    bench_emit(r);
}

void bench_instructions(const struct bench_src *s)
{
    static const int modes[2] = { REGCACHE_VALIDATE_NOTIFY, REGCACHE_VALIDATE_TAG_CHECK };
    char why[160], uncounted[160];
    int fd = counter(uncounted, sizeof uncounted);
    for (int i = 0; i < 2; i++) {
        struct bench_target t;
        struct bench_row r = { .workload = "instructions", .source = s->name, .what = "hit" };
        if (bench_target_open(&t, &r, s, modes[i], 1, 0) != 0)
            continue;
        emit(&r, fd, &t.op, uncounted);
        bench_target_close(&t);
    }
    struct bench_row r = { .workload = "instructions",
                           .source = s->name,
                           .impl = "regcache",
                           .what = "evicting get+put",
                           .asked = bench_mode_name(REGCACHE_VALIDATE_NOTIFY),
                           .entries = CHURN };
    struct bench_cycle c = { .use.counter = offsetof(struct regcache_stats, misses),
                             .base = s->base,
                             .regions = 2 * CHURN };
    c.use.cache = bench_cache(s, NULL, REGCACHE_VALIDATE_NOTIFY, CHURN, 0, why, sizeof why);
    if (!c.use.cache) {
        bench_note(&r, "failed: %s", why);
    } else {
        r.mode = regcache_validation_mode(c.use.cache);
        bench_cycle_run(&c, NULL, 2 * CHURN);
        c.use.expect = bench_counter(&c.use);
        emit(&r, fd, &(struct bench_op){ bench_cycle_run, NULL, bench_use_check, &c }, uncounted);
        regcache_destroy(c.use.cache);
    }
    if (fd >= 0)
        close(fd);
}
