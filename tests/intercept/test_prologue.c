/* The prologue decoder on byte patterns: the entries measured on libcuda,
 * the jumps other patchers leave, compiler prologues with endbr64, and
 * everything it must refuse. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <string.h>

#include "prologue.h"

#define AT ((uintptr_t)0x7f0012345670ull)

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

/* The trampoline: `copied` bytes of code, then jmp *0(%rip) to `resume`. */
static void assert_trampoline(const uint8_t *code, const struct rc_prologue *p)
{
    uint8_t t[RC_TRAMPOLINE_MAX];
    size_t len = rc_prologue_trampoline(t, code, p);
    assert_int_equal(len, p->copied + 14);
    assert_memory_equal(t, code, p->copied);
    static const uint8_t jmp_rip[6] = { 0xff, 0x25, 0, 0, 0, 0 };
    assert_memory_equal(t + p->copied, jmp_rip, sizeof jmp_rip);
    uint64_t to;
    memcpy(&to, t + p->copied + 6, sizeof to);
    assert_int_equal(to, p->resume);
}

/* Every memory function of libcuda 580 (device-facts.md): push %rbp;
 * mov %rsp,%rbp; push %r12 is the first 6 bytes, and the cmp with a
 * RIP-relative operand after them is never displaced. */
static void measured_libcuda_entry(void **state)
{
    (void)state;
    static const uint8_t code[] = { 0x55, 0x48, 0x89, 0xe5, 0x41, 0x54, 0x48, 0x83,
                                    0xec, 0x08, 0x81, 0x3d, 0x11, 0x22, 0x33, 0x44 };
    struct rc_prologue p = decoded(code, sizeof code);
    assert_int_equal(p.len, 6);
    assert_int_equal(p.copied, 6);
    assert_int_equal(p.resume, AT + 6);
    assert_trampoline(code, &p);
}

/* UCX's bistro patch within 2 GiB: jmp rel32 to its hook.  The trampoline
 * goes where that jump went, forwards or backwards. */
static void other_patchers_near_jump(void **state)
{
    (void)state;
    uint8_t code[] = { 0xe9, 0, 0, 0, 0, 0xe5, 0x41, 0x54 };
    for (int32_t rel = -0x7000000; rel <= 0x7000000; rel += 0x7000000) {
        memcpy(code + 1, &rel, sizeof rel);
        struct rc_prologue p = decoded(code, sizeof code);
        assert_int_equal(p.len, 5);
        assert_int_equal(p.copied, 0);
        assert_int_equal(p.resume, AT + 5 + (uintptr_t)(intptr_t)rel);
        assert_trampoline(code, &p);
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
    assert_int_equal(p.len, 10);
    assert_int_equal(p.copied, 10);
    assert_int_equal(p.resume, AT + 10);
    assert_trampoline(rax, &p);
    p = decoded(r11, sizeof r11);
    assert_int_equal(p.len, 10);
    assert_trampoline(r11, &p);
}

/* Compilers with -fcf-protection start functions with endbr64. */
static void endbr64_prologues(void **state)
{
    (void)state;
    static const uint8_t push[] = { 0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5 };
    struct rc_prologue p = decoded(push, sizeof push);
    assert_int_equal(p.len, 5);
    assert_int_equal(p.copied, 5);
    assert_trampoline(push, &p);

    static const uint8_t sub[] = { 0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x81,
                                   0xec, 0x00, 0x01, 0x00, 0x00, 0xc3 };
    p = decoded(sub, sizeof sub);
    assert_int_equal(p.len, 11);
    assert_int_equal(p.resume, AT + 11);

    /* A patcher that jumped after the marker. */
    static const uint8_t jmp[] = { 0xf3, 0x0f, 0x1e, 0xfa, 0xe9, 0x10, 0, 0, 0 };
    p = decoded(jmp, sizeof jmp);
    assert_int_equal(p.len, 9);
    assert_int_equal(p.copied, 4);
    assert_int_equal(p.resume, AT + 9 + 0x10);
    assert_trampoline(jmp, &p);
}

static void other_frame_setups(void **state)
{
    (void)state;
    /* push %r15; push %r14; push %r13 */
    static const uint8_t pushes[] = { 0x41, 0x57, 0x41, 0x56, 0x41, 0x55 };
    assert_int_equal(decoded(pushes, sizeof pushes).len, 6);
    /* push %rbp; mov %rsp,%rbp in its other encoding; push %rbx */
    static const uint8_t mov[] = { 0x55, 0x48, 0x8b, 0xec, 0x53 };
    assert_int_equal(decoded(mov, sizeof mov).len, 5);
    /* sub $0x28,%rsp; push %rbx */
    static const uint8_t sub8[] = { 0x48, 0x83, 0xec, 0x28, 0x53 };
    assert_int_equal(decoded(sub8, sizeof sub8).len, 5);
    /* push %rbp, then another patcher's jump */
    static const uint8_t push_jmp[] = { 0x55, 0xe9, 0xf0, 0xff, 0xff, 0xff };
    struct rc_prologue p = decoded(push_jmp, sizeof push_jmp);
    assert_int_equal(p.len, 6);
    assert_int_equal(p.copied, 1);
    assert_int_equal(p.resume, AT + 6 - 0x10);
}

/* What the decoder cannot move without changing its meaning, or does not
 * know, is refused - within the first 5 bytes; past them nothing is read. */
static void everything_else_is_refused(void **state)
{
    (void)state;
    static const uint8_t refused[][8] = {
        { 0x48, 0x8b, 0x05, 1, 2, 3, 4 },       /* mov x(%rip),%rax */
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
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        assert_refused(refused[i], sizeof refused[i]);
}

/* Bytes past the readable end are never assumed. */
static void truncated_code_is_refused(void **state)
{
    (void)state;
    static const uint8_t measured[] = { 0x55, 0x48, 0x89, 0xe5, 0x41, 0x54 };
    assert_refused(measured, 3);
    assert_refused(measured, 5);
    static const uint8_t jmp[] = { 0xe9, 1, 2, 3, 4 };
    assert_refused(jmp, 4);
    static const uint8_t movabs[] = { 0x48, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8 };
    assert_refused(movabs, 9);
    assert_refused(measured, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(measured_libcuda_entry),    cmocka_unit_test(other_patchers_near_jump),
        cmocka_unit_test(other_patchers_far_jump),   cmocka_unit_test(endbr64_prologues),
        cmocka_unit_test(other_frame_setups),        cmocka_unit_test(everything_else_is_refused),
        cmocka_unit_test(truncated_code_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
