/* Real caches in several processes (cache_helper: the public API over the
 * fake backend) sharing device 0's BAR1 budget through the ledger, with a
 * 320 MiB BAR1 (a 288 MiB budget) and max_bytes 0: the budget held to at
 * every quiet moment of a random run, pressure that makes the others evict,
 * a registration in flight counted, a killed process taken back, a fork
 * child's destroy, and REGCACHE_LEDGER=off. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ledger_fixture.h"

/* Every process puts its anchor: a quiet moment, at which each has
 * answered the pressure the others raised.  Returns the bytes of all. */
static unsigned long long put_all(struct helper *h, struct cache_view *v, int n,
                                  unsigned long long *held)
{
    unsigned long long total = 0;
    *held = 0;
    for (int i = 0; i < n; i++) {
        total += cache_ask(&h[i], "put", &v[i]);
        *held += v[i].held;
    }
    return total;
}

/* What regcache-stat shows of each process is what the process says. */
static void stat_agrees(const struct helper *h, const struct cache_view *v, int n,
                        unsigned long long total)
{
    struct stat_gpu g;
    stat_json(&g);
    assert_int_equal(g.n, n);
    assert_int_equal(g.budget, BUDGET);
    assert_int_equal(g.in_use, total);
    for (int i = 0; i < n; i++) {
        const struct stat_cache *c = stat_cache_of(&g, h[i].pid);
        assert_non_null(c);
        assert_string_equal(c->state, "live");
        assert_int_equal(c->bytes, v[i].bytes);
        assert_int_equal(c->entries, v[i].entries);
        assert_int_equal(c->budget, v[i].budget);
    }
}

/* Four processes register, hold and put at random; after each round the
 * GPU holds at most the budget plus what is held (held entries are never
 * evicted), and regcache-stat agrees with every process. */
static void sum_stays_within_budget_plus_held(void **state)
{
    (void)state;
    enum { N = 4, ROUNDS = 150 };
    struct helper h[N];
    struct cache_view v[N] = { { 0 } };
    unsigned long long most = 0, held;
    for (int i = 0; i < N; i++)
        cache_start(&h[i], NULL);
    srand(5);
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < N; i++) {
            char command[32] = "touch";
            int move = rand() % 8;
            if (move < 4)
                snprintf(command, sizeof command, "reg %d", 1 + rand() % 40);
            else if (move == 4 && v[i].held < 64 * M)
                snprintf(command, sizeof command, "hold %d", 1 + rand() % 16);
            else if (move == 5)
                snprintf(command, sizeof command, "release");
            cache_ask(&h[i], command, &v[i]);
            assert_int_equal(v[i].rc, 0);
        }
        unsigned long long total = put_all(h, v, N, &held);
        if (total > BUDGET + held)
            fail_msg("round %d: %llu MiB registered by all, %llu MiB of them held", round,
                     total / M, held / M);
        if (round % 10 == 0)
            stat_agrees(h, v, N, total);
        most = total > most ? total : most;
    }
    /* The GPU was full, and the caches made room for each other. */
    struct stat_gpu g;
    stat_json(&g);
    print_message("most registered at once %llu MiB of %llu, pressure raised %llu times\n",
                  most / M, BUDGET / M, g.pressure);
    assert_true(most > BUDGET - 40 * M);
    assert_true(g.pressure > 10);
    for (int i = 0; i < N; i++)
        helper_stop(&h[i]);
}

/* A fills the budget with unused entries; B, within its share, registers
 * and raises pressure; A evicts down to its share at its next put. */
static void pressure_makes_the_other_evict(void **state)
{
    (void)state;
    struct helper h[2];
    struct cache_view v[2], before;
    unsigned long long held;
    cache_start(&h[0], NULL);
    /* Alone, A makes room from its own entries once the budget is full. */
    for (int i = 0; i < 80; i++)
        cache_ask(&h[0], "reg 4", &v[0]);
    assert_true(v[0].bytes <= BUDGET && v[0].bytes > BUDGET - 4 * M);
    assert_true(v[0].evictions > 0);

    cache_start(&h[1], NULL);
    cache_ask(&h[1], "reg 20", &v[1]);
    assert_int_equal(v[1].rc, 0);
    assert_int_equal(v[1].bytes, 21 * M);
    assert_int_equal(v[1].evictions, 0);
    /* Until A's next put the GPU is over budget by B's request. */
    struct stat_gpu g;
    stat_json(&g);
    assert_int_equal(g.in_use, v[0].bytes + v[1].bytes);
    assert_true(g.pressure >= 1);

    before = v[0];
    cache_ask(&h[0], "put", &v[0]);
    assert_true(v[0].evictions > before.evictions);
    /* B holds less than an even split: A may keep all the rest. */
    assert_int_equal(v[0].budget, BUDGET - v[1].bytes);
    assert_true(v[0].bytes <= v[0].budget && v[0].bytes > v[0].budget - 4 * M);
    stat_agrees(h, v, 2, v[0].bytes + v[1].bytes);

    /* B grows at every turn until both hold about half. */
    for (int turn = 0; turn < 10; turn++) {
        cache_ask(&h[1], "reg 20", &v[1]);
        unsigned long long total = put_all(h, v, 2, &held);
        assert_true(total <= BUDGET + held);
    }
    print_message("A %llu MiB (budget %llu), B %llu MiB (budget %llu)\n", v[0].bytes / M,
                  v[0].budget / M, v[1].bytes / M, v[1].budget / M);
    assert_true(v[0].bytes > BUDGET / 2 - 24 * M && v[1].bytes > BUDGET / 2 - 24 * M);
    stat_agrees(h, v, 2, v[0].bytes + v[1].bytes);
    helper_stop(&h[0]);
    helper_stop(&h[1]);
}

