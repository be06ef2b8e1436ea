/* The driver symbols the hook defines for programs that call the driver
 * directly (linked with -lcuda: their calls bind to the first definition,
 * the hook's).  Each forwards to libcuda's own definition of the same name,
 * whose ABI the name fixes. */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "hook.h"

/* cuda.h maps these names to the newest ABI; the hook defines each ABI under
 * its own name. */
#undef cuGetProcAddress
#undef cuCtxDestroy
#undef cuDevicePrimaryCtxReset
#undef cuDevicePrimaryCtxRelease

#define RC_HOOK_API __attribute__((visibility("default")))

/* libcuda's definition of `symbol`, looked up on first use. */
static void *driver_definition(_Atomic(void *) *cache, const char *symbol)
{
    void *fn = rc_wrap_driver_function(cache, symbol);
    if (!fn) {
        /* What the dynamic linker does for a function no library defines. */
        fprintf(stderr,
                "libregcache-hook.so: %s called, but libcuda.so.1 is not "
                "loaded or does not define it\n",
                symbol);
        _exit(127);
    }
    return fn;
}

/* The ptsz names are only declared by cuda.h under per-thread streams. */
#define RC_HOOK_PROTOTYPE(symbol, proc, version, flags, kind) \
    RC_HOOK_API CUresult symbol(RC_WRAP_PARAMS_##kind);
RC_HOOK_SYMBOLS(RC_HOOK_PROTOTYPE)

#define RC_HOOK_DEFINE(symbol, proc, version, flags, kind)                             \
    CUresult symbol(RC_WRAP_PARAMS_##kind)                                             \
    {                                                                                  \
        static _Atomic(void *) real;                                                   \
        return rc_wrap_##kind(driver_definition(&real, #symbol), RC_WRAP_ARGS_##kind); \
    }
RC_HOOK_SYMBOLS(RC_HOOK_DEFINE)

/* Does the process resolve `symbol` to the hook's definition?  Asked as the
 * hook (no -Bsymbolic, so its scope starts with the global one) and judged by
 * the defining object: the hook's own address of an exported function would
 * itself come from the global lookup. */
static int resolves_to_hook(const char *symbol)
{
    return rc_hook_is_own(rc_hook_real_dlsym()(RTLD_DEFAULT, symbol));
}

int rc_hook_exports_resolved(void)
{
    /* The order of the libraries loaded at startup never changes, so the
     * first answer holds for the life of the process: 1 yes, -1 no. */
    static atomic_int known;
    int k = atomic_load_explicit(&known, memory_order_acquire);
    if (k != 0)
        return k > 0;
#define RC_HOOK_CHECK(symbol, proc, version, flags, kind) &&resolves_to_hook(#symbol)
    int ok = resolves_to_hook("dlsym") RC_HOOK_SYMBOLS(RC_HOOK_CHECK);
#undef RC_HOOK_CHECK
    atomic_store_explicit(&known, ok ? 1 : -1, memory_order_release);
    return ok;
}
