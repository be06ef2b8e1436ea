/* In-process interception: without the preload hook, the library patches
 * the entry of every CUDA memory function libcuda exports (wrap_symbols.h)
 * with a jump to a wrapper that tells the caches, so that every caller is
 * seen - the driver API, the CUDA runtime, and pointers fetched through
 * dlsym or cuGetProcAddress before the library was loaded.  See
 * docs/design.md "In-process interception (no LD_PRELOAD)". */
#ifndef RC_INTERCEPT_H
#define RC_INTERCEPT_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Whether a cache may trust the interception to report every free: installs
 * it (once per process; it stays until exit) and then proves, by a
 * self-test run on each call, that every patched function is reached
 * through dlsym and through cuGetProcAddress.  1 when it is, with a summary
 * in why[n]; 0 with the reason ("in-process interception unavailable: ...")
 * in why[n].  Thread safe.
 */
int rc_intercept_ensure(char *why, size_t n);

/*
 * Whether every entry patched still holds the bytes written there: 1, or 0
 * with the reason ("in-process interception lost: ...") in why[n].  A few
 * loads per patched function; call it only once rc_intercept_ensure()
 * returned 1.  Thread safe.
 */
int rc_intercept_intact(char *why, size_t n);

#endif
