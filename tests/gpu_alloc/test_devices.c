/*
 * The cache across devices on the real driver (label gpu), with the checking
 * backend of tests/gpu_hook (no NIC exists here) and the library's own CUDA
 * query:
 *   - the BAR1 budget NVML gives each device (max_bytes 0);
 *   - a budget per device: each device evicts its own entries, never
 *     another's, and held entries stay past it;
 *   - exhaustion per device (the backend answers ENOSPC, as nvidia-peermem
 *     does for a full BAR1): the cache evicts and retries on that device
 *     only, and fails with NO_SPACE when that device has nothing to evict,
 *     however many unused entries the others hold;
 *   - every registration attributed to the device that holds the memory
 *     (cuMemAlloc, pool and VMM memory), whichever device's context is
 *     current, or none.
 *
 *   gpu_alloc_devices GPUS     (1 or 2; run by alloc-test.sh)
 *
 * Linked with the static library for rc_bar1_budget().
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#include "bar1_budget.h"
#include "gpu_backend.h"

#define MIB ((size_t)1 << 20)
#define MAX_GPUS 2
#define BUF (2 * MIB)      /* one buffer, one registration */
#define PER_DEVICE 6       /* buffers per device */
#define BUDGET (8 * MIB)   /* less than PER_DEVICE buffers: each device evicts */
#define CAPACITY (3 * BUF) /* the injected "BAR1" of device 0 */

static int gpus;
static CUcontext ctx[MAX_GPUS];
static int failed;

#define CHECK(cond, ...)                                \
    do {                                                \
        if (!(cond)) {                                  \
            printf("FAIL %s:%d: ", __func__, __LINE__); \
            printf(__VA_ARGS__);                        \
            printf("\n");                               \
            failed = 1;                                 \
        }                                               \
    } while (0)

