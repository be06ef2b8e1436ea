/* What each params.host_merge costs, in counts: registrations made, the
 * peak of registered bytes, and the keys that merges revoked, for two
 * shapes of use of pageable host memory over the null registration.
 *
 *   transport   a transport's buffers: four 2 MiB mappings, each cut into
 *               buffers of 8 to 72 KiB one after another (as an allocator
 *               packs them), each a send buffer (remote read) or a receive
 *               buffer (local and remote write).  4000 gets, each of one
 *               buffer with its access, mostly a neighbour of the last one,
 *               eight in flight (put oldest first).  on_register counts
 *               each key advertised, on_leave each key revoked.
 *   sub-ranges  host_ranges' 400 gets of random sub-ranges (1 B to 1 MiB)
 *               over two 16 MiB mappings, no callbacks.
 *
 * Rows: "<shape> <figure> <policy>", the policy one of off, same_access,
 * all, and auto as it resolves for the shape (off for the transport, whose
 * cache has callbacks; all for the sub-ranges). */
#include "bench.h"

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#define MAPPINGS 4
#define MAPPING ((size_t)2 << 20)
#define MAX_BUFFERS 1024
#define GETS 4000
#define IN_FLIGHT 8
#define SEND IBV_ACCESS_REMOTE_READ
#define RECV (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

#define SUB_MAPPING ((size_t)16 << 20)
#define SUB_GETS 400

struct buffer {
    char *addr;
    size_t len;
    int access;
};

/* What the transport's callbacks saw. */
struct keys {
    uint64_t advertised, revoked, revoked_by_merge;
};

static int advertise(void *arg, regcache_entry_t *entry, unsigned rail, void *handle, void *priv)
{
    struct keys *k = arg;
    (void)entry, (void)rail, (void)handle, (void)priv;
    k->advertised++;
    return 0;
}

static void revoke(void *arg, const struct regcache_leave *l)
{
    struct keys *k = arg;
    if (l->reason == REGCACHE_REASON_DESTROY)
        return;
    k->revoked++;
    k->revoked_by_merge += l->reason == REGCACHE_REASON_MERGED;
}

static uint64_t next(uint64_t *rng)
{
    *rng ^= *rng << 13, *rng ^= *rng >> 7, *rng ^= *rng << 17;
    return *rng;
}

/* The mappings cut into buffers; how many. */
static size_t cut(char *const map[MAPPINGS], struct buffer *b)
{
    uint64_t rng = 0x2545f4914f6cdd1dull;
    size_t n = 0;
    for (int m = 0; m < MAPPINGS; m++)
        for (size_t off = 0; n < MAX_BUFFERS;) {
            size_t len = (8 + next(&rng) % 65) << 10;
            if (off + len > MAPPING)
                break;
            b[n++] = (struct buffer){ map[m] + off, len, next(&rng) & 1 ? SEND : RECV };
            off += len;
        }
    return n;
}

static regcache_t *cache(struct bench_row *r, int merge, struct keys *k)
{
    struct regcache_params p;
    bench_host_params(&p, 0, REGCACHE_HOST_MONITOR_AUTO);
    p.host_merge = merge;
    if (k) {
        p.on_register = advertise;
        p.on_leave = revoke;
        p.callback_arg = k;
    }
    regcache_t *c;
    int st = regcache_create(&p, &c);
    if (st == REGCACHE_OK)
        return c;
    bench_note(r, "regcache_create: %s (%s)", regcache_strerror(st), regcache_last_error());
    bench_emit(r);
    return NULL;
}

static int failed(struct bench_row *r, regcache_t *c, int i, int st)
{
    bench_note(r, "invalid: get %d: %s (%s)", i, regcache_strerror(st), regcache_last_error());
    bench_emit(r);
    regcache_destroy(c);
    return -1;
}

static void emit(struct bench_row *r, const char *shape, const char *figure, const char *policy,
                 const char *unit, double value)
{
    char what[96];
    snprintf(what, sizeof what, "%s %s %s", shape, figure, policy);
    bench_emit_count(r, what, unit, value);
}

