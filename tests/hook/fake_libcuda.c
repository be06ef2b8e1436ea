/* The libcuda test double (see fake_libcuda.h). */
#include "fake_libcuda.h"

#include <cuda.h>
#include <dlfcn.h>
#include <string.h>

/* cuda.h maps these to the newest ABI; the fake defines every ABI. */
#undef cuGetProcAddress
#undef cuMemFree
#undef cuMemAlloc
#undef cuCtxDestroy
#undef cuDevicePrimaryCtxReset
#undef cuDevicePrimaryCtxRelease

#define FAKECUDA_ARENA ((uintptr_t)0x200000000000ull)
#define FAKECUDA_SLOTS 64
#define FAKECUDA_EVENTS 4096

#define API __attribute__((visibility("default")))

static struct slot {
    int live, host, reserved;
    size_t size;
    uint64_t id;
} slots[FAKECUDA_SLOTS];
static uint64_t next_id = 1;
static struct fakecuda_event events[FAKECUDA_EVENTS];
static size_t n_events;

void fakecuda_reset(void)
{
    memset(slots, 0, sizeof slots);
    n_events = 0;
}

size_t fakecuda_events(const struct fakecuda_event **out)
{
    *out = events;
    return n_events;
}

static void log_event(enum fakecuda_event_type type, const char *fn, uintptr_t addr,
                      size_t len, int live)
{
    if (n_events < FAKECUDA_EVENTS)
        events[n_events++] = (struct fakecuda_event){ type, fn, addr, len, live };
}

static struct slot *slot_of(uintptr_t addr)
{
    if (addr < FAKECUDA_ARENA)
        return NULL;
    uintptr_t i = (addr - FAKECUDA_ARENA) / FAKECUDA_SLOT_SIZE;
    return i < FAKECUDA_SLOTS ? &slots[i] : NULL;
}

static uintptr_t base_of(const struct slot *s)
{
    return FAKECUDA_ARENA + (uintptr_t)(s - slots) * FAKECUDA_SLOT_SIZE;
}

int fakecuda_describe(uintptr_t addr, uintptr_t *base, size_t *size, uint64_t *id,
                      int *host)
{
    struct slot *s = slot_of(addr);
    if (s == NULL || !s->live || addr >= base_of(s) + s->size)
        return -1;
    *base = base_of(s);
    *size = s->size;
    *id = s->id;
    *host = s->host;
    return 0;
}

void fakecuda_log_dereg(uintptr_t addr, size_t len)
{
    uintptr_t base;
    size_t size;
    uint64_t id;
    int host;
    log_event(FAKECUDA_DEREG, NULL, addr, len,
              fakecuda_describe(addr, &base, &size, &id, &host) == 0);
}

/* Like the real driver, the lowest free address comes back first, so a
 * free and a new allocation of the same size meet at the same address. */
static void make_live(struct slot *s, size_t size, int host)
{
    s->live = 1;
    s->host = host;
    s->size = size;
    s->id = next_id++;
}

uintptr_t fakecuda_alloc_unhooked(size_t size, int host)
{
    if (size == 0 || size > FAKECUDA_SLOT_SIZE)
        return 0;
    for (int i = 0; i < FAKECUDA_SLOTS; i++)
        if (!slots[i].live && !slots[i].reserved) {
            make_live(&slots[i], size, host);
            return base_of(&slots[i]);
        }
    return 0;
}

void fakecuda_free_unhooked(uintptr_t addr)
{
    struct slot *s = slot_of(addr);
    if (s)
        s->live = 0;
}

/* A free as the driver does it: logged first, while the memory is live. */
static CUresult free_logged(const char *fn, uintptr_t addr)
{
    struct slot *s = slot_of(addr);
    if (s == NULL || !s->live || base_of(s) != addr)
        return CUDA_ERROR_INVALID_VALUE;
    log_event(FAKECUDA_CALL, fn, addr, s->size, 1);
    s->live = 0;
    return CUDA_SUCCESS;
}

