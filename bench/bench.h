/* regcache-bench measures, bench/report.py judges: each workload file times
 * one kind of operation through the public API and writes JSON rows, so a
 * figure is measured once and can be judged again without re-running. */
#ifndef BENCH_H
#define BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "regcache.h"

#define BENCH_NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* How long each figure is measured for (settings.c; main.c sets it:
 * --quick or full). */
extern struct bench_settings {
    int quick;
    unsigned samples;   /* timed samples per single-thread figure */
    unsigned batch;     /* hits per sample: keeps the clock's cost out */
    unsigned runs;      /* timed runs per thread count */
    double run_seconds; /* length of one multi-threaded run */
} bench;

extern const size_t bench_entries[4];         /* the table sizes */
extern const unsigned bench_thread_counts[7]; /* the thread counts */
/* The thread rows' shared set, and each thread's own in the private rows:
 * it stays in the CPU caches, so the figure is the sharing, not memory. */
#define BENCH_SET 1000
#define BENCH_MISS_BATCH 100 /* misses and drops per sample */

/* Every entry is one 64 KiB region; every get asks for one random 4 KiB page
 * of one random region, the same stream for regcache and UCX. */
#define BENCH_REGION ((size_t)65536)
#define BENCH_GET ((size_t)4096)

/* The null source's memory query (backend.c, and ab/ab.c's caches):
 * every address is GPU memory of device 0 in allocations of one region,
 * with one fixed buffer id, so the memory never changes and every tag
 * check passes; a check costs what a cheap tag source costs. */
static inline int bench_null_query(void *arg, const void *addr, size_t len,
                                   struct regcache_mem_info *info)
{
    (void)arg, (void)len;
    *info = (struct regcache_mem_info){ .base = (uintptr_t)addr & ~(uintptr_t)(BENCH_REGION - 1),
                                        .size = BENCH_REGION,
                                        .buffer_id = 42,
                                        .device = 0,
                                        .type = REGCACHE_MEM_DEVICE };
    return REGCACHE_OK;
}

/* Registering nothing (the null source's caches, ab/ab.c's and
 * ab/driver_tag.c's): the handle is the address, which is never NULL. */
static inline int bench_null_reg(void *arg, void *addr, size_t len, int device, int rail,
                                 void **handle)
{
    (void)arg, (void)len, (void)device, (void)rail;
    *handle = addr;
    return 0;
}

static inline void bench_null_dereg(void *arg, void *handle)
{
    (void)arg, (void)handle;
}

/* A cache of the null registration (ab/floor.c's and ab/driver_tag.c's)
 * whose memory query is `query` (NULL: the driver's), with the n regions
 * from base cached in it, an entry each; NULL when its creation or a get
 * fails, regcache_last_error() saying why. */
static inline regcache_t *bench_null_cache(int validation,
                                           int (*query)(void *, const void *, size_t,
                                                        struct regcache_mem_info *),
                                           uintptr_t base, size_t n)
{
    struct regcache_backend backend = { .reg = bench_null_reg,
                                        .dereg = bench_null_dereg,
                                        .query = query };
    struct regcache_params params;
    regcache_params_init(&params);
    params.backend = &backend;
    params.validation = validation;
    params.whole_allocation = 0; /* each region an entry of its own */
    params.max_bytes = (size_t)1 << 56;
    regcache_t *c;
    regcache_entry_t *e;
    if (regcache_create(&params, &c) != REGCACHE_OK)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (regcache_get(c, (void *)(base + i * BENCH_REGION), BENCH_GET, &e) != REGCACHE_OK) {
            regcache_destroy(c);
            return NULL;
        }
        regcache_put(c, e);
    }
    return c;
}

static inline uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* qsort's order for doubles, ascending. */
static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One per thread: its random stream and its index (for private sets). */
struct bench_lane {
    uint64_t rng;
    unsigned index;
    /* What bare calls read, left here so that they are not optimised out.
     * In the lane, which is its thread's own: a global that every thread
     * wrote made the bare call's scaling, the machine's reference in the
     * report, that of one line moving between cores. */
    uint64_t sink;
};

