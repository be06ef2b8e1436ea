/*
 * The cache on a real GPU: real allocations of every kind, freed and
 * reallocated at the same address, with a counting backend (no NIC exists
 * here) and no query callback, so the cache asks the CUDA driver itself.
 * Every registration records the buffer id of the memory it was made for;
 * every get checks that id against the memory's id now.
 *
 * The driver is dlopened (like the library does), so the program also runs,
 * and skips, on machines without one.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>
#include <cuda.h>

#include "bar1_budget.h"
#include "cache.h"
#include "cuda_seam.h"
#include "dmabuf_export.h"
#include "dmabuf_reg.h"
#include "regcache.h"
#include "verbs_seam.h"

#define MIB ((size_t)1 << 20)

/* ------------------------------------------------------------------------ */
/* The driver calls the test makes itself                                   */
/* ------------------------------------------------------------------------ */

/* Each field is named and typed after the cuda.h declaration its name
 * expands to (cuMemAlloc is cuMemAlloc_v2), and loaded by that name. */
#define DRIVER_CALLS(X)                                                                         \
    X(cuInit)                                                                                   \
    X(cuGetErrorName) X(cuDeviceGet) X(cuDeviceGetCount) X(cuDevicePrimaryCtxRetain)            \
        X(cuCtxSetCurrent) X(cuMemAlloc) X(cuMemFree) X(cuMemAllocHost) X(cuMemFreeHost)        \
            X(cuMemAllocManaged) X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize)    \
                X(cuMemAllocAsync) X(cuMemFreeAsync) X(cuMemAddressReserve) X(cuMemAddressFree) \
                    X(cuMemCreate) X(cuMemRelease) X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess)  \
                        X(cuMemGetAllocationGranularity) X(cuPointerGetAttribute)
#define STR(x) #x
#define NAME(x) STR(x)
#define FIELD(f) __typeof__(&f) f;
static struct {
    DRIVER_CALLS(FIELD)
} cu;
#undef FIELD

static CUcontext ctx;
static CUdevice dev;

/* NULL when the driver is there and has a GPU; else why not. */
static const char *driver_missing(void)
{
    static char why[256];
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return "no CUDA driver (libcuda.so.1 cannot be loaded)";
#define LOAD(f)                                      \
    do {                                             \
        void *p = dlsym(lib, NAME(f));               \
        if (!p)                                      \
            return "the CUDA driver lacks " NAME(f); \
        memcpy(&cu.f, &p, sizeof p);                 \
    } while (0);
    DRIVER_CALLS(LOAD)
#undef LOAD
    int n = 0;
    CUresult r = cu.cuInit(0);
    if (r == CUDA_SUCCESS)
        r = cu.cuDeviceGetCount(&n);
    if (r != CUDA_SUCCESS || n == 0) {
        snprintf(why, sizeof why, "cuInit/cuDeviceGetCount: error %d, %d GPUs", (int)r, n);
        return why;
    }
    if (cu.cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cu.cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        cu.cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return "cannot make device 0's primary context current";
    return NULL;
}

#define CK(call)                           \
    do {                                   \
        CUresult r_ = (call);              \
        if (r_ != CUDA_SUCCESS) {          \
            const char *n_ = "?";          \
            cu.cuGetErrorName(r_, &n_);    \
            fail_msg("%s: %s", #call, n_); \
        }                                  \
    } while (0)

static unsigned long long buffer_id(uintptr_t addr)
{
    unsigned long long id = 0;
    if (cu.cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)addr) !=
        CUDA_SUCCESS)
        return 0;
    return id;
}

static unsigned int sync_memops_of(uintptr_t addr)
{
    unsigned int v = 7;
    CK(cu.cuPointerGetAttribute(&v, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, (CUdeviceptr)addr));
    return v;
}

/* ------------------------------------------------------------------------ */
/* A counting backend                                                        */
/* ------------------------------------------------------------------------ */

/* What reg recorded.  Handles are kept (marked dead) after dereg until the
 * test ends, so that a stale one handed out again is caught, not reused. */
struct handle {
    uintptr_t start;
    size_t len;
    unsigned long long id; /* buffer id of the requested memory at reg */
    unsigned int sync;     /* its SYNC_MEMOPS at reg */
    atomic_int dead;
    struct handle *next;
};

static atomic_long regs, deregs;
static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
static struct handle *handles;
/* The address the calling thread asked regcache_get for: reg runs in that
 * thread and records what the memory there is. */
static _Thread_local uintptr_t requested;
static struct handle *_Atomic held_watch; /* must never be deregistered */
static atomic_int watch_violations;

