/* Another user plants objects under this user's segment names (a FIFO,
 * which open() would wait on for ever, and a file of its own): the
 * victim's regcache-stat reports them without blocking, and its caches
 * pass them by to the next name, share the budget there and touch
 * nothing of the planted objects.  The attacker runs as nobody; the
 * victim is root, which permissions would not stop from opening anything,
 * so the checks on the opened object are what protects it.  Needs root:
 * skipped (77) elsewhere. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "ledger_fixture.h"

/* Run `command` as nobody; it must succeed. */
static void as_nobody(const char *command)
{
    char line[768];
    snprintf(line, sizeof line, "setpriv --reuid=nobody --regid=nogroup --clear-groups %s",
             command);
    if (system(line) != 0)
        fail_msg("as nobody: %s failed", command);
}

static void planted_objects_are_passed_by(void **state)
{
    (void)state;
    char fifo[256], file[256], used[256], command[600];
    segment_path("dev0", fifo, sizeof fifo);
    segment_path("dev0+1", file, sizeof file);
    segment_path("dev0+2", used, sizeof used);
    snprintf(command, sizeof command, "mkfifo -m 0600 %s", fifo);
    as_nobody(command);
    snprintf(command, sizeof command, "sh -c 'umask 077; echo planted > %s'", file);
    as_nobody(command);
    struct stat fifo_before, file_before, st;
    assert_int_equal(lstat(fifo, &fifo_before), 0);
    assert_int_equal(lstat(file, &file_before), 0);
    assert_true(S_ISFIFO(fifo_before.st_mode));
    assert_int_equal(fifo_before.st_uid, 65534);

    /* A hang (open() of the FIFO waiting for a writer) fails the test. */
    alarm(60);
    int status;
    char *out = run_stat("", &status);
    assert_int_equal(status, 1);
    assert_contains(out, " belongs to uid 65534 with mode 0600 (a FIFO): only a regular file");
    assert_contains(out, "dev0+1 belongs to uid 65534 with mode 0600: only a regular file");
    free(out);

    /* Both caches share dev0+2: b's registration within its share makes
     * a give up its 200 MiB entry (on budgets of their own, they would
     * hold 302 MiB). */
    struct helper a, b;
    struct cache_view va, vb;
    cache_start(&a, NULL);
    cache_start(&b, NULL);
    cache_ask(&a, "reg 200", &va);
    cache_ask(&b, "reg 100", &vb);
    cache_ask(&a, "put", &va);
    assert_int_equal(va.rc, 0);
    assert_true(va.bytes + vb.bytes <= BUDGET);
    assert_int_equal(vb.bytes, 101 * M);
    struct rc_ledger_segment *s = segment_open("dev0+2");
    assert_non_null(s);
    assert_non_null(record_of(s, a.pid));
    assert_non_null(record_of(s, b.pid));
    rc_ledger_unmap(s);
    out = run_stat("", &status);
    assert_contains(out, "in use 102.0M by 2 caches");
    free(out);
    helper_stop(&a);
    helper_stop(&b);

    /* Nothing of the planted objects changed. */
    assert_int_equal(lstat(fifo, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    assert_int_equal(st.st_uid, 65534);
    assert_memory_equal(&st.st_mtim, &fifo_before.st_mtim, sizeof st.st_mtim);
    assert_int_equal(lstat(file, &st), 0);
    assert_int_equal(st.st_size, file_before.st_size);
    assert_memory_equal(&st.st_mtim, &file_before.st_mtim, sizeof st.st_mtim);
    assert_int_equal(lstat(used, &st), 0);
    assert_int_equal(st.st_uid, 0);
}

int main(void)
{
    if (geteuid() != 0) {
        printf("skipped: planting as another user needs root\n");
        return 77;
    }
#define T(test) cmocka_unit_test_setup_teardown(test, ledger_setup, ledger_teardown)
    const struct CMUnitTest tests[] = {
        T(planted_objects_are_passed_by),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
