/* The ledger's segment and records: creation, permissions, corruption,
 * opting out, fork, creation races, and taking back dead owners' records. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "ledger.h"
#include "ledger_fixture.h"
#include "regcache.h"

/* Attaching fails and says `why`. */
static void refused(const char *key, const char *why)
{
    struct rc_ledger *l = (struct rc_ledger *)1;
    assert_int_equal(rc_ledger_attach(key, BUDGET, RC_BUDGET_CONFIGURED, &l),
                     REGCACHE_ERR_UNSUPPORTED);
    assert_null(l);
    if (!strstr(regcache_last_error(), why))
        fail_msg("\"%s\" does not say \"%s\"", regcache_last_error(), why);
}

static void attach_creates_a_private_segment(void **state)
{
    (void)state;
    struct rc_ledger *l = ledger_attach("dev0", BUDGET);
    char path[256];
    struct stat st;
    segment_path("dev0", path, sizeof path);
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(st.st_uid, geteuid());
    assert_int_equal(st.st_size, sizeof(struct rc_ledger_segment));

    struct rc_ledger_segment *s = segment_open("dev0");
    assert_string_equal(s->hdr.key, "dev0");
    assert_int_equal(atomic_load(&s->hdr.budget), BUDGET);
    const struct rc_ledger_record *r = record_of(s, getpid());
    assert_non_null(r);
    assert_int_equal(atomic_load(&r->owner), rc_ledger_identity(getpid()));
    char comm[17] = "";
    uint64_t words[2] = { atomic_load(&r->comm[0]), atomic_load(&r->comm[1]) };
    memcpy(comm, words, 16);
    assert_string_equal(comm, "ledger_segment"); /* this test's name */

    rc_ledger_usage(l, 5 * M, 5);
    assert_int_equal(atomic_load(&r->bytes), 5 * M);
    assert_int_equal(atomic_load(&r->entries), 5);
    struct rc_ledger_counts c = { .hits = 1, .misses = 2, .reg_failures = 6 };
    rc_ledger_publish(l, &c);
    assert_int_equal(atomic_load(&r->hits), 1);
    assert_int_equal(atomic_load(&r->reg_failures), 6);

    rc_ledger_detach(l);
    uint64_t bytes;
    assert_int_equal(live_records(s, &bytes), 0);
    rc_ledger_unmap(s);
}

static void first_cache_sets_the_budget(void **state)
{
    (void)state;
    struct rc_ledger *a = ledger_attach("dev0", 100 * M);
    /* A later reading of free BAR1 lacks what the first cache registered. */
    struct rc_ledger *b = ledger_attach("dev0", 60 * M);
    struct rc_ledger_segment *s = segment_open("dev0");
    assert_int_equal(atomic_load(&s->hdr.budget), 100 * M);
    rc_ledger_detach(a);
    rc_ledger_detach(b);
    /* Alone again: the new reading counts. */
    struct rc_ledger *c = ledger_attach("dev0", 70 * M);
    assert_int_equal(atomic_load(&s->hdr.budget), 70 * M);
    /* A cache that knows no budget (its own max_bytes) changes nothing. */
    struct rc_ledger *d = ledger_attach("dev0", 0);
    assert_int_equal(atomic_load(&s->hdr.budget), 70 * M);
    rc_ledger_detach(c);
    rc_ledger_detach(d);
    rc_ledger_unmap(s);
}

static void unknown_budget_is_unlimited(void **state)
{
    (void)state;
    struct rc_ledger *l = ledger_attach("dev0", 0);
    assert_int_equal(rc_ledger_limit(l, 10 * M), SIZE_MAX);
    rc_ledger_detach(l);
}

static void ledger_off_or_misnamed_is_refused(void **state)
{
    (void)state;
    setenv("REGCACHE_LEDGER", "off", 1);
    refused("dev0", "REGCACHE_LEDGER=off");
    setenv("REGCACHE_LEDGER", "sometimes", 1);
    refused("dev0", "REGCACHE_LEDGER=\"sometimes\": expected on or off");
    char path[256];
    segment_path("dev0", path, sizeof path);
    assert_int_equal(access(path, F_OK), -1);
    unsetenv("REGCACHE_LEDGER");
    refused("../etc", "not a name");
    refused("", "not a name");
    setenv("REGCACHE_LEDGER_NAMESPACE", "a-b", 1);
    refused("dev0", "REGCACHE_LEDGER_NAMESPACE");
}

