/* The library's own driver calls that allocate or free: the memory of the
 * device key tables, a primary context released right after it was
 * retained, the interception's self-test.  While a thread makes them it is
 * quiet: the in-process interception's wrappers pass its calls to the
 * driver without telling the caches, which would otherwise take them for
 * the application's frees (and eager registration register the memory). */
#ifndef RC_QUIET_CALLS_H
#define RC_QUIET_CALLS_H

#include <stdatomic.h>
#include <stdbool.h>

extern atomic_int rc_quiet_threads;
extern _Thread_local bool rc_quiet;

/* The calling thread's calls are quiet from now on (or no longer). */
void rc_cuda_quiet(bool on);

/* Is the calling thread quiet?  While no thread is, one load of a shared
 * word, not of the thread-local flag, which in a shared library costs a
 * call into the TLS resolver on every free. */
static inline bool rc_cuda_quiet_here(void)
{
    return atomic_load_explicit(&rc_quiet_threads, memory_order_relaxed) != 0 && rc_quiet;
}

#endif
