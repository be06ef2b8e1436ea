/* One cache serving two NICs ("rails") on a real provider: soft-RoCE
 * devices rxe0 and rxe1, each on its own netdev, a PD on each
 * (params.rails = 2, params.pds).  One entry per allocation serves both
 * rails: a registration per PD, made when a get first asks for that rail,
 * its bytes counted once; invalidation and eviction drop every rail's MR,
 * as the provider counts them; and the real ENOMEM of one rail (rxe pins
 * the same pages again for every registration) is met by evicting and
 * retrying, or refused with NO_SPACE while the other rail goes on working.
 *
 * Run twice by run_vm_tests.sh: as root, the transfer cases (1-3); as an
 * unprivileged user under a 2 MiB RLIMIT_MEMLOCK, the exhaustion cases
 * (root pins without limit, so only there does the kernel refuse). */
#include "vm_env.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>

#define RAILS 2
/* Transfers move at most this much: enough to cross many pages and MTUs,
 * little enough for rxe under TCG. */
#define XFER ((size_t)64 << 10)
#define BUF (2 * XFER)

static const char *const dev_name[RAILS] = { "rxe0", "rxe1" };
static struct vm_dev dev[RAILS];
static size_t page;

struct fixture {
    regcache_t *cache;
    struct ibv_pd *pds[RAILS]; /* params.pds: lives as long as the cache */
    struct loopback lb[RAILS]; /* a QP pair on each rail's own device */
    char *buf[2];
    size_t len[2];
};

/* *state may name the cache's max_entries (prestate); else unlimited. */
static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    struct regcache_params p;
    /* Page alignment: each buffer is an entry of its own pages. */
    vm_params_init(&p, VM_ACCESS_ALL, (size_t)sysconf(_SC_PAGESIZE));
    for (int r = 0; r < RAILS; r++) {
        f->pds[r] = dev[r].pd;
        assert_int_equal(loopback_create(dev[r].pd, &f->lb[r]), 0);
    }
    p.rails = RAILS;
    p.pds = f->pds;
    p.max_entries = *state ? *(const size_t *)*state : 0;
    f->cache = vm_cache_create(&p);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    regcache_destroy(f->cache);
    assert_int_equal(vm_provider_mrs(), 0);
    for (int r = 0; r < RAILS; r++)
        loopback_destroy(&f->lb[r]);
    /* After the cache: memory is never unmapped under a live MR. */
    for (int i = 0; i < 2; i++)
        if (f->buf[i])
            vm_pages_free(f->buf[i], f->len[i]);
    free(f);
    return 0;
}

/* Buffer i of the fixture: len bytes of fresh pages, freed at teardown. */
static char *buffer(struct fixture *f, int i, size_t len)
{
    f->len[i] = len;
    return f->buf[i] = vm_pages(len);
}

static int mrs_on(int rail)
{
    return vm_provider_mrs_on(dev_name[rail]);
}

/* A get of [buf, buf+len) on rail r that must succeed, with an MR on that
 * rail's own PD. */
static regcache_entry_t *get_on(struct fixture *f, int r, char *buf, size_t len)
{
    regcache_entry_t *e = NULL;
    int rc = regcache_get_rail(f->cache, (unsigned)r, buf, len, &e);
    if (rc != REGCACHE_OK)
        print_error("get on rail %d: %s (%s)\n", r, regcache_strerror(rc), regcache_last_error());
    assert_int_equal(rc, REGCACHE_OK);
    assert_non_null(regcache_entry_mr(e));
    assert_ptr_equal(regcache_entry_mr(e)->pd, dev[r].pd);
    return e;
}

/* Data both ways on rail r through entry e alone: from the start of the
 * buffer to its end (so the MR covers both), under e's lkey and rkey, on
 * the QP pair of r's own device - traffic never crosses devices. */
static void transfer_on(struct fixture *f, int r, const regcache_entry_t *e, char *buf, size_t len,
                        int seed)
{
    size_t n = len / 2 < XFER ? len / 2 : XFER;
    vm_write_read(&f->lb[r], buf, vm_lkey(e), buf + len - n, vm_rkey(e), n, seed);
}

/* Case 1: both rails' registrations of a buffer live in one entry: one
 * entry, a miss and a registration per rail, its bytes counted once; each
 * MR on its own rail's PD, moving data on its own device; a second get on
 * a rail is a hit that registers nothing. */
