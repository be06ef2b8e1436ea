/* The prologue decoder on byte patterns: the entries measured on libcuda,
 * the jumps other patchers leave, compiler prologues with endbr64, and
 * everything it must refuse; the thunks and trampolines built from them. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <string.h>

#include "prologue.h"

#define AT ((uintptr_t)0x7f0012345670ull)
/* Where a trampoline is placed: within 2 GiB of AT. */
#define NEAR (AT + 0x40000000u)

static struct rc_prologue decoded(const uint8_t *code, size_t n)
{
    struct rc_prologue p;
    assert_int_equal(rc_prologue_decode(code, n, AT, &p), 0);
    return p;
}

static void assert_refused(const uint8_t *code, size_t n)
{
    struct rc_prologue p;
    assert_int_equal(rc_prologue_decode(code, n, AT, &p), -1);
}

static const uint8_t jmp_rip[6] = { 0xff, 0x25, 0, 0, 0, 0 };

/* At t: jmp *0(%rip) to `to`. */
static void assert_jump(const uint8_t *t, uintptr_t to)
{
    assert_memory_equal(t, jmp_rip, sizeof jmp_rip);
    uint64_t got;
    memcpy(&got, t + sizeof jmp_rip, sizeof got);
    assert_int_equal(got, to);
}

/* The thunk placed at NEAR: the undo `undo[n]`, then a jump through the
 * word at NEAR + 4096 (which holds the wrapper's address); a word beyond
 * the reach of a disp32 is refused. */
static void assert_thunk(const struct rc_prologue *p, const uint8_t *undo, size_t n)
{
    uint8_t t[RC_THUNK_MAX];
    size_t len = rc_prologue_thunk(t, NEAR, p, NEAR + 4096);
    assert_int_equal(len, n + 6);
    assert_memory_equal(t, undo, n);
    static const uint8_t jmp_through[2] = { 0xff, 0x25 };
    assert_memory_equal(t + n, jmp_through, sizeof jmp_through);
    int32_t disp;
    memcpy(&disp, t + n + 2, sizeof disp);
    assert_int_equal(NEAR + len + (uintptr_t)(intptr_t)disp, NEAR + 4096);
    assert_int_equal(rc_prologue_thunk(t, NEAR, p, NEAR + ((uintptr_t)1 << 32)), 0);
}

/* The trampoline placed at NEAR: `copied` bytes of code, then a jump to
 * p->resume. */
static void assert_trampoline(const uint8_t *code, const struct rc_prologue *p, size_t copied)
{
    uint8_t t[RC_TRAMPOLINE_MAX];
    size_t len = rc_prologue_trampoline(t, NEAR, code, p);
    assert_int_equal(len, copied + 14);
    if (!p->rip_disp)
        assert_memory_equal(t, code, copied);
    assert_jump(t + copied, p->resume);
}

/* Every memory function of libcuda 580 (device-facts.md): push %rbp;
 * mov %rsp,%rbp; push %r12; sub $8,%rsp; cmpl $imm32,x(%rip).  The patch
 * goes over the cmp, the first instruction as long as the jump; the thunk
 * undoes the four before it; the trampoline runs all five, the cmp reading
 * the same address from where it is placed. */
static void measured_libcuda_entry(void **state)
{
    (void)state;
    static const uint8_t code[] = { 0x55, 0x48, 0x89, 0xe5, 0x41, 0x54, 0x48, 0x83, 0xec, 0x08,
                                    0x81, 0x3d, 0x00, 0x10, 0x00, 0x00, 0x00, 0xba, 0x1c, 0x32 };
    struct rc_prologue p = decoded(code, sizeof code);
    assert_int_equal(p.site, 10);
    assert_int_equal(p.len, 20);
    assert_false(p.site_jumps);
    assert_int_equal(p.resume, AT + 20);
    assert_int_equal(p.rip_disp, 2);
    assert_int_equal(p.rip_target, AT + 20 + 0x1000);
    static const uint8_t undo[] = { 0x48, 0x83, 0xc4, 0x08, 0x41, 0x5c, 0x5d };
    assert_thunk(&p, undo, sizeof undo);

    uint8_t t[RC_TRAMPOLINE_MAX];
    assert_int_equal(rc_prologue_trampoline(t, NEAR, code, &p), 20 + 14);
    assert_memory_equal(t, code, 12);
    int32_t disp;
    memcpy(&disp, t + 12, sizeof disp);
    assert_int_equal(NEAR + 20 + (uintptr_t)(intptr_t)disp, p.rip_target);
    assert_memory_equal(t + 16, code + 16, 4);
    assert_jump(t + 20, AT + 20);
}

