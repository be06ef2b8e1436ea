/* File descriptors under the built-in dmabuf backend, with libibverbs and
 * the CUDA driver replaced: a cache holds no dmabuf fd per cached entry,
 * however its entries are used across rails, so that thousands of entries
 * fit under the default RLIMIT_NOFILE; the fds it holds (one per
 * registration in flight) show in the statistics; and an export that finds
 * no fd left is exhaustion, met by evicting unused entries and retrying. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>
#include <infiniband/verbs.h>

#include "cache_fixture.h"
#include "fake_verbs.h"
#include "regcache.h"

#define PAGE ((size_t)4096)
#define ENTRIES 2000

static struct rlimit saved_nofile;
static int limited;

/* Allow `n` descriptors (the soft limit only: the test, or its teardown
 * when it failed, raises it back). */
static void limit_fds(rlim_t n)
{
    struct rlimit lim;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved_nofile), 0);
    lim = saved_nofile;
    lim.rlim_cur = n;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &lim), 0);
    limited = 1;
}

static void unlimit_fds(void)
{
    if (limited)
        assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved_nofile), 0);
    limited = 0;
}

static int teardown(void **state)
{
    unlimit_fds();
    fake_verbs.during_dmabuf = NULL;
    return fake_world_teardown(state);
}

/* Descriptors open now: drv_open_fds() counts ".", ".." and its own. */
static rlim_t open_now(void)
{
    return (rlim_t)drv_open_fds() - 3;
}

/* A dmabuf cache of `rails` rails registering single 4 KiB pages of the
 * fake allocation, each its own entry. */
static regcache_t *page_cache(size_t rails)
{
    static struct ibv_pd pd1;
    static struct ibv_pd *pds[2];
    struct regcache_params p;
    regcache_t *c = NULL;

    pds[0] = fake_pd();
    pds[1] = &pd1;
    assert_int_equal(regcache_params_init(&p), REGCACHE_OK);
    p.rails = rails;
    p.pds = pds;
    p.alignment = PAGE;
    p.whole_allocation = 0;
    assert_int_equal(regcache_create(&p, &c), REGCACHE_OK);
    assert_int_equal(regcache_method_used(c), REGCACHE_METHOD_DMABUF);
    return c;
}

static regcache_entry_t *get_ok(regcache_t *c, const void *addr)
{
    regcache_entry_t *e = NULL;
    int rc = regcache_get(c, addr, 100, &e);
    if (rc != REGCACHE_OK)
        fail_msg("get %p: %s (%s)", addr, regcache_err_name(rc), regcache_last_error());
    return e;
}

/* The most fds the cache said it held while the provider registered. */
struct fds_seen {
    regcache_t *c;
    uint64_t most;
};

static void note_fds(void *arg)
{
    struct fds_seen *seen = arg;
    struct regcache_stats s;
    assert_int_equal(regcache_get_stats(seen->c, &s), REGCACHE_OK);
    if (s.fds > seen->most)
        seen->most = s.fds;
}

/* 2000 entries got on rail 0 of a two-rail cache under RLIMIT_NOFILE 256:
 * every get succeeds, the process's fds do not grow, and the statistics
 * show one fd while a registration is in flight and none after. */
static void test_entries_on_one_rail_hold_no_fds(void **state)
{
    (void)state;
    regcache_t *c = page_cache(2);
    struct fds_seen seen = { .c = c };
    int fds = drv_open_fds();
    fake_verbs.during_dmabuf = note_fds;
    fake_verbs.during_dmabuf_arg = &seen;
    limit_fds(256);

    for (size_t i = 0; i < ENTRIES; i++) {
        regcache_entry_t *e = NULL;
        int rc = regcache_get_rail(c, 0, fake_gpu(i * PAGE), 100, &e);
        if (rc != REGCACHE_OK)
            fail_msg("get %zu: %s (%s)", i, regcache_err_name(rc), regcache_last_error());
        regcache_put(c, e);
    }
    unlimit_fds();
    assert_int_equal(drv_open_fds(), fds);
    assert_int_equal(seen.most, 1);
    assert_cache_stats(c, FX_STAT(entries, ENTRIES), FX_STAT(registrations, ENTRIES),
                       FX_STAT(mrs, ENTRIES), FX_STAT(fds, 0), FX_STAT(evictions, 0),
                       FX_STAT(reg_failures, 0), NULL);
    regcache_destroy(c);
}

/* Each MR keeps a dmabuf file open (mr_keeps_fd), so the entries fill the
 * fd table: the registration that finds no fd left evicts the least
 * recently used unused entry, whose MR lets its file go, and the retry
 * registers. */