static int counting_reg(void *arg, void *addr, size_t len, int device, int rail, void **out)
{
    (void)arg;
    (void)device, (void)rail;
    struct handle *h = calloc(1, sizeof *h);
    if (!h)
        return ENOMEM;
    h->start = (uintptr_t)addr;
    h->len = len;
    h->id = buffer_id(requested);
    cu.cuPointerGetAttribute(&h->sync, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, (CUdeviceptr)requested);
    pthread_mutex_lock(&handles_lock);
    h->next = handles;
    handles = h;
    pthread_mutex_unlock(&handles_lock);
    atomic_fetch_add(&regs, 1);
    *out = h;
    return 0;
}

static struct handle *dereg_log[64];
static atomic_int dereg_count_logged;

static void counting_dereg(void *arg, void *handle)
{
    (void)arg;
    struct handle *h = handle;
    atomic_store(&h->dead, 1);
    if (h == atomic_load(&held_watch))
        atomic_fetch_add(&watch_violations, 1);
    int n = atomic_fetch_add(&dereg_count_logged, 1);
    if (n < 64)
        dereg_log[n] = h;
    atomic_fetch_add(&deregs, 1);
}

static const struct regcache_backend counting = {
    .reg = counting_reg, .dereg = counting_dereg, .arg = NULL, .query = NULL
};

static regcache_t *new_cache(size_t max_bytes)
{
    struct regcache_params p;
    assert_int_equal(regcache_params_init(&p), REGCACHE_OK);
    p.backend = &counting;
    p.validation = REGCACHE_VALIDATE_TAG_CHECK;
    p.max_bytes = max_bytes;
    regcache_t *c = NULL;
    int rc = regcache_create(&p, &c);
    if (rc != REGCACHE_OK)
        fail_msg("regcache_create: %s (%s)", regcache_strerror(rc), regcache_last_error());
    return c;
}

static int reset(void **state)
{
    (void)state;
    atomic_store(&regs, 0);
    atomic_store(&deregs, 0);
    atomic_store(&dereg_count_logged, 0);
    atomic_store(&held_watch, NULL);
    atomic_store(&watch_violations, 0);
    CK(cu.cuCtxSetCurrent(ctx));
    return 0;
}

static int release_handles(void **state)
{
    (void)state;
    assert_int_equal(atomic_load(&regs), atomic_load(&deregs));
    while (handles) {
        struct handle *h = handles;
        handles = h->next;
        free(h);
    }
    return 0;
}

/* get that must succeed, with the handle checked against the memory now. */
static struct handle *get_checked(regcache_t *c, uintptr_t addr, size_t len, regcache_entry_t **e)
{
    requested = addr;
    int rc = regcache_get(c, (const void *)addr, len, e);
    if (rc != REGCACHE_OK)
        fail_msg("regcache_get(%#jx, %zu): %s (%s)", (uintmax_t)addr, len, regcache_strerror(rc),
                 regcache_last_error());
    struct handle *h = regcache_entry_handle(*e);
    assert_false(atomic_load(&h->dead));
    assert_int_equal(h->id, buffer_id(addr));
    assert_true(h->start <= addr && addr + len <= h->start + h->len);
    return h;
}

static int get_status(regcache_t *c, uintptr_t addr, size_t len)
{
    regcache_entry_t *e = (regcache_entry_t *)1;
    requested = addr;
    int rc = regcache_get(c, (const void *)addr, len, &e);
    if (rc == REGCACHE_OK)
        regcache_put(c, e);
    else
        assert_null(e);
    return rc;
}

static struct regcache_stats stats_of(regcache_t *c)
{
    struct regcache_stats s;
    assert_int_equal(regcache_get_stats(c, &s), REGCACHE_OK);
    return s;
}

/* Register [base+offset, +len), then let `replace` free and reallocate the
 * memory at the same address; the next get must register again, for the
 * new id. */
static void expect_reregistration(regcache_t *c, uintptr_t base, size_t offset, size_t len,
                                  uintptr_t (*replace)(uintptr_t), const char *kind)
{
    uintptr_t addr = base + offset;
    regcache_entry_t *e;
    struct handle *first = get_checked(c, addr, len, &e);
    regcache_put(c, e);
    get_checked(c, addr, len, &e); /* a hit */
    regcache_put(c, e);
    long regs_before = atomic_load(&regs);
    unsigned long long old_id = first->id;
    uintptr_t again = replace(base);
    assert_int_equal(again, base); /* the case under test: same address */
    assert_int_not_equal(buffer_id(addr), old_id);
    struct handle *second = get_checked(c, addr, len, &e);
    regcache_put(c, e);
    assert_ptr_not_equal(second, first);
    assert_int_equal(atomic_load(&regs), regs_before + 1);
    assert_true(atomic_load(&first->dead));
    printf("%s: %#jx id %llu -> %llu, re-registered\n", kind, (uintmax_t)addr, old_id, second->id);
}