/* The same entry without the sub, and the cmp's shorter forms: the site is
 * the cmp at +6, whose jump crosses an 8-byte boundary. */
static void cmp_right_after_the_pushes(void **state)
{
    (void)state;
    /* cmpl $imm8,x(%rip); cmpq (REX.W); cmpb $imm8 */
    static const uint8_t forms[][16] = {
        { 0x55, 0x48, 0x89, 0xe5, 0x41, 0x54, 0x83, 0x3d, 1, 2, 3, 4, 0 },
        { 0x55, 0x48, 0x89, 0xe5, 0x41, 0x54, 0x48, 0x83, 0x3d, 1, 2, 3, 4, 0 },
        { 0x55, 0x48, 0x89, 0xe5, 0x41, 0x54, 0x80, 0x3d, 1, 2, 3, 4, 0 },
    };
    static const size_t len[] = { 13, 14, 13 }, disp[] = { 2, 3, 2 };
    static const uint8_t undo[] = { 0x41, 0x5c, 0x5d };
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        struct rc_prologue p = decoded(forms[i], len[i]);
        assert_int_equal(p.site, 6);
        assert_int_equal(p.len, len[i]);
        assert_int_equal(p.rip_disp, disp[i]);
        assert_int_equal(p.rip_target, AT + len[i] + 0x04030201);
        assert_thunk(&p, undo, sizeof undo);
        assert_trampoline(forms[i], &p, len[i]);
    }
}

/* A trampoline placed where the cmp's disp32 cannot reach its operand is
 * refused. */
static void trampoline_out_of_reach(void **state)
{
    (void)state;
    static const uint8_t code[] = { 0x55, 0x83, 0x3d, 0, 0, 0, 0, 0 };
    struct rc_prologue p = decoded(code, sizeof code);
    uint8_t t[RC_TRAMPOLINE_MAX];
    assert_int_equal(rc_prologue_trampoline(t, AT + ((uintptr_t)1 << 32), code, &p), 0);
    assert_int_equal(rc_prologue_trampoline(t, AT - ((uintptr_t)1 << 32), code, &p), 0);
}

/* UCX's bistro patch within 2 GiB: jmp rel32 to its hook, at the entry.
 * It is the site; the trampoline goes where it went, forwards or
 * backwards. */
static void other_patchers_near_jump(void **state)
{
    (void)state;
    uint8_t code[] = { 0xe9, 0, 0, 0, 0, 0xe5, 0x41, 0x54 };
    for (int32_t rel = -0x7000000; rel <= 0x7000000; rel += 0x7000000) {
        memcpy(code + 1, &rel, sizeof rel);
        struct rc_prologue p = decoded(code, sizeof code);
        assert_int_equal(p.site, 0);
        assert_int_equal(p.len, 5);
        assert_true(p.site_jumps);
        assert_int_equal(p.resume, AT + 5 + (uintptr_t)(intptr_t)rel);
        assert_thunk(&p, NULL, 0);
        assert_trampoline(code, &p, 0);
    }
}

/* UCX's far patch: movabs $hook,%rax (or %r11 in older UCX), then a jmp
 * through the register, which stays in place and runs after the copy. */