/* The state lives in the caller's local copy of the lane's (a register):
 * kept in the lane's memory, every operation would carry a store-to-load
 * dependency through it that a fence in the measured call then serialises,
 * and the harness's cost would leak into every figure. */
static inline void *bench_pick(uintptr_t base, size_t regions, uint64_t *rng)
{
    uint64_t x = *rng; /* xorshift64*, inlined so every cache pays the same */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *rng = x;
    x *= 0x2545F4914F6CDD1DULL;
    uint64_t region = ((x >> 32) * regions) >> 32; /* regions < 2^32 */
    uint64_t page = x & (BENCH_REGION / BENCH_GET - 1);
    return (void *)(base + region * BENCH_REGION + page * BENCH_GET);
}

/* What is timed: run() does n operations; reset(), if set, puts things back
 * untimed before each sample; check() then says whether every operation
 * went as intended (0) or why not. */
struct bench_op {
    void (*run)(void *ctx, struct bench_lane *l, uint64_t n);
    void (*reset)(void *ctx);
    int (*check)(void *ctx, char *why, size_t len);
    void *ctx;
};

/* Where the addresses come from and who describes them to the cache.
 * "null": untouched CPU address space, described by the null backend's
 * query callback (backend.c); "cuda": one cuMemAlloc allocation, described
 * by the driver (cuda.c). */
struct bench_src {
    const char *name;
    uintptr_t base;      /* BENCH_REGION-aligned */
    size_t regions;      /* room for this many regions */
    int driver;          /* no query callback: the cache asks the driver */
    struct bench_op tag; /* the bare tag source; ctx: a bench_src */
};

/* ---- backend.c ------------------------------------------------------------ */

/* What a registration does; a NULL pinner is the null backend (a token as
 * the handle, nothing pinned), so the figures are the cache's own path. */
struct bench_pinner {
    int (*pin)(void *addr, size_t len, void **handle);
    void (*unpin)(void *handle);
};
/* validation: a REGCACHE_VALIDATE_* value; limits of 0 mean none.  NULL and
 * why when regcache_create fails. */
regcache_t *bench_cache(const struct bench_src *s, const struct bench_pinner *p, int validation,
                        size_t max_entries, size_t max_bytes, char *why, size_t len);
/* Params of a cache of pageable host memory over the null backend,
 * registrations rounded to `alignment` (0: the default), watched the
 * `monitor` way. */
void bench_host_params(struct regcache_params *p, size_t alignment,
                       enum regcache_host_monitor monitor);
/* reg then dereg, as the cache calls them; 0 or an errno value. */
int bench_backend_pin(const struct bench_pinner *p, void *addr, size_t len);
/* The CPU source; -1 when the address space cannot be had. */
int bench_null_source(struct bench_src *s);

/* ---- measure.c ------------------------------------------------------------ */

/* One JSON row; NULL strings are written as "".  The figure is a median and
 * a p99 (nearest rank) after a warm-up: ns per operation, or with threads
 * Mops/s, whose p99 is the slow tail.  A note means there is no figure. */
struct bench_row {
    const char *workload; /* the file that measured it */
    const char *source;   /* bench_src name */
    const char *impl;     /* "regcache", "ucx", "tag" (the bare tag source),
                             "backend" (reg+dereg alone) */
    const char *what;     /* "hit", "miss", "shared", "private", "drop" ... */
    const char *asked;    /* the validation asked for */
    int mode;             /* regcache_validation_mode(); 0 n/a */
    const char *ledger;   /* the REGCACHE_LEDGER setting: "on", "off" */
    uint64_t entries, size;
    unsigned threads; /* 0: one thread, timed in samples */
    const char *unit; /* NULL: "ns", or "Mops/s" with threads; else a count's */
    double median, p99;
    char note[192];
    /* Every sample, in the order taken, each with its slot: its place in
     * the group's rounds (round, place in the block, arm), shared by the
     * rows measured interleaved with it, so that report.py can pair each
     * sample with its neighbour's (measure.c). */
    unsigned group;
    size_t nsamples;
    const double *samples;
    const size_t *slots;
};

/* One figure of an interleaved measurement: its row (threads 0: samples of
 * `ops` operations on the calling thread; else runs of that many threads)
 * and what is timed.  Arms may share a row, whose figure then pools their
 * samples: a series' one-thread row is run beside every other count. */