static void segment_of_wrong_mode_or_a_link_is_refused(void **state)
{
    (void)state;
    char path[256], other[256];
    segment_path("dev0", path, sizeof path);
    segment_make("dev0");
    assert_int_equal(chmod(path, 0644), 0);
    refused("dev0", "mode 0644");
    assert_int_equal(chmod(path, 0600), 0);
    segment_make("dev0");

    /* A link planted under the name is never followed, even to a valid
     * ledger of this user. */
    segment_make("dev1");
    segment_path("dev1", other, sizeof other);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(symlink(other, path), 0);
    refused("dev0", strerror(ELOOP));
}

/* Another user's segment under the name is neither used nor touched: the
 * next name is this user's (tests/ledger/test_squatted_name.c plants
 * worse as another user). */
static void another_users_segment_is_passed_by(void **state)
{
    (void)state;
    char path[256], next[256];
    struct stat before, after;
    segment_path("dev0", path, sizeof path);
    segment_path("dev0+1", next, sizeof next);
    segment_make("dev0");
    assert_int_equal(chown(path, 65534, 65534), 0);
    assert_int_equal(stat(path, &before), 0);
    struct rc_ledger *l = ledger_attach("dev0", BUDGET);
    struct rc_ledger_segment *s = segment_open("dev0+1");
    assert_non_null(s);
    assert_string_equal(s->hdr.key, "dev0");
    assert_non_null(record_of(s, getpid()));
    assert_int_equal(stat(next, &after), 0);
    assert_int_equal(after.st_uid, 0);
    assert_int_equal(after.st_mode & 07777, 0600);
    assert_int_equal(stat(path, &after), 0);
    assert_int_equal(after.st_uid, 65534);
    assert_memory_equal(&after.st_mtim, &before.st_mtim, sizeof after.st_mtim);
    rc_ledger_detach(l);
    rc_ledger_unmap(s);
}

/* Each way a segment can be wrong, written into a fresh one. */
static void corrupt_segment_is_survived(void **state)
{
    (void)state;
    static const struct {
        size_t offset;
        uint64_t value;
        const char *why;
    } wrong[] = {
        { offsetof(struct rc_ledger_header, magic), 0x6867666564636261ull, "bad magic" },
        { offsetof(struct rc_ledger_header, version), RC_LEDGER_VERSION + 1,
          "this library reads version" },
        { offsetof(struct rc_ledger_header, records), 1u << 20, "but layout version" },
        { offsetof(struct rc_ledger_header, key), 0x2f2e2e, "GPU key" },
        { offsetof(struct rc_ledger_header, used), RC_LEDGER_RECORDS + 1, "records in use" },
        { offsetof(struct rc_ledger_header, budget), 1ull << 60, "budget" },
        { offsetof(struct rc_ledger_segment, rec[3].owner), 1ull << 40, "without a pid" },
        { offsetof(struct rc_ledger_segment, rec[3].bytes), 1ull << 60, "record 3 claims" },
    };
    char path[256];
    segment_path("dev0", path, sizeof path);
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        segment_make("dev0");
        struct rc_ledger_segment *s = segment_open("dev0");
        memcpy((char *)s + wrong[i].offset, &wrong[i].value, sizeof wrong[i].value);
        rc_ledger_unmap(s);
        refused("dev0", wrong[i].why);
        assert_int_equal(unlink(path), 0);
    }
    segment_make("dev0");
    assert_int_equal(truncate(path, 1000), 0);
    refused("dev0", "1000 bytes");
    assert_int_equal(truncate(path, 10), 0);
    refused("dev0", "not a ledger");
}

static void corruption_while_attached_falls_back(void **state)
{
    (void)state;
    struct rc_ledger *l = ledger_attach("dev0", 100 * M);
    rc_ledger_usage(l, 10 * M, 1);
    /* Alone with 100: it may keep 99 before registering 1, and counts the
     * 1 already. */
    assert_int_equal(rc_ledger_limit(l, M), 99 * M);
    struct rc_ledger_segment *s = segment_open("dev0");
    atomic_store(&s->hdr.used, 5000);
    /* Its own budget of 100, with room for the 1 it registers. */
    assert_int_equal(rc_ledger_limit(l, M), 99 * M);
    assert_non_null(strstr(regcache_last_error(), "corrupt"));
    assert_non_null(strstr(rc_ledger_failure(l), "corrupt (5000 records in use"));
    /* From now on it keeps to itself and writes nothing, its record at
     * detach included. */
    atomic_store(&s->hdr.used, 1);
    rc_ledger_usage(l, 50 * M, 1);
    assert_int_equal(atomic_load(&record_of(s, getpid())->bytes), 11 * M);
    assert_int_equal(rc_ledger_limit(l, 10 * M), 90 * M);
    assert_int_equal(rc_ledger_limit(l, 200 * M), 0);
    rc_ledger_detach(l);
    assert_non_null(record_of(s, getpid()));
    atomic_store(&record_of(s, getpid())->owner, 0);

    /* A record taken over by someone else is no longer this cache's. */
    l = ledger_attach("dev0", 100 * M);
    assert_null(rc_ledger_failure(l));
    atomic_store(&record_of(s, getpid())->owner, 1ull << RC_LEDGER_PID_BITS | 1);
    assert_int_equal(rc_ledger_limit(l, M), 99 * M);
    assert_non_null(strstr(regcache_last_error(), "taken over"));
    rc_ledger_detach(l);
    rc_ledger_unmap(s);
}