static void other_patchers_far_jump(void **state)
{
    (void)state;
    static const uint8_t rax[] = { 0x48, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8, 0xff, 0xe0 };
    static const uint8_t r11[] = { 0x49, 0xbb, 1, 2, 3, 4, 5, 6, 7, 8, 0x41, 0xff, 0xe3 };
    struct rc_prologue p = decoded(rax, sizeof rax);
    assert_int_equal(p.site, 0);
    assert_int_equal(p.len, 10);
    assert_int_equal(p.resume, AT + 10);
    assert_trampoline(rax, &p, 10);
    p = decoded(r11, sizeof r11);
    assert_int_equal(p.len, 10);
    assert_trampoline(r11, &p, 10);
}

/* Compilers with -fcf-protection start functions with endbr64, which
 * needs no undo. */
static void endbr64_prologues(void **state)
{
    (void)state;
    static const uint8_t sub[] = { 0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5,
                                   0x48, 0x81, 0xec, 0x00, 0x01, 0x00, 0x00, 0xc3 };
    struct rc_prologue p = decoded(sub, sizeof sub);
    assert_int_equal(p.site, 8);
    assert_int_equal(p.len, 15);
    assert_int_equal(p.resume, AT + 15);
    static const uint8_t pop_rbp[] = { 0x5d };
    assert_thunk(&p, pop_rbp, 1);
    assert_trampoline(sub, &p, 15);

    /* A patcher that jumped after the marker. */
    static const uint8_t jmp[] = { 0xf3, 0x0f, 0x1e, 0xfa, 0xe9, 0x10, 0, 0, 0 };
    p = decoded(jmp, sizeof jmp);
    assert_int_equal(p.site, 4);
    assert_int_equal(p.len, 9);
    assert_int_equal(p.resume, AT + 9 + 0x10);
    assert_thunk(&p, NULL, 0);
    assert_trampoline(jmp, &p, 4);
}

/* Each leading instruction is undone, the last first. */
static void other_frame_setups(void **state)
{
    (void)state;
    /* push %r15; push %r14; push %r13; sub $0x28,%rsp; jmp */
    static const uint8_t pushes[] = { 0x41, 0x57, 0x41, 0x56, 0x41, 0x55, 0x48, 0x83,
                                      0xec, 0x28, 0xe9, 0,    0,    0,    0 };
    struct rc_prologue p = decoded(pushes, sizeof pushes);
    assert_int_equal(p.site, 10);
    static const uint8_t undo[] = { 0x48, 0x83, 0xc4, 0x28, 0x41, 0x5d, 0x41, 0x5e, 0x41, 0x5f };
    assert_thunk(&p, undo, sizeof undo);
    /* push %rbp; mov %rsp,%rbp in its other encoding; push %rbx; movabs */
    static const uint8_t mov[] = {
        0x55, 0x48, 0x8b, 0xec, 0x53, 0x48, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8
    };
    p = decoded(mov, sizeof mov);
    assert_int_equal(p.site, 5);
    static const uint8_t pops[] = { 0x5b, 0x5d };
    assert_thunk(&p, pops, sizeof pops);
    /* push %rbp, then another patcher's jump */
    static const uint8_t push_jmp[] = { 0x55, 0xe9, 0xf0, 0xff, 0xff, 0xff };
    p = decoded(push_jmp, sizeof push_jmp);
    assert_int_equal(p.site, 1);
    assert_int_equal(p.len, 6);
    assert_int_equal(p.resume, AT + 6 - 0x10);
    assert_thunk(&p, pops + 1, 1);
    assert_trampoline(push_jmp, &p, 1);
}

/* The entries of libc's memory functions, as glibc 2.36 (Debian 12) and
 * 2.39 (Ubuntu 24.04, with endbr64) build them. */