struct bench_arm {
    struct bench_row *row;
    const struct bench_op *op;
    unsigned ops;
    /* Operations of the sample thrown away before each block (0: ops): as
     * many as it takes to bring a large working set back into the caches
     * after the other arms' blocks. */
    unsigned warm_ops;
};
/* Measure the arms in rounds, each arm once per round in the given order
 * (bench.samples rounds, or bench.runs with threads), after warm-up rounds
 * that are thrown away; then emit each row once with its figure, or with an
 * "invalid:" note when an arm's check fails. */
void bench_interleave(const struct bench_arm *arms, size_t n);
/* The rows of ops[0..n) at every thread count (protos: their rows, threads
 * unset), all threads running one op at once: the one-thread run of an op
 * alternates with each of its other counts (1, 2, 1, 4, ...), every op in
 * turn within each round. */
void bench_series(const struct bench_row *protos, const struct bench_op *ops, size_t n);
/* Run first in every worker thread (the GPU context). */
extern void (*bench_thread_start)(void);

/* ---- cpus.c --------------------------------------------------------------- */

/* Plan where threads run and pin the calling (main) thread to the first CPU
 * of the plan; returns the physical cores among the allowed CPUs. */
int bench_cpus_plan(void);
/* Pin the calling worker thread, the index-th of its series. */
void bench_cpus_pin_worker(unsigned index);

/* ---- target.c ------------------------------------------------------------- */

/* What a timed loop expects of its cache: no call fails, and one counter
 * (a struct regcache_stats field) ends at `expect`.  The first member of
 * every op context that times a cache, so that bench_use_check serves all. */
struct bench_use {
    regcache_t *cache;
    size_t counter; /* offsetof(struct regcache_stats, ...) */
    uint64_t expect;
    _Atomic uint64_t failures;
    int error; /* the first failure's status */
};
void bench_get_put(struct bench_use *u, uintptr_t addr, size_t len);
/* Evicting get+puts (churn.c): `regions` regions from base walked in a
 * cycle, twice what the cache may keep, so that every get misses and
 * evicts once the cache is full.  An op's run. */
struct bench_cycle {
    struct bench_use use; /* counts misses: every get */
    uintptr_t base;
    size_t regions, next;
};
void bench_cycle_run(void *ctx, struct bench_lane *l, uint64_t n);
void bench_failed(struct bench_use *u, int status);
uint64_t bench_counter(const struct bench_use *u);
int bench_use_check(void *use, char *why, size_t len);
/* Get+put `regions` regions at base once, then expect the counter where it
 * is.  -1 and why unless the cache then holds them all. */
int bench_populate(struct bench_use *u, uintptr_t base, size_t regions, char *why, size_t len);
/* A cache holding `regions` regions of s, and op: random hits on it; set 0:
 * every thread hits them all, else each its own `set`.  op's context is t,
 * which stays where it is until bench_target_close. */
struct bench_target {
    struct bench_use use; /* counts misses: a hit loop has none */
    uintptr_t base;
    size_t regions, set;
    struct bench_op op;
};
/* Fills r's impl, asked, mode and entries; -1 (r emitted with a note) when
 * the cache cannot be had. */
int bench_target_open(struct bench_target *t, struct bench_row *r, const struct bench_src *s,
                      int validation, size_t regions, size_t set);
void bench_target_close(struct bench_target *t);
/* misses.c: the backend's reg+dereg alone, the cache's miss get+put and its
 * hit, interleaved, at one size, `ops` ranges per sample. */
void bench_miss_rows(struct bench_row *r, const struct bench_src *s, const struct bench_pinner *p,
                     size_t size, unsigned ops);

/* ---- json.c --------------------------------------------------------------- */

struct bench_machine {
    char cpu[128];
    long cores;
    int physical_cores;        /* the allowed CPUs' cores (workers fill them first) */
    char gpu[128], driver[64]; /* "" without a GPU */
    char ucx[32];              /* "" without UCX */
    /* The 1-minute load average before the first measurement: read at the
     * end, it counted the benchmark's own runs of 32 threads (4-6). */
    double load;
};
int bench_json_open(const char *path);
/* A validation mode as the rows name it ("TAG_CHECK"). */
const char *bench_mode_name(int validation);
void bench_emit(const struct bench_row *r);
/* r without a figure, its note saying why; a row without impl stands for
 * a part that did not run at all. */