static void test_entries_filling_the_fd_table_are_evicted(void **state)
{
    (void)state;
    regcache_t *c = page_cache(1);
    fake_verbs.mr_keeps_fd = 1;
    limit_fds(open_now() + 40);

    for (size_t i = 0; i < 200; i++)
        regcache_put(c, get_ok(c, fake_gpu(i * PAGE)));
    unlimit_fds();
    struct regcache_stats s;
    assert_int_equal(regcache_get_stats(c, &s), REGCACHE_OK);
    assert_int_equal(s.registrations, 200);
    assert_true(s.evictions > 0);
    assert_true(s.reg_failures > 0);
    if (s.entries > 40) /* each keeps an fd */
        fail_msg("%ju entries under room for 40 more fds", (uintmax_t)s.entries);
    assert_int_equal(s.entries + s.evictions, 200);
    assert_int_equal(s.fds, 0);
    regcache_destroy(c);
}

/* Descriptors the test opened to fill the table. */
struct filler {
    int fd[64];
    int n;
};

/* Open descriptors until none is left (under a limit a few above now). */
static void fill_fd_table(struct filler *f)
{
    limit_fds(open_now() + 8);
    for (f->n = 0; f->n < 64; f->n++) {
        f->fd[f->n] = eventfd(0, EFD_CLOEXEC);
        if (f->fd[f->n] < 0) {
            assert_int_equal(errno, EMFILE);
            return;
        }
    }
    fail_msg("the fd table did not fill");
}

static void empty_fd_table(struct filler *f)
{
    while (f->n)
        close(f->fd[--f->n]);
    unlimit_fds();
}

/* The export itself finds no fd: the cache evicts, and once the evicted
 * MRs' files are gone the export and the registration succeed.  Two
 * unused entries keep a file each; the export fails (no fd), the first
 * eviction frees one, which the export takes and the MR's own file then
 * lacks (a failure of the provider), the second frees another. */
static void test_export_without_fds_evicts_and_retries(void **state)
{
    (void)state;
    regcache_t *c = page_cache(1);
    struct filler f;
    fake_verbs.mr_keeps_fd = 1;
    for (size_t i = 0; i < 2; i++)
        regcache_put(c, get_ok(c, fake_gpu(i * PAGE)));
    unsigned exports = drv.calls[FC_GET_HANDLE];
    int regs = fake_verbs.dmabuf_calls;

    fill_fd_table(&f);
    regcache_entry_t *e = NULL;
    int rc = regcache_get(c, fake_gpu(2 * PAGE), 100, &e);
    empty_fd_table(&f);
    if (rc != REGCACHE_OK)
        fail_msg("get: %s (%s)", regcache_err_name(rc), regcache_last_error());
    /* Three exports, the first without an fd; two registrations. */
    assert_int_equal(drv.calls[FC_GET_HANDLE] - exports, 3);
    assert_int_equal(fake_verbs.dmabuf_calls - regs, 2);
    assert_cache_stats(c, FX_STAT(entries, 1), FX_STAT(evictions, 2), FX_STAT(reg_failures, 2),
                       FX_STAT(mrs, 1), FX_STAT(fds, 0), NULL);
    regcache_put(c, e);
    regcache_destroy(c);
}

/* With nothing to evict, an export without an fd is NO_SPACE, saying that
 * file descriptors ran out, with nothing registered or left open. */
static void test_export_without_fds_and_nothing_to_evict(void **state)
{
    (void)state;
    regcache_t *c = page_cache(1);
    struct filler f;
    int fds = drv_open_fds();

    fill_fd_table(&f);
    regcache_entry_t *e = (regcache_entry_t *)(uintptr_t)1;
    int rc = regcache_get(c, fake_gpu(0), 100, &e);
    empty_fd_table(&f);
    const char *why = regcache_last_error();
    assert_int_equal(rc, REGCACHE_ERR_NO_SPACE);
    assert_null(e);
    if (!strstr(why, strerror(EMFILE)) || !strstr(why, "no unused entry"))
        fail_msg("message: %s", why);
    assert_int_equal(fake_verbs.dmabuf_calls, 0);
    assert_int_equal(drv_open_fds(), fds);
    assert_cache_stats(c, FX_STAT(entries, 0), FX_STAT(mrs, 0), FX_STAT(fds, 0),
                       FX_STAT(reg_failures, 1), NULL);
    regcache_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, fake_world_setup, teardown)
        T(test_entries_on_one_rail_hold_no_fds),
        T(test_entries_filling_the_fd_table_are_evicted),
        T(test_export_without_fds_evicts_and_retries),
        T(test_export_without_fds_and_nothing_to_evict),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
