/* The prologue decoder (see prologue.h). */
#include "prologue.h"

#include <string.h>

#define JMP_REL32 0xe9
#define PUSH_RBP 0x55
#define RSP 4

/* One accepted form: its leading bytes under a mask, its length, and for a
 * leading instruction how it is undone. */
struct form {
    uint8_t match[5], mask[5];
    size_t matched, len;
    size_t disp; /* a site's: offset of its disp32 relative to %rip; 0: none */
};

/* Leading instructions, each shorter than the patch, that the thunk can
 * undo. */
enum lead {
    ENDBR64,
    PUSH,
    PUSH_REX,
    MOV_RBP,
    MOV_RBP_ALT,
    SUB_RSP8,
    MOV_R10,
    MOV_R10D,
    STORE_FRAME,
    MOV_REG,
    LEADS
};
static const struct form leads[LEADS] = {
    /* endbr64: a no-op marker for indirect-branch tracking. */
    [ENDBR64] = { { 0xf3, 0x0f, 0x1e, 0xfa }, { 0xff, 0xff, 0xff, 0xff }, 4, 4, 0 },
    /* push %rax..%rdi, and %r8..%r15 (REX.B) */
    [PUSH] = { { 0x50 }, { 0xf8 }, 1, 1, 0 },
    [PUSH_REX] = { { 0x41, 0x50 }, { 0xff, 0xf8 }, 2, 2, 0 },
    /* mov %rsp,%rbp, in both encodings */
    [MOV_RBP] = { { 0x48, 0x89, 0xe5 }, { 0xff, 0xff, 0xff }, 3, 3, 0 },
    [MOV_RBP_ALT] = { { 0x48, 0x8b, 0xec }, { 0xff, 0xff, 0xff }, 3, 3, 0 },
    /* sub $imm8,%rsp */
    [SUB_RSP8] = { { 0x48, 0x83, 0xec }, { 0xff, 0xff, 0xff }, 3, 4, 0 },
    /* mov %rcx,%r10 and mov %ecx,%r10d: how a system call's fourth argument
     * moves to its register; %r10 is scratch at a call, nothing to undo. */
    [MOV_R10] = { { 0x49, 0x89, 0xca }, { 0xff, 0xff, 0xff }, 3, 3, 0 },
    [MOV_R10D] = { { 0x41, 0x89, 0xca }, { 0xff, 0xff, 0xff }, 3, 3, 0 },
    /* mov %reg,disp8(%rbp), REX.W, optionally REX.R: a store into the frame
     * just set up (only after mov %rsp,%rbp), which the thunk's undo frees
     * again; nothing to undo. */
    [STORE_FRAME] = { { 0x48, 0x89, 0x45 }, { 0xfb, 0xff, 0xc7 }, 3, 4, 0 },
    /* mov %reg,%reg, REX.W: only into a register pushed before, whose pop in
     * the undo restores it. */
    [MOV_REG] = { { 0x48, 0x89, 0xc0 }, { 0xfa, 0xff, 0xc0 }, 3, 3, 0 },
};

/* Patch sites that run unchanged anywhere. */
static const struct form sites[] = {
    /* sub $imm32,%rsp */
    { { 0x48, 0x81, 0xec }, { 0xff, 0xff, 0xff }, 3, 7, 0 },
    /* movabs $imm64,%reg (REX.W, optionally REX.B), how UCX's bistro starts
     * its far patch (mov %rax or %r11, then jmp through it) */
    { { 0x48, 0xb8 }, { 0xfe, 0xf8 }, 2, 10, 0 },
    /* mov $imm32,%eax..%edi: a libc system call stub's number */
    { { 0xb8 }, { 0xf8 }, 1, 5, 0 },
    /* test $imm32,%r8d..%r15d: libc's mmap checking its offset */
    { { 0x41, 0xf7, 0xc0 }, { 0xff, 0xff, 0xf8 }, 3, 7, 0 },
    /* mov %reg,disp8(%rsp), REX.W, optionally REX.R: libc's mremap saving
     * its fifth argument */
    { { 0x48, 0x89, 0x44, 0x24 }, { 0xfb, 0xff, 0xc7, 0xff }, 4, 5, 0 },
    /* mov %fs:disp32,%rax..%rdi: the stack protector's canary */
    { { 0x64, 0x48, 0x8b, 0x04, 0x25 }, { 0xff, 0xff, 0xff, 0xc7, 0xff }, 5, 9, 0 },
    /* mov x(%rip),%reg, REX.W, optionally REX.R (relocated): libc's sbrk
     * loading the address of the break */
    { { 0x48, 0x8b, 0x05 }, { 0xfb, 0xff, 0xc7 }, 3, 7, 3 },
};