static void libc_entries(void **state)
{
    (void)state;
    /* munmap, madvise, brk, shmdt: mov $nr,%eax; syscall */
    static const uint8_t stub[] = { 0xb8, 0x0b, 0, 0, 0, 0x0f, 0x05, 0x48, 0x3d };
    struct rc_prologue p = decoded(stub, sizeof stub);
    assert_int_equal(p.site, 0);
    assert_int_equal(p.len, 5);
    assert_thunk(&p, NULL, 0);
    assert_trampoline(stub, &p, 5);
    static const uint8_t cet_stub[] = { 0xf3, 0x0f, 0x1e, 0xfa, 0xb8, 0x1c, 0, 0, 0, 0x0f, 0x05 };
    p = decoded(cet_stub, sizeof cet_stub);
    assert_int_equal(p.site, 4);
    assert_int_equal(p.len, 9);
    /* mmap: mov %ecx,%r10d; test $0xfff,%r9d */
    static const uint8_t mmap[] = { 0x41, 0x89, 0xca, 0x41, 0xf7, 0xc1, 0xff, 0x0f, 0, 0, 0x75 };
    p = decoded(mmap, sizeof mmap);
    assert_int_equal(p.site, 3);
    assert_int_equal(p.len, 10);
    assert_thunk(&p, NULL, 0);
    assert_trampoline(mmap, &p, 10);
    /* mremap (2.36): sub $0x58,%rsp; mov %r8,0x40(%rsp) */
    static const uint8_t mremap[] = { 0x48, 0x83, 0xec, 0x58, 0x4c, 0x89, 0x44, 0x24, 0x40, 0x64 };
    p = decoded(mremap, sizeof mremap);
    assert_int_equal(p.site, 4);
    assert_int_equal(p.len, 9);
    static const uint8_t add[] = { 0x48, 0x83, 0xc4, 0x58 };
    assert_thunk(&p, add, sizeof add);
    /* mremap (2.39): endbr64; push %rbp; mov %ecx,%r10d; mov %rsp,%rbp;
     * sub $0x50,%rsp; mov %r8,-0x10(%rbp); mov %fs:0x28,%rax */
    static const uint8_t mremap_cet[] = { 0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x41, 0x89, 0xca,
                                          0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x50, 0x4c,
                                          0x89, 0x45, 0xf0, 0x64, 0x48, 0x8b, 0x04, 0x25,
                                          0x28, 0,    0,    0,    0x48 };
    p = decoded(mremap_cet, sizeof mremap_cet);
    assert_int_equal(p.site, 19);
    assert_int_equal(p.len, 28);
    static const uint8_t unwind[] = { 0x48, 0x83, 0xc4, 0x50, 0x5d };
    assert_thunk(&p, unwind, sizeof unwind);
    assert_trampoline(mremap_cet, &p, 28);
    /* sbrk (2.36): push %r12; mov x(%rip),%r12, relocated */
    static const uint8_t sbrk[] = { 0x41, 0x54, 0x4c, 0x8b, 0x25, 0xa7, 0x51, 0x0d, 0x00, 0x80 };
    p = decoded(sbrk, sizeof sbrk);
    assert_int_equal(p.site, 2);
    assert_int_equal(p.len, 9);
    assert_int_equal(p.rip_disp, 3);
    assert_int_equal(p.rip_target, AT + 9 + 0x0d51a7);
    static const uint8_t pop_r12[] = { 0x41, 0x5c };
    assert_thunk(&p, pop_r12, sizeof pop_r12);
    assert_trampoline(sbrk, &p, 9);
    /* sbrk (2.39): endbr64; push %rbp; mov %rsp,%rbp; push %r13; push %r12;
     * push %rbx; mov %rdi,%rbx; sub $8,%rsp; mov x(%rip),%r13 */
    static const uint8_t sbrk_cet[] = { 0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0x41, 0x55,
                                        0x41, 0x54, 0x53, 0x48, 0x89, 0xfb, 0x48, 0x83, 0xec, 0x08,
                                        0x4c, 0x8b, 0x2d, 0xad, 0xd0, 0x0d, 0x00, 0x80 };
    p = decoded(sbrk_cet, sizeof sbrk_cet);
    assert_int_equal(p.site, 20);
    assert_int_equal(p.len, 27);
    static const uint8_t unwind_sbrk[] = { 0x48, 0x83, 0xc4, 0x08, 0x5b,
                                           0x41, 0x5c, 0x41, 0x5d, 0x5d };
    assert_thunk(&p, unwind_sbrk, sizeof unwind_sbrk);
    /* A move into a register no push saved cannot be undone. */
    static const uint8_t unsaved[] = { 0x53, 0x48, 0x89, 0xfe, 0xb8, 0, 0, 0, 0 };
    assert_refused(unsaved, sizeof unsaved);
    static const uint8_t into_rsp[] = { 0x54, 0x48, 0x89, 0xc4, 0xb8, 0, 0, 0, 0 };
    assert_refused(into_rsp, sizeof into_rsp);
    /* A store into a frame this entry did not set up is the caller's. */
    static const uint8_t foreign[] = { 0x4c, 0x89, 0x45, 0xf0, 0xb8, 0, 0, 0, 0 };
    assert_refused(foreign, sizeof foreign);
}

