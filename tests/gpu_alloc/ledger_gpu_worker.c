/*
 * One process of ledger-gpus.sh: a cache on one GPU sharing its BAR1
 * budget with the other processes on that GPU through the ledger.  The
 * checking backend of tests/gpu_hook (no NIC exists here) with the
 * library's own CUDA query, TAG_CHECK, max_bytes 0: the budget is NVML's
 * free BAR1 less the reserve, shared.
 *
 *   ledger_gpu_worker DEVICE PROCS
 *
 * It makes DEVICE's primary context current, creates the cache and holds
 * a 64 MiB cuMemAlloc "anchor" entry for good (the device joins its
 * ledger), then answers
 *   ready pid=P key=GPU-... reading=BYTES
 * (reading: its own NVML reading of the budget, rc_bar1_budget()).  Then
 * one command a line, each answered with a stats line (below):
 *   fill    register about 110 % of a fair share (reading / PROCS): two
 *           1 GiB cuMemAlloc buffers, then mappings of one 2 GiB VMM
 *           handle at one address after another.  BAR1 outgrows device
 *           memory on the GPUs this runs on (256 GiB against 141 GB on
 *           an H200), so a share is reached by mapping the same memory
 *           many times: each mapping is an allocation of its own to the
 *           cache, with its own buffer id.
 *   put     get the anchor (a hit) and put it: a put answers pressure
 *   stats
 * The stats line: "stats pid=P bytes=B entries=E budget=G held=H hits=N
 * misses=N evictions=N" (device DEVICE's regcache_get_device_stats(), and
 * the bytes held).  At end of input it destroys the cache, frees the
 * memory and exits 0 when every registration was deregistered while its
 * memory was still there; on any failure it prints "error ..." and exits
 * 1.
 *
 * Linked with the static library for rc_bar1_budget() and rc_gpu_key().
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bar1_budget.h"
#include "gpu_backend.h"
#include "gpu_key.h"

#define MIB ((size_t)1 << 20)
#define ANCHOR (64 * MIB)
#define PLAIN (1024 * MIB) /* each cuMemAlloc buffer */
#define PLAIN_COUNT 2
#define CHUNK (2048 * MIB) /* each VMM mapping */
#define MAX_MAPPINGS 4096

static int device;
static regcache_t *cache;
static CUdeviceptr anchor, plain[PLAIN_COUNT], vmm;
static CUmemGenericAllocationHandle handle;
static size_t mapped, vmm_reserved;
static regcache_entry_t *anchor_hold;

static void fail(const char *what, const char *why)
{
    printf("error device %d pid %d: %s: %s\n", device, (int)getpid(), what, why);
    exit(1);
}

static void cu(CUresult r, const char *what)
{
    const char *name = "unknown CUDA error";
    if (r == CUDA_SUCCESS)
        return;
    cuGetErrorName(r, &name);
    fail(what, name);
}

static void get_put(CUdeviceptr p, size_t size)
{
    regcache_entry_t *e;
    int rc = regcache_get(cache, (void *)p, size, &e);
    if (rc != REGCACHE_OK)
        fail(regcache_strerror(rc), regcache_last_error());
    regcache_put(cache, e);
}

static void stats(void)
{
    struct regcache_stats s;
    regcache_get_device_stats(cache, device, &s);
    printf("stats pid=%d bytes=%llu entries=%llu budget=%llu held=%zu hits=%llu misses=%llu "
           "evictions=%llu\n",
           (int)getpid(), (unsigned long long)s.bytes, (unsigned long long)s.entries,
           (unsigned long long)s.budget, ANCHOR, (unsigned long long)s.hits,
           (unsigned long long)s.misses, (unsigned long long)s.evictions);
}

/* The VMM part: one physical handle of CHUNK, RDMA-capable (the cache
 * refuses VMM memory without the flag), mapped `count` times side by side
 * in one reservation, each mapping registered. */
