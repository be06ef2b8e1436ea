/* The hook's answer to "does it see every CUDA free?", which the library
 * asks when a cache with validation AUTO is created. */
#include "hook.h"

/*
 * Yes when all three hold:
 *  1. dlsym resolves to the hook's for the process.  The hook then precedes
 *     libc, so it was loaded at startup (LD_PRELOAD, or linked first) and has
 *     seen every lookup of cuGetProcAddress or of a memory function on a
 *     driver handle since the first line of code ran.  A hook dlopen()ed
 *     later fails this test.
 *  2. Every driver symbol the hook exports resolves to the hook's, so direct
 *     callers of cuMemFree_v2 & co. reach its wrappers.
 *  3. No memory function was handed out unwrapped (a legacy 32-bit ABI asked
 *     for, or more variants of one kind than the hook has slots).
 */
__attribute__((visibility("default"))) int regcache_hook_active(void);

int regcache_hook_active(void)
{
    return rc_hook_exports_resolved() && !rc_hook_escaped();
}