void bench_note(struct bench_row *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int bench_json_close(const struct bench_machine *m);
/* A row of r's kind that is one count, not a time: `value` in `unit`, its
 * own median and p99 (host_ranges.c, host_merge.c). */
void bench_emit_count(const struct bench_row *r, const char *what, const char *unit, double value);
/* Write out what is buffered: before a fork whose child emits rows too (it
 * writes through the same file offset; the parent waits for it). */
void bench_json_flush(void);

/* ---- the workloads, one file each ----------------------------------------- */

void bench_hits(const struct bench_src *s);
void bench_threads(const struct bench_src *s);
void bench_churn(const struct bench_src *s);
void bench_invalidation(const struct bench_src *s);
void bench_misses(const struct bench_src *s);
void bench_pins(const struct bench_src *s, const struct bench_pinner *p);
void bench_linked(const struct bench_src *s);
/* prefetch.c: background registration (regcache_prefetch and the
 * non-blocking get). */
void bench_prefetch(const struct bench_src *s);
/* host_ranges.c: registrations and pinned bytes of random sub-range gets
 * over host mappings (counts, not times). */
void bench_host_ranges(void);
/* host_merge.c: registrations, pinned bytes and keys revoked by merges
 * under each params.host_merge, for a transport's neighbouring buffers
 * and for random sub-ranges (counts, not times). */
void bench_host_merge(void);
/* host_monitor.c: munmap+mmap of a watched and of an unwatched cached host
 * range, each way, without UCX and (in a child process) with UCX's memory
 * hooks live, and a host hit with the monitor on and off.  Before
 * bench_ucx_load(). */
void bench_host_monitor(void);
/* eager.c: the share of first gets of new allocations that hit with eager
 * registration (null: reported with regcache_notify_alloc; cuda: real
 * cuMemAlloc allocations, reported by the in-process interception). */
void bench_eager(const struct bench_src *s);
/* host_cache.c: a hit beside a cache that takes host memory and beside none. */
void bench_host_cache(const struct bench_src *s);
/* instructions.c: instructions per get+put, counted by the CPU or by
 * callgrind; and the loop a run under callgrind counts (`--count LOOP OPS`:
 * 0 and 1 the NOTIFY and TAG_CHECK hit, 2 the evicting get+put), its exit
 * status 0 when every operation did what it should. */
void bench_instructions(const struct bench_src *s);
int bench_instructions_child(int which, uint64_t ops);
/* leave_notice.c: how soon a leave notice arrives after an unmap of
 * watched host memory, per way, with no further call; UCX's events in a
 * child with UCX's memory hooks live.  Before bench_ucx_load(). */
void bench_leave_notice(void);
/* ucx.c: UCX's ucs_rcache beside regcache in the hits and threads rows.
 * bench_ucx_load: m's UCX version, or a skip when there is no UCX. */
struct bench_ucx;
void bench_ucx_load(struct bench_machine *m);
/* libucs loaded with its memory hooks live, as UCX runs by default (not
 * what bench_ucx_load does): NULL, or why not. */
const char *bench_ucx_hooks(void);
/* run() in a child process with UCX's memory hooks live; `skipped` noted
 * with why not where they cannot be.  Before bench_ucx_load(). */
void bench_beside_ucx_hooks(void (*run)(void), struct bench_row *skipped);
/* An rcache holding `regions` regions of s, and op: random hits on it, as
 * a regcache target's; NULL without UCX, or with r emitted with a note when
 * it cannot be had.  Fills r's impl and entries. */
struct bench_ucx *bench_ucx_open(struct bench_row *r, const struct bench_src *s, size_t regions,
                                 struct bench_op *op);
void bench_ucx_close(struct bench_ucx *u);
/* The GPU source and m's GPU fields; -1 (and a skip) without a GPU. */
int bench_cuda_open(struct bench_src *s, struct bench_machine *m);
/* The CUDA half of a dmabuf registration: SYNC_MEMOPS and export; close. */
extern const struct bench_pinner bench_dmabuf;

#endif
