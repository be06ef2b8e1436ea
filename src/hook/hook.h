/* Internals of libregcache-hook.so, the preload library that tells the cache
 * about every CUDA free (see README "The preload hook").
 *
 * Shape: the hook defines dlsym; asked on a library handle for a CUDA memory
 * function or for cuGetProcAddress it hands back a wrapper, and the wrapped
 * cuGetProcAddress does the same for what it returns.  Each wrapper belongs
 * to a kind (one C prototype); a kind has a few slots, each a trampoline
 * bound to one real driver function, so every (symbol, version, flags)
 * variant the driver hands out keeps its own real pointer. */
#ifndef RC_HOOK_H
#define RC_HOOK_H

#include <stddef.h>

#include "wrap.h"

/* Every kind: cuGetProcAddress in both forms - get_proc, the 4-argument
 * cuGetProcAddress of CUDA 11.3, and get_proc_v2, the 5-argument
 * cuGetProcAddress_v2 of CUDA 12.0 - whose wrappers wrap what they hand out,
 * then the memory kinds shared with the in-process interception.  Each
 * expands to the enum constant RC_HOOK_<kind> and has a wrapper body
 * rc_wrap_<kind>, which takes the real function first. */
#define RC_WRAP_PARAMS_get_proc const char *symbol, void **pfn, int version, cuuint64_t flags
#define RC_WRAP_ARGS_get_proc symbol, pfn, version, flags
#define RC_WRAP_PARAMS_get_proc_v2                                 \
    const char *symbol, void **pfn, int version, cuuint64_t flags, \
        CUdriverProcAddressQueryResult *status
#define RC_WRAP_ARGS_get_proc_v2 symbol, pfn, version, flags, status
#define RC_HOOK_KIND_LIST(X) X(get_proc) X(get_proc_v2) RC_WRAP_KINDS(X)

/* Every driver symbol the hook defines and looks up: its two forms of
 * cuGetProcAddress, then the shared list (wrap_symbols.h). */
#define RC_HOOK_SYMBOLS(X)                                            \
    X(cuGetProcAddress, "cuGetProcAddress", 11030, 0, get_proc)       \
    X(cuGetProcAddress_v2, "cuGetProcAddress", 12000, 0, get_proc_v2) \
    RC_WRAP_SYMBOLS(X)

#define RC_HOOK_ENUM(kind) RC_HOOK_##kind,
enum rc_hook_kind { RC_HOOK_KIND_LIST(RC_HOOK_ENUM) RC_HOOK_KINDS };
#undef RC_HOOK_ENUM

/* Not a kind: what the symbol table says about names it does not wrap. */
enum {
    RC_HOOK_NOT_OURS = -1, /* not a function that allocates or frees */
    RC_HOOK_LEGACY = -2    /* a memory function in an ABI the hook does not
                              wrap (the 32-bit pointers of CUDA < 3.2) */
};

CUresult rc_wrap_get_proc(void *real, RC_WRAP_PARAMS_get_proc);
CUresult rc_wrap_get_proc_v2(void *real, RC_WRAP_PARAMS_get_proc_v2);

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

/* Non-zero when each symbol the hook exports is the definition that the
 * process resolves by default (checked once, then remembered). */
int rc_hook_exports_resolved(void);

#endif
