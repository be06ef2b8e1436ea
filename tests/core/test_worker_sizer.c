/* How many workers register at once, decided from what a job costs: with
 * registrations that share everything (a job costs more the more workers
 * run) the limit stays at its floor but for its trials; with registrations
 * that run side by side (twice the workers, half the cost) it climbs to
 * every worker and stays; with a cost that does not move it comes back
 * down to the floor; it never leaves its bounds (the rails, the workers);
 * and a window in which the queue ran dry decides nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "worker_sizer.h"

/* Windows of a sizer whose job costs cost(limit); how many of them ran at
 * each limit, at most 64. */
static void run(struct rc_sizer *s, uint64_t (*cost)(unsigned), unsigned windows, unsigned at[65])
{
    for (unsigned i = 0; i < windows; i++) {
        assert_true(s->limit >= s->floor && s->limit <= s->ceil);
        at[s->limit]++;
        rc_sizer_decide(s, cost(s->limit));
    }
}

/* The limit kept: a trial's ends at its next window. */
static unsigned kept(const struct rc_sizer *s)
{
    return s->trying ? s->base : s->limit;
}

static uint64_t shared(unsigned limit)
{
    return 1000 + 300 * (limit - 1); /* contention: each worker more costs */
}

static uint64_t parallel(unsigned limit)
{
    return 16000 / limit;
}

static uint64_t flat(unsigned limit)
{
    (void)limit;
    return 1000;
}

static void shared_work_stays_at_the_floor(void **state)
{
    (void)state;
    struct rc_sizer s;
    unsigned at[65] = { 0 };
    rc_sizer_init(&s, 1, 16);
    run(&s, shared, 200, at);
    /* Trials of 2 now and then (every HOLD + 1 windows), nothing higher. */
    assert_true(at[1] >= 170);
    assert_int_equal(at[1] + at[2], 200);
}

static void parallel_work_climbs_to_every_worker(void **state)
{
    (void)state;
    struct rc_sizer s;
    unsigned at[65] = { 0 };
    rc_sizer_init(&s, 1, 16);
    run(&s, parallel, 200, at);
    assert_int_equal(kept(&s), 16);
    /* Doubling from 1: 1, 2, 4, 8, 16 in the first windows; later trials
     * of 8 (down) are refused, a sixteenth of the time at most. */
    assert_true(at[16] >= 170);
}

static void a_flat_cost_comes_down(void **state)
{
    (void)state;
    struct rc_sizer s;
    unsigned at[65] = { 0 };
    rc_sizer_init(&s, 1, 16);
    s.limit = 16; /* as if raised while the cost still fell */
    run(&s, flat, 100, at);
    assert_int_equal(kept(&s), 1);
}

static void bounds_hold(void **state)
{
    (void)state;
    struct rc_sizer s;
    unsigned at[65] = { 0 };
    /* Two rails register side by side whatever the cost. */
    rc_sizer_init(&s, 2, 4);
    run(&s, shared, 100, at);
    assert_int_equal(at[1], 0);
    rc_sizer_init(&s, 2, 4);
    run(&s, parallel, 100, at);
    assert_int_equal(kept(&s), 4);
    /* More rails than workers, and no workers: floor and limit are the
     * workers, one at least. */
    rc_sizer_init(&s, 4, 2);
    assert_int_equal(s.limit, 2);
    rc_sizer_init(&s, 1, 0);
    assert_int_equal(s.limit, 1);
    run(&s, parallel, 10, at);
    assert_int_equal(s.limit, 1);
}

static void a_dry_window_decides_nothing(void **state)
{
    (void)state;
    struct rc_sizer s;
    rc_sizer_init(&s, 1, 16);
    /* Windows of 16 jobs at limit 1, timed 1000 counts a job. */
    uint64_t now = 1;
    for (unsigned w = 0; w < 3; w++) {
        rc_sizer_started(&s, now);
        for (unsigned j = 0; j < 16; j++)
            rc_sizer_ended(&s, now += 1000, 0); /* the queue ran dry */
    }
    assert_int_equal(s.limit, 1);
    assert_false(s.trying);
    /* A full window from a steady limit starts a trial of twice as many. */
    rc_sizer_started(&s, now);
    bool rose = false;
    for (unsigned j = 0; j < 16; j++)
        rose |= rc_sizer_ended(&s, now += 1000, 100);
    assert_true(rose);
    assert_int_equal(s.limit, 2);
    assert_true(s.trying);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(shared_work_stays_at_the_floor),
        cmocka_unit_test(parallel_work_climbs_to_every_worker),
        cmocka_unit_test(a_flat_cost_comes_down),
        cmocka_unit_test(bounds_hold),
        cmocka_unit_test(a_dry_window_decides_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
