/* Which driver functions the hook wraps, under each name and version the
 * driver hands them out by.
 *
 * Not wrapped, on purpose: cuMemRelease (it drops a handle; the memory stays
 * mapped until cuMemUnmap, which is wrapped), cuMemPoolTrimTo and
 * cuMemPoolDestroy (they return to the system only memory already freed into
 * the pool, whose ranges were notified by the cuMemFreeAsync that freed it;
 * a destroyed pool's live allocations stay valid until freed). */
#include <string.h>

#include "hook.h"

static const struct symbol {
    const char *exported; /* the name libcuda exports (dlsym, PLT) */
    const char *proc;     /* the name cuGetProcAddress takes; NULL for the
                             _ptsz exports, which it hands out on flags */
    int version;          /* the first CUDA version with this ABI */
    int kind;
} symbols[] = {
    { "cuGetProcAddress", "cuGetProcAddress", 11030, RC_HOOK_gpa4 },
    { "cuGetProcAddress_v2", "cuGetProcAddress", 12000, RC_HOOK_gpa5 },
    { "cuMemFree", "cuMemFree", 2000, RC_HOOK_LEGACY },
    { "cuMemFree_v2", "cuMemFree", 3020, RC_HOOK_free },
    { "cuIpcCloseMemHandle", "cuIpcCloseMemHandle", 4010, RC_HOOK_free },
    { "cuMemFreeAsync", "cuMemFreeAsync", 11020, RC_HOOK_free_async },
    { "cuMemFreeAsync_ptsz", NULL, 11020, RC_HOOK_free_async },
    { "cuMemFreeHost", "cuMemFreeHost", 2000, RC_HOOK_free_host },
    { "cuMemUnmap", "cuMemUnmap", 10020, RC_HOOK_free_range },
    /* The reservation must be unmapped first; notifying again costs a
     * lookup and covers a driver that unmaps on the way. */
    { "cuMemAddressFree", "cuMemAddressFree", 10020, RC_HOOK_free_range },
    /* The old and new context calls share their prototype. */
    { "cuCtxDestroy", "cuCtxDestroy", 2000, RC_HOOK_ctx_gone },
    { "cuCtxDestroy_v2", "cuCtxDestroy", 4000, RC_HOOK_ctx_gone },
    { "cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxReset", 7000, RC_HOOK_device_gone },
    { "cuDevicePrimaryCtxReset_v2", "cuDevicePrimaryCtxReset", 11000, RC_HOOK_device_gone },
    /* Releasing the last reference destroys the primary context; the hook
     * cannot see the count, so every release counts as the last. */
    { "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease", 7000, RC_HOOK_device_gone },
    { "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease", 11000, RC_HOOK_device_gone },
    { "cuMemAlloc", "cuMemAlloc", 2000, RC_HOOK_LEGACY },
    { "cuMemAlloc_v2", "cuMemAlloc", 3020, RC_HOOK_alloc },
    { "cuMemAllocAsync", "cuMemAllocAsync", 11020, RC_HOOK_alloc_async },
    { "cuMemAllocAsync_ptsz", NULL, 11020, RC_HOOK_alloc_async },
    { "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync", 11020, RC_HOOK_alloc_pool },
    { "cuMemAllocFromPoolAsync_ptsz", NULL, 11020, RC_HOOK_alloc_pool },
    { "cuMemMap", "cuMemMap", 10020, RC_HOOK_map },
};

#define N_SYMBOLS (sizeof symbols / sizeof symbols[0])

/* Every name of interest starts with "cu": other lookups leave at once. */
static int maybe_ours(const char *symbol)
{
    return symbol[0] == 'c' && symbol[1] == 'u';
}

int rc_hook_kind_of_symbol(const char *symbol)
{
    if (!maybe_ours(symbol))
        return RC_HOOK_NOT_OURS;
    for (size_t i = 0; i < N_SYMBOLS; i++)
        if (strcmp(symbols[i].exported, symbol) == 0)
            return symbols[i].kind;
    return RC_HOOK_NOT_OURS;
}

int rc_hook_kind_of_proc(const char *symbol, int version)
{
    if (!maybe_ours(symbol))
        return RC_HOOK_NOT_OURS;
    /* The driver answers with the newest ABI not newer than `version`. */
    const struct symbol *best = NULL;
    for (size_t i = 0; i < N_SYMBOLS; i++)
        if (symbols[i].proc && symbols[i].version <= version &&
            strcmp(symbols[i].proc, symbol) == 0 &&
            (best == NULL || symbols[i].version > best->version))
            best = &symbols[i];
    return best ? best->kind : RC_HOOK_NOT_OURS;
}