static CUresult alloc_logged(const char *fn, CUdeviceptr *ptr, size_t size)
{
    uintptr_t addr = fakecuda_alloc_unhooked(size, 0);
    if (addr == 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *ptr = addr;
    log_event(FAKECUDA_CALL, fn, addr, size, 1);
    return CUDA_SUCCESS;
}

static CUresult context_gone(const char *fn)
{
    log_event(FAKECUDA_CALL, fn, 0, 0, 1);
    for (int i = 0; i < FAKECUDA_SLOTS; i++)
        slots[i].live = slots[i].reserved = 0;
    return CUDA_SUCCESS;
}

API CUresult cuInit(unsigned int flags)
{
    (void)flags;
    return CUDA_SUCCESS;
}

/* Device and pinned host memory alike, as the real driver answers. */
API CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr ptr)
{
    uintptr_t b;
    uint64_t id;
    int host;
    if (fakecuda_describe(ptr, &b, size, &id, &host) != 0)
        return CUDA_ERROR_NOT_FOUND;
    *base = b;
    return CUDA_SUCCESS;
}

API CUresult cuMemFree(unsigned int ptr)
{
    return free_logged(__func__, ptr);
}

API CUresult cuMemFree_v2(CUdeviceptr ptr)
{
    return free_logged(__func__, ptr);
}

API CUresult cuIpcCloseMemHandle(CUdeviceptr ptr)
{
    return free_logged(__func__, ptr);
}

API CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream stream)
{
    (void)stream;
    return free_logged(__func__, ptr);
}

API CUresult cuMemFreeAsync_ptsz(CUdeviceptr ptr, CUstream stream);
API CUresult cuMemFreeAsync_ptsz(CUdeviceptr ptr, CUstream stream)
{
    (void)stream;
    return free_logged(__func__, ptr);
}

API CUresult cuMemFreeHost(void *ptr)
{
    return free_logged(__func__, (uintptr_t)ptr);
}

API CUresult cuMemAllocHost_v2(void **ptr, size_t size)
{
    *ptr = (void *)fakecuda_alloc_unhooked(size, 1);
    return *ptr ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    (void)size;
    return free_logged(__func__, ptr);
}

API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                 CUdeviceptr addr, unsigned long long flags)
{
    (void)alignment, (void)addr, (void)flags;
    if (size > FAKECUDA_SLOT_SIZE)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < FAKECUDA_SLOTS; i++)
        if (!slots[i].live && !slots[i].reserved) {
            slots[i].reserved = 1;
            *ptr = base_of(&slots[i]);
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_OUT_OF_MEMORY;
}

API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    struct slot *s = slot_of(ptr);
    if (s == NULL || !s->reserved || s->live)
        return CUDA_ERROR_INVALID_VALUE;
    log_event(FAKECUDA_CALL, __func__, ptr, size, 1);
    s->reserved = 0;
    return CUDA_SUCCESS;
}

API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                      CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    (void)offset, (void)handle, (void)flags;
    struct slot *s = slot_of(ptr);
    if (s == NULL || !s->reserved || s->live || size > FAKECUDA_SLOT_SIZE)
        return CUDA_ERROR_INVALID_VALUE;
    make_live(s, size, 0);
    log_event(FAKECUDA_CALL, __func__, ptr, size, 1);
    return CUDA_SUCCESS;
}

API CUresult cuCtxDestroy(CUcontext ctx)
{
    (void)ctx;
    return context_gone(__func__);
}

API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    (void)ctx;
    return context_gone(__func__);
}

API CUresult cuDevicePrimaryCtxReset(CUdevice device)
{
    (void)device;
    return context_gone(__func__);
}

API CUresult cuDevicePrimaryCtxReset_v2(CUdevice device)
{
    (void)device;
    return context_gone(__func__);
}

API CUresult cuDevicePrimaryCtxRelease(CUdevice device)
{
    (void)device;
    return context_gone(__func__);
}

API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device)
{
    (void)device;
    return context_gone(__func__);
}

API CUresult cuMemAlloc(unsigned int *ptr, unsigned int size)
{
    (void)ptr, (void)size;
    return CUDA_ERROR_NOT_SUPPORTED;
}

API CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t size)
{
    return alloc_logged(__func__, ptr, size);
}

API CUresult cuMemAllocAsync(CUdeviceptr *ptr, size_t size, CUstream stream)
{
    (void)stream;
    return alloc_logged(__func__, ptr, size);
}

API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *ptr, size_t size, CUstream stream);
API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *ptr, size_t size, CUstream stream)
{
    (void)stream;
    return alloc_logged(__func__, ptr, size);
}

API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *ptr, size_t size, CUmemoryPool pool,
                                     CUstream stream)
{
    (void)pool, (void)stream;
    return alloc_logged(__func__, ptr, size);
}

API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *ptr, size_t size,
                                          CUmemoryPool pool, CUstream stream);