/* ------------------------------------------------------------------------ */
/* Reallocation at the same address                                          */
/* ------------------------------------------------------------------------ */

static size_t legacy_size;

static uintptr_t legacy_replace(uintptr_t addr)
{
    CUdeviceptr p;
    CK(cu.cuMemFree((CUdeviceptr)addr));
    CK(cu.cuMemAlloc(&p, legacy_size));
    return p;
}

static void legacy_realloc_is_reregistered(void **state)
{
    (void)state;
    regcache_t *c = new_cache(0);
    CUdeviceptr p;
    legacy_size = MIB;
    CK(cu.cuMemAlloc(&p, legacy_size));
    expect_reregistration(c, p, 4096, 8192, legacy_replace, "cuMemAlloc");
    regcache_destroy(c);
    CK(cu.cuMemFree(p));
}

/* The same, in a cache whose index has outgrown L1: its hits on the
 * driver query the tag before they look (hit_path.c), and compare the tag
 * queried then. */
static void legacy_realloc_is_reregistered_past_l1(void **state)
{
    (void)state;
    const size_t region = 64 << 10, pages = rc_page_index_l1_slots();
    regcache_t *c = new_cache(0);
    CUdeviceptr many, p;
    CK(cu.cuMemAlloc(&many, (pages + 1) * region));
    legacy_size = MIB;
    CK(cu.cuMemAlloc(&p, legacy_size));
    for (size_t i = 0; i < pages; i++) {
        regcache_entry_t *e;
        get_checked(c, many + i * region, 4096, &e);
        regcache_put(c, e);
    }
    assert_true(rc_page_index_large(&c->index));
    expect_reregistration(c, p, 4096, 8192, legacy_replace, "cuMemAlloc, index past L1");
    regcache_destroy(c);
    CK(cu.cuMemFree(p));
    CK(cu.cuMemFree(many));
}

static CUstream stream;

static uintptr_t pool_replace(uintptr_t addr)
{
    CUdeviceptr p;
    CK(cu.cuMemFreeAsync((CUdeviceptr)addr, stream));
    CK(cu.cuStreamSynchronize(stream));
    CK(cu.cuMemAllocAsync(&p, MIB, stream));
    CK(cu.cuStreamSynchronize(stream));
    return p;
}

