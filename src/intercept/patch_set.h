/* Patching a set of functions at once: every entry decoded before any is
 * touched, one page of thunks and trampolines within reach of them all,
 * then a jump written at each entry.  The libcuda interception and the
 * libc hooks of the host memory monitor both patch this way. */
#ifndef RC_PATCH_SET_H
#define RC_PATCH_SET_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "prologue.h"

/* The most functions one set patches. */
#define RC_PATCH_SET_MAX 48

struct rc_patch_fn {
    const char *name;
    void *entry;   /* the function's code; NULL: not patched */
    void *wrapper; /* where its callers go instead */
    /* The trampoline that runs the function as it was, published here
     * (release) before the entry leads to the wrapper. */
    _Atomic(void *) *original;
    /* Out: the entry as patched, up to the end of the jump. */
    uint8_t written[RC_PROLOGUE_MAX];
    size_t written_len;
};

/* Patch every fns[i] with an entry: 0, or -1 with why[n] ("<name>: ...").
 * Nothing is written unless every entry decodes and the page is built;
 * a failure while writing leaves the entries already patched in place
 * (each leads to its wrapper, which calls the original).  *patched counts
 * the entries written.  Once anything is written, the library stays loaded
 * for the rest of the process.  Not thread safe: call once. */
int rc_patch_set(struct rc_patch_fn *fns, size_t count, int *patched, char *why, size_t n);

/* The first entry that no longer holds what was written there (another
 * patcher rewrote it), or NULL. */
const struct rc_patch_fn *rc_patch_set_lost(const struct rc_patch_fn *fns, size_t count);

#endif
