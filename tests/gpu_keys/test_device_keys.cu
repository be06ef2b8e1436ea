// Device key tables on a real GPU, with the counting backend (keys_backend.h):
//
//   test_device_keys race hooks|tag [STEPS]   many warps look up random
//       buffers in hold sections while the host frees and reallocates them
//       (stream-ordered pool, STEPS times, default 3000) and a small budget
//       evicts; every key checked against the registrations' logged lives:
//       0 stale, 0 wrong.  Sections that hold_begin tells to confirm (a
//       removal on its way to the table) confirm each key first; how many
//       were told, and how many keys the confirm refused, is printed.  "hooks" runs under the
//       preload hook (validation AUTO must resolve to HOOKS); "tag" is a TAG_CHECK cache whose
//       frees the in-process interception that attach installs reports.
//   test_device_keys agree            1M kernel lookups over 10k packed
//       cudaMalloc buffers give the keys host gets give.
//   test_device_keys ring sync|copy|free   first-touch kernels (on the
//       legacy default stream) over buffers never registered complete
//       through the ring, one post per warp, and the keys the answers carry
//       are current in hold sections.  What the host thread does meanwhile:
//       cudaDeviceSynchronize (sync); a synchronous copy of the kernel's
//       result into pageable memory (copy), which waits for the kernel; a
//       cudaFree of another buffer (free), which waits for the device.  A
//       kernel waits a bounded time, so that a host that cannot answer
//       shows as misses, not as a hang.
//
// Each prints its figures and the table's (where a miss's time went on the
// host) and exits 0, 1 (a check failed) or 77 (no GPU).
#include <algorithm>
#include <string.h>
#include <time.h>
#include <vector>

#include "keys_backend.h"
#include "regcache_device.h"

