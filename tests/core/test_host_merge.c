/* params.host_merge: which cached pageable host entries a miss merges with.
 * ALL merges every overlapping entry (the merged ones leave as "merged"),
 * SAME_ACCESS only entries of the same access, OFF none (an access upgrade
 * of the same range still replaces, as "replaced"); AUTO is OFF for a
 * cache with on_register or on_leave and ALL otherwise, and
 * REGCACHE_HOST_MERGE overrides it.  A program built against 0.3 is told
 * "replaced" for a merge.  Real mappings, fenced by PROT_NONE pages, with
 * the page as alignment so that ranges are exact. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>
#include <infiniband/verbs.h>

#include "cache_fixture.h"

#define LEN (64 * KiB)
#define RR IBV_ACCESS_REMOTE_READ

#define page ((size_t)sysconf(_SC_PAGESIZE))

struct leaves {
    int n, reason[16];
};

static void on_leave(void *arg, const struct regcache_leave *l)
{
    struct leaves *v = arg;
    if (v->n < 16)
        v->reason[v->n] = l->reason;
    v->n++;
}

/* A mapping of LEN bytes between two PROT_NONE pages. */
static char *fenced(void)
{
    char *p = mmap(NULL, LEN + 2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    assert_int_equal(mprotect(p + page, LEN, PROT_READ | PROT_WRITE), 0);
    return p + page;
}

static void unmap(struct fx *f, char *m)
{
    regcache_destroy(f->c);
    f->c = NULL;
    assert_int_equal(munmap(m - page, LEN + 2 * page), 0);
}

static void create(struct fx *f, int merge, struct leaves *v)
{
    f->p.host_memory = 1;
    f->p.alignment = page;
    f->p.host_merge = merge;
    if (v) {
        memset(v, 0, sizeof(*v));
        f->p.on_leave = on_leave;
        f->p.callback_arg = v;
    }
    fx_create(f);
}

static void use_access(struct fx *f, char *at, size_t len, int access)
{
    regcache_entry_t *e;
    assert_int_equal(regcache_get_access(f->c, 0, at, len, access, 0, &e), REGCACHE_OK);
    regcache_put(f->c, e);
}

/* Three neighbours of one mapping: [0, 4) and [2, 6) pages with the
 * cache's access, then [5, 8) for remote read alone. */
static void neighbours(struct fx *f, char *m)
{
    fx_use(f, (uintptr_t)m, 4 * page);
    fx_use(f, (uintptr_t)m + 2 * page, 4 * page);
    use_access(f, m + 5 * page, 3 * page, RR);
}

static uint64_t leaves_of(struct fx *f, int reason)
{
    return fx_stats(f).leaves[reason];
}

struct policy_case {
    const char *name;
    int merge;
    bool callbacks;
    uint64_t entries, merged;
};

static const struct policy_case policies[] = {
    /* [0,6) merges the first; [0,8) merges both into one. */
    { "all", REGCACHE_HOST_MERGE_ALL, false, 1, 2 },
    /* [0,6) merges the first; remote read stays apart. */
    { "same_access", REGCACHE_HOST_MERGE_SAME_ACCESS, false, 2, 1 },
    { "off", REGCACHE_HOST_MERGE_OFF, false, 3, 0 },
    { "auto_without_callbacks", REGCACHE_HOST_MERGE_AUTO, false, 1, 2 },
    { "auto_with_on_leave", REGCACHE_HOST_MERGE_AUTO, true, 3, 0 },
};

static void policy(void **state)
{
    struct fx *f = *state;
    const struct policy_case *pc = f->param;
    struct leaves v;
    create(f, pc->merge, pc->callbacks ? &v : NULL);
    char *m = fenced();
    neighbours(f, m);
    fx_assert_stats(f, FX_STAT(entries, pc->entries), FX_STAT(registrations, 3), NULL);
    assert_int_equal(leaves_of(f, REGCACHE_REASON_MERGED), pc->merged);
    assert_int_equal(leaves_of(f, REGCACHE_REASON_REPLACED), 0);
    if (pc->callbacks) {
        assert_int_equal(v.n, 0);
        unmap(f, m);
        assert_int_equal(v.n, 3);
    } else {
        unmap(f, m);
    }
}

/* Unused merged entries are noticed as "merged", with their reason in the
 * statistics and the dump's names. */
static void merged_entries_noticed_as_merged(void **state)
{
    struct fx *f = *state;
    struct leaves v;
    create(f, REGCACHE_HOST_MERGE_ALL, &v);
    char *m = fenced();
    neighbours(f, m);
    assert_int_equal(v.n, 2);
    assert_string_equal(regcache_reason_name(v.reason[0]), "merged");
    assert_string_equal(regcache_reason_name(v.reason[1]), "merged");
    unmap(f, m);
}

/* With merging off, a get that needs more access on the same range still
 * replaces the narrower entry: an upgrade, not a merge. */
static void upgrade_of_the_same_range_replaces(void **state)
{
    struct fx *f = *state;
    struct leaves v;
    create(f, REGCACHE_HOST_MERGE_OFF, &v);
    char *m = fenced();
    use_access(f, m, 4 * page, RR);
    use_access(f, m, 4 * page, RR | IBV_ACCESS_REMOTE_WRITE);
    fx_assert_stats(f, FX_STAT(entries, 1), NULL);
    assert_int_equal(v.n, 1);
    assert_string_equal(regcache_reason_name(v.reason[0]), "replaced");
    /* A wider range of more access: a new entry, the old one kept. */
    use_access(f, m, 6 * page, IBV_ACCESS_REMOTE_ATOMIC);
    fx_assert_stats(f, FX_STAT(entries, 2), NULL);
    assert_int_equal(v.n, 1);
    unmap(f, m);
}

/* REGCACHE_HOST_MERGE overrides the field, AUTO with callbacks included. */
static void variable_overrides(void **state)
{
    struct fx *f = *state;
    struct leaves v;
    setenv("REGCACHE_HOST_MERGE", "all", 1);
    create(f, REGCACHE_HOST_MERGE_AUTO, &v);
    unsetenv("REGCACHE_HOST_MERGE");
    char *m = fenced();
    neighbours(f, m);
    fx_assert_stats(f, FX_STAT(entries, 1), NULL);
    assert_int_equal(v.n, 2);
    unmap(f, m);
}

/* A program built against 0.3 (params.size ends before host_merge) keeps
 * AUTO, and with merges forced by the variable is told "replaced" for
 * each; the statistics count them as merged. */
static void told_replaced_when_built_against_0_3(void **state)
{
    struct fx *f = *state;
    struct leaves v;
    memset(&v, 0, sizeof(v));
    f->p.size = offsetof(struct regcache_params, host_merge);
    f->p.on_leave = on_leave;
    f->p.callback_arg = &v;
    f->p.host_memory = 1;
    f->p.alignment = page;
    setenv("REGCACHE_HOST_MERGE", "all", 1);
    fx_create(f);
    unsetenv("REGCACHE_HOST_MERGE");
    char *m = fenced();
    neighbours(f, m);
    assert_int_equal(v.n, 2);
    assert_string_equal(regcache_reason_name(v.reason[0]), "replaced");
    assert_string_equal(regcache_reason_name(v.reason[1]), "replaced");
    assert_int_equal(leaves_of(f, REGCACHE_REASON_MERGED), 2);
    unmap(f, m);
}

static void bad_values(void **state)
{
    struct fx *f = *state;
    f->p.host_merge = REGCACHE_HOST_MERGE_ALL + 1;
    assert_int_equal(regcache_create(&f->p, &f->c), REGCACHE_ERR_INVALID);
    fx_assert_error_says("params.host_merge", NULL);
    f->p.host_merge = REGCACHE_HOST_MERGE_AUTO;
    setenv("REGCACHE_HOST_MERGE", "some", 1);
    assert_int_equal(regcache_create(&f->p, &f->c), REGCACHE_ERR_INVALID);
    unsetenv("REGCACHE_HOST_MERGE");
    fx_assert_error_says("REGCACHE_HOST_MERGE", NULL);
    f->c = NULL;
}

FX_MAIN_CASES(policy, policies, merged_entries_noticed_as_merged,
              upgrade_of_the_same_range_replaces, variable_overrides,
              told_replaced_when_built_against_0_3, bad_values)
