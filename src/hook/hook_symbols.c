/* Which driver functions the hook wraps, under each name and version the
 * driver hands them out by: the rows of RC_HOOK_SYMBOLS, and the legacy
 * ABIs it knows but does not wrap. */
#include <string.h>

#include "hook.h"

static const struct symbol {
    const char *exported; /* the name libcuda exports (dlsym, PLT) */
    const char *proc;     /* the name cuGetProcAddress takes */
    int version;          /* the first CUDA version with this ABI */
    int kind;
} symbols[] = {
#define RC_HOOK_ROW(symbol, proc, version, flags, kind) { #symbol, proc, version, RC_HOOK_##kind },
    RC_HOOK_SYMBOLS(RC_HOOK_ROW)
#undef RC_HOOK_ROW
    /* The 32-bit pointers of CUDA < 3.2. */
    { "cuMemFree", "cuMemFree", 2000, RC_HOOK_LEGACY },
    { "cuMemAlloc", "cuMemAlloc", 2000, RC_HOOK_LEGACY },
    { "cuMemAllocHost", "cuMemAllocHost", 2000, RC_HOOK_LEGACY },
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
        if (symbols[i].version <= version && strcmp(symbols[i].proc, symbol) == 0 &&
            (!best || symbols[i].version > best->version))
            best = &symbols[i];
    return best ? best->kind : RC_HOOK_NOT_OURS;
}