static __device__ __forceinline__ unsigned long long sys_load(const unsigned long long *p)
{
    unsigned long long v;
    asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

static __device__ __forceinline__ uint32_t rnd(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* ------------------------------------------------------------------------ */
/* race                                                                      */
/* ------------------------------------------------------------------------ */

struct use {
    uint32_t lkey;
    uint32_t buffer;
    unsigned long long addr, t0, t1, used;
};

#define PER_SECTION 4

/* count[]: uses logged, sections told to confirm, keys the confirm refused. */
enum { LOGGED, CONFIRMING, REFUSED, COUNTS };

__global__ void race_kernel(regcache_device_table t, const unsigned long long *addrs,
                            const unsigned long long *sizes, int nbuf,
                            const unsigned long long *tick, const unsigned long long *stop,
                            use *log, unsigned long long cap, unsigned long long *count)
{
    if ((threadIdx.x & 31) != 0)
        return;
    unsigned slot = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    uint32_t seed = 0x9e3779b9u ^ (slot * 2654435761u);
    while (!sys_load(stop)) {
        int confirm = regcache_device_hold_begin(&t, slot);
        if (confirm)
            atomicAdd(&count[CONFIRMING], 1ull);
        unsigned long long mine[PER_SECTION];
        int n = 0;
        for (int j = 0; j < PER_SECTION; j++) {
            int b = (int)(rnd(&seed) % (uint32_t)nbuf);
            unsigned long long base = sys_load(&addrs[b]), size = sys_load(&sizes[b]);
            if (!base)
                continue;
            unsigned long long addr = base + rnd(&seed) % size;
            regcache_device_key key;
            unsigned long long t0 = sys_load(tick);
            int rc = regcache_device_lookup(&t, (const void *)addr, 1, 0, &key);
            unsigned long long t1 = sys_load(tick);
            if (rc != REGCACHE_DEVICE_HIT)
                continue;
            if (confirm && !regcache_device_confirm(&t, &key)) {
                atomicAdd(&count[REFUSED], 1ull);
                continue;
            }
            unsigned long long i = atomicAdd(&count[LOGGED], 1ull);
            if (i >= cap)
                break;
            log[i] = use{ key.lkey, (uint32_t)b, addr, t0, t1, 0 };
            mine[n++] = i;
        }
        unsigned long long used = sys_load(tick);
        for (int j = 0; j < n; j++)
            log[mine[j]].used = used;
        regcache_device_hold_end(&t, slot);
    }
}

struct alloc_life {
    uintptr_t base;
    size_t size;
    unsigned long long id;
    uint64_t from, until;
};

static int race(const char *how, int churn)
{
    bool tag = !strcmp(how, "tag");
    const int nbuf = 64, blocks = 132, threads = 128;
    regcache_device_keys_params kp;
    regcache_device_keys_params_init(&kp);
    kp.hold_slots = blocks * threads / 32;
    kp.poll_ns = 20000;
    regcache_device_table t;
    regcache_t *c =
        kb_cache(tag ? REGCACHE_VALIDATE_TAG_CHECK : REGCACHE_VALIDATE_AUTO, nbuf / 2, &kp, &t);
    int mode = regcache_validation_mode(c);
    printf("race %s: validation %s (%s)\n", how,
           mode == REGCACHE_VALIDATE_HOOKS ? "HOOKS" : "TAG_CHECK", regcache_validation_reason(c));
    if (!tag && mode != REGCACHE_VALIDATE_HOOKS) {
        printf("FAIL: the preload hook should make AUTO resolve to HOOKS\n");
        return 1;
    }
    cudaStream_t s, ks;
    KB_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    KB_CHECK(cudaStreamCreateWithFlags(&ks, cudaStreamNonBlocking));
    unsigned long long *addrs, *sizes, *stop, *count;
    KB_CHECK(cudaHostAlloc((void **)&addrs, nbuf * 8, cudaHostAllocMapped));
    KB_CHECK(cudaHostAlloc((void **)&sizes, nbuf * 8, cudaHostAllocMapped));
    KB_CHECK(cudaHostAlloc((void **)&stop, 64, cudaHostAllocMapped));
    KB_CHECK(cudaMalloc((void **)&count, COUNTS * 8));
    KB_CHECK(cudaMemset(count, 0, COUNTS * 8));
    *stop = 0;
    std::vector<alloc_life> allocs;
    uint32_t seed = 12345;
    auto next = [&]() {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        return seed;
    };
    std::vector<size_t> index(nbuf);
    kb_enter("allocate and register");
    for (int b = 0; b < nbuf; b++) {
        size_t size = (size_t)(64 + next() % 960) << 10;
        void *p;
        KB_CHECK(cudaMallocAsync(&p, size, s));
        KB_CHECK(cudaStreamSynchronize(s));
        index[b] = allocs.size();
        allocs.push_back({ (uintptr_t)p, size, kb_buffer_id((uintptr_t)p), kb_now(), UINT64_MAX });
        sizes[b] = size;
        addrs[b] = (uintptr_t)p;
        kb_host_key(c, (uintptr_t)p, 64);
    }
    kb_enter("sync");
    KB_OK(regcache_device_keys_sync(c, 0));
    const unsigned long long cap = 1ull << 21;
    use *log;
    KB_CHECK(cudaMalloc(&log, cap * sizeof(use)));
    race_kernel<<<blocks, threads, 0, ks>>>(t, addrs, sizes, nbuf, kb.dtick, stop, log, cap, count);
    KB_CHECK(cudaGetLastError());
    kb_enter("churn beside the kernel");
    int reallocs = 0;
    for (int i = 0; i < churn; i++) {
        kb_step = i;
        int b = (int)(next() % nbuf);
        alloc_life &old = allocs[index[b]];
        if (next() % 2 == 0) {
            KB_CHECK(cudaFreeAsync((void *)old.base, s));
            old.until = kb_now();
            void *p;
            KB_CHECK(cudaMallocAsync(&p, old.size, s));
            KB_CHECK(cudaStreamSynchronize(s));
            index[b] = allocs.size();
            allocs.push_back(
                { (uintptr_t)p, old.size, kb_buffer_id((uintptr_t)p), kb_now(), UINT64_MAX });
            __atomic_store_n(&addrs[b], (unsigned long long)(uintptr_t)p, __ATOMIC_RELEASE);
            reallocs++;
        }
        const alloc_life &now = allocs[index[b]];
        kb_host_key(c, now.base + next() % now.size, 64);
        /* A step at most every 100 us, five of the writer's polls: what a
         * step changed mostly lands before the next, as in an application
         * that frees at a few kHz, so that the kernel's sections meet a
         * current table between removals and use enough keys to check.  At
         * full speed (the host waits for no GPU work) nearly every section
         * would meet records still being removed, and its keys be refused. */
        struct timespec pace = { 0, 100000 };
        nanosleep(&pace, NULL);
    }
    __atomic_store_n(stop, 1ull, __ATOMIC_RELEASE);
    kb_enter("stopping the kernel");
    KB_CHECK(cudaStreamSynchronize(ks));
    struct regcache_device_keys_stats ks_stats;
    KB_OK(regcache_device_keys_stats(c, 0, &ks_stats));
    kb_table_line(c, "race");
    kb_enter("destroy");
    kb_destroy(c); // every life ends
    kb_enter("check");
    unsigned long long counts[COUNTS];
    KB_CHECK(cudaMemcpy(counts, count, sizeof counts, cudaMemcpyDeviceToHost));
    unsigned long long n = std::min(counts[LOGGED], cap);
    std::vector<use> uses(n);
    KB_CHECK(cudaMemcpy(uses.data(), log, n * sizeof(use), cudaMemcpyDeviceToHost));
    // The allocations by base: those holding an address start at most
    // 1 MiB before it.
    std::sort(allocs.begin(), allocs.end(),
              [](const alloc_life &x, const alloc_life &y) { return x.base < y.base; });
    long stale = 0, wrong = 0;
    for (const use &u : uses) {
        const kb_life &l = kb.lives[u.lkey < KB_MAX_REGS ? u.lkey : 0];
        bool ok = u.lkey && u.lkey < KB_MAX_REGS && l.made && u.addr >= l.start &&
                  u.addr < l.start + l.len;
        bool id_then = false;
        auto first = std::lower_bound(
            allocs.begin(), allocs.end(), u.addr - std::min(u.addr, (unsigned long long)(1 << 20)),
            [](const alloc_life &x, unsigned long long v) { return x.base < v; });
        for (auto a = first; a != allocs.end() && a->base <= u.addr; ++a)
            if (u.addr < a->base + a->size && a->id == l.id && a->from <= u.t1 && a->until >= u.t0)
                id_then = true;
        if (!ok || !id_then) {
            if (wrong++ < 5)
                printf("wrong: key %u at %#llx, lookup in [%llu, %llu]\n", u.lkey, u.addr, u.t0,
                       u.t1);
        } else if (l.gone < u.used) {
            if (stale++ < 5)
                printf("stale: key %u deregistered at %llu, used until %llu\n", u.lkey,
                       (unsigned long long)l.gone, u.used);
        }
    }
    printf("race %s: kernel lookups hit %llu, reallocations %d, registrations %u, removed %llu, "
           "drains %llu (max %.1f us, timeouts %llu), sections told to confirm %llu, keys "
           "refused %llu, stale %ld, wrong %ld\n",
           how, n, reallocs, kb.serials, (unsigned long long)ks_stats.removed,
           (unsigned long long)ks_stats.drains, ks_stats.drain_ns_max / 1e3,
           (unsigned long long)ks_stats.drain_timeouts, counts[CONFIRMING], counts[REFUSED], stale,
           wrong);
    return stale || wrong || n == 0 || reallocs == 0;
}

/* ------------------------------------------------------------------------ */
/* agree                                                                     */
/* ------------------------------------------------------------------------ */

__global__ void lookup_kernel(regcache_device_table t, const unsigned long long *addrs, size_t n,
                              uint32_t *lkeys, unsigned long long *bytes)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        regcache_device_key key;
        bool hit =
            regcache_device_lookup(&t, (const void *)addrs[i], 1, 0, &key) == REGCACHE_DEVICE_HIT;
        lkeys[i] = hit ? key.lkey : 0;
        bytes[i] = hit ? key.bytes : 0;
    }
}

