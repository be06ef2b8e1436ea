/* The libcuda test double (see fake_libcuda.h). */
#include "fake_libcuda.h"

#include <cuda.h>
#include <dlfcn.h>
#include <string.h>

/* cuda.h maps these to the newest ABI; the fake defines every ABI. */
#undef cuGetProcAddress
#undef cuMemFree
#undef cuMemAlloc
#undef cuMemAllocHost
#undef cuCtxDestroy
#undef cuDevicePrimaryCtxReset
#undef cuDevicePrimaryCtxRelease

#define FAKECUDA_ARENA ((uintptr_t)0x200000000000ull)
#define FAKECUDA_SLOTS 64
#define FAKECUDA_EVENTS 4096

#define API __attribute__((visibility("default")))

/* The functions the in-process interception patches.  Built with
 * FAKECUDA_MEASURED_PROLOGUE, each export is an assembly entry (below) that
 * starts with the bytes measured at libcuda's and runs the C body
 * <name>_body; otherwise the C function is the export. */
#ifdef FAKECUDA_MEASURED_PROLOGUE
#define PATCHED(name, params) \
    API CUresult name params; \
    static __attribute__((used)) CUresult name##_body params
#else
#define PATCHED(name, params) API CUresult name params
#endif

static struct slot {
    int live, host, reserved;
    size_t size;
    uint64_t id;
} slots[FAKECUDA_SLOTS];
static uint64_t next_id = 1;
static struct fakecuda_event events[FAKECUDA_EVENTS];
static size_t n_events;

/* Stream capture (fake_libcuda.h): each thread's interaction mode, 0 being
 * GLOBAL, and the captures in progress. */
static _Thread_local CUstreamCaptureMode thread_mode;
static struct {
    int active, invalidated;
    CUstreamCaptureMode mode;
    const void *owner;
} captures[4];
static int refusals;

/* A restricted thread's call of an unsafe function: refused, and the
 * captures that restrict the thread invalidated. */
