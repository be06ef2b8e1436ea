/* notify_free's range filter on its own: an add asks for a larger fine
 * table exactly when more than one slot in 16 is in use, at every size but
 * the largest, which never asks; a grown table refilled from the ranges
 * counted keeps finding each of them; and once every range has gone, no
 * free may overlap anything. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "range_filter.h"
#include "regcache.h"

#define CHUNK ((uintptr_t)2 << 20) /* the fine granularity */
#define LEN ((uintptr_t)64 << 10)
/* Ranges 4 GiB up, one a fine chunk, so that each may take a slot of its
 * own and only hash collisions share one. */
#define RANGE(i) (((uintptr_t)1 << 32) + (uintptr_t)(i)*CHUNK)

/* The fine table's largest size, as range_filter.c has it. */
#define MAX_BITS 22

/* A filter as a cache holds one: in zeroed memory (init leaves the coarse
 * counts as they are). */
static void make(struct rc_range_filter *f)
{
    memset(f, 0, sizeof(*f));
    assert_int_equal(rc_filter_init(f), REGCACHE_OK);
}

static bool crowded(const struct rc_filter_table *t)
{
    return t->occupied * 16 > (size_t)1 << t->bits;
}

static void grows_when_crowded_until_the_largest_table(void **state)
{
    (void)state;
    struct rc_range_filter f;
    make(&f);
    unsigned growths = 0;
    size_t n = 0;
    /* Up to the largest table, and on until it is as crowded as a smaller
     * one would have had to grow. */
    for (;;) {
        struct rc_filter_table *t = atomic_load(&f.fine);
        if (t->bits == MAX_BITS && crowded(t))
            break;
        bool asks = rc_filter_add(&f, RANGE(n), RANGE(n) + LEN);
        n++;
        assert_int_equal(asks, crowded(t) && t->bits < MAX_BITS);
        if (!asks)
            continue;
        struct rc_filter_table *grown = rc_filter_grow_begin(&f);
        assert_non_null(grown);
        for (size_t i = 0; i < n; i++)
            rc_filter_refill(grown, RANGE(i), RANGE(i) + LEN);
        rc_filter_grow_end(&f, grown);
        assert_int_equal(grown->bits, t->bits + 2);
        assert_false(crowded(grown));
        growths++;
    }
    assert_int_equal(growths, 5);
    for (size_t i = 0; i < n; i += 97)
        assert_true(rc_filter_may_overlap(&f, RANGE(i) + LEN - 1, RANGE(i) + LEN));
    for (size_t i = 0; i < n; i++)
        rc_filter_remove(&f, RANGE(i), RANGE(i) + LEN);
    assert_int_equal(atomic_load(&f.fine)->occupied, 0);
    for (size_t i = 0; i < n; i += 97)
        assert_false(rc_filter_may_overlap(&f, RANGE(i), RANGE(i) + LEN));
    rc_filter_fini(&f);
}

/* Ranges across several fine chunks, or so long that they are counted in
 * coarse chunks or as huge: found while counted, gone once removed. */
static void counts_every_granularity(void **state)
{
    (void)state;
    static const uintptr_t lens[] = {
        1, LEN, CHUNK, 5 * CHUNK + 1, 16 * CHUNK, (uintptr_t)3 << 30, (uintptr_t)64 << 30
    };
    enum { N = sizeof(lens) / sizeof(lens[0]) };
    struct rc_range_filter f;
    make(&f);
    for (int i = 0; i < N; i++) {
        uintptr_t start = RANGE(1000 * (i + 1)) - 4096;
        assert_false(rc_filter_may_overlap(&f, start + lens[i] - 1, start + lens[i]));
        rc_filter_add(&f, start, start + lens[i]);
        assert_true(rc_filter_may_overlap(&f, start, start + 1));
        assert_true(rc_filter_may_overlap(&f, start + lens[i] - 1, start + lens[i]));
        rc_filter_remove(&f, start, start + lens[i]);
        assert_false(rc_filter_may_overlap(&f, start, start + 1));
        assert_false(rc_filter_may_overlap(&f, start + lens[i] - 1, start + lens[i]));
    }
    assert_int_equal(atomic_load(&f.fine)->occupied, 0);
    rc_filter_fini(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(grows_when_crowded_until_the_largest_table),
        cmocka_unit_test(counts_every_granularity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