static int agree(void)
{
    const int nbuf = 10000;
    const size_t n = 1000000;
    regcache_device_keys_params kp;
    regcache_device_keys_params_init(&kp);
    regcache_device_table t;
    regcache_t *c = kb_cache(REGCACHE_VALIDATE_AUTO, 0, &kp, &t);
    std::vector<uintptr_t> base(nbuf);
    std::vector<size_t> size(nbuf);
    uint32_t seed = 777;
    auto next = [&]() {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        return seed;
    };
    kb_enter("allocate and register");
    for (int b = 0; b < nbuf; b++) {
        kb_step = b;
        size[b] = 256 + next() % (256 << 10); // many packed into shared pages
        void *p;
        KB_CHECK(cudaMalloc(&p, size[b]));
        base[b] = (uintptr_t)p;
        if (!kb_host_key(c, base[b], 1)) {
            printf("FAIL: host get of buffer %d\n", b);
            return 1;
        }
    }
    KB_OK(regcache_device_keys_sync(c, 0));
    std::vector<unsigned long long> addrs(n);
    std::vector<int> owner(n);
    for (size_t i = 0; i < n; i++) {
        owner[i] = (int)(next() % nbuf);
        addrs[i] = base[owner[i]] + next() % size[owner[i]];
    }
    unsigned long long *daddrs, *dbytes;
    uint32_t *dkeys;
    KB_CHECK(cudaMalloc(&daddrs, n * 8));
    KB_CHECK(cudaMalloc(&dbytes, n * 8));
    KB_CHECK(cudaMalloc(&dkeys, n * 4));
    KB_CHECK(cudaMemcpy(daddrs, addrs.data(), n * 8, cudaMemcpyHostToDevice));
    kb_enter("kernel lookups");
    lookup_kernel<<<264, 256>>>(t, daddrs, n, dkeys, dbytes);
    KB_CHECK(cudaDeviceSynchronize());
    std::vector<uint32_t> keys(n);
    std::vector<unsigned long long> bytes(n);
    KB_CHECK(cudaMemcpy(keys.data(), dkeys, n * 4, cudaMemcpyDeviceToHost));
    KB_CHECK(cudaMemcpy(bytes.data(), dbytes, n * 8, cudaMemcpyDeviceToHost));
    kb_enter("host gets to compare");
    long hits = 0, same = 0, beyond = 0;
    for (size_t i = 0; i < n; i++) {
        if (!keys[i])
            continue;
        hits++;
        same += keys[i] == kb_host_key(c, addrs[i], 1);
        beyond += addrs[i] + bytes[i] > base[owner[i]] + size[owner[i]];
    }
    struct regcache_device_keys_stats st;
    KB_OK(regcache_device_keys_stats(c, 0, &st));
    printf("agree: %zu lookups over %d buffers: hits %ld, same key as the host %ld, "
           "reaching past their buffer %ld; table records %llu, unmirrored %llu\n",
           n, nbuf, hits, same, beyond, (unsigned long long)st.records,
           (unsigned long long)st.unmirrored);
    kb_destroy(c);
    return hits != (long)n || same != hits || beyond != 0;
}