static void pool_reuse_is_reregistered(void **state)
{
    (void)state;
    regcache_t *c = new_cache(0);
    CUdeviceptr p;
    CK(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CK(cu.cuMemAllocAsync(&p, MIB, stream));
    CK(cu.cuStreamSynchronize(stream));
    expect_reregistration(c, p, 0, MIB, pool_replace, "cuMemAllocAsync");
    regcache_destroy(c);
    CK(cu.cuMemFreeAsync(p, stream));
    CK(cu.cuStreamSynchronize(stream));
    CK(cu.cuStreamDestroy(stream));
}

static CUmemAllocationProp vmm_prop;
static CUmemGenericAllocationHandle vmm_handle;
static size_t vmm_size;

static void vmm_map(CUdeviceptr va)
{
    CK(cu.cuMemMap(va, vmm_size, 0, vmm_handle, 0));
    CUmemAccessDesc access = { .location = vmm_prop.location,
                               .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    CK(cu.cuMemSetAccess(va, vmm_size, &access, 1));
}

static regcache_t *vmm_cache;

static uintptr_t vmm_replace(uintptr_t addr)
{
    CK(cu.cuMemUnmap((CUdeviceptr)addr, vmm_size));
    /* Unmapped: nothing to register. */
    assert_int_equal(get_status(vmm_cache, addr, 4096), REGCACHE_ERR_NOT_GPU);
    vmm_map((CUdeviceptr)addr);
    return addr;
}

/* VMM memory of device 0 that GPUDirect RDMA may reach, and its smallest
 * mapping (vmm_size). */
static void vmm_granularity(void)
{
    vmm_prop = (CUmemAllocationProp){
        .type = CU_MEM_ALLOCATION_TYPE_PINNED,
        .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
        .allocFlags = { .gpuDirectRDMACapable = 1 },
    };
    CK(cu.cuMemGetAllocationGranularity(&vmm_size, &vmm_prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
}

static void vmm_remap_is_reregistered(void **state)
{
    (void)state;
    vmm_cache = new_cache(0);
    vmm_granularity();
    CUdeviceptr va;
    /* A reservation twice the mapping: the cache must take the mapping. */
    CK(cu.cuMemAddressReserve(&va, 2 * vmm_size, 0, 0, 0));
    CK(cu.cuMemCreate(&vmm_handle, vmm_size, &vmm_prop, 0));
    vmm_map(va);
    regcache_entry_t *e;
    get_checked(vmm_cache, va, vmm_size, &e);
    uintptr_t start;
    size_t len;
    regcache_entry_range(e, &start, &len);
    assert_int_equal(start, va);
    assert_int_equal(len, vmm_size);
    regcache_put(vmm_cache, e);
    expect_reregistration(vmm_cache, va, 0, vmm_size, vmm_replace, "VMM");
    regcache_destroy(vmm_cache);
    CK(cu.cuMemUnmap(va, vmm_size));
    CK(cu.cuMemRelease(vmm_handle));
    CK(cu.cuMemAddressFree(va, 2 * vmm_size));
}

/* Two 1000-byte allocations in one 64 KiB page: one entry each, each get
 * served by the registration of its own allocation. */
static void packed_small_allocations_stay_apart(void **state)
{
    (void)state;
    regcache_t *c = new_cache(0);
    CUdeviceptr a, b;
    CK(cu.cuMemAlloc(&a, 1000));
    CK(cu.cuMemAlloc(&b, 1000));
    printf("packed: %#jx and %#jx, ids %llu and %llu\n", (uintmax_t)a, (uintmax_t)b, buffer_id(a),
           buffer_id(b));
    assert_int_equal(a / 65536, b / 65536); /* the case under test */
    regcache_entry_t *ea, *eb, *e;
    struct handle *ha = get_checked(c, a, 1000, &ea);
    struct handle *hb = get_checked(c, b, 1000, &eb);
    assert_ptr_not_equal(ha, hb);
    assert_int_equal(ha->start, hb->start);
    assert_ptr_equal(get_checked(c, a + 500, 500, &e), ha);
    regcache_put(c, e);
    assert_ptr_equal(get_checked(c, b + 500, 500, &e), hb);
    regcache_put(c, e);
    /* Across the two: spans two allocations. */
    assert_int_equal(get_status(c, a + 500, 1000), REGCACHE_ERR_RANGE);
    regcache_put(c, ea);
    regcache_put(c, eb);
    assert_int_equal(atomic_load(&regs), 2);
    /* a freed and reallocated: b's entry untouched. */
    legacy_size = 1000;
    assert_int_equal(legacy_replace(a), a);
    assert_ptr_not_equal(get_checked(c, a, 1000, &e), ha);
    regcache_put(c, e);
    assert_ptr_equal(get_checked(c, b, 1000, &e), hb);
    regcache_put(c, e);
    assert_int_equal(atomic_load(&regs), 3);
    regcache_destroy(c);
    CK(cu.cuMemFree(a));
    CK(cu.cuMemFree(b));
}

/* Large allocations and pool allocations packed back to back are one entry
 * each, registered whole. */
static void whole_allocations_of_every_size(void **state)
{
    (void)state;
    regcache_t *c = new_cache(0);
    CK(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    static const size_t sizes[] = { 20 * MIB, 20 * MIB, 20 * MIB, 64 * MIB, 1024 * MIB };
    CUdeviceptr legacy[5], pool[5];
    for (int i = 0; i < 5; i++) {
        CK(cu.cuMemAlloc(&legacy[i], sizes[i]));
        CK(cu.cuMemAllocAsync(&pool[i], sizes[i], stream));
    }
    CK(cu.cuStreamSynchronize(stream));
    for (int i = 0; i < 5; i++) {
        CUdeviceptr kinds[2] = { legacy[i], pool[i] };
        for (int k = 0; k < 2; k++) {
            regcache_entry_t *e;
            get_checked(c, kinds[k], sizes[i], &e);
            uintptr_t start;
            size_t len;
            regcache_entry_range(e, &start, &len);
            assert_true(start <= kinds[k] && kinds[k] + sizes[i] <= start + len);
            assert_true(len < sizes[i] + 2 * 65536);
            regcache_put(c, e);
        }
    }
    assert_int_equal(atomic_load(&regs), 10);
    regcache_destroy(c);
    for (int i = 0; i < 5; i++) {
        CK(cu.cuMemFree(legacy[i]));
        CK(cu.cuMemFreeAsync(pool[i], stream));
    }
    CK(cu.cuStreamSynchronize(stream));
    CK(cu.cuStreamDestroy(stream));
}

/* ------------------------------------------------------------------------ */
/* Refused memory, SYNC_MEMOPS                                               */
/* ------------------------------------------------------------------------ */

static void managed_and_host_memory_are_refused(void **state)
{
    (void)state;
    regcache_t *c = new_cache(0);
    CUdeviceptr m;
    void *pinned;
    char *heap = malloc(MIB);
    CK(cu.cuMemAllocManaged(&m, MIB, CU_MEM_ATTACH_GLOBAL));
    CK(cu.cuMemAllocHost(&pinned, MIB));
    assert_int_equal(get_status(c, m, 4096), REGCACHE_ERR_MANAGED);
    assert_int_equal(get_status(c, (uintptr_t)pinned, 4096), REGCACHE_ERR_NOT_GPU);
    assert_int_equal(get_status(c, (uintptr_t)heap, 4096), REGCACHE_ERR_NOT_GPU);
    assert_int_equal(atomic_load(&regs), 0);
    regcache_destroy(c);
    CK(cu.cuMemFree(m));
    CK(cu.cuMemFreeHost(pinned));
    free(heap);
}

static void sync_memops_is_set_before_the_first_registration(void **state)
{
    (void)state;
    regcache_t *c = new_cache(0);
    CUdeviceptr p;
    CK(cu.cuMemAlloc(&p, MIB));
    assert_int_equal(sync_memops_of(p), 0);
    regcache_entry_t *e;
    struct handle *h = get_checked(c, p, MIB, &e);
    assert_int_equal(h->sync, 1); /* already set when reg ran */
    regcache_put(c, e);
    assert_int_equal(sync_memops_of(p), 1);
    regcache_destroy(c);
    CK(cu.cuMemFree(p));
}

/* ------------------------------------------------------------------------ */
/* dmabuf export                                                             */
/* ------------------------------------------------------------------------ */

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

static void export_checked(uintptr_t addr, size_t len, const char *kind)
{
    int fd = -1;
    uint64_t offset = ~0ull;
    int rc = rc_dmabuf_export(addr, len, &fd, &offset);
    if (rc != REGCACHE_OK)
        fail_msg("%s: rc_dmabuf_export(%#jx, %zu): %s (%s)", kind, (uintmax_t)addr, len,
                 regcache_strerror(rc), regcache_last_error());
    char path[64], target[128] = "";
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    assert_true(n > 0);
    target[n] = '\0';
    printf("dmabuf %-22s %#jx+%zu: fd %d -> %s, offset %ju\n", kind, (uintmax_t)addr, len, fd,
           target, (uintmax_t)offset);
    assert_non_null(strstr(target, "dmabuf"));
    assert_int_equal(offset, addr % (uintptr_t)sysconf(_SC_PAGESIZE));
    close(fd);
}

struct export_job {
    uintptr_t addr;
    size_t len;
    const char *kind;
};

/* On a thread that has no current context (a progress thread). */
static void *export_without_context(void *arg)
{
    const struct export_job *job = arg;
    export_checked(job->addr, job->len, job->kind);
    return NULL;
}

/* A stand-in NIC for the registration after the export (no NIC here): it
 * records whether it was handed a dmabuf, and an MR it never dereferences. */
static int dmabuf_handed;

static struct ibv_mr *record_dmabuf(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova,
                                    int fd, int access)
{
    static char mr[64];
    char path[64], target[128] = "";
    (void)pd, (void)offset, (void)len, (void)iova, (void)access;
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    dmabuf_handed = n > 0 && strstr(target, "dmabuf") != NULL;
    return (struct ibv_mr *)mr;
}

static int no_data_direct(struct ibv_pd *pd, char *why, size_t n)
{
    (void)pd;
    snprintf(why, n, "no NIC");
    return 0;
}

/* Measured: this GPU's driver refuses the PCIe mapping type (H200:
 * NOT_SUPPORTED; GB200 takes it, and there this check does not apply),
 * and the cache's export with mapping AUTO falls back to the default
 * mapping, remembers the refusal, and hands the NIC a dmabuf. */
static void pcie_mapping_refused_and_the_export_falls_back(void **state)
{
    (void)state;
    CUdeviceptr p;
    assert_int_equal(cu.cuMemAlloc(&p, 2 * MIB), CUDA_SUCCESS);
    int fd = -1;
    CUresult r = rc_cuda_api()->MemGetHandleForAddressRange(
        &fd, p, 2 * MIB, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
        CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE);
    const char *name = "?";
    cu.cuGetErrorName(r, &name);
    printf("cuMemGetHandleForAddressRange(DMA_BUF_FD, MAPPING_TYPE_PCIE): %s (%d)\n", name,
           (int)r);
    if (r == CUDA_SUCCESS)
        close(fd);
    assert_true(r == CUDA_ERROR_NOT_SUPPORTED || r == CUDA_ERROR_INVALID_VALUE);

    static const struct rc_verbs_seam nic = { .reg_dmabuf_mr = record_dmabuf,
                                              .data_direct = no_data_direct };
    static struct rc_dmabuf_reg d;
    struct ibv_pd *pd = (struct ibv_pd *)&d;
    struct ibv_mr *mr = NULL;
    rc_verbs_seam_override(&nic);
    assert_int_equal(rc_dmabuf_reg_init(&d, &pd, 1, RC_MAPPING_AUTO, RC_DATA_DIRECT_AUTO),
                     REGCACHE_OK);
    for (int i = 0; i < 2; i++) {
        dmabuf_handed = 0;
        int err = rc_dmabuf_reg(&d, pd, 0, 0, 0, (void *)(uintptr_t)p, 2 * MIB, &mr);
        if (err)
            fail_msg("registration %d: %s (%s)", i, strerror(err), regcache_last_error());
        assert_true(dmabuf_handed);
        assert_true(atomic_load(&d.pcie_refused[0]));
        assert_int_equal(atomic_load(&d.fds), 0);
    }
    rc_verbs_seam_override(NULL);
    char how[512];
    rc_dmabuf_reg_describe(&d, 1, how, sizeof how);
    printf("%s\n", how);
    assert_int_equal(cu.cuMemFree(p), CUDA_SUCCESS);
}

/* Measured: what the driver answers an export when the process has no
 * file descriptor left, and that the cache's export calls that exhaustion
 * (NO_SPACE, errno EMFILE: evict and retry), not a CUDA error. */
static void export_without_fds_is_exhaustion(void **state)
{
    (void)state;
    CUdeviceptr p;
    assert_int_equal(cu.cuMemAlloc(&p, 2 * MIB), CUDA_SUCCESS);
    struct rlimit saved, lim;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved), 0);
    lim = saved;
    lim.rlim_cur = (rlim_t)open_fds() + 16;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &lim), 0);
    int fillers[64], n = 0;
    while (n < 64 && (fillers[n] = eventfd(0, EFD_CLOEXEC)) >= 0)
        n++;
    int fd = -1;
    CUresult r = rc_cuda_api()->MemGetHandleForAddressRange(
        &fd, p, 2 * MIB, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    uint64_t offset;
    int dmabuf = -1;
    int rc = rc_dmabuf_export((uintptr_t)p, 2 * MIB, &dmabuf, &offset);
    int err = errno;
    char why[256];
    snprintf(why, sizeof why, "%s", regcache_last_error());
    while (n)
        close(fillers[--n]);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved), 0);
    const char *name = "?";
    cu.cuGetErrorName(r, &name);
    printf("export with no fd left: %s (%d); the cache's export: %s, errno %d (%s)\n", name,
           (int)r, regcache_err_name(rc), err, why);
    if (r == CUDA_SUCCESS)
        close(fd);
    if (rc == REGCACHE_OK)
        close(dmabuf);
    assert_int_not_equal(r, CUDA_SUCCESS);
    assert_int_equal(rc, REGCACHE_ERR_NO_SPACE);
    assert_int_equal(err, EMFILE);
    assert_int_equal(cu.cuMemFree(p), CUDA_SUCCESS);
}

