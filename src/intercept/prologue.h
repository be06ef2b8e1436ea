/* The x86-64 instructions the interception may displace from a function's
 * entry, and their copy in a trampoline.  A strict decoder: it accepts only
 * forms whose meaning does not depend on where they run (or, for a jump,
 * whose target it recomputes) and that no code jumps into the middle of -
 * the frame set-up a compiler emits at an entry, and the jumps other
 * patchers leave there.  Anything else is refused, and the function is not
 * patched. */
#ifndef RC_PROLOGUE_H
#define RC_PROLOGUE_H

#include <stddef.h>
#include <stdint.h>

/* The patch written at an entry: jmp rel32. */
#define RC_PATCH_LEN 5
/* Bytes at an entry the decoder may look at. */
#define RC_PROLOGUE_MAX 16
/* Room for a trampoline: the longest prologue (a 10-byte instruction
 * starting at byte 4) plus an absolute jump (14 bytes). */
#define RC_TRAMPOLINE_MAX 32

struct rc_prologue {
    size_t len;       /* bytes displaced: whole instructions, >= RC_PATCH_LEN */
    size_t copied;    /* how many of them run unchanged in the trampoline */
    uintptr_t resume; /* where the trampoline jumps after them: the entry +
                         len, or the target of a displaced jmp rel32 */
};

/* Decode the entry at `code`, of which `n` bytes are readable and which
 * lives at address `at`.  0 and *p, or -1 when an instruction within the
 * first RC_PATCH_LEN bytes is not one this decoder understands. */
int rc_prologue_decode(const uint8_t *code, size_t n, uintptr_t at, struct rc_prologue *p);

/* Write the trampoline for a decoded entry to dst (RC_TRAMPOLINE_MAX
 * bytes): the copied instructions, then an absolute jump to p->resume, so
 * that it runs wherever it is placed.  Returns its length. */
size_t rc_prologue_trampoline(uint8_t *dst, const uint8_t *code, const struct rc_prologue *p);

/* Write an absolute jump to `to` (jmp *0(%rip) and the address: 14 bytes,
 * any distance, no register touched) at dst; returns its length. */
size_t rc_prologue_jump(uint8_t *dst, uintptr_t to);

#endif
