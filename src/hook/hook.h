/* Internals of libregcache-hook.so, the preload library that tells the cache
 * about every CUDA free (see README "Preload hook").
 *
 * Shape: the hook defines dlsym; asked on a library handle for a CUDA memory
 * function or for cuGetProcAddress it hands back a wrapper, and the wrapped
 * cuGetProcAddress does the same for what it returns.  Each wrapper belongs
 * to a kind (one C prototype); a kind has a few slots, each a trampoline
 * bound to one real driver function, so every (symbol, version, flags)
 * variant the driver hands out keeps its own real pointer. */
#ifndef RC_HOOK_H
#define RC_HOOK_H

#include <cuda.h>
#include <stdatomic.h>
#include <stddef.h>

/* Every kind: name, prototype, argument names.  Each expands to the enum
 * constant RC_HOOK_<name> and to the wrapper body rc_hook_<name>, which takes
 * the real function first. */
#define RC_HOOK_KIND_LIST(X)                                                    \
    X(gpa4, (const char *symbol, void **pfn, int version, cuuint64_t flags),    \
      symbol, pfn, version, flags)                                              \
    X(gpa5, (const char *symbol, void **pfn, int version, cuuint64_t flags,     \
             CUdriverProcAddressQueryResult *status),                           \
      symbol, pfn, version, flags, status)                                      \
    X(free, (CUdeviceptr ptr), ptr)                                             \
    X(free_async, (CUdeviceptr ptr, CUstream stream), ptr, stream)              \
    X(free_host, (void *ptr), ptr)                                              \
    X(free_range, (CUdeviceptr ptr, size_t size), ptr, size)                    \
    X(ctx_gone, (CUcontext ctx), ctx)                                           \
    X(device_gone, (CUdevice device), device)                                   \
    X(alloc, (CUdeviceptr *ptr, size_t size), ptr, size)                        \
    X(alloc_async, (CUdeviceptr *ptr, size_t size, CUstream stream),            \
      ptr, size, stream)                                                        \
    X(alloc_pool, (CUdeviceptr *ptr, size_t size, CUmemoryPool pool,            \
                   CUstream stream), ptr, size, pool, stream)                   \
    X(map, (CUdeviceptr ptr, size_t size, size_t offset,                        \
            CUmemGenericAllocationHandle handle, unsigned long long flags),     \
      ptr, size, offset, handle, flags)

#define RC_HOOK_ENUM(name, params, ...) RC_HOOK_##name,
enum rc_hook_kind { RC_HOOK_KIND_LIST(RC_HOOK_ENUM) RC_HOOK_KINDS };
#undef RC_HOOK_ENUM

/* Not a kind: what the symbol table says about names it does not wrap. */
enum {
    RC_HOOK_NOT_OURS = -1, /* not a function that allocates or frees */
    RC_HOOK_LEGACY = -2    /* a memory function in an ABI the hook does not
                              wrap (the 32-bit pointers of CUDA < 3.2) */
};

#define RC_HOOK_WITH_REAL(...) (void *real, __VA_ARGS__)
#define RC_HOOK_DECLARE(name, params, ...) \
    CUresult rc_hook_##name RC_HOOK_WITH_REAL params;
RC_HOOK_KIND_LIST(RC_HOOK_DECLARE)
#undef RC_HOOK_DECLARE

/* The kind of a symbol as libcuda exports it (dlsym, PLT names such as
 * "cuMemFree_v2", "cuMemFreeAsync_ptsz"). */
int rc_hook_kind_of_symbol(const char *symbol);

/* The kind of what cuGetProcAddress returns for (base name, version). */
int rc_hook_kind_of_proc(const char *symbol, int version);

/* The wrapper of `real` for `kind` (a trampoline bound to it), or `real`
 * itself for RC_HOOK_NOT_OURS, for NULL and for the hook's own functions.
 * RC_HOOK_LEGACY and a kind whose slots are all taken hand `real` back
 * unwrapped and mark the hook as no longer seeing every free. */
void *rc_hook_wrap(int kind, void *real);

/* Non-zero when fn is defined by the hook itself. */
int rc_hook_is_own(void *fn);

/* Non-zero once a memory function was handed out unwrapped. */
int rc_hook_escaped(void);

/* glibc's dlsym (never the hook's). */
typedef void *(*rc_dlsym_fn)(void *handle, const char *symbol);
rc_dlsym_fn rc_hook_real_dlsym(void);

/* `symbol` as libcuda.so.1 defines it, through glibc's dlsym on the driver's
 * handle, or NULL when the driver is not loaded or lacks it. */
void *rc_hook_driver_symbol(const char *symbol);

/* rc_hook_driver_symbol(symbol), remembered in *cache once found. */
void *rc_hook_driver_function(_Atomic(void *) *cache, const char *symbol);

/* Tell every cache that [ptr, ptr+size) goes away. */
void rc_hook_notify_range(CUdeviceptr ptr, size_t size);

/* Tell every cache that the allocation holding ptr goes away; when the
 * driver cannot say which allocation that is, everything goes. */
void rc_hook_notify_allocation(CUdeviceptr ptr);

/* Tell every cache that all CUDA memory goes away (a context ends). */
void rc_hook_notify_everything(void);

/* Non-zero when each symbol the hook exports is the definition that the
 * process resolves by default (checked once, then remembered). */
int rc_hook_exports_resolved(void);

#endif