/* ------------------------------------------------------------------------ */
/* ring                                                                      */
/* ------------------------------------------------------------------------ */

// Each warp asks for its own buffer (lane l at l * 64 bytes, lane 0's range
// posted for all), then checks the key in a hold section of its own.
__global__ void first_touch_kernel(regcache_device_table t, const unsigned long long *bufs,
                                   unsigned long long max_polls, uint32_t *lkeys,
                                   unsigned long long *ns, int *current)
{
    unsigned w = blockIdx.x, lane = threadIdx.x;
    unsigned long long t0, t1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    regcache_device_key key;
    int rc =
        regcache_device_get_key(&t, (const void *)(bufs[w] + lane * 64), 64, 0, max_polls, &key);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    lkeys[w * 32 + lane] = rc == REGCACHE_DEVICE_HIT ? key.lkey : 0;
    if (lane == 0)
        ns[w] = t1 - t0;
    __syncwarp();
    int confirm = 0;
    if (lane == 0)
        confirm = regcache_device_hold_begin(&t, w);
    confirm = __shfl_sync(0xffffffffu, confirm, 0);
    current[w * 32 + lane] =
        rc == REGCACHE_DEVICE_HIT &&
        (confirm ? regcache_device_confirm(&t, &key) : regcache_device_key_current(&t, &key));
    __syncwarp();
    if (lane == 0)
        regcache_device_hold_end(&t, w);
}

