// regcache-bench-keys: the device key table's rows (bench/README.md), on
// one GPU, with the counting backend of the device tests (no NIC):
//   - lookups/s from every SM, against a kernel of plain L2 loads at random
//     places of an array as large as the table;
//   - one warp's hit latency (a chain of dependent lookups), against a chain
//     of dependent L2 loads; a hold section's opening and end, and a key's
//     confirm (what a section told to confirm pays per key);
//   - a miss's round trip through the ring, as the kernel waits for it (the
//     host waiting for the kernel with a synchronous copy of its result),
//     and where the host's side of it went (the table's counters);
//   - the least a removal can cost: a word to the GPU and the wait for it;
//   - what the mirror adds to a host miss (get + put of memory never
//     registered) and to an invalidation, caches with and without a table
//     taking turns: over the counting backend (which registers nothing) and
//     over a backend that makes the CUDA half of a dmabuf registration
//     (export and close), what a real one costs short of the NIC's part.
// Prints one line per row.  Exits 77 without a GPU.
#include <algorithm>
#include <vector>

#define KB_WATCHDOG_S 120

#include "keys_backend.h"
#include "regcache_device.h"

static __device__ __forceinline__ uint32_t rnd(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static __device__ __forceinline__ unsigned long long clock_ns(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void lookups(regcache_device_table t, const unsigned long long *bases, uint32_t n,
                        int iters, uint32_t *out)
{
    uint32_t seed = 0x9e3779b9u ^ (blockIdx.x * blockDim.x + threadIdx.x) * 2654435761u, acc = 0;
    for (int i = 0; i < iters; i++) {
        uint32_t b = rnd(&seed) % n;
        regcache_device_key key;
        if (regcache_device_lookup(&t, (const void *)(bases[b] + (rnd(&seed) & 0xffff)), 1, 0,
                                   &key) == REGCACHE_DEVICE_HIT)
            acc += key.lkey;
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

__global__ void loads(const unsigned long long *table, uint32_t words,
                      const unsigned long long *bases, uint32_t n, int iters, uint32_t *out)
{
    uint32_t seed = 0x9e3779b9u ^ (blockIdx.x * blockDim.x + threadIdx.x) * 2654435761u, acc = 0;
    for (int i = 0; i < iters; i++) {
        uint32_t b = rnd(&seed) % n;
        acc += (uint32_t)bases[b] + (uint32_t)__ldcg(&table[rnd(&seed) % words]);
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

__global__ void lookup_chain(regcache_device_table t, const unsigned long long *bases, uint32_t n,
                             int iters, unsigned long long *ns)
{
    uint32_t b = 1;
    unsigned long long t0 = clock_ns();
    for (int i = 0; i < iters; i++) {
        regcache_device_key key;
        regcache_device_lookup(&t, (const void *)(bases[b] + 64), 1, 0, &key);
        b = (key.lkey * 2654435761u + (uint32_t)i) % n;
    }
    *ns = clock_ns() - t0 + b; // b keeps the chain alive; it is < n, noise
}

__global__ void load_chain(const unsigned long long *table, uint32_t words,
                           const unsigned long long *bases, uint32_t n, int iters,
                           unsigned long long *ns)
{
    uint32_t b = 1, w = 1;
    unsigned long long t0 = clock_ns();
    for (int i = 0; i < iters; i++) {
        unsigned long long v = __ldcg(&table[(w + (uint32_t)bases[b]) % words]);
        w = (uint32_t)(v * 2654435761u + (uint32_t)i) % words;
        b = w % n;
    }
    *ns = clock_ns() - t0 + (b & 1);
}

// Hold sections opened and ended one after another on one slot; `told`
// counts those told to confirm (none while no removal is on its way).
__global__ void section_chain(regcache_device_table t, int iters, unsigned long long *ns,
                              unsigned long long *told)
{
    unsigned long long t0 = clock_ns(), n = 0;
    for (int i = 0; i < iters; i++) {
        n += regcache_device_hold_begin(&t, 0) == REGCACHE_DEVICE_CONFIRM;
        regcache_device_hold_end(&t, 0);
    }
    *ns = clock_ns() - t0;
    *told = n;
}

// A key confirmed again and again (each a read of host memory, acquire).
__global__ void confirm_chain(regcache_device_table t, unsigned long long base, int iters,
                              unsigned long long *ns, unsigned long long *good)
{
    regcache_device_key key;
    unsigned long long n = 0;
    regcache_device_lookup(&t, (const void *)(base + 64), 1, 0, &key);
    unsigned long long t0 = clock_ns();
    for (int i = 0; i < iters; i++)
        n += regcache_device_confirm(&t, &key);
    *ns = clock_ns() - t0;
    *good = n;
}

// About two seconds of polls at most: a miss the host cannot answer shows
// as a miss, not as a hang.
__global__ void miss_once(regcache_device_table t, unsigned long long buf, uint32_t *lkey,
                          unsigned long long *ns)
{
    unsigned long long t0 = clock_ns();
    regcache_device_key key;
    int rc = regcache_device_get_key(&t, (const void *)buf, 64, 0, 1ull << 21, &key);
    unsigned long long t1 = clock_ns();
    if (threadIdx.x == 0) {
        *lkey = rc == REGCACHE_DEVICE_HIT ? key.lkey : 0;
        *ns = t1 - t0;
    }
}

static double seconds(cudaEvent_t a, cudaEvent_t b)
{
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    return ms / 1e3;
}

static uint64_t host_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

static double p99(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() * 99 / 100];
}

// Device rows: a table of n entries of 64 KiB each.
static void device_rows(void)
{
    const uint32_t n = 10000;
    regcache_device_keys_params kp;
    regcache_device_keys_params_init(&kp);
    regcache_device_table t;
    regcache_t *c = kb_cache(REGCACHE_VALIDATE_AUTO, 0, &kp, &t);
    std::vector<unsigned long long> bases(n);
    for (uint32_t b = 0; b < n; b++) {
        void *p;
        KB_CHECK(cudaMalloc(&p, 64 << 10));
        bases[b] = (uintptr_t)p;
        kb_host_key(c, bases[b], 64);
    }
    KB_OK(regcache_device_keys_sync(c, 0));
    kb_enter("lookups/s");
    unsigned long long *dbases, *table, *ns;
    uint32_t *out;
    size_t table_bytes =
        kp.page_slots * sizeof(regcache_device_slot) + kp.records * sizeof(regcache_device_record);
    uint32_t words = (uint32_t)(table_bytes / 8);
    int sms = 0;
    KB_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int blocks = sms * 8, threads = 256, iters = 2000;
    KB_CHECK(cudaMalloc(&dbases, n * 8));
    KB_CHECK(cudaMalloc(&table, table_bytes));
    KB_CHECK(cudaMemset(table, 1, table_bytes));
    KB_CHECK(cudaMalloc(&ns, 8));
    KB_CHECK(cudaMalloc(&out, (size_t)blocks * threads * 4));
    KB_CHECK(cudaMemcpy(dbases, bases.data(), n * 8, cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    double per = (double)blocks * threads * iters;
    std::vector<double> lk, ld;
    for (int round = 0; round < 5; round++) {
        cudaEventRecord(e0);
        lookups<<<blocks, threads>>>(t, dbases, n, iters, out);
        cudaEventRecord(e1);
        KB_CHECK(cudaEventSynchronize(e1));
        lk.push_back(per / seconds(e0, e1));
        cudaEventRecord(e0);
        loads<<<blocks, threads>>>(table, words, dbases, n, iters, out);
        cudaEventRecord(e1);
        KB_CHECK(cudaEventSynchronize(e1));
        ld.push_back(per / seconds(e0, e1));
    }
    printf("row lookups/s, %d SMs, %u entries (%zu MiB table): %.3g, plain L2 loads %.3g "
           "(%.2f of them)\n",
           sms, n, table_bytes >> 20, median(lk), median(ld), median(lk) / median(ld));
    kb_enter("single-warp latency");
    const int chain = 20000;
    std::vector<double> lc, lo;
    for (int round = 0; round < 5; round++) {
        unsigned long long v;
        lookup_chain<<<1, 1>>>(t, dbases, n, chain, ns);
        KB_CHECK(cudaMemcpy(&v, ns, 8, cudaMemcpyDeviceToHost));
        lc.push_back((double)v / chain);
        load_chain<<<1, 1>>>(table, words, dbases, n, chain, ns);
        KB_CHECK(cudaMemcpy(&v, ns, 8, cudaMemcpyDeviceToHost));
        lo.push_back((double)v / chain);
    }
    printf("row single-warp hit latency: %.0f ns a lookup, a dependent L2 load %.0f ns\n",
           median(lc), median(lo));
    kb_enter("hold sections and confirms");
    const int sections = 2000;
    std::vector<double> sc, cc;
    unsigned long long *counted, told = 0, good = 0;
    KB_CHECK(cudaMalloc(&counted, 8));
    for (int round = 0; round < 5; round++) {
        unsigned long long v;
        section_chain<<<1, 1>>>(t, sections, ns, counted);
        KB_CHECK(cudaMemcpy(&v, ns, 8, cudaMemcpyDeviceToHost));
        KB_CHECK(cudaMemcpy(&told, counted, 8, cudaMemcpyDeviceToHost));
        sc.push_back((double)v / sections);
        confirm_chain<<<1, 1>>>(t, bases[0], sections, ns, counted);
        KB_CHECK(cudaMemcpy(&v, ns, 8, cudaMemcpyDeviceToHost));
        KB_CHECK(cudaMemcpy(&good, counted, 8, cudaMemcpyDeviceToHost));
        cc.push_back((double)v / sections);
    }
    printf("row hold section, one warp: %.0f ns to open and end one (%llu of %d told to "
           "confirm); a confirm %.0f ns (%llu of %d good)\n",
           median(sc), told, sections, median(cc), good, sections);
    KB_CHECK(cudaFree(counted));
    kb_destroy(c);
}

static void miss_rows(uint64_t poll_ns)
{
    const int m = 200;
    regcache_device_keys_params kp;
    regcache_device_keys_params_init(&kp);
    kp.poll_ns = poll_ns;
    regcache_device_table t;
    regcache_t *c = kb_cache(REGCACHE_VALIDATE_AUTO, 0, &kp, &t);
    unsigned long long *ns;
    uint32_t *lkey;
    KB_CHECK(cudaMalloc(&ns, 8));
    KB_CHECK(cudaMalloc(&lkey, 4));
    std::vector<double> us;
    int hits = 0, asked = 0;
    kb_enter("misses");
    // Three unanswered misses end the row: the rest would say no more.
    for (int i = 0; i < m && asked - hits < 3; i++) {
        kb_step = i;
        void *p;
        KB_CHECK(cudaMalloc(&p, 1 << 20));
        miss_once<<<1, 32>>>(t, (uintptr_t)p, lkey, ns);
        unsigned long long v;
        uint32_t k;
        KB_CHECK(cudaMemcpy(&v, ns, 8, cudaMemcpyDeviceToHost));
        KB_CHECK(cudaMemcpy(&k, lkey, 4, cudaMemcpyDeviceToHost));
        hits += k != 0;
        asked++;
        us.push_back(v / 1e3);
    }
    std::sort(us.begin(), us.end());
    printf("row miss round trip (poll_ns %llu us), %d misses, %d answered: median %.1f us, "
           "p99 %.1f us\n",
           (unsigned long long)(poll_ns / 1000), asked, hits, us[asked / 2], us[asked * 99 / 100]);
    kb_table_line(c, "row miss round trip");
    kb_destroy(c);
}

// The CUDA half of a registration of GPU memory through dmabuf, which the
// built-in backend makes before ibv_reg_dmabuf_mr (bench/README.md's pin
// rows measure it alone): SYNC_MEMOPS and the export when registering, the
// fd's close when deregistering.  Keys and the log are the counting
// backend's.  What a NIC adds (the MR itself) cannot be measured here.
static std::vector<int> dmabuf_fds;
static long dmabuf_failures;

static int dmabuf_reg(void *arg, void *addr, size_t len, int device, int rail, void **handle)
{
    unsigned one = 1;
    int fd = -1;
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)addr;
    if (cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p) != CUDA_SUCCESS ||
        cuMemGetHandleForAddressRange(&fd, p, len, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0) !=
            CUDA_SUCCESS) {
        dmabuf_failures++;
        return EINVAL;
    }
    int rc = kb_reg(arg, addr, len, device, rail, handle);
    if (rc) {
        close(fd);
        return rc;
    }
    dmabuf_fds[(uintptr_t)*handle] = fd;
    return 0;
}

static void dmabuf_dereg(void *arg, void *handle)
{
    close(dmabuf_fds[(uintptr_t)handle]);
    kb_dereg(arg, handle);
}

static const regcache_backend dmabuf_backend = { dmabuf_reg, dmabuf_dereg, NULL, NULL, NULL };

// A host miss (get + put of memory never registered) and an invalidation,
// in a cache without a table and in one with, both over `backend`, on n
// buffers of `bytes`: rounds taking turns.  Then the table's writes in the
// cache with one: the invalidations' removals and the writer's batches.
static void host_rows(const regcache_backend *backend, const char *name, int n, size_t bytes)
{
    const int rounds = 7;
    std::vector<uintptr_t> bufs(n);
    for (int i = 0; i < n; i++) {
        void *p;
        KB_CHECK(cudaMalloc(&p, bytes));
        bufs[i] = (uintptr_t)p;
    }
    regcache_params p;
    regcache_params_init(&p);
    p.backend = backend;
    regcache_t *plain = NULL;
    KB_OK(regcache_create(&p, &plain));
    regcache_device_keys_params kp;
    regcache_device_keys_params_init(&kp);
    regcache_device_table t;
    regcache_t *mirrored = kb_cache_over(backend, REGCACHE_VALIDATE_AUTO, 0, &kp, &t);
    std::vector<double> miss[2], inval[2];
    long unkeyed = 0;
    kb_enter("host miss and invalidation");
    for (int r = 0; r < rounds; r++) {
        kb_step = r;
        for (int which = 0; which < 2; which++) {
            regcache_t *c = which ? mirrored : plain;
            uint64_t t0 = host_ns();
            for (int i = 0; i < n; i++)
                unkeyed += !kb_host_key(c, bufs[i], 64);
            uint64_t t1 = host_ns();
            for (int i = 0; i < n; i++)
                regcache_invalidate(c, (void *)bufs[i], 64);
            uint64_t t2 = host_ns();
            miss[which].push_back((double)(t1 - t0) / n);
            inval[which].push_back((double)(t2 - t1) / n);
        }
    }
    double m0 = median(miss[0]), m1 = median(miss[1]), i0 = median(inval[0]), i1 = median(inval[1]);
    printf("row host miss (get+put, %s, %zu KiB buffers): %.0f ns without a table, %.0f ns with "
           "(+%.0f ns, %+.1f%%)%s\n",
           name, bytes >> 10, m0, m1, m1 - m0, 100 * (m1 - m0) / m0,
           unkeyed ? " - SOME GETS FAILED" : "");
    printf("row invalidation of one entry (%s): %.0f ns without a table, %.0f ns with (+%.0f ns, "
           "%+.1f%%)\n",
           name, i0, i1, i1 - i0, 100 * (i1 - i0) / i0);
    if (unkeyed)
        printf("row %s: %ld gets failed (dmabuf exports failed: %ld)\n", name, unkeyed,
               dmabuf_failures);
    char label[128];
    snprintf(label, sizeof label, "row %s, the table's", name);
    kb_table_line(mirrored, label);
    kb_destroy(mirrored);
    regcache_destroy(plain);
    for (int i = 0; i < n; i++)
        KB_CHECK(cudaFree((void *)bufs[i]));
}

// The least a removal can cost: one word to the GPU and the wait for it,
// as the table writes it (a copy from pinned memory on a stream of its own
// and a stream synchronisation), and the same word by a stream write.
static void word_rows(void)
{
    const int n = 2000;
    uint64_t *word, *host;
    cudaStream_t s;
    KB_CHECK(cudaMalloc(&word, 8));
    KB_CHECK(cudaHostAlloc((void **)&host, 8, cudaHostAllocPortable));
    KB_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::vector<double> copy, memop;
    bool memops = true;
    for (int i = 0; i < n; i++) {
        *host = (uint64_t)i;
        uint64_t t0 = host_ns();
        KB_CHECK(cudaMemcpyAsync(word, host, 8, cudaMemcpyHostToDevice, s));
        KB_CHECK(cudaStreamSynchronize(s));
        uint64_t t1 = host_ns();
        memops = memops && cuStreamWriteValue64((CUstream)s, (CUdeviceptr)(uintptr_t)word,
                                                (cuuint64_t)i, 0) == CUDA_SUCCESS;
        KB_CHECK(cudaStreamSynchronize(s));
        uint64_t t2 = host_ns();
        copy.push_back((double)(t1 - t0));
        memop.push_back((double)(t2 - t1));
    }
    printf("row a word to the GPU and the wait for it: copy + stream synchronisation %.0f ns "
           "(p99 %.0f), stream write + synchronisation %s%.0f ns (p99 %.0f)\n",
           median(copy), p99(copy), memops ? "" : "(failed) ", median(memop), p99(memop));
    KB_CHECK(cudaStreamDestroy(s));
    KB_CHECK(cudaFreeHost(host));
    KB_CHECK(cudaFree(word));
}

int main(void)
{
    kb_init();
    device_rows();
    miss_rows(100000);
    miss_rows(10000);
    kb_enter("a word to the GPU");
    word_rows();
    host_rows(&kb_backend, "counting backend", 2000, 64 << 10);
    dmabuf_fds.resize(KB_MAX_REGS, -1);
    host_rows(&dmabuf_backend, "dmabuf export backend", 1000, 2 << 20);
    return 0;
}