static void dmabuf_export_of_every_kind(void **state)
{
    (void)state;
    CUdeviceptr legacy, pool, small_pool, va;
    CK(cu.cuMemAlloc(&legacy, 4 * MIB));
    CK(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CK(cu.cuMemAllocAsync(&pool, MIB, stream));
    CK(cu.cuMemAllocAsync(&small_pool, 1000, stream));
    CK(cu.cuStreamSynchronize(stream));
    vmm_granularity();
    CK(cu.cuMemAddressReserve(&va, vmm_size, 0, 0, 0));
    CK(cu.cuMemCreate(&vmm_handle, vmm_size, &vmm_prop, 0));
    vmm_map(va);

    /* The driver may keep files of its own open after its first export:
     * count from after it. */
    export_checked(legacy, 4 * MIB, "cuMemAlloc");
    int fds = open_fds();
    export_checked(legacy + 8192, 4096, "cuMemAlloc 4K sub-range");
    export_checked(legacy + 8192 + 100, 5000, "cuMemAlloc unaligned");
    export_checked(pool, MIB, "cuMemAllocAsync");
    export_checked(va, vmm_size, "VMM");
    struct export_job jobs[] = { { legacy, MIB, "no context, cuMemAlloc" },
                                 { pool, MIB, "no context, pool" },
                                 { va, vmm_size, "no context, VMM" } };
    for (size_t i = 0; i < sizeof jobs / sizeof jobs[0]; i++) {
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, export_without_context, &jobs[i]), 0);
        pthread_join(t, NULL);
    }
    /* What the verbs backend meets with a small pool allocation: its host
     * page, and the 64 KiB registration page around it (informational). */
    int fd = -1;
    uint64_t offset;
    for (size_t page = 4096; page <= 65536; page *= 16) {
        int rc = rc_dmabuf_export(small_pool & ~(uintptr_t)(page - 1), page, &fd, &offset);
        printf("dmabuf %zu-byte page around a 1000-byte pool allocation: %s %s\n", page,
               regcache_strerror(rc), rc == REGCACHE_OK ? "" : regcache_last_error());
        if (rc == REGCACHE_OK)
            close(fd);
    }

    /* A failing export leaves no fd behind either. */
    CUdeviceptr gone;
    CK(cu.cuMemAlloc(&gone, MIB));
    CK(cu.cuMemFree(gone));
    fd = -1;
    int rc = rc_dmabuf_export(gone, MIB, &fd, &offset);
    printf("dmabuf of freed memory: %s (%s)\n", regcache_strerror(rc), regcache_last_error());
    assert_int_not_equal(rc, REGCACHE_OK);
    assert_int_equal(fd, -1);
    assert_int_equal(open_fds(), fds);

    assert_int_equal(rc_dmabuf_supported(0), 1);
    CK(cu.cuMemUnmap(va, vmm_size));
    CK(cu.cuMemRelease(vmm_handle));
    CK(cu.cuMemAddressFree(va, vmm_size));
    CK(cu.cuMemFreeAsync(pool, stream));
    CK(cu.cuMemFreeAsync(small_pool, stream));
    CK(cu.cuStreamSynchronize(stream));
    CK(cu.cuStreamDestroy(stream));
    CK(cu.cuMemFree(legacy));
}