static int refused_by_capture(void)
{
    int refused = 0;
    if (thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return 0;
    for (size_t i = 0; i < sizeof captures / sizeof captures[0]; i++) {
        int own = captures[i].owner == &thread_mode;
        if (captures[i].active && ((own && captures[i].mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
                                   (!own && thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                                    captures[i].mode == CU_STREAM_CAPTURE_MODE_GLOBAL))) {
            captures[i].invalidated = 1;
            refused = 1;
        }
    }
    refusals += refused;
    return refused;
}

#define UNSAFE()                                          \
    do {                                                  \
        if (refused_by_capture())                         \
            return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; \
    } while (0)

int fakecuda_capture_begin(int mode)
{
    for (int i = 0; i < (int)(sizeof captures / sizeof captures[0]); i++)
        if (!captures[i].active) {
            captures[i].active = 1;
            captures[i].invalidated = 0;
            captures[i].mode = (CUstreamCaptureMode)mode;
            captures[i].owner = &thread_mode;
            return i;
        }
    return -1;
}

int fakecuda_capture_end(int i)
{
    captures[i].active = 0;
    return captures[i].invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
}

int fakecuda_thread_mode(void)
{
    return thread_mode;
}

int fakecuda_capture_refusals(void)
{
    return refusals;
}

API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    CUstreamCaptureMode was = thread_mode;
    thread_mode = *mode;
    *mode = was;
    return CUDA_SUCCESS;
}

void fakecuda_reset(void)
{
    memset(slots, 0, sizeof slots);
    n_events = 0;
    memset(captures, 0, sizeof captures);
    refusals = 0;
    thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
}

size_t fakecuda_events(const struct fakecuda_event **out)
{
    *out = events;
    return n_events;
}

static void log_event(enum fakecuda_event_type type, const char *fn, uintptr_t addr, size_t len,
                      int live)
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

int fakecuda_describe(uintptr_t addr, uintptr_t *base, size_t *size, uint64_t *id, int *host)
{
    struct slot *s = slot_of(addr);
    if (!s || !s->live || addr >= base_of(s) + s->size)
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
    if (!s || !s->live || base_of(s) != addr)
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

/* Like the driver, no pointer to fill in is refused before anything. */
static CUresult host_alloc_logged(const char *fn, void **ptr, size_t size)
{
    if (!ptr)
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t addr = fakecuda_alloc_unhooked(size, 1);
    if (addr == 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *ptr = (void *)addr;
    log_event(FAKECUDA_CALL, fn, addr, size, 1);
    return CUDA_SUCCESS;
}

/* Like the driver, the context calls refuse a NULL context and a negative
 * device without touching anything. */
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

API CUresult cuDriverGetVersion(int *version)
{
    *version = 13000;
    return CUDA_SUCCESS;
}

/* Device and pinned host memory alike, as the real driver answers. */
API CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr ptr)
{
    UNSAFE();
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
    UNSAFE();
    return free_logged(__func__, ptr);
}

PATCHED(cuMemFree_v2, (CUdeviceptr ptr))
{
    UNSAFE();
    return free_logged("cuMemFree_v2", ptr);
}

PATCHED(cuIpcCloseMemHandle, (CUdeviceptr ptr))
{
    UNSAFE();
    return free_logged("cuIpcCloseMemHandle", ptr);
}

PATCHED(cuMemFreeAsync, (CUdeviceptr ptr, CUstream stream))
{
    (void)stream;
    return free_logged("cuMemFreeAsync", ptr);
}

PATCHED(cuMemFreeAsync_ptsz, (CUdeviceptr ptr, CUstream stream))
{
    (void)stream;
    return free_logged("cuMemFreeAsync_ptsz", ptr);
}

PATCHED(cuMemFreeHost, (void *ptr))
{
    UNSAFE();
    return free_logged("cuMemFreeHost", (uintptr_t)ptr);
}

PATCHED(cuMemHostUnregister, (void *ptr))
{
    UNSAFE();
    return free_logged("cuMemHostUnregister", (uintptr_t)ptr);
}

PATCHED(cuMemUnmap, (CUdeviceptr ptr, size_t size))
{
    UNSAFE();
    (void)size;
    return free_logged("cuMemUnmap", ptr);
}

API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                 unsigned long long flags)
{
    UNSAFE();
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

PATCHED(cuMemAddressFree, (CUdeviceptr ptr, size_t size))
{
    UNSAFE();
    struct slot *s = slot_of(ptr);
    if (!s || !s->reserved || s->live)
        return CUDA_ERROR_INVALID_VALUE;
    log_event(FAKECUDA_CALL, "cuMemAddressFree", ptr, size, 1);
    s->reserved = 0;
    return CUDA_SUCCESS;
}

PATCHED(cuMemMap, (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                   unsigned long long flags))
{
    UNSAFE();
    (void)offset, (void)handle, (void)flags;
    struct slot *s = slot_of(ptr);
    if (!s || !s->reserved || s->live || size > FAKECUDA_SLOT_SIZE)
        return CUDA_ERROR_INVALID_VALUE;
    make_live(s, size, 0);
    log_event(FAKECUDA_CALL, "cuMemMap", ptr, size, 1);
    return CUDA_SUCCESS;
}

PATCHED(cuCtxDestroy, (CUcontext ctx))
{
    UNSAFE();
    return ctx ? context_gone("cuCtxDestroy") : CUDA_ERROR_INVALID_VALUE;
}

PATCHED(cuCtxDestroy_v2, (CUcontext ctx))
{
    UNSAFE();
    return ctx ? context_gone("cuCtxDestroy_v2") : CUDA_ERROR_INVALID_VALUE;
}

PATCHED(cuDevicePrimaryCtxReset, (CUdevice device))
{
    UNSAFE();
    return device >= 0 ? context_gone("cuDevicePrimaryCtxReset") : CUDA_ERROR_INVALID_DEVICE;
}

PATCHED(cuDevicePrimaryCtxReset_v2, (CUdevice device))
{
    UNSAFE();
    return device >= 0 ? context_gone("cuDevicePrimaryCtxReset_v2") : CUDA_ERROR_INVALID_DEVICE;
}

PATCHED(cuDevicePrimaryCtxRelease, (CUdevice device))
{
    UNSAFE();
    return device >= 0 ? context_gone("cuDevicePrimaryCtxRelease") : CUDA_ERROR_INVALID_DEVICE;
}

PATCHED(cuDevicePrimaryCtxRelease_v2, (CUdevice device))
{
    UNSAFE();
    return device >= 0 ? context_gone("cuDevicePrimaryCtxRelease_v2") : CUDA_ERROR_INVALID_DEVICE;
}

API CUresult cuMemAlloc(unsigned int *ptr, unsigned int size)
{
    UNSAFE();
    (void)ptr, (void)size;
    return CUDA_ERROR_NOT_SUPPORTED;
}

PATCHED(cuMemAlloc_v2, (CUdeviceptr * ptr, size_t size))
{
    UNSAFE();
    return alloc_logged("cuMemAlloc_v2", ptr, size);
}

PATCHED(cuMemAllocAsync, (CUdeviceptr * ptr, size_t size, CUstream stream))
{
    (void)stream;
    return alloc_logged("cuMemAllocAsync", ptr, size);
}

PATCHED(cuMemAllocAsync_ptsz, (CUdeviceptr * ptr, size_t size, CUstream stream))
{
    (void)stream;
    return alloc_logged("cuMemAllocAsync_ptsz", ptr, size);
}

PATCHED(cuMemAllocFromPoolAsync,
        (CUdeviceptr * ptr, size_t size, CUmemoryPool pool, CUstream stream))
{
    (void)pool, (void)stream;
    return alloc_logged("cuMemAllocFromPoolAsync", ptr, size);
}

PATCHED(cuMemAllocFromPoolAsync_ptsz,
        (CUdeviceptr * ptr, size_t size, CUmemoryPool pool, CUstream stream))
{
    (void)pool, (void)stream;
    return alloc_logged("cuMemAllocFromPoolAsync_ptsz", ptr, size);
}

/* The 32-bit ABI of CUDA < 3.2, which the hook hands out unwrapped. */
API CUresult cuMemAllocHost(void **ptr, unsigned int size)
{
    UNSAFE();
    (void)ptr, (void)size;
    return CUDA_ERROR_NOT_SUPPORTED;
}

PATCHED(cuMemAllocHost_v2, (void **ptr, size_t size))
{
    UNSAFE();
    return host_alloc_logged("cuMemAllocHost_v2", ptr, size);
}

PATCHED(cuMemHostAlloc, (void **ptr, size_t size, unsigned int flags))
{
    UNSAFE();
    (void)flags;
    return host_alloc_logged("cuMemHostAlloc", ptr, size);
}

#ifdef FAKECUDA_MEASURED_PROLOGUE
/* Read by the entries as libcuda's read a flag of its own. */
static __attribute__((used)) int tools_flag;
static __attribute__((used)) int other_patcher_calls;

int fakecuda_other_patcher_calls(void)
{
    return __atomic_load_n(&other_patcher_calls, __ATOMIC_RELAXED);
}

#define ENTRY_START(name) \
    ".text\n.globl " #name "\n.type " #name ",@function\n.p2align 4\n" #name ":\n"
#define ENTRY_END(name) ".size " #name ",.-" #name "\n"

/* The bytes measured at every memory function of libcuda 580 (16-byte
 * aligned; device-facts.md): push %rbp; mov %rsp,%rbp; push %r12;
 * sub $8,%rsp; cmpl $imm32,x(%rip).  Then the C body, which finds its
 * arguments untouched and the stack aligned.  FAKECUDA_CMP_AFTER_PUSHES
 * moves the cmp before the sub, to +6: the jump written over it then
 * crosses an 8-byte boundary. */
#ifdef FAKECUDA_CMP_AFTER_PUSHES
#define FRAME \
    "push %rbp\nmov %rsp,%rbp\npush %r12\ncmpl $0x321cba00,tools_flag(%rip)\nsub $8,%rsp\n"
#else
#define FRAME \
    "push %rbp\nmov %rsp,%rbp\npush %r12\nsub $8,%rsp\ncmpl $0x321cba00,tools_flag(%rip)\n"
#endif
#define MEASURED(name)                                      \
    __asm__(ENTRY_START(name) FRAME "call " #name "_body\n" \
                                    "add $8,%rsp\npop %r12\npop %rbp\nret\n" ENTRY_END(name));

MEASURED(cuMemFree_v2)
MEASURED(cuIpcCloseMemHandle)
MEASURED(cuMemFreeAsync)
MEASURED(cuMemFreeAsync_ptsz)
MEASURED(cuMemAddressFree)
MEASURED(cuMemHostUnregister)
MEASURED(cuMemMap)
MEASURED(cuCtxDestroy)
MEASURED(cuCtxDestroy_v2)
MEASURED(cuDevicePrimaryCtxReset)
MEASURED(cuDevicePrimaryCtxReset_v2)
MEASURED(cuDevicePrimaryCtxRelease)
MEASURED(cuDevicePrimaryCtxRelease_v2)
MEASURED(cuMemAlloc_v2)
MEASURED(cuMemAllocAsync)
MEASURED(cuMemAllocAsync_ptsz)
MEASURED(cuMemAllocFromPoolAsync)
MEASURED(cuMemAllocFromPoolAsync_ptsz)
MEASURED(cuMemAllocHost_v2)
MEASURED(cuMemHostAlloc)

/* cuMemFreeHost as another patcher (UCX's bistro) leaves an entry: a
 * jmp rel32 over the first bytes to its hook, which counts the call and
 * runs the original. */
__asm__(ENTRY_START(cuMemFreeHost) ".byte 0xe9\n.long other_patcher_hook-.-4\n"
                                   ".byte 0xe5,0x41,0x54\n" ENTRY_END(
                                       cuMemFreeHost) "other_patcher_hook:\n"
                                                      "lock incl other_patcher_calls(%rip)\n"
                                                      "jmp cuMemFreeHost_body\n");

#ifdef FAKECUDA_UNRECOGNISED_UNMAP
/* An entry the decoder must refuse: a load relative to where it runs. */
__asm__(ENTRY_START(cuMemUnmap) "mov tools_flag(%rip),%eax\n"
                                "jmp cuMemUnmap_body\n" ENTRY_END(cuMemUnmap));
#else
MEASURED(cuMemUnmap)
#endif
#endif

API CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags);
API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                 CUdriverProcAddressQueryResult *status);

