/* The benchmark harness's shared pieces: timing, the random address stream,
 * the "hit target" every cache under test is driven through, and the result
 * list that the table, the JSON file and the plots are printed from. */
#ifndef BENCH_H
#define BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "regcache.h"

/* ---- run settings -------------------------------------------------------- */

struct bench_opts {
    int quick;          /* --quick: fewer repetitions, smaller sizes */
    const char *json;   /* --json FILE, or NULL */
    const char *plot;   /* --plot DIR, or NULL */
    unsigned batches;   /* timed batches per hit figure */
    unsigned batch_ops; /* operations per timed batch */
    unsigned pin_reps;  /* repetitions per pin/unpin figure */
    double mt_seconds;  /* duration of one multi-threaded run */
    unsigned mt_runs;   /* runs per thread count */
};

#define BENCH_NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* ---- the goals the figures are judged against (from the issue) ---------- */

#define BENCH_GOAL_UCX_SPEEDUP 1.5   /* hit at 1, 1k, 100k entries vs UCX */
#define BENCH_GOAL_UCX_ENTRIES_MAX 100000
#define BENCH_GOAL_SCALING 10.0      /* 16 threads vs one thread ... */
#define BENCH_GOAL_SCALING_CORES 16  /* ... on a machine with this many cores */
#define BENCH_GOAL_UCX_MT 20.0       /* 16 threads vs UCX's 16 threads */
#define BENCH_GOAL_TAG_NS 20.0       /* TAG_CHECK hit over one BUFFER_ID query */
#define BENCH_GOAL_MISS_NS 1000.0    /* miss overhead beyond the backend */

/* The table sizes of workload 2 and the thread counts of workload 3, shared
 * by the CPU and the GPU rows (compare.c). */
extern const size_t bench_entry_counts[4];
extern const unsigned bench_thread_counts[5];
/* Workload 3's table: small enough to stay in the CPU caches, so the figure
 * is the cache's locking, not memory latency. */
#define BENCH_THREAD_ENTRIES 1000

/* ---- timing and statistics (stats.c) ------------------------------------- */

uint64_t bench_now_ns(void);

struct bench_summary {
    double median;
    double p99;
};

/* Median and 99th percentile (nearest rank) of v[0..n); sorts v. */
struct bench_summary bench_summarize(double *v, size_t n);

/* ---- the random address stream ------------------------------------------ */

/* Regions are REGION_SIZE apart; every get asks for one random 4 KiB page of
 * one random region (the UCX workload).  The generator is inlined in
 * each target's loop so that every cache pays the same few cycles for it. */
#define BENCH_REGION_SIZE ((size_t)65536)
#define BENCH_GET_SIZE ((size_t)4096)

