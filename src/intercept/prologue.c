/* The prologue decoder (see prologue.h). */
#include "prologue.h"

#include <string.h>

#define JMP_REL32 0xe9

/* One accepted form: its leading bytes under a mask, and its length. */
static const struct form {
    uint8_t match[4], mask[4];
    size_t matched, len;
} forms[] = {
    /* endbr64: a no-op marker for indirect-branch tracking. */
    { { 0xf3, 0x0f, 0x1e, 0xfa }, { 0xff, 0xff, 0xff, 0xff }, 4, 4 },
    /* push %rax..%rdi */
    { { 0x50 }, { 0xf8 }, 1, 1 },
    /* push %r8..%r15 (REX.B) */
    { { 0x41, 0x50 }, { 0xff, 0xf8 }, 2, 2 },
    /* mov %rsp,%rbp, in both encodings */
    { { 0x48, 0x89, 0xe5 }, { 0xff, 0xff, 0xff }, 3, 3 },
    { { 0x48, 0x8b, 0xec }, { 0xff, 0xff, 0xff }, 3, 3 },
    /* sub $imm8,%rsp and sub $imm32,%rsp */
    { { 0x48, 0x83, 0xec }, { 0xff, 0xff, 0xff }, 3, 4 },
    { { 0x48, 0x81, 0xec }, { 0xff, 0xff, 0xff }, 3, 7 },
    /* movabs $imm64,%reg (REX.W, optionally REX.B): how UCX's bistro
     * starts its far patch (mov %rax or %r11, then jmp through it). */
    { { 0x48, 0xb8 }, { 0xfe, 0xf8 }, 2, 10 },
};

/* The length of the instruction at code (n bytes readable) if it is one of
 * the accepted forms, else 0. */
static size_t form_length(const uint8_t *code, size_t n)
{
    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
        const struct form *x = &forms[f];
        size_t i = 0;
        while (i < x->matched && i < n && (code[i] & x->mask[i]) == x->match[i])
            i++;
        if (i == x->matched)
            return x->len <= n ? x->len : 0;
    }
    return 0;
}

int rc_prologue_decode(const uint8_t *code, size_t n, uintptr_t at, struct rc_prologue *p)
{
    size_t i = 0;
    while (i < RC_PATCH_LEN) {
        if (i >= n)
            return -1;
        /* A jmp rel32, as another patcher (UCX, or another copy of this
         * library) leaves at an entry: nothing after it runs, and the
         * trampoline jumps to its target instead. */
        if (code[i] == JMP_REL32 && n - i >= 5) {
            int32_t rel;
            memcpy(&rel, code + i + 1, sizeof rel);
            p->len = i + 5;
            p->copied = i;
            p->resume = at + p->len + (uintptr_t)(intptr_t)rel;
            return 0;
        }
        size_t len = form_length(code + i, n - i);
        if (len == 0)
            return -1;
        i += len;
    }
    p->len = p->copied = i;
    p->resume = at + i;
    return 0;
}

size_t rc_prologue_jump(uint8_t *dst, uintptr_t to)
{
    static const uint8_t jmp_rip[6] = { 0xff, 0x25, 0, 0, 0, 0 };
    uint64_t target = to;
    memcpy(dst, jmp_rip, sizeof jmp_rip);
    memcpy(dst + sizeof jmp_rip, &target, sizeof target);
    return sizeof jmp_rip + sizeof target;
}

size_t rc_prologue_trampoline(uint8_t *dst, const uint8_t *code, const struct rc_prologue *p)
{
    memcpy(dst, code, p->copied);
    return p->copied + rc_prologue_jump(dst + p->copied, p->resume);
}