/* ------------------------------------------------------------------------ */
/* Budget                                                                    */
/* ------------------------------------------------------------------------ */

#define BUDGET_ALLOCS 8

static void budget_evicts_lru_and_never_a_held_entry(void **state)
{
    (void)state;
    regcache_t *c = new_cache(3 * MIB);
    CUdeviceptr p[BUDGET_ALLOCS];
    struct handle *h[BUDGET_ALLOCS];
    regcache_entry_t *e, *held;
    for (int i = 0; i < BUDGET_ALLOCS; i++)
        CK(cu.cuMemAlloc(&p[i], MIB));
    /* Held for the whole test. */
    struct handle *keep = get_checked(c, p[0], MIB, &held);
    atomic_store(&held_watch, keep);
    h[1] = get_checked(c, p[1], MIB, &e);
    regcache_put(c, e);
    h[2] = get_checked(c, p[2], MIB, &e);
    regcache_put(c, e);
    /* 3 MiB in use; one more evicts the least recently used unused one. */
    h[3] = get_checked(c, p[3], MIB, &e);
    regcache_put(c, e);
    assert_true(atomic_load(&dereg_count_logged) >= 1);
    assert_ptr_equal(dereg_log[0], h[1]);
    assert_false(atomic_load(&h[2]->dead));
    /* Churn: every other allocation over and over. */
    for (int round = 0; round < 50; round++) {
        for (int i = 1; i < BUDGET_ALLOCS; i++) {
            get_checked(c, p[i], MIB, &e);
            regcache_put(c, e);
            assert_true(stats_of(c).bytes <= 3 * MIB);
        }
    }
    struct regcache_stats s = stats_of(c);
    printf("budget 3 MiB: evictions %ju, registrations %ju, bytes %ju, peak %ju\n",
           (uintmax_t)s.evictions, (uintmax_t)s.registrations, (uintmax_t)s.bytes,
           (uintmax_t)s.peak_bytes);
    assert_true(s.evictions > 0);
    assert_int_equal(atomic_load(&watch_violations), 0);
    assert_false(atomic_load(&keep->dead));
    assert_ptr_equal(get_checked(c, p[0], MIB, &e), keep);
    regcache_put(c, e);
    atomic_store(&held_watch, NULL);
    regcache_put(c, held);
    regcache_destroy(c);
    for (int i = 0; i < BUDGET_ALLOCS; i++)
        CK(cu.cuMemFree(p[i]));
}