/* What cuGetProcAddress hands out: per name, the newest ABI not newer than
 * the version asked, and the per-thread-stream function on that flag. */
static const struct proc {
    const char *name;
    int version, ptsz;
    void *fn;
} procs[] = {
    { "cuInit", 2000, 0, (void *)cuInit },
    { "cuThreadExchangeStreamCaptureMode", 10010, 0, (void *)cuThreadExchangeStreamCaptureMode },
    { "cuMemGetAddressRange", 3020, 0, (void *)cuMemGetAddressRange_v2 },
    { "cuGetProcAddress", 11030, 0, (void *)cuGetProcAddress },
    { "cuGetProcAddress", 12000, 0, (void *)cuGetProcAddress_v2 },
    { "cuMemFree", 2000, 0, (void *)cuMemFree },
    { "cuMemFree", 3020, 0, (void *)cuMemFree_v2 },
    { "cuIpcCloseMemHandle", 4010, 0, (void *)cuIpcCloseMemHandle },
    { "cuMemFreeAsync", 11020, 0, (void *)cuMemFreeAsync },
    { "cuMemFreeAsync", 11020, 1, (void *)cuMemFreeAsync_ptsz },
    { "cuMemFreeHost", 2000, 0, (void *)cuMemFreeHost },
    { "cuMemHostUnregister", 4000, 0, (void *)cuMemHostUnregister },
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
    { "cuMemAllocHost", 2000, 0, (void *)cuMemAllocHost },
    { "cuMemAllocHost", 3020, 0, (void *)cuMemAllocHost_v2 },
    { "cuMemHostAlloc", 2020, 0, (void *)cuMemHostAlloc },
};

static void *find_proc(const char *symbol, int version, int ptsz)
{
    const struct proc *best = NULL;
    for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++)
        if (procs[i].ptsz == ptsz && procs[i].version <= version &&
            strcmp(procs[i].name, symbol) == 0 && (!best || procs[i].version > best->version))
            best = &procs[i];
    return best ? best->fn : NULL;
}

API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                 CUdriverProcAddressQueryResult *status)
{
    void *fn = NULL;
    if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
        fn = find_proc(symbol, version, 1);
    if (!fn)
        fn = find_proc(symbol, version, 0);
    *pfn = fn;
    if (status)
        *status = fn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return fn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

API CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}

void *fakecuda_own(const char *symbol)
{
    /* glibc's dlsym (the hook's would wrap), on this library's handle. */
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    void *real = libc ? dlvsym(libc, "dlsym", "GLIBC_2.34") : NULL;
    if (!real && libc)
        real = dlvsym(libc, "dlsym", "GLIBC_2.2.5");
    Dl_info self;
    void *me =
        dladdr((void *)fakecuda_own, &self) ? dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD) : NULL;
    return real && me ? ((void *(*)(void *, const char *))real)(me, symbol) : NULL;
}
