/* The fair-share arithmetic alone: room, the water level, pressure. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "ledger.h"

#define M (1024ull * 1024ull)

static void room_is_grown_into(void **state)
{
    (void)state;
    uint64_t others[] = { 100 * M, 50 * M };
    /* 288 - 150 - 20 held by this one = 118 of room; it may keep its 20 and
     * all the room, less the 10 it is about to register. */
    struct rc_ledger_plan p = rc_ledger_plan(288 * M, others, 2, 20 * M, 10 * M);
    assert_int_equal(p.keep, 128 * M);
    assert_false(p.pressure);
    /* Alone: everything but what it registers. */
    p = rc_ledger_plan(288 * M, NULL, 0, 200 * M, 20 * M);
    assert_int_equal(p.keep, 268 * M);
    assert_false(p.pressure);
}

static void newcomer_within_share_raises_pressure(void **state)
{
    (void)state;
    uint64_t others[] = { 288 * M };
    /* Holdings {288, 20} over-fill 288: the level is 268, so the newcomer
     * keeps what it has and the other must come down to 268. */
    struct rc_ledger_plan p = rc_ledger_plan(288 * M, others, 1, 0, 20 * M);
    assert_int_equal(p.keep, 248 * M);
    assert_true(p.pressure);
    /* The other, asked after the pressure (want 0), is told 268. */
    others[0] = 20 * M;
    p = rc_ledger_plan(288 * M, others, 1, 288 * M, 0);
    assert_int_equal(p.keep, 268 * M);
    assert_false(p.pressure);
}

static void cache_over_its_share_evicts_its_own(void **state)
{
    (void)state;
    uint64_t others[] = { 144 * M };
    /* At its share of 144 already: it makes room from its own entries and
     * nobody else is asked to. */
    struct rc_ledger_plan p = rc_ledger_plan(288 * M, others, 1, 144 * M, 20 * M);
    assert_int_equal(p.keep, 124 * M);
    assert_false(p.pressure);
}

static void small_holdings_leave_the_rest_to_others(void **state)
{
    (void)state;
    /* 300 over three caches, one of which holds only 10: the other two get
     * 145 each, not 100. */
    uint64_t others[] = { 10 * M, 200 * M };
    struct rc_ledger_plan p = rc_ledger_plan(300 * M, others, 2, 200 * M, 0);
    assert_int_equal(p.keep, 145 * M);
    assert_false(p.pressure);
}

static void request_above_the_budget_keeps_nothing(void **state)
{
    (void)state;
    uint64_t others[] = { 50 * M };
    struct rc_ledger_plan p = rc_ledger_plan(100 * M, others, 1, 30 * M, 200 * M);
    assert_int_equal(p.keep, 0);
    assert_true(p.pressure);
    p = rc_ledger_plan(100 * M, others, 1, 30 * M, UINT64_MAX);
    assert_int_equal(p.keep, 0);
    assert_true(p.pressure);
}

/* Random holdings: the level is the water level (everything under it kept
 * whole, the budget filled to within rounding), never below an equal
 * share, and the cache keeps min(what it may keep, its holding) at most. */
static void level_is_tight_and_at_least_an_equal_share(void **state)
{
    (void)state;
    srand(7);
    for (int round = 0; round < 20000; round++) {
        uint64_t others[16], budget = 1 + (uint64_t)rand() % (1000 * M);
        size_t n = (size_t)rand() % 16;
        uint64_t own = (uint64_t)rand() % (600 * M), total = own;
        for (size_t i = 0; i < n; i++) {
            others[i] = (uint64_t)rand() % (600 * M);
            total += others[i];
        }
        struct rc_ledger_plan p = rc_ledger_plan(budget, others, n, own, 0);
        assert_false(p.pressure);
        if (total <= budget) {
            assert_int_equal(p.keep, own + (budget - total));
            continue;
        }
        uint64_t filled = own < p.keep ? own : p.keep, above = own > p.keep;
        for (size_t i = 0; i < n; i++) {
            filled += others[i] < p.keep ? others[i] : p.keep;
            above += others[i] > p.keep;
        }
        assert_true(filled <= budget);
        assert_true(budget - filled < above); /* one more byte each would overflow */
        assert_true(p.keep >= budget / (n + 1));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(room_is_grown_into),
        cmocka_unit_test(newcomer_within_share_raises_pressure),
        cmocka_unit_test(cache_over_its_share_evicts_its_own),
        cmocka_unit_test(small_holdings_leave_the_rest_to_others),
        cmocka_unit_test(request_above_the_budget_keeps_nothing),
        cmocka_unit_test(level_is_tight_and_at_least_an_equal_share),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