/* ------------------------------------------------------------------------ */
/* Threads against a reallocator                                             */
/* ------------------------------------------------------------------------ */

#define SLOTS 8
#define GETTERS 16
#define GETS_PER_THREAD 20000
#define REALLOCS 2000

/* A getter holds its slot's lock shared from get to put, so the memory it
 * checks is live; the reallocator takes it exclusively around free+alloc. */
struct slot {
    pthread_rwlock_t lock;
    CUdeviceptr addr;
};

static struct slot slots[SLOTS];
static regcache_t *stress_cache;
static atomic_int wrong, moved; /* stale handle or failed get */
static atomic_bool stop;

static void *getter(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    for (int i = 0; i < GETS_PER_THREAD; i++) {
        struct slot *s = &slots[rand_r(&seed) % SLOTS];
        size_t offset = (rand_r(&seed) % 256) * 4096;
        pthread_rwlock_rdlock(&s->lock);
        uintptr_t addr = s->addr + offset;
        regcache_entry_t *e;
        requested = addr;
        if (regcache_get(stress_cache, (const void *)addr, 4096, &e) != REGCACHE_OK) {
            atomic_fetch_add(&wrong, 1);
        } else {
            struct handle *h = regcache_entry_handle(e);
            if (atomic_load(&h->dead) || h->id != buffer_id(addr))
                atomic_fetch_add(&wrong, 1);
            regcache_put(stress_cache, e);
        }
        pthread_rwlock_unlock(&s->lock);
    }
    return NULL;
}

