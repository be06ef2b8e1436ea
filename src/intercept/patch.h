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

/*
 * Write `bytes` (RC_PATCH_LEN, an instruction) over the instruction that
 * starts at `site`, so that a thread arriving at `site` runs either the old
 * instruction or the new one, never a mix, then give the code back the
 * protection /proc/self/maps lists for it.  When the bytes lie in one
 * aligned 8-byte word, one store does it.  Otherwise: an int3 at `site`,
 * every core serialised, the other bytes, serialised, the first byte,
 * serialised; a thread that meets the int3 meanwhile continues at `detour`,
 * which must do what the new instruction does (a SIGTRAP handler, installed
 * for good at the first such write, sends it there and passes every other
 * trap to the handler it replaced).  0, or -1 and why (the code cannot be
 * made writable, its protection cannot be restored, or - for the int3 way -
 * the kernel cannot serialise other cores).
 */
int rc_patch_site(uintptr_t site, const uint8_t *bytes, uintptr_t detour, char *why, size_t n);

/* Whether the n bytes at `at` are still `bytes` (read without a lock:
 * another patcher may be writing them). */
bool rc_patch_holds(uintptr_t at, const uint8_t *bytes, size_t n);

#endif
