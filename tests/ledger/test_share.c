/* Several processes on one GPU with a 320 MiB BAR1 (a 288 MiB budget):
 * fair shares, pressure, held entries, a killed process, and what
 * regcache-stat shows of them, names escaped. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "ledger.h"
#include "ledger_fixture.h"

static void pressure_makes_the_other_evict(void **state)
{
    (void)state;
    struct helper a, b;
    helper_start(&a, "dev0");
    assert_int_equal(helper_ask(&a, "miss 200"), 200);
    assert_int_equal(helper_ask(&a, "miss 88"), 288);
    /* Alone and full: it makes room from its own entries. */
    assert_int_equal(helper_ask(&a, "miss 20"), 288);
    assert_int_equal(helper_ask(&a, "put"), 288);

    /* b is within its share: it registers and raises pressure, and a comes
     * down at its next put. */
    helper_start(&b, "dev0");
    for (unsigned long long k = 1; k <= 7; k++) {
        assert_int_equal(helper_ask(&b, "miss 20"), 20 * k);
        assert_int_equal(helper_ask(&a, "put"), 288 - 20 * k);
    }
    /* 140 against 148: b's next 20 would take it past an even split, so it
     * evicts some of its own, and a comes down to the same 144. */
    assert_int_equal(helper_ask(&b, "miss 20"), 144);
    assert_int_equal(helper_ask(&a, "put"), 144);
    /* At their shares each makes room from its own entries; nobody else is
     * asked to. */
    assert_int_equal(helper_ask(&b, "miss 20"), 144);
    assert_int_equal(helper_ask(&a, "put"), 144);
    assert_int_equal(helper_ask(&a, "miss 10"), 144);
    assert_int_equal(helper_ask(&b, "put"), 144);
    helper_stop(&a);
    helper_stop(&b);
}

/* Four processes at random: after every round in which each has made its
 * move and then a put, the GPU holds at most the budget, plus what is held
 * (held entries are never evicted). */
static void sum_stays_within_budget_plus_held(void **state)
{
    (void)state;
    enum { N = 4, ROUNDS = 300 };
    struct helper h[N];
    unsigned long long bytes[N] = { 0 }, held[N] = { 0 }, most = 0;
    for (int i = 0; i < N; i++)
        helper_start(&h[i], "dev0");
    struct rc_ledger_segment *s = segment_open("dev0");
    srand(11);
    for (int round = 0; round < ROUNDS; round++) {
        /* Entries are held only in the second half. */
        bool holding = round >= ROUNDS / 2;
        for (int i = 0; i < N; i++) {
            char command[32];
            int move = rand() % 4;
            if (move == 3 && holding)
                snprintf(command, sizeof command, "hold %llu",
                         held[i] = (unsigned long long)rand() % (bytes[i] + 1));
            else if (move != 3)
                snprintf(command, sizeof command, "miss %d", 1 + rand() % 40);
            else
                continue;
            bytes[i] = helper_ask(&h[i], command);
        }
        unsigned long long total = 0, total_held = 0;
        for (int i = 0; i < N; i++) {
            total += bytes[i] = helper_ask(&h[i], "put");
            total_held += held[i];
        }
        uint64_t recorded;
        assert_int_equal(live_records(s, &recorded), N);
        assert_int_equal(recorded, total * M);
        if (total * M > BUDGET + total_held * M)
            fail_msg("round %d: %llu MiB held by all, %llu MiB of them in use", round, total,
                     total_held);
        most = total > most ? total : most;
    }
    /* The GPU was full, and caches made room for each other. */
    assert_true(most * M > BUDGET - 40 * M);
    assert_true(atomic_load(&s->hdr.pressure) > 10);
    for (int i = 0; i < N; i++)
        helper_stop(&h[i]);
    rc_ledger_unmap(s);
}

/* Pressure also looks for dead owners: what a killed process registered
 * stops counting against the budget. */
static void pressure_takes_back_a_killed_process_record(void **state)
{
    (void)state;
    struct helper a, b;
    helper_start(&a, "dev0");
    assert_int_equal(helper_ask(&a, "miss 200"), 200);
    helper_start(&b, "dev0");
    pid_t dead = a.pid;
    helper_kill(&a);
    usleep(150 * 1000); /* past the interval between two searches */
    struct rc_ledger_segment *s = segment_open("dev0");
    assert_non_null(record_of(s, dead));
    assert_int_equal(helper_ask(&b, "miss 100"), 100);
    assert_null(record_of(s, dead));
    assert_int_equal(helper_ask(&b, "miss 188"), 288);
    helper_stop(&b);
    rc_ledger_unmap(s);
}