/* Whether code (n bytes readable) starts with form f, whole. */
static bool matches(const struct form *f, const uint8_t *code, size_t n)
{
    if (f->len > n)
        return false;
    for (size_t i = 0; i < f->matched; i++)
        if ((code[i] & f->mask[i]) != f->match[i])
            return false;
    return true;
}

/* cmp $imm8 or $imm32 with x(%rip) (opcode 80, 81 or 83, ModRM /7 with
 * RIP-relative addressing), optionally REX.W: how libcuda's entries test
 * a flag of their own.  Its length and the offset of its disp32, or 0. */
static size_t rip_cmp_length(const uint8_t *code, size_t n, size_t *disp)
{
    size_t rex = n > 0 && code[0] == 0x48;
    if (n < rex + 2 || code[rex + 1] != 0x3d)
        return 0;
    size_t imm = code[rex] == 0x81 ? 4 : code[rex] == 0x80 || code[rex] == 0x83 ? 1 : 0;
    size_t len = rex + 2 + 4 + imm;
    if (imm == 0 || len > n)
        return 0;
    *disp = rex + 2;
    return len;
}

/* The site at code[i]: fills *p and returns 0, or -1 when none is there. */
static int site_at(const uint8_t *code, size_t n, size_t i, uintptr_t at, struct rc_prologue *p)
{
    p->site = i;
    p->site_jumps = false;
    p->rip_disp = 0;
    p->rip_target = 0;
    size_t len = 0;
    if (code[i] == JMP_REL32 && n - i >= 5) {
        /* Another patcher (UCX, or another copy of this library) left it:
         * nothing after it runs, and the trampoline jumps to its target. */
        int32_t rel;
        memcpy(&rel, code + i + 1, sizeof rel);
        p->len = i + 5;
        p->site_jumps = true;
        p->resume = at + p->len + (uintptr_t)(intptr_t)rel;
        return 0;
    }
    size_t disp = 0;
    for (size_t f = 0; len == 0 && f < sizeof sites / sizeof sites[0]; f++)
        if (matches(&sites[f], code + i, n - i)) {
            len = sites[f].len;
            disp = sites[f].disp;
        }
    if (len == 0)
        len = rip_cmp_length(code + i, n - i, &disp);
    if (disp) {
        int32_t d;
        memcpy(&d, code + i + disp, sizeof d);
        p->rip_disp = disp;
        p->rip_target = at + i + len + (uintptr_t)(intptr_t)d;
    }
    if (len == 0)
        return -1;
    p->len = i + len;
    p->resume = at + p->len;
    return 0;
}

/* The leading instruction at code (n bytes readable), or LEADS. */
static enum lead lead_at(const uint8_t *code, size_t n)
{
    for (int f = 0; f < LEADS; f++)
        if (matches(&leads[f], code, n))
            return (enum lead)f;
    return LEADS;
}

/* Write the undo of the leading instruction at code, of kind k, to dst;
 * returns its length. */