static void *reallocator(void *arg)
{
    (void)arg;
    unsigned seed = 1;
    cu.cuCtxSetCurrent(ctx);
    for (int i = 0; i < REALLOCS && !atomic_load(&stop); i++) {
        struct slot *s = &slots[rand_r(&seed) % SLOTS];
        pthread_rwlock_wrlock(&s->lock);
        CUdeviceptr old = s->addr;
        if (cu.cuMemFree(old) != CUDA_SUCCESS || cu.cuMemAlloc(&s->addr, MIB) != CUDA_SUCCESS)
            abort();
        if (s->addr != old)
            atomic_fetch_add(&moved, 1);
        pthread_rwlock_unlock(&s->lock);
    }
    return NULL;
}

static void threads_never_see_a_stale_handle(void **state)
{
    (void)state;
    stress_cache = new_cache(0);
    for (int i = 0; i < SLOTS; i++) {
        pthread_rwlock_init(&slots[i].lock, NULL);
        CK(cu.cuMemAlloc(&slots[i].addr, MIB));
    }
    atomic_store(&wrong, 0);
    atomic_store(&moved, 0);
    atomic_store(&stop, false);
    pthread_t g[GETTERS], r;
    assert_int_equal(pthread_create(&r, NULL, reallocator, NULL), 0);
    for (int i = 0; i < GETTERS; i++)
        assert_int_equal(pthread_create(&g[i], NULL, getter, (void *)(uintptr_t)(i + 1)), 0);
    for (int i = 0; i < GETTERS; i++)
        pthread_join(g[i], NULL);
    atomic_store(&stop, true);
    pthread_join(r, NULL);
    struct regcache_stats s = stats_of(stress_cache);
    printf("16 getters x %d gets, reallocations moved %d times: hits %ju misses %ju "
           "registrations %ju invalidations_tag %ju, stale or failed %d\n",
           GETS_PER_THREAD, atomic_load(&moved), (uintmax_t)s.hits, (uintmax_t)s.misses,
           (uintmax_t)s.registrations, (uintmax_t)s.invalidations_tag, atomic_load(&wrong));
    assert_int_equal(atomic_load(&wrong), 0);
    assert_true(s.invalidations_tag > 0);
    regcache_destroy(stress_cache);
    for (int i = 0; i < SLOTS; i++) {
        CK(cu.cuMemFree(slots[i].addr));
        pthread_rwlock_destroy(&slots[i].lock);
    }
}

/* ------------------------------------------------------------------------ */
/* The BAR1 budget                                                            */
/* ------------------------------------------------------------------------ */

/* Where NVML is there, it gives device 0 a BAR1 budget (how long the cache's
 * calls take is the benchmark's business: bench/cuda.c, bench/hits.c). */
static void bar1_budget_of_device_0_is_read(void **state)
{
    (void)state;
    /* NVML ships with the driver: where the driver runs, it must load. */
    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!nvml)
        fail_msg("libnvidia-ml.so.1 cannot be loaded beside the driver: %s", dlerror());
    dlclose(nvml);
    size_t budget = rc_bar1_budget(0);
    printf("BAR1 budget of device 0: %zu MiB\n", budget / MIB);
    assert_true(budget > 0);
}

int main(void)
{
    const char *why = driver_missing();
    if (why) {
        printf("skipped: %s\n", why);
        return 77;
    }
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, reset, release_handles)
        T(legacy_realloc_is_reregistered),      T(legacy_realloc_is_reregistered_past_l1),
        T(pool_reuse_is_reregistered),          T(vmm_remap_is_reregistered),
        T(packed_small_allocations_stay_apart), T(whole_allocations_of_every_size),
        T(managed_and_host_memory_are_refused), T(sync_memops_is_set_before_the_first_registration),
        T(dmabuf_export_of_every_kind),         T(budget_evicts_lru_and_never_a_held_entry),
        T(threads_never_see_a_stale_handle),    T(bar1_budget_of_device_0_is_read),
        T(pcie_mapping_refused_and_the_export_falls_back),
        T(export_without_fds_is_exhaustion),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
