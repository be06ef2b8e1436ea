/* The x86-64 instructions at a function's entry that the patcher
 * understands, and the code it builds from them.
 *
 * The patch (a jmp rel32) goes over one whole instruction of at least its
 * length - the patch site - and covers no other instruction boundary, so a
 * thread stopped anywhere in the entry resumes on valid code: before the
 * site it runs the entry's own leading instructions into the site; inside
 * an instruction no thread can be.  The leading instructions are frame
 * set-up that can be undone (push, mov %rsp,%rbp after push %rbp, sub
 * $imm8,%rsp, endbr64, a move into %r10, a store into the new frame):
 * the thunk the site jumps to undoes them and enters the wrapper as if the
 * function had been called; the trampoline the wrapper calls runs them,
 * then the site's instruction, then jumps back past it.
 *
 * A strict decoder: a site is another patcher's jmp rel32 (the trampoline
 * follows it), movabs $imm64,%reg, sub $imm32,%rsp, cmp $imm,x(%rip)
 * (relocated for the trampoline's address), or one of the instructions
 * libc's memory functions start with (mov $imm32,%eax, test $imm32,%r9d,
 * a store to disp8(%rsp), a load from %fs:disp32); anything else, or a leading
 * instruction it cannot undo, is refused and the function is not patched. */
#ifndef RC_PROLOGUE_H
#define RC_PROLOGUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The patch written at a site: jmp rel32. */
#define RC_PATCH_LEN 5
/* Bytes at an entry the decoder may look at. */
#define RC_PROLOGUE_MAX 32
/* Room for a thunk (the undo, then an indirect jump of 6 bytes) and for a
 * trampoline (the leading instructions, the site's, an absolute jump). */
#define RC_THUNK_MAX 48
#define RC_TRAMPOLINE_MAX 80

struct rc_prologue {
    size_t site;                   /* offset of the patch site: the leading bytes before it */
    size_t len;                    /* site + the length of the instruction there */
    uintptr_t resume;              /* where the trampoline goes on: the entry + len, or
                                      the target of a jmp rel32 at the site */
    bool site_jumps;               /* the site holds a jmp rel32: the trampoline takes
                                      its place with its own jump */
    size_t rip_disp;               /* offset in the site instruction of a disp32
                                      relative to its end; 0: none */
    uintptr_t rip_target;          /* the address that disp32 reaches */
    uint8_t undo[RC_PROLOGUE_MAX]; /* instructions that undo the leading ones */
    size_t undo_len;
};

/* Decode the entry at `code`, of which `n` bytes are readable and which
 * lives at address `at`.  0 and *p, or -1 when the decoder does not
 * understand it (see above). */
int rc_prologue_decode(const uint8_t *code, size_t n, uintptr_t at, struct rc_prologue *p);

/* Write the thunk for a decoded entry to dst (RC_THUNK_MAX bytes), which
 * will run at address `dst_at`: the undo, then a jump to the address held
 * in the 8 bytes at `target` (jmp *disp32(%rip)), which can be changed
 * later with one store.  Returns its length, or 0 when `target` is beyond
 * the reach of a disp32 from there. */
size_t rc_prologue_thunk(uint8_t *dst, uintptr_t dst_at, const struct rc_prologue *p,
                         uintptr_t target);

/* Write the trampoline for a decoded entry to dst (RC_TRAMPOLINE_MAX bytes),
 * which will run at address `dst_at`: the leading instructions, the site's
 * (its disp32 adjusted to reach the same address from there), then an
 * absolute jump to p->resume.  Returns its length, or 0 when dst_at is
 * beyond the reach of a disp32 from p->rip_target. */
size_t rc_prologue_trampoline(uint8_t *dst, uintptr_t dst_at, const uint8_t *code,
                              const struct rc_prologue *p);

/* Write an absolute jump to `to` (jmp *0(%rip) and the address: 14 bytes,
 * any distance, no register touched) at dst; returns its length. */
size_t rc_prologue_jump(uint8_t *dst, uintptr_t to);

#endif
