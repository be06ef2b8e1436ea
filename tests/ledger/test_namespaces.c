/* Records of caches in other pid namespaces (containers sharing
 * /dev/shm), with ledger_helper run under `unshare --pid --fork
 * --mount-proc`: judged live or gone from a namespace above theirs, which
 * sees their processes, and taken back once gone; left alone from a
 * sibling namespace, which cannot tell; and, once their whole namespace
 * has ended, taken back from the initial namespace.  Needs root (and
 * unshare): skipped (77) elsewhere. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "ledger.h"
#include "ledger_fixture.h"

#define UNSHARE "/usr/bin/unshare", "--pid", "--fork", "--mount-proc"
#define INITIAL_PIDNS 0xeffffffcu

/* Start argv (unshare and a ledger_helper below it); *pid is the helper's
 * pid in its namespace. */
static void start_below(struct helper *h, char *const argv[], pid_t *pid)
{
    char line[512];
    int n;
    h->pid = spawn(argv, &h->to, &h->from);
    assert_non_null(fgets(line, sizeof line, h->from));
    if (sscanf(line, "ready %d", &n) != 1)
        fail_msg("ledger_helper did not start below unshare: %s", line);
    *pid = n;
}

static const char *state_of(pid_t pid)
{
    static struct stat_gpu g;
    stat_json(&g);
    const struct stat_cache *c = stat_cache_of(&g, pid);
    assert_non_null(c);
    return c->state;
}

static void owner_below_is_judged_and_taken_back(void **state)
{
    (void)state;
    /* sh stays as the namespace's init once the helper is dead, and says
     * when it is. */
    char *x_argv[] = { UNSHARE,
                       "--kill-child",
                       "/bin/sh",
                       "-c",
                       "\"$0\" dev0; echo exited; read x; exit 0",
                       (char *)ledger_helper_path,
                       NULL };
    char *y_argv[] = { UNSHARE, (char *)ledger_helper_path, "dev0", NULL };
    struct helper x, y;
    pid_t xpid, ypid;
    char line[64];
    start_below(&x, x_argv, &xpid);
    assert_int_equal(helper_ask(&x, "miss 50"), 50);
    struct rc_ledger_segment *s = segment_open("dev0");
    const struct rc_ledger_record *r = record_of(s, xpid);
    assert_non_null(r);
    uint64_t owner = atomic_load(&r->owner);
    assert_true(atomic_load(&r->pidns) != rc_ledger_pid_namespace());
    assert_string_equal(state_of(xpid), "live");

    fprintf(x.to, "crash\n");
    assert_non_null(fgets(line, sizeof line, x.from));
    assert_string_equal(line, "exited\n");
    /* A sibling namespace sees none of x's processes: its attach leaves
     * the record. */
    start_below(&y, y_argv, &ypid);
    assert_int_equal(atomic_load(&r->owner), owner);
    helper_stop(&y);

    assert_string_equal(state_of(xpid), "gone");
    struct rc_ledger *l = ledger_attach("dev0", BUDGET);
    assert_true(atomic_load(&r->owner) != owner);
    rc_ledger_detach(l);
    helper_stop(&x);
    rc_ledger_unmap(s);
}

static void owner_of_an_ended_namespace_is_taken_back_from_the_initial_one(void **state)
{
    (void)state;
    char *argv[] = { UNSHARE, (char *)ledger_helper_path, "dev0", NULL };
    struct helper x;
    pid_t xpid;
    int status;
    start_below(&x, argv, &xpid);
    assert_int_equal(helper_ask(&x, "miss 50"), 50);
    struct rc_ledger_segment *s = segment_open("dev0");
    const struct rc_ledger_record *r = record_of(s, xpid);
    assert_non_null(r);
    uint64_t owner = atomic_load(&r->owner);
    /* The helper is the namespace's init: with it the namespace ends. */
    fprintf(x.to, "crash\n");
    assert_int_equal(waitpid(x.pid, &status, 0), x.pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 1);
    assert_int_equal(atomic_load(&r->owner), owner);
    fclose(x.to);
    fclose(x.from);
    struct rc_ledger *l = ledger_attach("dev0", BUDGET);
    if (rc_ledger_pid_namespace() == INITIAL_PIDNS) {
        assert_true(atomic_load(&r->owner) != owner);
    } else {
        print_message("not in the initial pid namespace: the record must stay\n");
        assert_int_equal(atomic_load(&r->owner), owner);
    }
    rc_ledger_detach(l);
    rc_ledger_unmap(s);
}

int main(void)
{
    if (geteuid() != 0 || system("/usr/bin/unshare --pid --fork --mount-proc true") != 0) {
        printf("skipped: needs root and unshare --pid\n");
        return 77;
    }
#define T(test) cmocka_unit_test_setup_teardown(test, ledger_setup, ledger_teardown)
    const struct CMUnitTest tests[] = {
        T(owner_below_is_judged_and_taken_back),
        T(owner_of_an_ended_namespace_is_taken_back_from_the_initial_one),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
