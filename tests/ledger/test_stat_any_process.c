/* regcache-stat with whatever other processes do: a process that ends
 * between the listing of the segments and their opening is left out
 * quietly (a preloaded shim removes its segment at that moment); a
 * process name of any bytes - a carriage return, UTF-8 cut in the middle
 * of a character by the kernel's 15 bytes - is valid JSON that keeps its
 * UTF-8, and valid Prometheus text (check_prometheus.py reads it strictly:
 * UTF-8, no control character); and a GPU's ledger that no process owns a
 * record in is not shown. */
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

static void start_named(struct helper *h, const char *tag, const char *name)
{
    char *argv[] = { (char *)NAMED_HELPER, (char *)tag, (char *)name, NULL };
    char line[512];
    h->pid = spawn(argv, &h->to, &h->from);
    if (!fgets(line, sizeof line, h->from) || strncmp(line, "ready ", 6) != 0)
        fail_msg("named_caches_helper: %s", line);
}

/* `out` saved to a file, and `command` run on it with the file's path for
 * %s: its exit status. */
static int check_file(const char *out, const char *command)
{
    char path[] = "/tmp/regcache-stat-XXXXXX", full[1024];
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, out, strlen(out)), (ssize_t)strlen(out));
    close(fd);
    snprintf(full, sizeof full, command, path);
    int rc = system(full);
    unlink(path);
    return rc;
}

static void vanished_process_is_left_out_quietly(void **state)
{
    (void)state;
    struct helper stays, goes;
    start_named(&stays, "stays", NULL);
    start_named(&goes, "goes", NULL);
    char vanish[32];
    snprintf(vanish, sizeof vanish, ".%d", (int)goes.pid);
    setenv("REGCACHE_TEST_VANISH", vanish, 1);
    setenv("LD_PRELOAD", VANISH_PRELOAD, 1);
    int status;
    char *out = run_stat("2>&1", &status);
    char *json = run_stat("--json 2>&1", &status);
    int json_status = status;
    unsetenv("LD_PRELOAD");
    unsetenv("REGCACHE_TEST_VANISH");
    print_message("%s", out);
    assert_null(strstr(out, "cannot open"));
    assert_contains(out, "2 caches in /dev/shm:");
    assert_contains(out, "gpu-stays");
    assert_null(strstr(out, "gpu-goes"));
    assert_int_equal(json_status, 0);
    assert_json(json);
    assert_contains(json, "\"errors\":[]");
    free(out);
    free(json);
    helper_stop(&stays);
    helper_stop(&goes);
}

/* "\ra" and seven e-acutes: 16 bytes, of which the kernel keeps 15, the
 * last one the first half of an e-acute. */
#define NAME "\ra\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
#define E6 "\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9"

static void any_process_name_is_valid_json_and_prometheus(void **state)
{
    (void)state;
    struct helper h, l;
    start_named(&h, "odd", NAME);
    helper_start_with(&l, "dev0", "--name=" NAME);

    int status;
    char *out = run_stat("--json", &status);
    assert_int_equal(status, 0);
    assert_json(out);
    /* UTF-8 stays UTF-8, the control character and the cut byte do not
     * pass: a JSON escape and the replacement character. */
    assert_null(strstr(out, "\\u00c3"));
    assert_null(strchr(out, '\r'));
    setenv("WANT", "\\ra" E6 "\\ufffd", 1);
    int rc = check_file(
        out, "python3 -c 'import json, os, sys\n"
             "d = json.loads(open(sys.argv[1], \"rb\").read().decode(\"utf-8\"))\n"
             "want = os.environ[\"WANT\"].encode().decode(\"unicode_escape\")\n"
             "names = [c[\"process\"] for c in d[\"caches\"]]\n"
             "names += [c[\"process\"] for g in d[\"gpus\"] for c in g[\"caches\"]]\n"
             "sys.exit(0 if names.count(want) >= 3 else \"%%r in %%r\" %% (want, names))' %s");
    if (rc != 0)
        fail_msg("the process names, decoded, are not the name given: %s", out);
    free(out);

    /* In the exposition the control character is shown as text, \x0d
     * (its backslash escaped), and the cut byte as the replacement
     * character. */
    out = run_stat("--prometheus", &status);
    assert_int_equal(status, 0);
    setenv("WANT_PROCESS", "\\\\x0da" E6 "\\ufffd", 1);
    char command[512];
    snprintf(command, sizeof command, "python3 %s %%s gpu-odd=2 host-odd=2", CHECK_PROMETHEUS);
    rc = check_file(out, command);
    unsetenv("WANT_PROCESS");
    unsetenv("WANT");
    if (rc != 0)
        fail_msg("not the exposition format, or not the name given:\n%s", out);
    free(out);
    helper_stop(&h);
    helper_stop(&l);
}

/* A ledger whose every record is free (its processes long gone) is not
 * shown, in any format; one with a live owner is. */
static void ledger_nobody_owns_is_not_shown(void **state)
{
    (void)state;
    segment_make("dev3");
    struct helper h;
    helper_start(&h, "dev0");
    int status;
    char *out = run_stat("", &status);
    assert_int_equal(status, 0);
    assert_contains(out, "GPU dev0:");
    assert_null(strstr(out, "dev3"));
    free(out);
    out = run_stat("--json", &status);
    assert_int_equal(status, 0);
    assert_json(out);
    assert_contains(out, "\"gpu\":\"dev0\"");
    assert_null(strstr(out, "dev3"));
    free(out);
    out = run_stat("--prometheus", &status);
    assert_int_equal(status, 0);
    assert_contains(out, "regcache_gpu_budget_bytes{gpu=\"dev0\"}");
    assert_null(strstr(out, "dev3"));
    free(out);
    helper_stop(&h);
    /* Once its last process left, dev0's is not shown either. */
    out = run_stat("", &status);
    assert_int_equal(status, 0);
    assert_null(strstr(out, "GPU dev0"));
    assert_contains(out, "no regcache ledger of uid");
    free(out);
}

int main(void)
{
#define T(test) cmocka_unit_test_setup_teardown(test, ledger_setup, ledger_teardown)
    const struct CMUnitTest tests[] = {
        T(vanished_process_is_left_out_quietly),
        T(any_process_name_is_valid_json_and_prometheus),
        T(ledger_nobody_owns_is_not_shown),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
