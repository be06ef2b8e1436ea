/* The hit's skeleton (skeleton.h).  Its slot and shard lines are laid out
 * as the library's page index lays out its own (src/core/page_index.h). */
#include "skeleton.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "bench.h"

#define SHARDS 64
#define HOLDS 8
#define HASH 0x9e3779b97f4a7c15ull

struct slot {
    uintptr_t page, entry, start, end;
    uint64_t id, stamp;
} __attribute__((aligned(64)));

struct shard {
    _Atomic uint64_t seq; /* odd while a writer is inside */
    struct slot *table;
    unsigned mask;
} __attribute__((aligned(64)));

struct bench_skeleton {
    _Atomic uint64_t epoch;
    _Atomic unsigned flags;
    struct shard shards[SHARDS];
};

struct holder {
    _Atomic uintptr_t holds[HOLDS];
    unsigned hint;
};

static __thread struct holder *holder;

/* Called through a pointer, as the library calls a backend's query. */
static int (*volatile query)(void *, const void *, size_t,
                             struct regcache_mem_info *) = bench_null_query;

static inline void full_fence(void)
{
#if defined(__x86_64__)
    __asm__ __volatile__("lock orl $0, -64(%%rsp)" ::: "memory", "cc");
#else
    atomic_thread_fence(memory_order_seq_cst);
#endif
}

static inline struct shard *shard_of(struct bench_skeleton *s, uintptr_t page, uint64_t *h)
{
    *h = page * HASH;
    return &s->shards[*h >> 58];
}

static inline __attribute__((always_inline)) int
get(struct bench_skeleton *s, uintptr_t addr, size_t len, void **out, bool fence, bool tagged)
{
    struct holder *t = holder;
    if (!t)
        return -1;
    uintptr_t page = addr / BENCH_REGION, end = addr + len;
    uint64_t h;
    struct shard *sh = shard_of(s, page, &h);
    uint64_t seq = atomic_load_explicit(&sh->seq, memory_order_acquire);
    if (seq & 1)
        return -1;
    struct slot *sl;
    for (unsigned i = (unsigned)(h >> 29);; i++) {
        sl = &sh->table[i & sh->mask];
        if (!sl->entry)
            return -1;
        if (sl->page == page && addr >= sl->start && end <= sl->end)
            break;
    }
    _Atomic uintptr_t *hold = &t->holds[t->hint];
    if (atomic_load_explicit(hold, memory_order_relaxed))
        return -1;
    atomic_store_explicit(hold, sl->entry, memory_order_release);
    if (fence)
        full_fence();
    else
        atomic_signal_fence(memory_order_seq_cst);
    uint64_t stamp = sl->stamp, id = sl->id;
    if (atomic_load_explicit(&sh->seq, memory_order_relaxed) != seq ||
        stamp != atomic_load_explicit(&s->epoch, memory_order_relaxed)) {
        atomic_store_explicit(hold, 0, memory_order_relaxed);
        return -1;
    }
    *out = (void *)((uintptr_t)hold | 1);
    if (tagged) {
        struct regcache_mem_info info;
        info.buffer_id = 0;
        if (query(NULL, (const void *)addr, 1, &info) != 0 || info.buffer_id != id) {
            atomic_store_explicit(hold, 0, memory_order_relaxed);
            return -1;
        }
    }
    return 0;
}

static __attribute__((noinline)) int get_fenced(struct bench_skeleton *s, uintptr_t a, size_t n,
                                                void **out)
{
    return get(s, a, n, out, true, false);
}

static __attribute__((noinline)) int get_unfenced(struct bench_skeleton *s, uintptr_t a, size_t n,
                                                  void **out)
{
    return get(s, a, n, out, false, false);
}

static __attribute__((noinline)) int get_tagged(struct bench_skeleton *s, uintptr_t a, size_t n,
                                                void **out)
{
    return get(s, a, n, out, false, true);
}

/* A flag set would send the put to its slow turns: none here. */
static __attribute__((noinline, cold)) void flagged(void)
{
}

static __attribute__((noinline)) void put(struct bench_skeleton *s, void *h)
{
    _Atomic uintptr_t *hold = (_Atomic uintptr_t *)((uintptr_t)h & ~(uintptr_t)7);
    atomic_store_explicit(hold, 0, memory_order_release);
    atomic_signal_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&s->flags, memory_order_relaxed))
        flagged();
}

int (*volatile bench_skeleton_get[3])(struct bench_skeleton *, uintptr_t, size_t,
                                      void **) = { get_fenced, get_unfenced, get_tagged };
void (*volatile bench_skeleton_put)(struct bench_skeleton *, void *) = put;

void bench_skeleton_free(struct bench_skeleton *s)
{
    if (!s)
        return;
    for (int k = 0; k < SHARDS; k++)
        free(s->shards[k].table);
    free(s);
}

struct bench_skeleton *bench_skeleton_new(uintptr_t base, size_t n)
{
    /* At most a quarter full, as the library's tables below 16k pages. */
    unsigned cap = 64;
    while (cap < 4 * n / SHARDS)
        cap *= 2;
    struct bench_skeleton *s = aligned_alloc(64, sizeof(*s));
    if (!s)
        return NULL;
    *s = (struct bench_skeleton){ 0 };
    for (int k = 0; k < SHARDS; k++) {
        s->shards[k].mask = cap - 1;
        s->shards[k].table = aligned_alloc(64, cap * sizeof(struct slot));
        if (!s->shards[k].table) {
            bench_skeleton_free(s);
            return NULL;
        }
        for (unsigned j = 0; j < cap; j++)
            s->shards[k].table[j] = (struct slot){ 0 };
    }
    for (size_t r = 0; r < n; r++) {
        uintptr_t a = base + r * BENCH_REGION;
        uint64_t h;
        struct shard *sh = shard_of(s, a / BENCH_REGION, &h);
        unsigned i = (unsigned)(h >> 29);
        while (sh->table[i & sh->mask].entry)
            i++;
        struct regcache_mem_info info;
        bench_null_query(NULL, (void *)a, BENCH_GET, &info);
        /* The entry's address is never read: any non-zero, aligned word. */
        sh->table[i & sh->mask] =
            (struct slot){ a / BENCH_REGION, a | 64, a, a + BENCH_REGION, info.buffer_id, 0 };
    }
    static __thread struct holder mine;
    holder = &mine;
    return s;
}
