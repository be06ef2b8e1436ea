/* Writing code: the page that holds the thunks and trampolines, and the
 * patch at a function's entry. */
#ifndef RC_PATCH_H
#define RC_PATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "prologue.h"

/* A read-write mapping of `size` bytes from which a jmp rel32 reaches every
 * address in [lo, hi), and back: mapped in a free gap within 2 GiB of
 * that range.  NULL with a reason in why[n] when there is none. */
void *rc_patch_page_near(uintptr_t lo, uintptr_t hi, size_t size, char *why, size_t n);

/* Make [page, page + size) executable and no longer writable.  0, or -1
 * and why. */
int rc_patch_seal(void *page, size_t size, char *why, size_t n);

/* Whether RC_PATCH_LEN bytes at `site` can be written with one aligned
 * atomic store, so that a thread arriving there runs either the old
 * instruction or the new one: they lie in one aligned 8-byte word, or in
 * one aligned 16-byte block on a CPU with cmpxchg16b.  Nothing else is
 * written: no int3, whose trap a thread that blocks SIGTRAP cannot take. */
bool rc_patch_fits(uintptr_t site);

/*
 * Replace the RC_PATCH_LEN bytes `was` at `site` (rc_patch_fits) with
 * `bytes` in one compare-and-swap, then give the code back the protection
 * /proc/self/maps lists for it.  0; 1 when the site no longer holds `was`
 * (another patcher wrote it meanwhile: nothing written); -1 and why (the
 * code cannot be made writable, or its protection cannot be restored).
 */
int rc_patch_site(uintptr_t site, const uint8_t *was, const uint8_t *bytes, char *why, size_t n);

/* Whether the n bytes at `at` are still `bytes` (read without a lock:
 * another patcher may be writing them). */
bool rc_patch_holds(uintptr_t at, const uint8_t *bytes, size_t n);

#endif