static size_t undo_of(enum lead k, const uint8_t *code, uint8_t *dst)
{
    switch (k) {
    case PUSH: /* pop of the same register */
        dst[0] = (uint8_t)(0x58 | (code[0] & 7));
        return 1;
    case PUSH_REX:
        dst[0] = 0x41;
        dst[1] = (uint8_t)(0x58 | (code[1] & 7));
        return 2;
    case SUB_RSP8: /* add $imm8,%rsp */
        dst[0] = 0x48, dst[1] = 0x83, dst[2] = 0xc4, dst[3] = code[3];
        return 4;
    default: /* endbr64 and the rest change nothing the wrapper reads; the
              * pop of %rbp restores it */
        return 0;
    }
}

int rc_prologue_decode(const uint8_t *code, size_t n, uintptr_t at, struct rc_prologue *p)
{
    /* Undos in the order of their instructions, reversed at the end. */
    uint8_t undo[RC_PROLOGUE_MAX][4];
    size_t undo_lens[RC_PROLOGUE_MAX], leading = 0, i = 0;
    bool rbp_saved = false, frame = false;
    unsigned pushed = 0; /* registers a leading push saved */
    n = n < RC_PROLOGUE_MAX ? n : RC_PROLOGUE_MAX;
    while (i < n) {
        if (site_at(code, n, i, at, p) == 0) {
            p->undo_len = 0;
            while (leading > 0) {
                leading--;
                memcpy(p->undo + p->undo_len, undo[leading], undo_lens[leading]);
                p->undo_len += undo_lens[leading];
            }
            return 0;
        }
        enum lead k = lead_at(code + i, n - i);
        /* %rbp overwritten can only be restored from where it was saved. */
        unsigned into = k == MOV_REG ? (unsigned)((code[i] & 1) << 3 | (code[i + 2] & 7)) : 0;
        if (k == LEADS || ((k == MOV_RBP || k == MOV_RBP_ALT) && !rbp_saved) ||
            (k == STORE_FRAME && !frame) ||
            (k == MOV_REG && (into == RSP || !(pushed >> into & 1))))
            return -1;
        if (k == PUSH || k == PUSH_REX)
            pushed |= 1u << ((k == PUSH_REX ? 8 : 0) | (code[i + (k == PUSH_REX)] & 7));
        rbp_saved |= k == PUSH && code[i] == PUSH_RBP;
        frame |= k == MOV_RBP || k == MOV_RBP_ALT;
        undo_lens[leading] = undo_of(k, code + i, undo[leading]);
        leading++;
        i += leads[k].len;
    }
    return -1;
}

size_t rc_prologue_jump(uint8_t *dst, uintptr_t to)
{
    static const uint8_t jmp_rip[6] = { 0xff, 0x25, 0, 0, 0, 0 };
    uint64_t target = to;
    memcpy(dst, jmp_rip, sizeof jmp_rip);
    memcpy(dst + sizeof jmp_rip, &target, sizeof target);
    return sizeof jmp_rip + sizeof target;
}

size_t rc_prologue_thunk(uint8_t *dst, uintptr_t dst_at, const struct rc_prologue *p,
                         uintptr_t target)
{
    memcpy(dst, p->undo, p->undo_len);
    size_t len = p->undo_len + 6;
    intptr_t d = (intptr_t)(target - (dst_at + len));
    if (d != (int32_t)d)
        return 0;
    int32_t disp = (int32_t)d;
    dst[p->undo_len] = 0xff;
    dst[p->undo_len + 1] = 0x25;
    memcpy(dst + p->undo_len + 2, &disp, sizeof disp);
    return len;
}

size_t rc_prologue_trampoline(uint8_t *dst, uintptr_t dst_at, const uint8_t *code,
                              const struct rc_prologue *p)
{
    size_t copied = p->site_jumps ? p->site : p->len;
    memcpy(dst, code, copied);
    if (p->rip_disp) {
        intptr_t d = (intptr_t)(p->rip_target - (dst_at + p->len));
        if (d != (int32_t)d)
            return 0;
        int32_t disp = (int32_t)d;
        memcpy(dst + p->site + p->rip_disp, &disp, sizeof disp);
    }
    return copied + rc_prologue_jump(dst + copied, p->resume);
}