static void one_entry_serves_both_rails(void **state)
{
    struct fixture *f = *state;
    char *buf = buffer(f, 0, BUF);
    int before[RAILS];
    regcache_entry_t *e[RAILS];
    uintptr_t start[RAILS];
    size_t len[RAILS];

    for (int r = 0; r < RAILS; r++)
        before[r] = mrs_on(r);
    for (int r = 0; r < RAILS; r++) {
        e[r] = get_on(f, r, buf, BUF);
        regcache_entry_range(e[r], &start[r], &len[r]);
    }
    struct regcache_stats s = vm_stats(f->cache);
    assert_int_equal(s.entries, 1);
    assert_int_equal(s.misses, RAILS);
    assert_int_equal(s.registrations, RAILS);
    assert_int_equal(s.hits, 0);
    assert_int_equal(start[0], (uintptr_t)buf);
    assert_int_equal(len[0], BUF);
    assert_int_equal(start[1], start[0]);
    assert_int_equal(len[1], len[0]);
    assert_int_equal(s.bytes, len[0]); /* once, not once per rail */
    assert_ptr_not_equal(regcache_entry_mr(e[0]), regcache_entry_mr(e[1]));
    for (int r = 0; r < RAILS; r++)
        assert_int_equal(mrs_on(r), before[r] + 1);

    for (int r = 0; r < RAILS; r++)
        transfer_on(f, r, e[r], buf, BUF, r);
    struct ibv_mr *mr1 = regcache_entry_mr(e[1]);
    for (int r = 0; r < RAILS; r++)
        regcache_put(f->cache, e[r]);

    regcache_entry_t *again = get_on(f, 1, buf, BUF);
    struct regcache_stats t = vm_stats(f->cache);
    assert_int_equal(t.hits, s.hits + 1);
    assert_int_equal(t.misses, s.misses);
    assert_int_equal(t.registrations, s.registrations);
    assert_ptr_equal(regcache_entry_mr(again), mr1);
    transfer_on(f, 1, again, buf, BUF, 5);
    regcache_put(f->cache, again);
}

/* Case 2: dropping the buffer's entry (by regcache_invalidate, or by
 * regcache_notify_free as the free hook does) deregisters it on every
 * rail: the provider loses both MRs, new gets on both rails register new
 * keys that work, and each old rkey is refused by its responder. */
static void invalidated_on_every_rail(struct fixture *f, int by_notify)
{
    char *buf = buffer(f, 0, BUF);
    regcache_entry_t *e[RAILS];
    uint32_t old_rkey[RAILS];
    int before[RAILS];

    for (int r = 0; r < RAILS; r++) {
        e[r] = get_on(f, r, buf, BUF);
        old_rkey[r] = vm_rkey(e[r]);
        regcache_put(f->cache, e[r]);
        before[r] = mrs_on(r);
    }
    int all = vm_provider_mrs();
    struct regcache_stats s = vm_stats(f->cache);

    if (by_notify)
        regcache_notify_free(buf, BUF);
    else
        assert_int_equal(regcache_invalidate(f->cache, buf, BUF), REGCACHE_OK);
    struct regcache_stats t = vm_stats(f->cache);
    assert_int_equal(by_notify ? t.invalidations_notify : t.invalidations_explicit, 1);
    assert_int_equal(t.deregistrations, s.deregistrations + RAILS);
    assert_int_equal(t.entries, 0);
    assert_int_equal(t.bytes, 0);
    assert_int_equal(vm_provider_mrs(), all - RAILS);
    for (int r = 0; r < RAILS; r++)
        assert_int_equal(mrs_on(r), before[r] - 1);

    for (int r = 0; r < RAILS; r++) {
        e[r] = get_on(f, r, buf, BUF);
        assert_int_not_equal(vm_rkey(e[r]), old_rkey[r]);
        transfer_on(f, r, e[r], buf, BUF, 10 + r);
    }
    assert_int_equal(vm_stats(f->cache).misses, t.misses + RAILS);
    assert_int_equal(vm_provider_mrs(), all);
    /* Last on each pair: the refusal moves the QPs to the error state. */
    for (int r = 0; r < RAILS; r++) {
        vm_write_refused(&f->lb[r], buf, vm_lkey(e[r]), buf + XFER, old_rkey[r], XFER);
        regcache_put(f->cache, e[r]);
    }
}

static void invalidate_drops_every_rail(void **state)
{
    invalidated_on_every_rail(*state, 0);
}

static void notify_free_drops_every_rail(void **state)
{
    invalidated_on_every_rail(*state, 1);
}

/* Case 3 (max_entries 1): an entry evicted to make room leaves with its
 * MRs on every rail, and the newcomer works. */