/* What the decoder cannot undo, move without changing its meaning, or does
 * not know, is refused - before the first instruction as long as the
 * jump. */
static void everything_else_is_refused(void **state)
{
    (void)state;
    static const uint8_t refused[][8] = {
        { 0x8b, 0x05, 1, 2, 3, 4 },             /* mov x(%rip),%eax */
        { 0xe8, 1, 2, 3, 4 },                   /* call rel32 */
        { 0xc3 },                               /* ret */
        { 0xeb, 0xfe },                         /* jmp . (a patcher's lock) */
        { 0xcc },                               /* int3 */
        { 0xff, 0x25, 0, 0, 0, 0 },             /* jmp *0(%rip) */
        { 0x0f, 0x1f, 0x44, 0x00, 0x00 },       /* nopl (not in the list) */
        { 0x48, 0x83, 0xec, 0x28, 0xc3 },       /* sub $0x28,%rsp; ret */
        { 0x48, 0x83, 0xc4, 0x08, 0x55 },       /* add $8,%rsp */
        { 0x48, 0x89, 0xe6, 0x55, 0x55 },       /* mov %rsp,%rsi */
        { 0x41, 0x54, 0x74, 0x05, 0x55 },       /* push %r12; je */
        { 0x55, 0x48, 0x8d, 0x05, 1, 2, 3, 4 }, /* push; lea x(%rip),%rax */
        { 0x83, 0x7d, 0x08, 0x00, 0x55 },       /* cmpl $0,8(%rbp): not RIP */
        { 0x83, 0x38, 0x00, 0x55 },             /* cmpl $0,(%rax) */
        /* mov %rsp,%rbp without %rbp saved: the thunk could not restore it */
        { 0x48, 0x89, 0xe5, 0xe9, 1, 2, 3, 4 },
        { 0x53, 0x48, 0x89, 0xe5, 0xe9, 1, 2, 3 },
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        assert_refused(refused[i], sizeof refused[i]);
    /* Only leading instructions, as far as the decoder looks. */
    uint8_t pushes[RC_PROLOGUE_MAX + 8];
    memset(pushes, 0x53, sizeof pushes);
    assert_refused(pushes, sizeof pushes);
}

/* Bytes past the readable end are never assumed. */
static void truncated_code_is_refused(void **state)
{
    (void)state;
    static const uint8_t measured[] = { 0x55, 0x48, 0x89, 0xe5, 0x41, 0x54, 0x48, 0x83, 0xec, 0x08,
                                        0x81, 0x3d, 1,    2,    3,    4,    5,    6,    7,    8 };
    for (size_t n = 0; n < sizeof measured; n++)
        assert_refused(measured, n);
    static const uint8_t jmp[] = { 0xe9, 1, 2, 3, 4 };
    assert_refused(jmp, 4);
    static const uint8_t movabs[] = { 0x48, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8 };
    assert_refused(movabs, 9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(measured_libcuda_entry),    cmocka_unit_test(cmp_right_after_the_pushes),
        cmocka_unit_test(trampoline_out_of_reach),   cmocka_unit_test(other_patchers_near_jump),
        cmocka_unit_test(other_patchers_far_jump),   cmocka_unit_test(endbr64_prologues),
        cmocka_unit_test(other_frame_setups),        cmocka_unit_test(everything_else_is_refused),
        cmocka_unit_test(truncated_code_is_refused), cmocka_unit_test(libc_entries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