/* A driver call that fails leaves nothing after it meaningful: stop. */
#define CU(call)                                                                         \
    do {                                                                                 \
        CUresult r_ = (call);                                                            \
        if (r_ != CUDA_SUCCESS) {                                                        \
            const char *n_ = "?";                                                        \
            cuGetErrorName(r_, &n_);                                                     \
            printf("FAIL %s:%d: %s: %s (%d)\n", __FILE__, __LINE__, #call, n_, (int)r_); \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

static regcache_t *create(size_t max_bytes)
{
    regcache_t *cache = NULL;
    int rc = gb_create_driver(REGCACHE_VALIDATE_TAG_CHECK, max_bytes, &cache);
    if (rc != REGCACHE_OK) {
        printf("FAIL regcache_create: %s: %s\n", regcache_strerror(rc), regcache_last_error());
        exit(1);
    }
    return cache;
}

/* ------------------------------------------------------------------------ */
/* Memory                                                                    */
/* ------------------------------------------------------------------------ */

enum kind { PLAIN, POOL, VMM, KINDS };
static const char *const kind_names[KINDS] = { "cuMemAlloc", "cuMemAllocAsync", "VMM" };

struct buffer {
    uintptr_t ptr;
    size_t size;
    int device;
    enum kind kind;
};

static struct buffer alloc_on(int device, enum kind kind)
{
    CU(cuCtxSetCurrent(ctx[device]));
    struct buffer b = { 0, BUF, device, kind };
    CUdeviceptr p;
    if (kind == PLAIN) {
        CU(cuMemAlloc(&p, b.size));
    } else if (kind == POOL) {
        CU(cuMemAllocAsync(&p, b.size, NULL));
        CU(cuStreamSynchronize(NULL));
    } else {
        /* RDMA-capable, as PyTorch creates its VMM memory: the cache refuses
         * VMM memory without the flag. */
        CUmemAllocationProp prop = { 0 };
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = device;
        prop.allocFlags.gpuDirectRDMACapable = 1;
        size_t grain;
        CU(cuMemGetAllocationGranularity(&grain, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
        b.size = (b.size + grain - 1) / grain * grain;
        CUmemGenericAllocationHandle handle;
        CUmemAccessDesc access = { prop.location, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        CU(cuMemAddressReserve(&p, b.size, 0, 0, 0));
        CU(cuMemCreate(&handle, b.size, &prop, 0));
        CU(cuMemMap(p, b.size, 0, handle, 0));
        CU(cuMemRelease(handle)); /* the mapping keeps the memory */
        CU(cuMemSetAccess(p, b.size, &access, 1));
    }
    b.ptr = p;
    return b;
}

static void free_buffer(const struct buffer *b)
{
    CU(cuCtxSetCurrent(ctx[b->device]));
    if (b->kind == PLAIN) {
        CU(cuMemFree(b->ptr));
    } else if (b->kind == POOL) {
        CU(cuMemFreeAsync(b->ptr, NULL));
        CU(cuStreamSynchronize(NULL));
    } else {
        CU(cuMemUnmap(b->ptr, b->size));
        CU(cuMemAddressFree(b->ptr, b->size));
    }
}

/* A checked get and put on the whole buffer from `current`'s context. */
static int touch_from(regcache_t *cache, const struct buffer *b, int current)
{
    char msg[1536];
    int rc;
    int outcome = gb_checked_get(cache, b->ptr, b->size, b->device, current, &rc, msg, sizeof msg);
    CHECK(outcome == GB_SERVED, "%s", msg);
    return outcome;
}

static void touch(regcache_t *cache, const struct buffer *b)
{
    touch_from(cache, b, GB_CURRENT_KEEP);
}

static long live_on(int device)
{
    return gb_regs_on(device) - gb_deregs_on(device);
}

/* ------------------------------------------------------------------------ */
/* The parts                                                                 */
/* ------------------------------------------------------------------------ */

static void bar1_budgets(void)
{
    for (int d = 0; d < gpus; d++) {
        CUdevice dev;
        char bus[32];
        CU(cuDeviceGet(&dev, d));
        CU(cuDeviceGetPCIBusId(bus, sizeof bus, dev));
        size_t budget = rc_bar1_budget(d);
        printf("device %d (%s): BAR1 budget %zu MiB (%zu bytes)%s\n", d, bus, budget / MIB, budget,
               budget == 1 ? ": the reserve takes all free BAR1, no unused entry is kept" : "");
        CHECK(budget != 0,
              "device %d: no BAR1 reading from NVML (libnvidia-ml.so.1 not loadable, or no "
              "device at PCI bus id %s): the budget would be unlimited",
              d, bus);
    }
}

/* The entries a device kept are the ones it used last: getting them again
 * must register nothing. */
static void expect_kept(regcache_t *cache, const struct buffer *bufs, int device)
{
    long kept = live_on(device), regs = gb_regs_on(device);
    for (long i = PER_DEVICE - kept; i < PER_DEVICE; i++)
        touch(cache, &bufs[i]);
    CHECK(gb_regs_on(device) == regs,
          "device %d: %ld of its %ld kept entries were gone (evicted by another device?)", device,
          gb_regs_on(device) - regs, kept);
}

static void budgets(struct buffer bufs[][PER_DEVICE])
{
    regcache_t *cache = create(BUDGET);
    long evicted[MAX_GPUS] = { 0 };
    /* The last device first: when device 0 evicts, the others hold entries
     * it must leave alone. */
    for (int d = gpus - 1; d >= 0; d--) {
        long deregs[MAX_GPUS];
        for (int e = 0; e < gpus; e++)
            deregs[e] = gb_deregs_on(e);
        for (int round = 0; round < 3; round++)
            for (int i = 0; i < PER_DEVICE; i++)
                touch(cache, &bufs[d][i]);
        evicted[d] = gb_deregs_on(d) - deregs[d];
        CHECK(gb_bytes_on(d) > 0 && (size_t)gb_bytes_on(d) <= BUDGET,
              "device %d keeps %ld bytes, budget %zu", d, gb_bytes_on(d), BUDGET);
        CHECK(evicted[d] > 0, "device %d: nothing evicted past its budget", d);
        for (int e = 0; e < gpus; e++)
            CHECK(e == d || gb_deregs_on(e) == deregs[e],
                  "device %d's evictions deregistered %ld entries of device %d", d,
                  gb_deregs_on(e) - deregs[e], e);
    }
    for (int d = 0; d < gpus; d++)
        expect_kept(cache, bufs[d], d);

    /* Held entries stay, past the budget too, and cost other devices nothing. */
    long others[MAX_GPUS];
    for (int e = 0; e < gpus; e++)
        others[e] = gb_deregs_on(e);
    regcache_entry_t *held[PER_DEVICE];
    for (int i = 0; i < PER_DEVICE; i++) {
        int rc = gb_get(cache, bufs[0][i].ptr, BUF, &held[i]);
        CHECK(rc == REGCACHE_OK, "hold %d: %s: %s", i, regcache_strerror(rc),
              regcache_last_error());
    }
    CHECK((size_t)gb_bytes_on(0) >= PER_DEVICE * BUF,
          "device 0 keeps %ld bytes with %d buffers of %zu held", gb_bytes_on(0), PER_DEVICE, BUF);
    for (int i = 0; i < PER_DEVICE; i++)
        regcache_put(cache, held[i]);
    CHECK((size_t)gb_bytes_on(0) <= BUDGET, "device 0 keeps %ld bytes after the puts",
          gb_bytes_on(0));
    for (int e = 1; e < gpus; e++)
        CHECK(gb_deregs_on(e) == others[e], "device 0's held entries evicted %ld of device %d",
              gb_deregs_on(e) - others[e], e);
    for (int d = 0; d < gpus; d++)
        printf("budget %zu MiB: device %d evicted %ld entries, keeps %ld (%ld MiB)\n", BUDGET / MIB,
               d, evicted[d], live_on(d), gb_bytes_on(d) / (long)MIB);
    regcache_destroy(cache);
}

static void exhaustion(struct buffer bufs[][PER_DEVICE])
{
    regcache_t *cache = create(1024 * MIB); /* not what binds here */
    for (int d = 1; d < gpus; d++)
        for (int i = 0; i < PER_DEVICE; i++)
            touch(cache, &bufs[d][i]);
    long others[MAX_GPUS];
    for (int e = 0; e < gpus; e++)
        others[e] = gb_deregs_on(e);
    long failures = gb_stat(cache, "reg_failures"), evictions = gb_stat(cache, "evictions");

    gb_set_capacity(0, CAPACITY);
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < PER_DEVICE; i++)
            touch(cache, &bufs[0][i]);
    failures = gb_stat(cache, "reg_failures") - failures;
    evictions = gb_stat(cache, "evictions") - evictions;
    CHECK(failures > 0, "the backend never reported exhaustion on device 0");
    CHECK(evictions > 0, "exhaustion on device 0 evicted nothing");
    CHECK((size_t)gb_bytes_on(0) <= CAPACITY, "device 0 holds %ld bytes past its capacity",
          gb_bytes_on(0));

    /* Everything of device 0 held: it has nothing left to evict, and the
     * other devices' unused entries must not be taken instead. */
    regcache_entry_t *held[PER_DEVICE];
    int n = 0, rc = REGCACHE_OK;
    while (n < PER_DEVICE && (rc = gb_get(cache, bufs[0][n].ptr, BUF, &held[n])) == REGCACHE_OK)
        n++;
    CHECK(n > 0 && rc == REGCACHE_ERR_NO_SPACE,
          "holding device 0's buffers: %d held, then %s (wanted NO_SPACE)", n,
          regcache_strerror(rc));
    printf("exhaustion on device 0 (capacity %zu MiB): %ld injected failures, %ld evictions, "
           "%d held, then %s: %s\n",
           CAPACITY / MIB, failures, evictions, n, regcache_strerror(rc), regcache_last_error());
    for (int i = 0; i < n; i++)
        regcache_put(cache, held[i]);
    for (int e = 1; e < gpus; e++)
        CHECK(gb_deregs_on(e) == others[e],
              "device 0's exhaustion deregistered %ld entries of device %d",
              gb_deregs_on(e) - others[e], e);
    gb_set_capacity(0, 0);
    regcache_destroy(cache);
}

static const char *context_name(int current)
{
    static char name[32];
    if (current == GB_CURRENT_NONE)
        return "no";
    snprintf(name, sizeof name, "device %d's", current);
    return name;
}

/* Every current context: each device's, and none (a progress thread). */
static void attribution(void)
{
    regcache_t *cache = create(0); /* the BAR1 budget of each device */
    int checked = 0;
    for (int m = 0; m < gpus; m++)
        for (int k = 0; k < KINDS; k++) {
            struct buffer b = alloc_on(m, (enum kind)k);
            for (int current = GB_CURRENT_NONE; current < gpus; current++) {
                if (current == GB_CURRENT_KEEP)
                    continue;
                /* A miss each time: the registration is made under `current`. */
                regcache_invalidate(cache, (const void *)b.ptr, b.size);
                long regs = gb_regs_on(m);
                if (touch_from(cache, &b, current) == GB_SERVED)
                    checked++;
                CHECK(gb_regs_on(m) == regs + 1,
                      "%s memory of device %d, %s context current: no registration "
                      "attributed to device %d",
                      kind_names[k], m, context_name(current), m);
            }
            /* What the handle was made for, asked of the backend directly. */
            regcache_entry_t *e;
            int rc = gb_get(cache, b.ptr, b.size, &e);
            CHECK(rc == REGCACHE_OK, "%s", regcache_last_error());
            if (rc == REGCACHE_OK) {
                int device = -1;
                unsigned long long made_for = 0, now = 0;
                gb_memory_kind(b.ptr, &now);
                CHECK(gb_registered_for(regcache_entry_handle(e), b.ptr, &device, &made_for) == 0 &&
                          device == m && made_for == now && now != 0,
                      "%s memory of device %d (buffer id %llu): registered for device %d, "
                      "buffer id %llu",
                      kind_names[k], m, now, device, made_for);
                regcache_put(cache, e);
            }
            /* No hook here: the application says the memory goes. */
            regcache_invalidate(cache, (const void *)b.ptr, b.size);
            free_buffer(&b);
        }
    printf("attribution: %d of %d registrations on the memory's device under every current "
           "context\n",
           checked, gpus * KINDS * (gpus + 1));
    regcache_destroy(cache);
}

int main(int argc, char **argv)
{
    gpus = argc > 1 ? atoi(argv[1]) : 0;
    if (gpus < 1 || gpus > MAX_GPUS) {
        printf("usage: %s GPUS (1 to %d)\n", argv[0], MAX_GPUS);
        return 2;
    }
    int count = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
        printf("skipped: no CUDA device\n");
        return 77;
    }
    if (count < gpus) {
        printf("skipped: needs %d GPUs, the driver sees %d\n", gpus, count);
        return 77;
    }
    for (int d = 0; d < gpus; d++) {
        CUdevice dev;
        CU(cuDeviceGet(&dev, d));
        CU(cuDevicePrimaryCtxRetain(&ctx[d], dev));
    }
    bar1_budgets();

    struct buffer bufs[MAX_GPUS][PER_DEVICE];
    for (int d = 0; d < gpus; d++)
        for (int i = 0; i < PER_DEVICE; i++)
            bufs[d][i] = alloc_on(d, PLAIN);
    budgets(bufs);
    exhaustion(bufs);
    for (int d = 0; d < gpus; d++)
        for (int i = 0; i < PER_DEVICE; i++)
            free_buffer(&bufs[d][i]);
    attribution();

    CHECK(gb_deregs() == gb_regs(), "%ld registrations never deregistered",
          gb_regs() - gb_deregs());
    CHECK(gb_deregs_stale() == 0, "%ld deregs after the memory had gone", gb_deregs_stale());
    printf("devices gpus=%d: regs=%ld deregs=%ld valid_at_dereg=%ld %s\n", gpus, gb_regs(),
           gb_deregs(), gb_deregs_valid(), failed ? "FAIL" : "ok");
    return failed;
}
