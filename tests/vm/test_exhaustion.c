/* Real resource exhaustion: run as a non-root user under a small
 * RLIMIT_MEMLOCK (run_vm_tests.sh does), where the kernel refuses to pin
 * more and ibv_reg_mr fails with ENOMEM.  The cache must evict its least
 * recently used unused entries and retry, and report NO_SPACE, with nothing
 * leaked, when every entry is in use. */
#include "vm_env.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>

/* Four chunks fit under the limit with a few pages to spare; a fifth does
 * not. */
#define FIT 4
#define CHUNKS (FIT + 1)

static struct vm_dev dev;
static size_t chunk_len;

struct fixture {
    regcache_t *cache;
    char *chunk[CHUNKS];
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    /* Page alignment, so that each chunk pins exactly its own pages. */
    f->cache = vm_cache(dev.pd, VM_ACCESS_ALL, (size_t)sysconf(_SC_PAGESIZE));
    for (int i = 0; i < CHUNKS; i++)
        f->chunk[i] = vm_pages(chunk_len);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    regcache_destroy(f->cache);
    assert_int_equal(vm_provider_mrs(), 0);
    for (int i = 0; i < CHUNKS; i++)
        vm_pages_free(f->chunk[i], chunk_len);
    free(f);
    return 0;
}

static int get(struct fixture *f, int i, regcache_entry_t **e)
{
    return regcache_get(f->cache, f->chunk[i], chunk_len, e);
}

static void get_put(struct fixture *f, int i)
{
    regcache_entry_t *e;
    assert_int_equal(get(f, i, &e), REGCACHE_OK);
    regcache_put(f->cache, e);
}

/* Fill the limit with unused entries, touch chunk 0 again so that chunk 1
 * is the least recently used, then ask for one more chunk: the kernel's
 * refusal must turn into an eviction of chunk 1, not a failure, and not the
 * loss of chunk 0. */
static void exhaustion_evicts_lru_unused_and_retries(void **state)
{
    struct fixture *f = *state;
    for (int i = 0; i < FIT; i++)
        get_put(f, i);
    get_put(f, 0);
    struct regcache_stats s = vm_stats(f->cache);
    assert_int_equal(s.registrations, FIT);
    assert_int_equal(s.reg_failures, 0);
    assert_int_equal(vm_provider_mrs(), FIT);

    regcache_entry_t *e;
    assert_int_equal(get(f, FIT, &e), REGCACHE_OK);
    assert_non_null(regcache_entry_mr(e));
    s = vm_stats(f->cache);
    assert_true(s.reg_failures >= 1); /* the kernel really said ENOMEM */
    assert_true(s.evictions >= 1);
    assert_int_equal(s.entries, FIT + 1 - s.evictions);
    assert_int_equal(vm_provider_mrs(), (int)s.entries);
    regcache_put(f->cache, e);

    uint64_t hits = s.hits;
    get_put(f, 0); /* most recently used before the squeeze: still cached */
    assert_int_equal(vm_stats(f->cache).hits, hits + 1);
}

/* Every byte the limit allows is held: nothing can be evicted, so the get
 * fails with NO_SPACE and leaves nothing behind; after the puts the same
 * get succeeds by evicting. */
static void exhaustion_with_everything_held_is_no_space(void **state)
{
    struct fixture *f = *state;
    regcache_entry_t *held[FIT], *e;

    for (int i = 0; i < FIT; i++)
        assert_int_equal(get(f, i, &held[i]), REGCACHE_OK);
    e = held[0]; /* non-NULL: the failing get must clear it */
    int rc = get(f, FIT, &e);
    assert_int_equal(rc, REGCACHE_ERR_NO_SPACE);
    assert_null(e);
    printf("NO_SPACE message: %s\n", regcache_last_error());
    struct regcache_stats s = vm_stats(f->cache);
    assert_true(s.reg_failures >= 1);
    assert_int_equal(s.entries, FIT);
    assert_int_equal(s.evictions, 0);
    assert_int_equal(vm_provider_mrs(), FIT);

    for (int i = 0; i < FIT; i++)
        regcache_put(f->cache, held[i]);
    assert_int_equal(get(f, FIT, &e), REGCACHE_OK);
    regcache_put(f->cache, e);
    assert_int_equal(vm_provider_mrs(), (int)vm_stats(f->cache).entries);

    assert_int_equal(regcache_flush(f->cache), REGCACHE_OK);
    s = vm_stats(f->cache);
    assert_int_equal(s.entries, 0);
    assert_int_equal(s.bytes, 0);
    assert_int_equal(s.deregistrations, s.registrations);
    assert_int_equal(vm_provider_mrs(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(exhaustion_evicts_lru_unused_and_retries, setup, teardown),
        cmocka_unit_test_setup_teardown(exhaustion_with_everything_held_is_no_space, setup,
                                        teardown),
    };
    struct rlimit lim;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);

    vm_dev_open(&dev);
    if (getrlimit(RLIMIT_MEMLOCK, &lim) || lim.rlim_cur == RLIM_INFINITY ||
        lim.rlim_cur > ((rlim_t)64 << 20) || geteuid() == 0) {
        printf("SKIP: needs a non-root user and RLIMIT_MEMLOCK <= 64 MiB (see "
               "run_vm_tests.sh: prlimit --memlock ... setpriv --reuid ...)\n");
        return 77;
    }
    chunk_len = ((size_t)lim.rlim_cur / FIT / page - 1) * page;
    printf("memlock limit %zu bytes: %d chunks of %zu bytes fit\n", (size_t)lim.rlim_cur, FIT,
           chunk_len);
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    vm_dev_close(&dev);
    return failed;
}