/* A cache alone on a GPU stops reading the records while nobody claims
 * one: its share must shrink once another cache attaches and registers,
 * follow that cache's bytes, and grow back once it leaves. */
static void share_alone_follows_newcomers(void **state)
{
    (void)state;
    struct rc_ledger *a = ledger_attach("dev0", 100 * M);
    /* Before each ask, a holds 50 again: the ask counts its request. */
    rc_ledger_usage(a, 50 * M, 50);
    assert_int_equal(rc_ledger_limit(a, M), 99 * M);
    rc_ledger_usage(a, 50 * M, 50);
    assert_int_equal(rc_ledger_limit(a, M), 99 * M);

    struct rc_ledger *b = ledger_attach("dev0", 0);
    rc_ledger_usage(b, 30 * M, 30);
    rc_ledger_usage(a, 50 * M, 50);
    assert_int_equal(rc_ledger_limit(a, M), 69 * M);
    rc_ledger_usage(b, 40 * M, 40);
    rc_ledger_usage(a, 50 * M, 50);
    assert_int_equal(rc_ledger_limit(a, M), 59 * M);

    rc_ledger_detach(b);
    rc_ledger_usage(a, 50 * M, 50);
    assert_int_equal(rc_ledger_limit(a, M), 99 * M);
    rc_ledger_detach(a);
}

/* What the core will do from many threads: every call at once, on
 * ledgers of their own and on one they share (for ThreadSanitizer). */
static void *cache_thread(void *arg)
{
    struct rc_ledger *l = arg;
    for (int i = 0; i < 2000; i++) {
        size_t keep = rc_ledger_limit(l, M);
        size_t bytes = (keep < 60 * M ? keep : 60 * M) + M;
        rc_ledger_usage(l, bytes, bytes / M);
        if (rc_ledger_pressed(l))
            rc_ledger_limit(l, 0);
    }
    return NULL;
}

static void threads_share_ledgers(void **state)
{
    (void)state;
    enum { CACHES = 6, THREADS = 8 };
    struct rc_ledger *l[CACHES];
    pthread_t t[THREADS];
    for (int i = 0; i < CACHES; i++)
        l[i] = ledger_attach("dev0", BUDGET);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, cache_thread, l[i % CACHES]), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    struct rc_ledger_segment *s = segment_open("dev0");
    uint64_t bytes;
    assert_int_equal(live_records(s, &bytes), CACHES);
    assert_true(bytes <= CACHES * 61 * M);
    assert_true(atomic_load(&s->hdr.pressure) > 0);
    for (int i = 0; i < CACHES; i++)
        rc_ledger_detach(l[i]);
    assert_int_equal(live_records(s, &bytes), 0);
    rc_ledger_unmap(s);
}

/* Sixteen processes attach at once to a ledger nobody has created: they
 * all end up in one segment, and nothing half-made is left behind. */
static void creation_race_yields_one_segment(void **state)
{
    (void)state;
    enum { N = 16 };
    int go[2], ready[2], leave[2];
    pid_t pids[N];
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(leave), 0);
    for (int i = 0; i < N; i++) {
        if ((pids[i] = fork()) == 0) {
            char c;
            struct rc_ledger *l;
            close(go[1]);
            close(leave[1]);
            if (read(go[0], &c, 1) != 0 ||
                rc_ledger_attach("dev0", BUDGET, RC_BUDGET_CONFIGURED, &l) != REGCACHE_OK)
                _exit(1);
            rc_ledger_usage(l, M, 1);
            if (write(ready[1], "x", 1) != 1 || read(leave[0], &c, 1) != 0)
                _exit(1);
            rc_ledger_detach(l);
            _exit(0);
        }
        assert_true(pids[i] > 0);
    }
    close(go[0]);
    close(ready[1]);
    close(leave[0]);
    close(go[1]); /* all start at once */
    char c;
    for (int i = 0; i < N; i++)
        assert_int_equal(read(ready[0], &c, 1), 1);
    struct rc_ledger_segment *s = segment_open("dev0");
    uint64_t bytes;
    assert_int_equal(live_records(s, &bytes), N);
    assert_int_equal(bytes, N * M);
    close(leave[1]);
    for (int i = 0; i < N; i++) {
        int status;
        assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    assert_int_equal(live_records(s, &bytes), 0);
    rc_ledger_unmap(s);
    close(ready[0]);
}

