/* What every GPU cache test shares: the driver calls the tests make
 * themselves, a counting backend, and checked gets (gpu_cache.h). */
#include "gpu_cache.h"

#define STR(x) #x
#define NAME(x) STR(x)

/* ------------------------------------------------------------------------ */
/* The driver calls the test makes itself                                   */
/* ------------------------------------------------------------------------ */

struct cu_calls cu;

CUcontext ctx;
CUdevice dev;

/* NULL when the driver is there and has a GPU; else why not. */
const char *driver_missing(void)
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

unsigned long long buffer_id(uintptr_t addr)
{
    unsigned long long id = 0;
    if (cu.cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)addr) !=
        CUDA_SUCCESS)
        return 0;
    return id;
}

unsigned int sync_memops_of(uintptr_t addr)
{
    unsigned int v = 7;
    CK(cu.cuPointerGetAttribute(&v, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, (CUdeviceptr)addr));
    return v;
}

/* ------------------------------------------------------------------------ */
/* A counting backend                                                        */
/* ------------------------------------------------------------------------ */

atomic_long regs, deregs;
static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
static struct handle *handles;
/* The address the calling thread asked regcache_get for: reg runs in that
 * thread and records what the memory there is. */
_Thread_local uintptr_t requested;
struct handle *_Atomic held_watch; /* must never be deregistered */
atomic_int watch_violations;

static int counting_reg(void *arg, void *addr, size_t len, int device, int rail, void **out)
{
    (void)arg;
    (void)device, (void)rail;
    struct handle *h = calloc(1, sizeof *h);
    if (!h)
        return ENOMEM;
    h->start = (uintptr_t)addr;
    h->len = len;
    /* A backend's own driver calls, like the library's, must leave an
     * application's stream capture alone. */
    struct rc_relaxed mode = rc_relax(cu.cuThreadExchangeStreamCaptureMode);
    h->id = buffer_id(requested);
    cu.cuPointerGetAttribute(&h->sync, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, (CUdeviceptr)requested);
    rc_unrelax(cu.cuThreadExchangeStreamCaptureMode, &mode);
    pthread_mutex_lock(&handles_lock);
    h->next = handles;
    handles = h;
    pthread_mutex_unlock(&handles_lock);
    atomic_fetch_add(&regs, 1);
    *out = h;
    return 0;
}

struct handle *dereg_log[64];
atomic_int dereg_count_logged;

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

regcache_t *new_cache_validated(size_t max_bytes, enum regcache_validation validation)
{
    struct regcache_params p;
    assert_int_equal(regcache_params_init(&p), REGCACHE_OK);
    p.backend = &counting;
    p.validation = validation;
    p.max_bytes = max_bytes;
    regcache_t *c = NULL;
    int rc = regcache_create(&p, &c);
    if (rc != REGCACHE_OK)
        printf("regcache_create: %s (%s)\n", regcache_strerror(rc), regcache_last_error());
    return c;
}

regcache_t *new_cache(size_t max_bytes)
{
    regcache_t *c = new_cache_validated(max_bytes, REGCACHE_VALIDATE_TAG_CHECK);
    if (!c)
        fail_msg("regcache_create failed");
    return c;
}

int reset(void **state)
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

int release_handles(void **state)
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
struct handle *get_checked(regcache_t *c, uintptr_t addr, size_t len, regcache_entry_t **e)
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

int get_status(regcache_t *c, uintptr_t addr, size_t len)
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

struct regcache_stats stats_of(regcache_t *c)
{
    struct regcache_stats s;
    assert_int_equal(regcache_get_stats(c, &s), REGCACHE_OK);
    return s;
}

/* Register [base+offset, +len), then let `replace` free and reallocate the
 * memory at the same address; the next get must register again, for the
 * new id. */
void expect_reregistration(regcache_t *c, uintptr_t base, size_t offset, size_t len,
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

/* A stream of the test's own, for stream-ordered allocations. */
CUstream stream;

CUmemAllocationProp vmm_prop;
CUmemGenericAllocationHandle vmm_handle;
size_t vmm_size;

void vmm_map(CUdeviceptr va)
{
    CK(cu.cuMemMap(va, vmm_size, 0, vmm_handle, 0));
    CUmemAccessDesc access = { .location = vmm_prop.location,
                               .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    CK(cu.cuMemSetAccess(va, vmm_size, &access, 1));
}

/* VMM memory of device 0 that GPUDirect RDMA may reach, and its smallest
 * mapping (vmm_size). */
void vmm_granularity(void)
{
    vmm_prop = (CUmemAllocationProp){
        .type = CU_MEM_ALLOCATION_TYPE_PINNED,
        .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
        .allocFlags = { .gpuDirectRDMACapable = 1 },
    };
    CK(cu.cuMemGetAllocationGranularity(&vmm_size, &vmm_prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
}
