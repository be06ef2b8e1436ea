/* regcache-stat shows every cache of every process, GPU or host: two
 * processes (named_caches_helper) with two named caches each, one over
 * the fake CUDA driver and one of host memory, all four in the table, the
 * JSON (read by python3's json) and the Prometheus text (read by a strict
 * parser, check_prometheus.py); and a bad option is named, exit status 2. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ledger_fixture.h"

static void start_named(struct helper *h, const char *tag)
{
    char *argv[] = { (char *)NAMED_HELPER, (char *)tag, NULL };
    char line[512];
    h->pid = spawn(argv, &h->to, &h->from);
    if (!fgets(line, sizeof line, h->from) || strncmp(line, "ready ", 6) != 0)
        fail_msg("named_caches_helper: %s", line);
}

/* The table row of cache `name` of process pid: its columns from the
 * process name on. */
static void table_row(const char *out, int pid, const char *name, const char *devices)
{
    char want[200];
    snprintf(want, sizeof want, "%8d %-16s %-20s %-10s %8d ", pid, "named_caches_he", name, devices,
             2);
    assert_contains(out, want);
}

static void every_cache_of_every_process(void **state)
{
    (void)state;
    struct helper h[2];
    start_named(&h[0], "a");
    start_named(&h[1], "b");
    int status;

    char *out = run_stat("", &status);
    print_message("%s", out);
    assert_int_equal(status, 0);
    assert_contains(out, "4 caches in /dev/shm:");
    for (int i = 0; i < 2; i++) {
        table_row(out, h[i].pid, i ? "gpu-b" : "gpu-a", "0");
        table_row(out, h[i].pid, i ? "host-b" : "host-a", "host");
    }
    assert_contains(out, " 33.3% "); /* 1 hit in 3 gets */
    free(out);

    out = run_stat("--json", &status);
    assert_int_equal(status, 0);
    assert_json(out);
    char want[300];
    for (int i = 0; i < 2; i++) {
        snprintf(want, sizeof want,
                 "{\"pid\":%d,\"process\":\"named_caches_he\",\"state\":\"live\",\"name\":\"%s\","
                 "\"devices\":[0],\"entries\":2,",
                 h[i].pid, i ? "gpu-b" : "gpu-a");
        assert_contains(out, want);
        snprintf(want, sizeof want,
                 "{\"pid\":%d,\"process\":\"named_caches_he\",\"state\":\"live\",\"name\":\"%s\","
                 "\"devices\":[\"host\"],\"entries\":2,",
                 h[i].pid, i ? "host-b" : "host-a");
        assert_contains(out, want);
    }
    assert_contains(out, "\"rails\":[{\"rail\":0,\"registrations\":2,\"failures\":0,");
    free(out);

    out = run_stat("--prometheus", &status);
    assert_int_equal(status, 0);
    char path[] = "/tmp/regcache-prom-XXXXXX", command[512];
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, out, strlen(out)), (ssize_t)strlen(out));
    close(fd);
    snprintf(command, sizeof command, "python3 %s %s gpu-a=2 host-a=2 gpu-b=2 host-b=2",
             CHECK_PROMETHEUS, path);
    int rc = system(command);
    unlink(path);
    if (rc != 0)
        fail_msg("not the exposition format, or caches missing:\n%s", out);
    snprintf(want, sizeof want,
             "regcache_hits_total{pid=\"%d\",process=\"named_caches_he\","
             "cache=\"host-a\"} 1\n",
             h[0].pid);
    assert_contains(out, want);
    free(out);
    for (int i = 0; i < 2; i++)
        helper_stop(&h[i]);
    /* Their segments went with their last caches. */
    out = run_stat("", &status);
    assert_contains(out, "0 caches in /dev/shm:");
    free(out);
}

/* Every bad option says what was wrong, exit status 2. */
static void bad_options_are_named(void **state)
{
    (void)state;
    static const struct {
        const char *args, *says;
    } cases[] = {
        { "--watch 0", "regcache-stat: --watch 0: expected a whole number of seconds" },
        { "--watch x", "regcache-stat: --watch x: expected a whole number of seconds" },
        { "--watch", "regcache-stat: --watch needs a number of seconds" },
        { "--bogus", "regcache-stat: unknown option '--bogus'" },
        { "--json --prometheus", "--json and --prometheus exclude each other" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int status;
        char args[64];
        snprintf(args, sizeof args, "%s 2>&1", cases[i].args);
        char *out = run_stat(args, &status);
        assert_int_equal(status, 2);
        assert_contains(out, cases[i].says);
        free(out);
    }
}

int main(void)
{
#define T(test) cmocka_unit_test_setup_teardown(test, ledger_setup, ledger_teardown)
    const struct CMUnitTest tests[] = {
        T(every_cache_of_every_process),
        T(bad_options_are_named),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