API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *ptr, size_t size,
                                          CUmemoryPool pool, CUstream stream)
{
    (void)pool, (void)stream;
    return alloc_logged(__func__, ptr, size);
}

API CUresult cuGetProcAddress(const char *symbol, void **pfn, int version,
                              cuuint64_t flags);
API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                 cuuint64_t flags, CUdriverProcAddressQueryResult *status);

/* What cuGetProcAddress hands out: per name, the newest ABI not newer than
 * the version asked, and the per-thread-stream function on that flag. */
static const struct proc {
    const char *name;
    int version, ptsz;
    void *fn;
} procs[] = {
    { "cuInit", 2000, 0, (void *)cuInit },
    { "cuMemGetAddressRange", 3020, 0, (void *)cuMemGetAddressRange_v2 },
    { "cuGetProcAddress", 11030, 0, (void *)cuGetProcAddress },
    { "cuGetProcAddress", 12000, 0, (void *)cuGetProcAddress_v2 },
    { "cuMemFree", 2000, 0, (void *)cuMemFree },
    { "cuMemFree", 3020, 0, (void *)cuMemFree_v2 },
    { "cuIpcCloseMemHandle", 4010, 0, (void *)cuIpcCloseMemHandle },
    { "cuMemFreeAsync", 11020, 0, (void *)cuMemFreeAsync },
    { "cuMemFreeAsync", 11020, 1, (void *)cuMemFreeAsync_ptsz },
    { "cuMemFreeHost", 2000, 0, (void *)cuMemFreeHost },
    { "cuMemUnmap", 10020, 0, (void *)cuMemUnmap },
    { "cuMemAddressFree", 10020, 0, (void *)cuMemAddressFree },
    { "cuCtxDestroy", 2000, 0, (void *)cuCtxDestroy },
    { "cuCtxDestroy", 4000, 0, (void *)cuCtxDestroy_v2 },
    { "cuDevicePrimaryCtxReset", 7000, 0, (void *)cuDevicePrimaryCtxReset },
    { "cuDevicePrimaryCtxReset", 11000, 0, (void *)cuDevicePrimaryCtxReset_v2 },
    { "cuDevicePrimaryCtxRelease", 7000, 0, (void *)cuDevicePrimaryCtxRelease },
    { "cuDevicePrimaryCtxRelease", 11000, 0, (void *)cuDevicePrimaryCtxRelease_v2 },
    { "cuMemAlloc", 2000, 0, (void *)cuMemAlloc },
    { "cuMemAlloc", 3020, 0, (void *)cuMemAlloc_v2 },
    { "cuMemAllocAsync", 11020, 0, (void *)cuMemAllocAsync },
    { "cuMemAllocAsync", 11020, 1, (void *)cuMemAllocAsync_ptsz },
    { "cuMemAllocFromPoolAsync", 11020, 0, (void *)cuMemAllocFromPoolAsync },
    { "cuMemAllocFromPoolAsync", 11020, 1, (void *)cuMemAllocFromPoolAsync_ptsz },
    { "cuMemMap", 10020, 0, (void *)cuMemMap },
};

static void *find_proc(const char *symbol, int version, int ptsz)
{
    const struct proc *best = NULL;
    for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++)
        if (procs[i].ptsz == ptsz && procs[i].version <= version &&
            strcmp(procs[i].name, symbol) == 0 &&
            (best == NULL || procs[i].version > best->version))
            best = &procs[i];
    return best ? best->fn : NULL;
}

API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                 cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    void *fn = NULL;
    if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
        fn = find_proc(symbol, version, 1);
    if (fn == NULL)
        fn = find_proc(symbol, version, 0);
    *pfn = fn;
    if (status)
        *status = fn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return fn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

API CUresult cuGetProcAddress(const char *symbol, void **pfn, int version,
                              cuuint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}

void *fakecuda_own(const char *symbol)
{
    /* glibc's dlsym (the hook's would wrap), on this library's handle. */
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    void *real = libc ? dlvsym(libc, "dlsym", "GLIBC_2.34") : NULL;
    if (real == NULL && libc != NULL)
        real = dlvsym(libc, "dlsym", "GLIBC_2.2.5");
    Dl_info self;
    void *me = dladdr((void *)fakecuda_own, &self)
                   ? dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD)
                   : NULL;
    return real && me ? ((void *(*)(void *, const char *))real)(me, symbol) : NULL;
}