static void transport(const struct buffer *b, size_t n, int merge, const char *policy)
{
    struct bench_row r = {
        .workload = "host_merge", .source = "null", .impl = "regcache", .size = 65536
    };
    struct keys k = { 0 };
    regcache_t *c = cache(&r, merge, &k);
    if (!c)
        return;
    regcache_entry_t *flight[IN_FLIGHT] = { 0 };
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    size_t at = 0;
    for (int i = 0; i < GETS; i++) {
        uint64_t x = next(&rng);
        /* Mostly a neighbour of the last buffer, now and then anywhere. */
        at = x % 4 ? (at + n + (x >> 8) % 3 - 1) % n : (x >> 8) % n;
        regcache_entry_t **slot = &flight[i % IN_FLIGHT];
        regcache_put(c, *slot);
        int st = regcache_get_access(c, 0, b[at].addr, b[at].len, b[at].access, 0, slot);
        if (st != REGCACHE_OK)
            return (void)failed(&r, c, i, st);
    }
    for (int i = 0; i < IN_FLIGHT; i++)
        regcache_put(c, flight[i]);
    struct regcache_stats s;
    regcache_get_stats(c, &s);
    emit(&r, "transport", "registrations", policy, "count", (double)s.registrations);
    emit(&r, "transport", "pinned_peak", policy, "MiB", (double)s.peak_bytes / (1 << 20));
    emit(&r, "transport", "revoked_by_merges", policy, "keys", (double)k.revoked_by_merge);
    emit(&r, "transport", "revoked", policy, "keys", (double)k.revoked);
    regcache_destroy(c);
}

static void sub_ranges(char *const map[2], int merge, const char *policy)
{
    struct bench_row r = {
        .workload = "host_merge", .source = "null", .impl = "regcache", .size = 65536
    };
    regcache_t *c = cache(&r, merge, NULL);
    if (!c)
        return;
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < SUB_GETS; i++) {
        uint64_t x = next(&rng);
        size_t len = 1 + (size_t)(x >> 40) % ((size_t)1 << 20);
        size_t off = (size_t)(x & 0xffffffu) % (SUB_MAPPING - len);
        regcache_entry_t *e;
        int st = regcache_get(c, map[i & 1] + off, len, &e);
        if (st != REGCACHE_OK)
            return (void)failed(&r, c, i, st);
        regcache_put(c, e);
    }
    struct regcache_stats s;
    regcache_get_stats(c, &s);
    emit(&r, "sub-ranges", "registrations", policy, "count", (double)s.registrations);
    emit(&r, "sub-ranges", "pinned_peak", policy, "MiB", (double)s.peak_bytes / (1 << 20));
    emit(&r, "sub-ranges", "merged", policy, "entries", (double)s.leaves[REGCACHE_REASON_MERGED]);
    regcache_destroy(c);
}

static const struct {
    int merge;
    const char *name;
} policies[] = {
    { REGCACHE_HOST_MERGE_OFF, "off" },
    { REGCACHE_HOST_MERGE_SAME_ACCESS, "same_access" },
    { REGCACHE_HOST_MERGE_ALL, "all" },
    { REGCACHE_HOST_MERGE_AUTO, "auto" },
};

static char *map_or_skip(size_t len)
{
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED)
        return p;
    struct bench_row r = { .workload = "host_merge", .source = "null" };
    bench_note(&r, "cannot map %zu bytes", len);
    bench_emit(&r);
    return NULL;
}

void bench_host_merge(void)
{
    char *map[MAPPINGS] = { 0 }, *sub[2] = { 0 };
    static struct buffer b[MAX_BUFFERS];
    bool ok = true;
    for (int m = 0; m < MAPPINGS && ok; m++)
        ok = (map[m] = map_or_skip(MAPPING)) != NULL;
    for (int m = 0; m < 2 && ok; m++)
        ok = (sub[m] = map_or_skip(SUB_MAPPING)) != NULL;
    if (ok) {
        size_t n = cut(map, b);
        for (size_t i = 0; i < BENCH_NELEM(policies); i++) {
            transport(b, n, policies[i].merge, policies[i].name);
            sub_ranges(sub, policies[i].merge, policies[i].name);
        }
    }
    for (int m = 0; m < MAPPINGS; m++)
        if (map[m])
            munmap(map[m], MAPPING);
    for (int m = 0; m < 2; m++)
        if (sub[m])
            munmap(sub[m], SUB_MAPPING);
}
