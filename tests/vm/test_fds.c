/* What a cache of many rails holds open, on a real provider: eight
 * soft-RoCE devices rxe0..rxe7, a PD on each (params.rails = 8), 2000
 * entries got on rail 0 under RLIMIT_NOFILE 256.  Every get registers, no
 * file descriptor is left open per entry (the statistics say none is held
 * and /proc/self/fd does not grow), and every rail still registers when
 * asked.  Host memory cannot be exported as a dmabuf, so the dmabuf fds
 * themselves are covered with the fake driver (tests/verbs/test_fds.c):
 * this proves the library's own descriptors stay bounded with eight rails
 * and two thousand entries on a provider that counts its MRs itself. */
#include "vm_env.h"

#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>

#define RAILS 8
#define ENTRIES 2000

static struct vm_dev dev[RAILS];
static size_t page;

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

static regcache_t *eight_rails(struct ibv_pd **pds)
{
    struct regcache_params p;
    /* Page alignment: rounded to more, neighbours would merge into one. */
    vm_params_init(&p, VM_ACCESS_ALL, page);
    for (int r = 0; r < RAILS; r++)
        pds[r] = dev[r].pd;
    p.rails = RAILS;
    p.pds = pds;
    return vm_cache_create(&p);
}

static void entries_on_one_of_eight_rails_hold_no_fds(void **state)
{
    (void)state;
    static struct ibv_pd *pds[RAILS];
    regcache_t *c = eight_rails(pds);
    char *buf = vm_pages(ENTRIES * page);
    struct rlimit saved, lim;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved), 0);
    lim = saved;
    lim.rlim_cur = 256;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &lim), 0);
    int fds = open_fds();
    int before = vm_provider_mrs_on("rxe0");

    for (size_t i = 0; i < ENTRIES; i++) {
        regcache_entry_t *e = NULL;
        /* Inside one page each: an entry of its own. */
        int rc = regcache_get_rail(c, 0, buf + i * page + 8, 64, &e);
        if (rc != REGCACHE_OK)
            fail_msg("get %zu on rail 0: %s (%s)", i, regcache_err_name(rc), regcache_last_error());
        assert_ptr_equal(regcache_entry_mr(e)->pd, dev[0].pd);
        regcache_put(c, e);
    }
    int after = open_fds();
    struct regcache_stats s = vm_stats(c);
    printf("fds: %d entries on rail 0 of %d under RLIMIT_NOFILE 256: %d fds open before, "
           "%d after; the cache holds %ju fds and %ju MRs; rxe0 counts %d MRs\n",
           ENTRIES, RAILS, fds, after, (uintmax_t)s.fds, (uintmax_t)s.mrs,
           vm_provider_mrs_on("rxe0") - before);
    assert_int_equal(after, fds);
    assert_int_equal(s.entries, ENTRIES);
    assert_int_equal(s.fds, 0);
    assert_int_equal(s.mrs, ENTRIES);
    assert_int_equal(s.reg_failures, 0);
    assert_int_equal(vm_provider_mrs_on("rxe0"), before + ENTRIES);

    /* Every other rail registers the last entry on its own device. */
    for (int r = 1; r < RAILS; r++) {
        regcache_entry_t *e = NULL;
        assert_int_equal(regcache_get_rail(c, (unsigned)r, buf + (ENTRIES - 1) * page + 8, 64, &e),
                         REGCACHE_OK);
        assert_ptr_equal(regcache_entry_mr(e)->pd, dev[r].pd);
        regcache_put(c, e);
    }
    s = vm_stats(c);
    assert_int_equal(s.mrs, ENTRIES + RAILS - 1);
    assert_int_equal(s.fds, 0);
    assert_int_equal(open_fds(), fds);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved), 0);
    regcache_destroy(c);
    assert_int_equal(vm_provider_mrs(), 0);
    vm_pages_free(buf, ENTRIES * page);
}

int main(void)
{
    static const char *const names[RAILS] = { "rxe0", "rxe1", "rxe2", "rxe3",
                                              "rxe4", "rxe5", "rxe6", "rxe7" };
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(entries_on_one_of_eight_rails_hold_no_fds),
    };
    page = (size_t)sysconf(_SC_PAGESIZE);
    for (int r = 0; r < RAILS; r++)
        vm_dev_open_named(&dev[r], names[r]);
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    for (int r = 0; r < RAILS; r++)
        vm_dev_close(&dev[r]);
    return failed;
}
