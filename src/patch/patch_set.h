/* Patching a set of functions at once: every entry decoded before any is
 * touched, one mapping of thunks and trampolines within reach of them all,
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
    /* Out: the entry as patched, up to the end of the jump, and as it was
     * before; the jump starts at written + site. */
    uint8_t written[RC_PROLOGUE_MAX], was[RC_PROLOGUE_MAX];
    size_t written_len, site;
    /* Out: where the thunk the jump leads to goes on (the wrapper), and
     * the trampoline. */
    _Atomic uintptr_t *thunk_target;
    uintptr_t trampoline;
};

/*
 * Patch every fns[i] with an entry: 0, or -1 with why[n] ("<name>: ..."),
 * or 1 when an entry changed between its decoding and its write (another
 * patcher at work: try again).  All or nothing: nothing is written unless
 * every entry decodes, each jump can be written with one atomic store and
 * the mapping is built; a failure while writing takes back the jumps
 * written.  `owner` is stored beside each thunk, where rc_patch_owner()
 * finds it (NULL: none).  *patched counts the entries written.  Once
 * anything is written, the library stays loaded for the rest of the
 * process.  Not thread safe: call it under the caller's lock.
 */
int rc_patch_set(struct rc_patch_fn *fns, size_t count, void *owner, int *patched, char *why,
                 size_t n);

/* The first entry that no longer holds what was written there (another
 * patcher rewrote it), or NULL. */
const struct rc_patch_fn *rc_patch_set_lost(const struct rc_patch_fn *fns, size_t count);

/* Send f's thunk straight on to its trampoline, past the wrapper: for a
 * patch that another took the place of, or that is taken back, whose
 * thunk another patcher's trampoline may still lead to.  The trampoline
 * runs the function as it was at the patching. */
void rc_patch_bypass(const struct rc_patch_fn *f);

/* Take back every patch of the set: each thunk bypassed, and each entry
 * that still holds its jump given back the bytes it had (one atomic store
 * again); an entry another patcher wrote since keeps its bytes.  The
 * mapping stays: a thread may be running in it. */
void rc_patch_set_undo(struct rc_patch_fn *fns, size_t count);

/* Where the jump at `entry` leads, when it leads into a thunk of a set
 * patched by this library (any copy of it in the process, any version that
 * stores an owner the same way): that set's owner; else NULL.  Reads only
 * readable memory. */
void *rc_patch_owner(void *entry);

#endif