static inline uint64_t bench_rand(uint64_t *state)
{
    uint64_t x = *state; /* xorshift64* */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static inline void *bench_pick(uintptr_t base, size_t regions, uint64_t *state)
{
    uint64_t r = bench_rand(state);
    uint64_t region = ((r >> 32) * regions) >> 32; /* regions < 2^32 */
    uint64_t page = r & (BENCH_REGION_SIZE / BENCH_GET_SIZE - 1);
    return (void *)(base + region * BENCH_REGION_SIZE + page * BENCH_GET_SIZE);
}

/* ---- the cache (or bare call) under test --------------------------------- */

/* A hit target runs `count` random get+put pairs on regions that are all
 * cached already; loop() must not fail (a miss or an error is counted by the
 * target and checked by check()). */
struct bench_target {
    const char *name;
    void *ctx;
    void (*loop)(void *ctx, uint64_t *rng, uint64_t count);
    /* 0 when every operation so far was a hit; else -1 and a message. */
    int (*check)(void *ctx, char *why, size_t why_len);
    void (*close)(void *ctx);
};

static inline void bench_target_close(struct bench_target *t)
{
    if (t->close)
        t->close(t->ctx);
}

/* Address space for `regions` regions: readable/writable anonymous memory
 * that is never touched (UCX checks the mapping's protection). */
struct bench_space {
    uintptr_t base;     /* region-aligned */
    size_t regions;
    uintptr_t unmap_at; /* the mapping itself */
    size_t bytes;
};
int bench_space_map(struct bench_space *s, size_t regions);
void bench_space_unmap(struct bench_space *s);

/* ---- results (results.c) ------------------------------------------------- */

/* NOT_JUDGED: the goal is set for another machine (e.g. 16 cores). */
enum bench_verdict { BENCH_MET = 1, BENCH_MISSED, BENCH_NOT_JUDGED };

#define BENCH_MAX_GOALS 2

struct bench_row {
    char section[16];   /* "pin", "entries", "threads", "churn", "notify", "ucx" */
    char name[96];      /* what was measured, e.g. "regcache HOOKS hit" */
    char impl[24];      /* "regcache", "ucx", "raw", "cuda" */
    char mode[24];      /* "TAG_CHECK", "HOOKS", "" */
    uint64_t size;      /* bytes, 0 if not a per-size row */
    uint64_t entries;   /* cached entries, 0 if n/a */
    unsigned threads;   /* 0 if n/a */
    double median_ns;   /* per operation; < 0 if n/a */
    double p99_ns;
    double mops;        /* aggregate Mops/s, median of runs; < 0 if n/a */
    double mops_low;    /* its slowest 1% (nearest rank) */
    double derived;     /* a figure computed from others (a speed-up, a
                           ratio to UCX, a penalty); < 0 if n/a */
    char derived_what[48]; /* what it is, e.g. "x faster than UCX" */
    struct {
        char text[112]; /* the goal and the measured value against it */
        enum bench_verdict verdict;
    } goal[BENCH_MAX_GOALS];
    unsigned goals;
    char note[256];
};

/* A new zeroed row with every figure marked n/a; never NULL (exits when
 * memory runs out: the harness cannot report without it). */
struct bench_row *bench_row_add(const char *section, const char *name);
size_t bench_row_count(void);
struct bench_row *bench_row_at(size_t i);
/* The first row matching section, impl, mode, entries, threads and size
 * (mode NULL matches any), or NULL. */
struct bench_row *bench_row_find(const char *section, const char *impl,
                                 const char *mode, uint64_t entries,
                                 unsigned threads, uint64_t size);
/* Attach a goal (printf-style text) and its verdict to a row. */
void bench_row_goal(struct bench_row *row, enum bench_verdict verdict,
                    const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Things not measured, and why. */
void bench_skip(const char *what, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
size_t bench_skip_count(void);
const char *bench_skip_what(size_t i);
const char *bench_skip_why(size_t i);

/* ---- the machine (machine.c) --------------------------------------------- */

struct bench_machine {
    char cpu[128];
    long cores;
    char gpu[128];    /* "" without a GPU */
    char driver[64];  /* "" without a GPU */
    char regcache_version[32];
    char ucx_version[32]; /* "" without UCX */
    double load;          /* 1-minute load average at start; < 0 unknown */
};
void bench_machine_read(struct bench_machine *m);

/* ---- output (report.c, plot.c) ------------------------------------------- */

/* "64 KiB", "1 GiB"; "1", "1k", "100k", "1M". */
const char *bench_bytes_label(char *buf, size_t len, uint64_t b);
const char *bench_count_label(char *buf, size_t len, uint64_t n);

void bench_print_table(const struct bench_machine *m,
                       const struct bench_opts *o);
int bench_write_json(const char *path, const struct bench_machine *m,
                     const struct bench_opts *o);
int bench_write_plots(const char *dir);

/* ---- hit-path measurements shared by every target (hitrun.c) ------------- */

/* Median/p99 ns per get+put over o->batches batches of o->batch_ops, after a
 * warm-up.  Returns -1 (and a message) if the target saw a miss or error. */
int bench_hit_cost(const struct bench_target *t, const struct bench_opts *o,
                   struct bench_summary *ns, char *why, size_t why_len);

/* The same two, filling a row: its figures, or "invalid: why" in its note.
 * bench_measure_threads runs r->threads threads. */
void bench_measure_hit(struct bench_row *r, const struct bench_target *t,
                       const struct bench_opts *o);
void bench_measure_threads(struct bench_row *r, const struct bench_target *t,
                           const struct bench_opts *o);
/* bench_measure_threads, then the speed-up over the one-thread row of the
 * same series: *one holds that row's Mops/s (the series starts at 1). */
void bench_measure_scaling(struct bench_row *r, const struct bench_target *t,
                           const struct bench_opts *o, double *one);

/* Aggregate Mops/s of `threads` threads hitting t at once over o->mt_runs
 * runs: the median, and in .p99 the slow tail (1st percentile of
 * throughput).  Returns -1 (and a message) on a miss or error. */
int bench_hit_threads(const struct bench_target *t, const struct bench_opts *o,
                      unsigned threads, struct bench_summary *mops, char *why,
                      size_t why_len);

/* ---- the parts ----------------------------------------------------------- */

/* regcache with the null backend on the CPU (regcache_side.c): reg hands
 * out a token, dereg does nothing, and the query callback reports every
 * address as GPU memory of device 0 in allocations of `granule` bytes (the
 * aligned block around it) with one fixed buffer id. */
enum bench_rc_mode { BENCH_TAG_CHECK, BENCH_HOOKS };
/* reg and dereg alone (no query): with it the cache asks the CUDA driver. */
extern const struct regcache_backend bench_null_backend;
const char *bench_rc_mode_name(enum bench_rc_mode mode);

struct bench_rc {
    regcache_t *cache;
    struct regcache_backend backend;
    size_t granule;
};
/* Limits of 0 mean none.  Returns a regcache status. */
int bench_rc_create(struct bench_rc *rc, enum bench_rc_mode mode,
                    size_t granule, size_t max_bytes, size_t max_entries);
void bench_rc_destroy(struct bench_rc *rc);

/* A target over every region of s, all cached by the time it returns.  On
 * error returns -1 and fills why. */
int bench_rc_target(struct bench_target *t, const struct bench_space *s,
                    enum bench_rc_mode mode, char *why, size_t why_len);
/* The same, but each thread stays in a private slice of the regions (the
 * first thread to run takes the first slice, and so on). */
int bench_rc_private_target(struct bench_target *t, const struct bench_space *s,
                            enum bench_rc_mode mode, char *why, size_t why_len);
/* The same target around a cache made elsewhere (the real CUDA one); the
 * target does not own the cache. */
int bench_rc_target_on(struct bench_target *t, regcache_t *cache,
                       const struct bench_space *s, char *why, size_t why_len);
/* The trivial query callback alone, over the same addresses. */
void bench_query_target(struct bench_target *t, const struct bench_space *s);

/* The workloads on regcache alone (workloads.c). */
/* Miss (first get+put) and hit rows for one size on `cache`, named with
 * `label`, with the goals; raw_pin_ns / raw_total_ns are the backend alone
 * (< 0: none). */
void bench_pin_rows(const char *impl, const char *label, regcache_t *cache,
                    void *addr, size_t size, const struct bench_opts *o,
                    double raw_pin_ns, double raw_total_ns);
void bench_pin_sizes(const struct bench_opts *o);
void bench_churn(const struct bench_opts *o);
void bench_notify(const struct bench_opts *o);
/* Workloads 2 and 3 for regcache and, when built with it, UCX. */
void bench_entries_and_threads(const struct bench_opts *o, long cores);

/* UCX's ucs_rcache (ucx_rcache.c, only with UCX; ucx_missing.c otherwise). */
int bench_ucx_available(char *why, size_t why_len);
int bench_ucx_target(struct bench_target *t, const struct bench_space *s,
                     char *why, size_t why_len);

/* Real verbs registration when an RDMA device exists (verbs_side.c). */
void bench_verbs_pin(const struct bench_opts *o);

/* The real CUDA rows (cuda_side.c): 0 when no GPU (and a skip recorded). */
int bench_cuda_run(const struct bench_opts *o, struct bench_machine *m);

/* Per-size list shared by the CPU and GPU pin rows. */
size_t bench_pin_size_list(const struct bench_opts *o, const size_t **sizes);

#endif