static void stat_shows_every_cache(void **state)
{
    (void)state;
    struct helper a, b;
    int status;
    char text[256];
    helper_start(&a, "dev0");
    helper_start(&b, "dev0");
    assert_int_equal(helper_ask(&a, "miss 100"), 100);
    assert_int_equal(helper_ask(&a, "count 11 12 13 14 15 16"), 100);
    assert_int_equal(helper_ask(&b, "miss 20"), 20);

    char *out = run_stat("", &status);
    assert_int_equal(status, 0);
    assert_contains(
        out,
        "GPU dev0: budget 288.0M (configured), in use 120.0M by 2 caches, pressure raised 0 times");
    struct stat_row r;
    assert_true(stat_row(out, a.pid, &r));
    assert_string_equal(r.process, "ledger_helper");
    assert_string_equal(r.state, "live");
    assert_int_equal(r.entries, 100);
    assert_string_equal(r.bytes, "100.0M");
    assert_string_equal(r.budget, "288.0M"); /* alone at its miss */
    assert_int_equal(r.hits, 11);
    assert_int_equal(r.misses, 12);
    assert_int_equal(r.evictions, 13);
    assert_int_equal(r.tag, 14);
    assert_int_equal(r.notify, 15);
    assert_int_equal(r.failures, 16);
    assert_true(stat_row(out, b.pid, &r));
    assert_string_equal(r.bytes, "20.0M");
    assert_string_equal(r.budget, "188.0M");
    free(out);

    out = run_stat("--json", &status);
    assert_int_equal(status, 0);
    assert_json(out);
    assert_contains(out, "\"gpu\":\"dev0\",\"budget\":301989888,\"budget_source\":\"configured\","
                         "\"in_use\":125829120,"
                         "\"pressure\":0");
    snprintf(text, sizeof text,
             "{\"pid\":%d,\"process\":\"ledger_helper\",\"cache\":1,\"state\":\"live\","
             "\"entries\":100,\"bytes\":104857600,\"budget\":301989888,\"hits\":11,"
             "\"misses\":12,\"evictions\":13,\"inval_tag\":14,\"inval_notify\":15,"
             "\"reg_failures\":16}",
             (int)a.pid);
    assert_contains(out, text);
    free(out);

    /* Killed, a has not been taken back yet: shown gone, not counted. */
    helper_kill(&a);
    out = run_stat("", &status);
    assert_contains(out, "in use 20.0M by 2 caches");
    assert_true(stat_row(out, a.pid, &r));
    assert_string_equal(r.state, "gone");
    free(out);
    helper_stop(&b);
}

/* A process name is whatever the process chose: what a terminal would act
 * on is shown escaped, in the table as \xHH, in JSON as \u00HH. */
static void stat_escapes_process_names(void **state)
{
    (void)state;
    struct helper h;
    int status;
    helper_start_with(&h, "dev0", "--name=\x1b]0;owned\x07\x1b[2J\\");
    char *out = run_stat("", &status);
    assert_int_equal(status, 0);
    assert_null(strchr(out, '\x1b'));
    assert_null(strchr(out, '\x07'));
    assert_contains(out, " \\x1b]0;owned\\x07\\x1b[2J\\x5c ");
    free(out);
    out = run_stat("--json", &status);
    assert_int_equal(status, 0);
    assert_json(out);
    assert_null(strchr(out, '\x1b'));
    assert_contains(out, "\"process\":\"\\u001b]0;owned\\u0007\\u001b[2J\\\\\"");
    free(out);
    helper_stop(&h);
}

static void stat_reports_a_corrupt_segment_and_goes_on(void **state)
{
    (void)state;
    int status;
    segment_make("dev0");
    struct helper h;
    helper_start(&h, "dev1");
    struct rc_ledger_segment *s = segment_open("dev0");
    s->hdr.magic = 0;
    rc_ledger_unmap(s);
    char *out = run_stat("", &status);
    assert_int_equal(status, 1);
    assert_contains(out, "dev0 is corrupt: bad magic");
    assert_contains(out, "GPU dev1: budget 288.0M (configured), in use 0B by 1 cache,");
    free(out);
    out = run_stat("--json", &status);
    assert_int_equal(status, 1);
    assert_json(out);
    assert_contains(out, "\"error\":");
    assert_contains(out, "\"gpu\":\"dev1\"");
    free(out);
    helper_stop(&h);
}

static void stat_watch_prints_until_stopped(void **state)
{
    (void)state;
    char *argv[] = { REGCACHE_STAT, "--json", "--watch", "1", NULL };
    FILE *to, *from;
    char line[4096];
    struct helper h;
    helper_start(&h, "dev0");
    pid_t pid = spawn(argv, &to, &from);
    for (int i = 0; i < 2; i++) {
        assert_non_null(fgets(line, sizeof line, from));
        assert_json(line);
        assert_contains(line, "\"gpu\":\"dev0\"");
    }
    kill(pid, SIGTERM);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    fclose(to);
    fclose(from);
    helper_stop(&h);
}

static void stat_usage(void **state)
{
    (void)state;
    int status;
    free(run_stat("--watch 0 2>/dev/null", &status));
    assert_int_equal(status, 2);
    char *out = run_stat("--help", &status);
    assert_int_equal(status, 0);
    assert_contains(out, "usage: regcache-stat");
    free(out);
    out = run_stat("", &status); /* this test's namespace is empty */
    assert_int_equal(status, 0);
    assert_contains(out, "no regcache ledger of uid");
    free(out);
}

int main(void)
{
#define T(test) cmocka_unit_test_setup_teardown(test, ledger_setup, ledger_teardown)
    const struct CMUnitTest tests[] = {
        T(pressure_makes_the_other_evict),
        T(sum_stays_within_budget_plus_held),
        T(pressure_takes_back_a_killed_process_record),
        T(stat_shows_every_cache),
        T(stat_escapes_process_names),
        T(stat_reports_a_corrupt_segment_and_goes_on),
        T(stat_watch_prints_until_stopped),
        T(stat_usage),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