static void eviction_drops_every_rail(void **state)
{
    struct fixture *f = *state;
    char *a = buffer(f, 0, BUF), *b = buffer(f, 1, BUF);
    int before[RAILS];

    for (int r = 0; r < RAILS; r++) {
        before[r] = mrs_on(r);
        regcache_put(f->cache, get_on(f, r, a, BUF));
        assert_int_equal(mrs_on(r), before[r] + 1);
    }
    struct regcache_stats s = vm_stats(f->cache);

    regcache_entry_t *eb = get_on(f, 0, b, BUF);
    struct regcache_stats t = vm_stats(f->cache);
    assert_int_equal(t.evictions, s.evictions + 1);
    assert_int_equal(t.deregistrations, s.deregistrations + RAILS);
    assert_int_equal(t.entries, 1);
    assert_int_equal(t.bytes, BUF);
    assert_int_equal(mrs_on(0), before[0] + 1); /* B's, where A's was */
    assert_int_equal(mrs_on(1), before[1]);
    transfer_on(f, 0, eb, b, BUF, 20);
    regcache_put(f->cache, eb);
}

/* The most pages one registration may pin in this process now: the
 * largest registration rxe0 takes with nothing else registered, found by
 * bisection.  The kernel (ib_umem_get) counts every registration's pages
 * against RLIMIT_MEMLOCK, so the buffers below are sized from this, not
 * from the limit: anything else that counts is measured with it. */
static size_t pages_that_fit(void)
{
    struct rlimit lim;
    assert_int_equal(getrlimit(RLIMIT_MEMLOCK, &lim), 0);
    size_t most = (size_t)lim.rlim_cur / page + 16;
    char *p = vm_pages(most * page);
    size_t lo = 0, hi = most + 1; /* lo fits; hi does not */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        errno = 0;
        struct ibv_mr *mr = ibv_reg_mr(dev[0].pd, p, mid * page, VM_ACCESS_ALL);
        if (mr) {
            assert_int_equal(ibv_dereg_mr(mr), 0);
            lo = mid;
        } else {
            assert_int_equal(errno, ENOMEM);
            hi = mid;
        }
    }
    vm_pages_free(p, most * page);
    assert_true(lo < most); /* the limit binds */
    assert_true(lo >= 64);  /* room for the sizes below */
    printf("rails: memlock limit %ju bytes; one registration pins at most %zu pages "
           "of %zu bytes\n",
           (uintmax_t)lim.rlim_cur, lo, page);
    return lo;
}

/* Case 4a: A fits once under the limit but not twice, so its registration
 * on rail 1 (the same pages pinned again) fails with the provider's ENOMEM.
 * The cache evicts the device's one unused entry, C, tries again, fails
 * again, and with nothing left to evict reports NO_SPACE - leaving rail 1
 * unregistered and A's rail 0 registration, held meanwhile, working. */
static void no_space_on_one_rail_spares_the_other(void **state)
{
    struct fixture *f = *state;
    size_t fit = pages_that_fit();
    size_t a_len = fit * 3 / 4 * page; /* fits once, not twice */
    size_t c_len = fit / 8 * page;     /* fits beside A; gone, A twice still does not */
    printf("rails: NO_SPACE case: A %zu bytes, C %zu bytes\n", a_len, c_len);
    char *a = buffer(f, 0, a_len), *c = buffer(f, 1, c_len);

    regcache_put(f->cache, get_on(f, 0, c, c_len));
    regcache_entry_t *e0 = get_on(f, 0, a, a_len);
    struct regcache_stats s = vm_stats(f->cache);
    assert_int_equal(s.entries, 2);

    regcache_entry_t *e1 = e0; /* a failing get must clear it */
    int rc = regcache_get_rail(f->cache, 1, a, a_len, &e1);
    const char *why = regcache_last_error();
    printf("rails: rail 1 of A: %s: %s\n", regcache_err_name(rc), why);
    assert_int_equal(rc, REGCACHE_ERR_NO_SPACE);
    assert_null(e1);
    assert_non_null(strstr(why, strerror(ENOMEM))); /* the provider's own answer */
    assert_non_null(strstr(why, "no unused entry of the device is left to evict"));
    struct regcache_stats t = vm_stats(f->cache);
    /* ENOMEM, C evicted, ENOMEM again, nothing left: NO_SPACE. */
    assert_int_equal(t.reg_failures, s.reg_failures + 2);
    assert_int_equal(t.evictions, s.evictions + 1);
    assert_int_equal(t.registrations, s.registrations);
    assert_int_equal(t.entries, 1);
    assert_int_equal(t.bytes, a_len);
    assert_int_equal(mrs_on(0), 1); /* A's; C's went */
    assert_int_equal(mrs_on(1), 0); /* nothing left behind */

    transfer_on(f, 0, e0, a, a_len, 30);
    regcache_put(f->cache, e0);
    e0 = get_on(f, 0, a, a_len);
    assert_int_equal(vm_stats(f->cache).hits, t.hits + 1);
    transfer_on(f, 0, e0, a, a_len, 31);
    regcache_put(f->cache, e0);
}