static int ring(const char *how)
{
    const int warps = 256;
    bool copy = !strcmp(how, "copy"), free_one = !strcmp(how, "free");
    if (!copy && !free_one && strcmp(how, "sync")) {
        printf("unknown ring way %s\n", how);
        return 2;
    }
    regcache_device_keys_params kp;
    regcache_device_keys_params_init(&kp);
    kp.poll_ns = 20000;
    regcache_device_table t;
    regcache_t *c = kb_cache(REGCACHE_VALIDATE_AUTO, 0, &kp, &t);
    std::vector<unsigned long long> bufs(warps);
    for (int w = 0; w < warps; w++) {
        void *p;
        KB_CHECK(cudaMalloc(&p, 1 << 20));
        bufs[w] = (uintptr_t)p;
    }
    void *other;
    KB_CHECK(cudaMalloc(&other, 1 << 20));
    unsigned long long *dbufs, *dns;
    uint32_t *dkeys;
    int *dcurrent;
    KB_CHECK(cudaMalloc(&dbufs, warps * 8));
    KB_CHECK(cudaMalloc(&dns, warps * 8));
    KB_CHECK(cudaMalloc(&dkeys, warps * 32 * 4));
    KB_CHECK(cudaMalloc(&dcurrent, warps * 32 * 4));
    KB_CHECK(cudaMemcpy(dbufs, bufs.data(), warps * 8, cudaMemcpyHostToDevice));
    std::vector<uint32_t> keys(warps * 32);
    std::vector<int> current(warps * 32);
    std::vector<unsigned long long> ns(warps);
    kb_enter("first-touch kernel");
    uint64_t t0 = kb_clock_ns();
    // About two seconds of polls at most: a host that cannot answer shows
    // as misses.
    first_touch_kernel<<<warps, 32>>>(t, dbufs, 1ull << 21, dkeys, dns, dcurrent);
    KB_CHECK(cudaGetLastError());
    if (copy) {
        kb_enter("synchronous copy behind the kernel");
        KB_CHECK(cudaMemcpy(keys.data(), dkeys, keys.size() * 4, cudaMemcpyDeviceToHost));
    } else if (free_one) {
        kb_enter("cudaFree beside the kernel");
        KB_CHECK(cudaFree(other));
        other = NULL;
    }
    kb_enter("sync");
    KB_CHECK(cudaDeviceSynchronize());
    double host_ms = (kb_clock_ns() - t0) / 1e6;
    kb_enter("check");
    KB_CHECK(cudaMemcpy(keys.data(), dkeys, keys.size() * 4, cudaMemcpyDeviceToHost));
    KB_CHECK(cudaMemcpy(current.data(), dcurrent, current.size() * 4, cudaMemcpyDeviceToHost));
    KB_CHECK(cudaMemcpy(ns.data(), dns, warps * 8, cudaMemcpyDeviceToHost));
    long same = 0, cur = 0;
    for (int w = 0; w < warps; w++)
        for (int l = 0; l < 32; l++) {
            same += keys[w * 32 + l] && keys[w * 32 + l] == kb_host_key(c, bufs[w] + l * 64, 64);
            cur += current[w * 32 + l];
        }
    struct regcache_device_keys_stats st;
    KB_OK(regcache_device_keys_stats(c, 0, &st));
    std::sort(ns.begin(), ns.end());
    printf("ring %s: %d warps touching a buffer never registered: keys as the host's %ld of %d, "
           "current in a hold section %ld, posts %llu (failed %llu); kernel's wait from first "
           "lookup to key: min %.1f us, median %.1f us, p99 %.1f us, max %.1f us; host side "
           "launch to sync %.1f ms\n",
           how, warps, same, warps * 32, cur, (unsigned long long)st.requests,
           (unsigned long long)st.request_failures, ns[0] / 1e3, ns[warps / 2] / 1e3,
           ns[warps * 99 / 100] / 1e3, ns[warps - 1] / 1e3, host_ms);
    kb_table_line(c, "ring");
    if (other)
        KB_CHECK(cudaFree(other));
    kb_destroy(c);
    return same != warps * 32 || cur != warps * 32 || st.requests != (unsigned long long)warps;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        printf("usage: %s race hooks|tag [STEPS] | agree | ring sync|copy|free\n", argv[0]);
        return 2;
    }
    kb_init();
    if (!strcmp(argv[1], "race") && argc > 2)
        return race(argv[2], argc > 3 ? atoi(argv[3]) : 3000);
    if (!strcmp(argv[1], "agree"))
        return agree();
    if (!strcmp(argv[1], "ring"))
        return ring(argc > 2 ? argv[2] : "sync");
    printf("unknown test %s\n", argv[1]);
    return 2;
}
