/* Real caches in several processes (cache_helper) when the ledger cannot
 * be trusted: a segment that turns corrupt or is truncated while they run,
 * and one of another mode when they start.  Each cache keeps
 * its own budget (the whole 288 MiB), as with REGCACHE_LEDGER=off, goes on
 * serving gets, writes nothing more into the segment, and its
 * REGCACHE_STATS dump says why. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "ledger_fixture.h"

/* A file for a helper's stderr. */
static void stderr_file(char path[32])
{
    strcpy(path, "/tmp/regcache-err-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
}

/* What the helper printed to stderr, which must say `text`; the file goes. */
static void stderr_says(const char *path, const char *text)
{
    char out[4096];
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    out[fread(out, 1, sizeof out - 1, f)] = '\0';
    fclose(f);
    unlink(path);
    assert_contains(out, text);
}

/* The cache serves gets and keeps to its own budget: the whole budget. */
static void keeps_own_budget(struct helper *h, struct cache_view *v)
{
    static const char *const moves[] = { "reg 100", "reg 100", "touch",  "reg 100",
                                         "realloc", "put",     "reg 100" };
    for (size_t i = 0; i < sizeof moves / sizeof moves[0]; i++) {
        cache_ask(h, moves[i], v);
        assert_int_equal(v->rc, 0);
        assert_int_equal(v->budget, BUDGET);
        assert_true(v->bytes <= BUDGET);
    }
    assert_true(v->bytes > BUDGET - 100 * M);
}

/* The segment's name, made by a cache that has left it. */
static void made_segment(struct stat_gpu *g)
{
    struct helper h;
    cache_start(&h, NULL);
    stat_json(g);
    helper_stop(&h);
}

/* Two caches sharing the GPU's ledger, 100 MiB each registered, their
 * REGCACHE_STATS dumps going to err[i]. */
static void start_two(struct helper h[2], struct cache_view v[2], char err[2][32],
                      struct stat_gpu *g)
{
    setenv("REGCACHE_STATS", "1", 1);
    for (int i = 0; i < 2; i++) {
        stderr_file(err[i]);
        cache_start(&h[i], err[i]);
        cache_ask(&h[i], "reg 100", &v[i]);
    }
    unsetenv("REGCACHE_STATS");
    stat_json(g);
    assert_int_equal(g->in_use, 202 * M);
}

static void corrupt_ledger_is_survived(void **state)
{
    (void)state;
    struct helper h[2];
    struct cache_view v[2];
    char err[2][32], text[160];
    struct stat_gpu g;
    start_two(h, v, err, &g);

    struct rc_ledger_segment *s = segment_open(g.key), copy;
    assert_non_null(s);
    s->hdr.magic = 0;
    /* Each finds out at its next miss, and from then on leaves it alone. */
    for (int i = 0; i < 2; i++) {
        cache_ask(&h[i], "reg 50", &v[i]);
        assert_int_equal(v[i].rc, 0);
    }
    memcpy(&copy, s, sizeof copy);
    for (int i = 0; i < 2; i++)
        keeps_own_budget(&h[i], &v[i]);
    /* Together they hold more than the GPU's budget: each its own. */
    assert_true(v[0].bytes + v[1].bytes > BUDGET);
    assert_memory_equal(&copy, s, sizeof copy);

    snprintf(text, sizeof text, "the BAR1 ledger of GPU %s is corrupt (bad magic 0", g.key);
    for (int i = 0; i < 2; i++) {
        helper_stop(&h[i]);
        stderr_says(err[i], text);
    }
    assert_memory_equal(&copy, s, sizeof copy);
    rc_ledger_unmap(s);
}

/* A segment truncated under the caches that share it: each goes on, with
 * no SIGBUS at its next put or miss, on its own budget, and its
 * REGCACHE_STATS dump says why. */
static void truncated_ledger_is_survived(void **state)
{
    (void)state;
    struct helper h[2];
    struct cache_view v[2];
    char err[2][32], path[256], text[256];
    struct stat_gpu g;
    start_two(h, v, err, &g);
    segment_path(g.key, path, sizeof path);
    assert_int_equal(truncate(path, 0), 0);
    for (int i = 0; i < 2; i++) {
        cache_ask(&h[i], "put", &v[i]);
        assert_int_equal(v[i].rc, 0);
        keeps_own_budget(&h[i], &v[i]);
    }
    assert_true(v[0].bytes + v[1].bytes > BUDGET);
    snprintf(text, sizeof text,
             "the BAR1 ledger of GPU %s was truncated by another process while in use: this "
             "cache keeps its own budget",
             g.key);
    for (int i = 0; i < 2; i++) {
        helper_stop(&h[i]);
        stderr_says(err[i], text);
    }
}

/* This user's own segment of another mode is refused, and left alone.
 * (Another user's is passed by: test_segment.c, test_squatted_name.c.) */
static void segment_of_another_mode_is_refused_and_left_alone(void **state)
{
    (void)state;
    struct stat_gpu g;
    char path[256], err[32], text[512];
    made_segment(&g);
    segment_path(g.key, path, sizeof path);
    assert_int_equal(chmod(path, 0644), 0);
    struct stat before, after;
    struct rc_ledger_segment *s = segment_open(g.key), copy;
    assert_non_null(s);
    memcpy(&copy, s, sizeof copy);
    assert_int_equal(stat(path, &before), 0);

    struct helper h;
    struct cache_view v;
    stderr_file(err);
    setenv("REGCACHE_STATS", "1", 1);
    cache_start(&h, err);
    unsetenv("REGCACHE_STATS");
    keeps_own_budget(&h, &v);
    helper_stop(&h);
    snprintf(text, sizeof text,
             "device 0: no shared BAR1 budget for GPU %s (%s belongs to uid %u with mode 0644: "
             "only",
             g.key, path, (unsigned)before.st_uid);
    stderr_says(err, text);

    /* Not a byte, not its time, owner or mode. */
    assert_int_equal(stat(path, &after), 0);
    assert_memory_equal(&copy, s, sizeof copy);
    assert_memory_equal(&after.st_mtim, &before.st_mtim, sizeof after.st_mtim);
    assert_int_equal(after.st_uid, before.st_uid);
    assert_int_equal(after.st_mode, before.st_mode);
    rc_ledger_unmap(s);
    assert_int_equal(unlink(path), 0);
}

int main(void)
{
#define T(test) cmocka_unit_test_setup_teardown(test, ledger_setup, ledger_teardown)
    const struct CMUnitTest tests[] = {
        T(corrupt_ledger_is_survived),
        T(truncated_ledger_is_survived),
        T(segment_of_another_mode_is_refused_and_left_alone),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