/* Case 4b: A and B fit on rail 0, but A again on rail 1 does not; evicting
 * B, unused, makes room, and the retry registers A on rail 1.  A is the
 * least recently used entry: its own registration holds it, so it is not
 * its own victim. */
static void eviction_makes_room_for_another_rail(void **state)
{
    struct fixture *f = *state;
    size_t fit = pages_that_fit();
    size_t a_len = fit / 3 * page; /* A twice fits, */
    size_t b_len = fit / 2 * page; /* A, B and A again do not */
    printf("rails: evict-and-retry case: A %zu bytes, B %zu bytes\n", a_len, b_len);
    char *a = buffer(f, 0, a_len), *b = buffer(f, 1, b_len);

    regcache_put(f->cache, get_on(f, 0, a, a_len));
    regcache_put(f->cache, get_on(f, 0, b, b_len));
    struct regcache_stats s = vm_stats(f->cache);

    regcache_entry_t *e1 = get_on(f, 1, a, a_len);
    struct regcache_stats t = vm_stats(f->cache);
    printf("rails: rail 1 of A registered after %ju failure(s) and %ju eviction(s)\n",
           (uintmax_t)(t.reg_failures - s.reg_failures), (uintmax_t)(t.evictions - s.evictions));
    assert_int_equal(t.reg_failures, s.reg_failures + 1); /* the kernel's ENOMEM */
    assert_int_equal(t.evictions, s.evictions + 1);
    assert_int_equal(t.registrations, s.registrations + 1);
    assert_int_equal(t.entries, 1);
    assert_int_equal(t.bytes, a_len);
    assert_int_equal(mrs_on(0), 1);
    assert_int_equal(mrs_on(1), 1);
    transfer_on(f, 1, e1, a, a_len, 40);

    regcache_entry_t *e0 = get_on(f, 0, a, a_len);
    assert_int_equal(vm_stats(f->cache).hits, t.hits + 1);
    transfer_on(f, 0, e0, a, a_len, 41);
    regcache_put(f->cache, e0);
    regcache_put(f->cache, e1);
}

/* Only an unprivileged process under a small limit can be refused pinning. */
static int memlock_limited(void)
{
    struct rlimit lim;
    return !getrlimit(RLIMIT_MEMLOCK, &lim) && lim.rlim_cur != RLIM_INFINITY &&
           lim.rlim_cur <= ((rlim_t)64 << 20) && geteuid() != 0;
}

int main(void)
{
    static const size_t one_entry = 1;
    const struct CMUnitTest transfers[] = {
        cmocka_unit_test_setup_teardown(one_entry_serves_both_rails, setup, teardown),
        cmocka_unit_test_setup_teardown(invalidate_drops_every_rail, setup, teardown),
        cmocka_unit_test_setup_teardown(notify_free_drops_every_rail, setup, teardown),
        cmocka_unit_test_prestate_setup_teardown(eviction_drops_every_rail, setup, teardown,
                                                 (void *)&one_entry),
    };
    const struct CMUnitTest exhaustion[] = {
        cmocka_unit_test_setup_teardown(no_space_on_one_rail_spares_the_other, setup, teardown),
        cmocka_unit_test_setup_teardown(eviction_makes_room_for_another_rail, setup, teardown),
    };
    page = (size_t)sysconf(_SC_PAGESIZE);
    for (int r = 0; r < RAILS; r++)
        vm_dev_open_named(&dev[r], dev_name[r]);
    int failed;
    if (memlock_limited()) {
        printf("rails: unprivileged under a memlock limit: the exhaustion cases\n");
        failed = cmocka_run_group_tests(exhaustion, NULL, NULL);
    } else {
        printf("rails: the transfer cases (the exhaustion cases run as a non-root user "
               "under RLIMIT_MEMLOCK <= 64 MiB, as run_vm_tests.sh runs vm_rails_enomem)\n");
        failed = cmocka_run_group_tests(transfers, NULL, NULL);
    }
    for (int r = 0; r < RAILS; r++)
        vm_dev_close(&dev[r]);
    return failed;
}