static void map_and_register(size_t count)
{
    CUmemAllocationProp prop = { 0 };
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    prop.allocFlags.gpuDirectRDMACapable = 1;
    CUmemAccessDesc access = { prop.location, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    vmm_reserved = count * CHUNK;
    cu(cuMemAddressReserve(&vmm, vmm_reserved, CHUNK, 0, 0), "cuMemAddressReserve");
    cu(cuMemCreate(&handle, CHUNK, &prop, 0), "cuMemCreate");
    for (; mapped < count; mapped++) {
        CUdeviceptr at = vmm + mapped * CHUNK;
        cu(cuMemMap(at, CHUNK, 0, handle, 0), "cuMemMap");
        cu(cuMemSetAccess(at, CHUNK, &access, 1), "cuMemSetAccess");
        get_put(at, CHUNK);
    }
}

static void fill(size_t reading, int procs)
{
    size_t target = reading / (size_t)procs / 10 * 11, have = ANCHOR;
    for (int i = 0; i < PLAIN_COUNT; i++) {
        cu(cuMemAlloc(&plain[i], PLAIN), "cuMemAlloc");
        get_put(plain[i], PLAIN);
        have += PLAIN;
    }
    size_t count = target > have ? (target - have + CHUNK - 1) / CHUNK : 0;
    if (count > MAX_MAPPINGS)
        fail("fill", "the share needs more mappings than MAX_MAPPINGS");
    if (count)
        map_and_register(count);
}

/* The cache first: its deregistrations must find the memory still there. */
static void finish(void)
{
    regcache_put(cache, anchor_hold);
    regcache_destroy(cache);
    for (size_t i = 0; i < mapped; i++)
        cu(cuMemUnmap(vmm + i * CHUNK, CHUNK), "cuMemUnmap");
    if (vmm_reserved) {
        cu(cuMemRelease(handle), "cuMemRelease");
        cu(cuMemAddressFree(vmm, vmm_reserved), "cuMemAddressFree");
    }
    for (int i = 0; i < PLAIN_COUNT; i++)
        if (plain[i])
            cu(cuMemFree(plain[i]), "cuMemFree");
    cu(cuMemFree(anchor), "cuMemFree");
    if (gb_deregs() != gb_regs() || gb_deregs_stale() != 0) {
        char why[96];
        snprintf(why, sizeof why, "%ld registrations, %ld deregistrations, %ld of them stale",
                 gb_regs(), gb_deregs(), gb_deregs_stale());
        fail("destroy", why);
    }
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 3) {
        printf("usage: %s DEVICE PROCS\n", argv[0]);
        return 2;
    }
    device = atoi(argv[1]);
    int procs = atoi(argv[2]);
    CUdevice dev;
    CUcontext ctx;
    cu(cuInit(0), "cuInit");
    cu(cuDeviceGet(&dev, device), "cuDeviceGet");
    cu(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    cu(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");

    int rc = gb_create_driver(REGCACHE_VALIDATE_TAG_CHECK, 0, &cache);
    if (rc != REGCACHE_OK)
        fail("regcache_create", regcache_last_error());
    cu(cuMemAlloc(&anchor, ANCHOR), "cuMemAlloc");
    rc = regcache_get(cache, (void *)anchor, ANCHOR, &anchor_hold);
    if (rc != REGCACHE_OK)
        fail("regcache_get", regcache_last_error());
    char key[RC_GPU_KEY_LEN];
    if (rc_gpu_key(device, key, sizeof key) != REGCACHE_OK)
        fail("rc_gpu_key", regcache_last_error());
    size_t reading = rc_bar1_budget(device);
    printf("ready pid=%d key=%s reading=%zu\n", (int)getpid(), key, reading);

    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (!strcmp(line, "fill\n"))
            fill(reading, procs);
        else if (!strcmp(line, "put\n"))
            get_put(anchor, ANCHOR);
        else if (strcmp(line, "stats\n") != 0)
            fail("unknown command", line);
        stats();
    }
    finish();
    return 0;
}