/* The child of a process with a ledger neither frees the parent's record
 * nor waits on anything; a ledger it attaches itself is its own. */
static void fork_child_leaves_the_parent_record(void **state)
{
    (void)state;
    struct rc_ledger *l = ledger_attach("dev0", BUDGET);
    rc_ledger_usage(l, 7 * M, 1);
    pid_t pid = fork();
    if (pid == 0) {
        struct rc_ledger_segment *s = segment_open("dev0");
        struct rc_ledger *mine = NULL;
        rc_ledger_detach(l);
        const struct rc_ledger_record *parent = record_of(s, getppid());
        int ok = parent && atomic_load(&parent->bytes) == 7 * M &&
                 rc_ledger_attach("dev0", BUDGET, RC_BUDGET_CONFIGURED, &mine) == REGCACHE_OK;
        ok = ok && record_of(s, getpid()) != parent;
        rc_ledger_detach(mine);
        _exit(ok && !record_of(s, getpid()) ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    struct rc_ledger_segment *s = segment_open("dev0");
    assert_non_null(record_of(s, getpid()));
    rc_ledger_detach(l);
    assert_null(record_of(s, getpid()));
    rc_ledger_unmap(s);
}

/* Forge a settled record for `owner` in free record i. */
static void forge(struct rc_ledger_segment *s, unsigned i, uint64_t owner, uint64_t pidns)
{
    assert_int_equal(atomic_load(&s->rec[i].owner), 0);
    atomic_store(&s->rec[i].pidns, pidns);
    atomic_store(&s->rec[i].bytes, 50 * M);
    atomic_store(&s->rec[i].owner, owner);
    if (atomic_load(&s->hdr.used) <= i)
        atomic_store(&s->hdr.used, i + 1);
}

static void dead_and_reused_pids_are_taken_back(void **state)
{
    (void)state;
    struct helper h;
    helper_start(&h, "dev0");
    assert_int_equal(helper_ask(&h, "miss 100"), 100);
    pid_t dead = h.pid;
    helper_kill(&h);
    struct rc_ledger_segment *s = segment_open("dev0");
    const struct rc_ledger_record *left = record_of(s, dead);
    assert_non_null(left);

    /* This process's pid with another start time: a process that had the
     * pid before (other pid namespaces: test_namespaces.c). */
    uint64_t me = rc_ledger_identity(getpid()), pidns = rc_ledger_pid_namespace();
    forge(s, 10, me + (1ull << RC_LEDGER_PID_BITS), pidns);
    struct rc_ledger *l = ledger_attach("dev0", BUDGET);
    /* The dead helper's record was free again for this attach to claim. */
    assert_ptr_equal(record_of(s, getpid()), left);
    assert_int_equal(atomic_load(&left->owner), me);
    assert_int_equal(atomic_load(&s->rec[10].owner), 0);
    rc_ledger_detach(l);
    rc_ledger_unmap(s);
}

/* `another-user` runs the one case that needs root (only root can make a
 * file another user's) as a test of its own, skipped (77) elsewhere rather
 * than passed. */
int main(int argc, char **argv)
{
#define T(test) cmocka_unit_test_setup_teardown(test, ledger_setup, ledger_teardown)
    if (argc > 1 && strcmp(argv[1], "another-user") == 0) {
        if (geteuid() != 0) {
            printf("skipped: only root can make a segment another user's\n");
            return 77;
        }
        const struct CMUnitTest root_only[] = { T(another_users_segment_is_passed_by) };
        return cmocka_run_group_tests(root_only, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        T(attach_creates_a_private_segment),
        T(first_cache_sets_the_budget),
        T(unknown_budget_is_unlimited),
        T(ledger_off_or_misnamed_is_refused),
        T(segment_of_wrong_mode_or_a_link_is_refused),
        T(corrupt_segment_is_survived),
        T(corruption_while_attached_falls_back),
        T(share_alone_follows_newcomers),
        T(threads_share_ledgers),
        T(creation_race_yields_one_segment),
        T(fork_child_leaves_the_parent_record),
        T(dead_and_reused_pids_are_taken_back),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
