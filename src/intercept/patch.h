/* Writing code: the page that holds the thunks and trampolines, and the
 * patch at a function's entry. */
#ifndef RC_PATCH_H
#define RC_PATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "prologue.h"

/* A read-write page of `size` bytes from which a jmp rel32 reaches every
 * address in [lo, hi), and back: mapped in a free gap within 2 GiB of
 * that range.  NULL with a reason in why[n] when there is none. */
void *rc_patch_page_near(uintptr_t lo, uintptr_t hi, size_t size, char *why, size_t n);

/* Make the page executable and no longer writable.  0, or -1 and why. */
int rc_patch_seal(void *page, size_t size, char *why, size_t n);

/* Whether the RC_PATCH_LEN bytes at `entry` lie in one aligned 8-byte
 * word, which rc_patch_entry() needs. */
bool rc_patch_fits(uintptr_t entry);

/* Write `bytes` (RC_PATCH_LEN) at `entry` (rc_patch_fits) with one aligned
 * 8-byte store, so that a thread running the function meets either the old
 * bytes or the new ones, then give the page back the protection
 * /proc/self/maps lists for it.  0, or -1 and why (the page cannot be made
 * writable, or its protection cannot be restored). */
int rc_patch_entry(uintptr_t entry, const uint8_t *bytes, char *why, size_t n);

/* Whether the n bytes at `at` are still `bytes` (read without a lock:
 * another patcher may be writing them). */
bool rc_patch_holds(uintptr_t at, const uint8_t *bytes, size_t n);

/* After patching: make every thread of the process drop instructions it
 * fetched before the stores (best effort; see patch.c). */
void rc_patch_sync_cores(void);

#endif
