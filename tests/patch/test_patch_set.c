/* The patcher on functions written here, at chosen alignments: a jump
 * whose 5 bytes lie in one 8-byte word, one that crosses an 8-byte
 * boundary (one 16-byte store), and one that crosses a 16-byte boundary
 * (refused before anything is written: no store could write it at once);
 * a patched function reaches its wrapper, which calls it on through the
 * trampoline; the owner stored beside each thunk is found from the entry;
 * a bypassed thunk goes past the wrapper; a set taken back leaves the
 * entries as they were. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "patch_set.h"

/* mov $value,%eax; ret */
static void *function_at(uint8_t *page, size_t at, uint8_t value)
{
    const uint8_t code[] = { 0xb8, value, 0, 0, 0, 0xc3 };
    memcpy(page + at, code, sizeof code);
    return page + at;
}

static uint8_t *code_page(void)
{
    uint8_t *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    memset(p, 0xcc, 4096);
    return p;
}

static void seal(uint8_t *page)
{
    assert_int_equal(mprotect(page, 4096, PROT_READ | PROT_EXEC), 0);
}

typedef int (*fn_t)(void);
static _Atomic(void *) originals[2];
static atomic_int wrapped;

static int wrapper0(void)
{
    atomic_fetch_add(&wrapped, 1);
    return ((fn_t)atomic_load(&originals[0]))() + 10;
}

static int wrapper1(void)
{
    atomic_fetch_add(&wrapped, 1);
    return ((fn_t)atomic_load(&originals[1]))() + 10;
}

static int owner_mark;

static void in_a_word_and_across_eight(void **state)
{
    (void)state;
    uint8_t *page = code_page();
    fn_t in_word = (fn_t)function_at(page, 16, 1), across = (fn_t)function_at(page, 38, 2);
    seal(page);
    uint8_t was[2][6];
    memcpy(was[0], (void *)in_word, 6);
    memcpy(was[1], (void *)across, 6);
    struct rc_patch_fn fns[2] = {
        { .name = "in_word",
          .entry = (void *)in_word,
          .wrapper = (void *)wrapper0,
          .original = &originals[0] },
        { .name = "across",
          .entry = (void *)across,
          .wrapper = (void *)wrapper1,
          .original = &originals[1] },
    };
    char why[200] = "";
    int patched;
    if (rc_patch_set(fns, 2, &owner_mark, &patched, why, sizeof why) != 0)
        fail_msg("%s", why);
    assert_int_equal(patched, 2);
    assert_int_equal(in_word(), 11);
    assert_int_equal(across(), 12);
    assert_int_equal(atomic_load(&wrapped), 2);
    assert_ptr_equal(rc_patch_owner((void *)in_word), &owner_mark);
    assert_ptr_equal(rc_patch_owner((void *)across), &owner_mark);
    assert_null(rc_patch_set_lost(fns, 2));
    /* Past the wrapper, to the function as it was. */
    rc_patch_bypass(&fns[1]);
    assert_int_equal(across(), 2);
    assert_int_equal(atomic_load(&wrapped), 2);
    rc_patch_set_undo(fns, 2);
    assert_memory_equal((void *)in_word, was[0], 6);
    assert_memory_equal((void *)across, was[1], 6);
    assert_int_equal(in_word(), 1);
    assert_null(rc_patch_owner((void *)in_word));
}

static void across_sixteen_is_refused(void **state)
{
    (void)state;
    uint8_t *page = code_page();
    fn_t fine = (fn_t)function_at(page, 32, 3), across = (fn_t)function_at(page, 76, 4);
    seal(page);
    uint8_t before[4096];
    memcpy(before, page, sizeof before);
    struct rc_patch_fn fns[2] = {
        { .name = "fine",
          .entry = (void *)fine,
          .wrapper = (void *)wrapper0,
          .original = &originals[0] },
        { .name = "across16",
          .entry = (void *)across,
          .wrapper = (void *)wrapper1,
          .original = &originals[1] },
    };
    char why[200] = "";
    int patched = -1;
    assert_int_equal(rc_patch_set(fns, 2, NULL, &patched, why, sizeof why), -1);
    assert_int_equal(patched, 0);
    if (!strstr(why, "across16: the jump at +0 cannot be written with one atomic store"))
        fail_msg("%s", why);
    assert_memory_equal(page, before, sizeof before);
    assert_int_equal(fine(), 3);
    assert_int_equal(across(), 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(in_a_word_and_across_eight),
        cmocka_unit_test(across_sixteen_is_refused),
    };
    return cmocka_run_group_tests_name("patch_set", tests, NULL, NULL);
}
