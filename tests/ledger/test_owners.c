/* Telling live owners from dead ones: a record is taken back only when its
 * owner is definitely gone - never because a process could not read
 * /proc (out of descriptors), and also when its owner died in the middle
 * of claiming it. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "ledger.h"
#include "ledger_fixture.h"

/* A process out of descriptors raises pressure and searches for dead
 * owners: it can read nothing of /proc, and so takes nobody for dead. */
static void unreadable_owners_are_not_taken_for_dead(void **state)
{
    (void)state;
    struct helper a, b;
    helper_start(&a, "dev0");
    assert_int_equal(helper_ask(&a, "miss 100"), 100);
    helper_start(&b, "dev0");
    assert_int_equal(helper_ask(&b, "nofd"), 0);
    struct rc_ledger_segment *s = segment_open("dev0");
    uint64_t before = atomic_load(&s->hdr.pressure), bytes;
    /* The last search for dead owners was long ago: the next pressure
     * searches. */
    atomic_store(&s->hdr.swept, 0);
    assert_int_equal(helper_ask(&b, "miss 250"), 250);
    assert_true(atomic_load(&s->hdr.pressure) > before);
    assert_true(atomic_load(&s->hdr.swept) != 0);

    const struct rc_ledger_record *ra = record_of(s, a.pid), *rb = record_of(s, b.pid);
    assert_non_null(ra);
    assert_non_null(rb);
    assert_int_equal(atomic_load(&ra->owner), rc_ledger_identity(a.pid));
    assert_int_equal(atomic_load(&rb->owner), rc_ledger_identity(b.pid));
    assert_int_equal(live_records(s, &bytes), 2);
    /* a still shares the ledger: against b's 250 it may hold 144 (on its
     * own it would keep 200). */
    assert_int_equal(helper_ask(&a, "miss 100"), 144);
    assert_int_equal(helper_ask(&b, "fds"), 250);
    helper_stop(&a);
    helper_stop(&b);
    rc_ledger_unmap(s);
}

/* A process killed after taking a record and before settling it leaves a
 * claim behind, which the next search takes back. */
static void claim_of_a_killed_process_is_taken_back(void **state)
{
    (void)state;
    char *argv[] = { (char *)ledger_helper_path, "dev0", "--die-claiming", NULL };
    char line[256];
    FILE *to, *from;
    pid_t pid = spawn(argv, &to, &from);
    assert_null(fgets(line, sizeof line, from));
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    fclose(to);
    fclose(from);

    struct rc_ledger_segment *s = segment_open("dev0");
    const struct rc_ledger_record *left = record_of(s, pid);
    assert_non_null(left);
    assert_true(atomic_load(&left->owner) & RC_LEDGER_CLAIMING);
    struct rc_ledger *l = ledger_attach("dev0", BUDGET);
    assert_null(record_of(s, pid));
    assert_ptr_equal(record_of(s, getpid()), left);
    rc_ledger_detach(l);
    rc_ledger_unmap(s);
}

int main(void)
{
#define T(test) cmocka_unit_test_setup_teardown(test, ledger_setup, ledger_teardown)
    const struct CMUnitTest tests[] = {
        T(unreadable_owners_are_not_taken_for_dead),
        T(claim_of_a_killed_process_is_taken_back),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