/* B's registration is in flight, after it evicted to make room for it: a
 * miss of A meanwhile counts it, so the GPU does not end up over budget
 * once both are registered. */
static void registration_in_flight_is_counted(void **state)
{
    (void)state;
    struct helper h[2];
    struct cache_view v[2];
    char line[64];
    cache_start(&h[0], NULL);
    cache_start(&h[1], NULL);
    /* Both at 141 MiB in 4 MiB entries: the GPU is full. */
    for (int i = 0; i < 35; i++) {
        cache_ask(&h[0], "reg 4", &v[0]);
        cache_ask(&h[1], "reg 4", &v[1]);
    }
    assert_int_equal(v[0].bytes + v[1].bytes, 282 * M);

    fprintf(h[1].to, "wait 20\n");
    assert_non_null(fgets(line, sizeof line, h[1].from));
    assert_string_equal(line, "registering\n");
    cache_ask(&h[0], "reg 20", &v[0]);
    fprintf(h[1].to, "go\n");
    cache_ask(&h[1], "touch", &v[1]);
    print_message("A %llu MiB, B %llu MiB\n", v[0].bytes / M, v[1].bytes / M);
    if (v[0].bytes + v[1].bytes > BUDGET + v[0].held + v[1].held)
        fail_msg("%llu MiB registered, %llu MiB of them held", (v[0].bytes + v[1].bytes) / M,
                 (v[0].held + v[1].held) / M);
    helper_stop(&h[0]);
    helper_stop(&h[1]);
}

/* A process killed while it holds entries: regcache-stat shows it gone and
 * stops counting its bytes at once; the next pressure takes its record
 * back, and the others may grow into the whole budget again. */
static void killed_process_is_taken_back(void **state)
{
    (void)state;
    struct helper a, b;
    struct cache_view va, vb;
    cache_start(&a, NULL);
    cache_ask(&a, "reg 100", &va);
    cache_ask(&a, "hold 100", &va);
    cache_ask(&a, "reg 80", &va);
    assert_int_equal(va.bytes, 281 * M);
    cache_start(&b, NULL);
    cache_ask(&b, "reg 20", &vb);
    pid_t dead = a.pid;
    helper_kill(&a);

    struct stat_gpu g;
    stat_json(&g);
    assert_int_equal(g.n, 2);
    assert_non_null(stat_cache_of(&g, dead));
    assert_string_equal(stat_cache_of(&g, dead)->state, "gone");
    assert_int_equal(g.in_use, vb.bytes);

    usleep(150 * 1000); /* past the interval between two searches */
    cache_ask(&b, "reg 100", &vb);
    stat_json(&g);
    assert_int_equal(g.n, 1);
    assert_null(stat_cache_of(&g, dead));
    assert_int_equal(g.in_use, vb.bytes);
    cache_ask(&b, "reg 100", &vb);
    cache_ask(&b, "reg 67", &vb);
    assert_int_equal(vb.bytes, BUDGET);
    assert_int_equal(vb.evictions, 0);
    helper_stop(&b);
}

/* REGCACHE_LEDGER=off: each cache keeps the whole budget to itself and
 * nothing is made in /dev/shm. */
/* A fork child that destroys the cache it inherited leaves the parent's
 * record as it was: the parent still holds those entries. */
static void fork_child_leaves_the_parent_record(void **state)
{
    (void)state;
    struct helper h;
    struct cache_view v;
    cache_start(&h, NULL);
    cache_ask(&h, "reg 8", &v);
    assert_int_equal(v.bytes, 9 * M);
    cache_ask(&h, "fork", &v);
    assert_int_equal(v.rc, 0);
    assert_int_equal(v.bytes, 9 * M);
    stat_agrees(&h, &v, 1, 9 * M);
    helper_stop(&h);
}

static void ledger_off_keeps_budgets_apart(void **state)
{
    (void)state;
    struct helper h[2];
    struct cache_view v[2];
    setenv("REGCACHE_LEDGER", "off", 1);
    for (int i = 0; i < 2; i++) {
        cache_start(&h[i], NULL);
        for (int k = 0; k < 4; k++)
            cache_ask(&h[i], "reg 72", &v[i]);
        assert_int_equal(v[i].budget, BUDGET);
        assert_int_equal(v[i].bytes, 1 * M + 3 * 72 * M);
    }
    assert_int_equal(namespace_segments(false), 0);
    for (int i = 0; i < 2; i++)
        helper_stop(&h[i]);
}

int main(void)
{
#define T(test) cmocka_unit_test_setup_teardown(test, ledger_setup, ledger_teardown)
    const struct CMUnitTest tests[] = {
        T(sum_stays_within_budget_plus_held),   T(pressure_makes_the_other_evict),
        T(registration_in_flight_is_counted),   T(killed_process_is_taken_back),
        T(fork_child_leaves_the_parent_record), T(ledger_off_keeps_budgets_apart),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
