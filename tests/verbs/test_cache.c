/* The built-in verbs backend under the cache (params.backend == NULL), with
 * libibverbs and the CUDA driver replaced: the cache must evict and retry
 * when ibv_reg_mr runs out of resources, and hand out the verbs MR. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <infiniband/verbs.h>

#include "cache_fixture.h"
#include "fake_verbs.h"
#include "regcache.h"

#define BLOCK ((size_t)65536)

/* A built-in cache for host memory only: no GPU, no peermem. */
static regcache_t *host_cache(void)
{
    struct regcache_params p;
    regcache_t *c = NULL;

    drv.device_count = 0;
    assert_int_equal(regcache_params_init(&p), REGCACHE_OK);
    p.pd = fake_pd();
    p.host_memory = 1;
    assert_int_equal(regcache_create(&p, &c), REGCACHE_OK);
    assert_int_equal(regcache_method_used(c), REGCACHE_METHOD_HOST);
    return c;
}

static void test_entry_mr_is_the_verbs_mr(void **state)
{
    regcache_t *c = host_cache();
    char *buf = aligned_alloc(BLOCK, BLOCK);
    regcache_entry_t *e;
    struct ibv_mr *mr;
    uintptr_t start;
    size_t len;
    (void)state;

    assert_int_equal(regcache_get(c, buf + 100, 200, &e), REGCACHE_OK);
    mr = regcache_entry_mr(e);
    assert_non_null(mr);
    assert_ptr_equal(mr, regcache_entry_handle(e));
    regcache_entry_range(e, &start, &len);
    assert_int_equal(fake_verbs.reg_mr_calls, 1);
    assert_ptr_equal(mr->pd, fake_pd());
    assert_int_equal((uintptr_t)mr->addr, start);
    assert_int_equal(mr->length, len);
    assert_true(start <= (uintptr_t)buf + 100);
    assert_true(start + len >= (uintptr_t)buf + 300);
    assert_int_equal(fake_verbs.last_reg_mr.access,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    regcache_put(c, e);
    regcache_destroy(c);
    free(buf);
}

/* Each "resources exhausted" errno from ibv_reg_mr makes the cache evict
 * the unused entry and register again (EFAULT on host memory is a bad
 * address instead: test_bad_address). */
static void test_exhausted_reg_mr_evicts_and_retries(void **state)
{
    static const int exhausted[] = { ENOMEM, ENOSPC, EAGAIN };
    char *a = aligned_alloc(BLOCK, BLOCK);
    char *b = aligned_alloc(BLOCK, BLOCK);
    (void)state;

    for (size_t i = 0; i < sizeof(exhausted) / sizeof(exhausted[0]); i++) {
        regcache_t *c = host_cache();
        regcache_entry_t *ea, *eb;

        assert_int_equal(regcache_get(c, a, BLOCK, &ea), REGCACHE_OK);
        regcache_put(c, ea);
        fake_verbs.reg_mr_failures = 1;
        fake_verbs.reg_mr_errno = exhausted[i];
        assert_int_equal(regcache_get(c, b, BLOCK, &eb), REGCACHE_OK);
        assert_ptr_equal(regcache_entry_mr(eb)->addr, b);
        assert_cache_stats(c, FX_STAT(reg_failures, 1), FX_STAT(evictions, 1),
                           FX_STAT(registrations, 2), FX_STAT(deregistrations, 1),
                           FX_STAT(entries, 1), NULL);
        assert_int_equal(fake_verbs.live_mrs, 1);
        regcache_put(c, eb);
        regcache_destroy(c);
        assert_int_equal(fake_verbs.live_mrs, 0);
        fake_verbs_install();
    }
    free(a);
    free(b);
}

/* Exhaustion with nothing unused to evict is NO_SPACE; any other errno is
 * a backend failure that evicts nothing. */
static void test_reg_mr_failures_that_cannot_be_retried(void **state)
{
    regcache_t *c = host_cache();
    char *a = aligned_alloc(BLOCK, BLOCK);
    char *b = aligned_alloc(BLOCK, BLOCK);
    regcache_entry_t *ea, *eb;
    (void)state;

    assert_int_equal(regcache_get(c, a, BLOCK, &ea), REGCACHE_OK);
    fake_verbs.reg_mr_failures = 100;
    fake_verbs.reg_mr_errno = ENOMEM;
    assert_int_equal(regcache_get(c, b, BLOCK, &eb), REGCACHE_ERR_NO_SPACE);
    assert_null(eb);
    fake_verbs.reg_mr_failures = 1;
    fake_verbs.reg_mr_errno = EIO;
    assert_int_equal(regcache_get(c, b, BLOCK, &eb), REGCACHE_ERR_BACKEND);
    assert_null(eb);
    assert_cache_stats(c, FX_STAT(evictions, 0), FX_STAT(entries, 1), NULL);
    regcache_put(c, ea);
    regcache_destroy(c);
    free(a);
    free(b);
}

/* GPU memory through dmabuf: the entry's MR has the registered range's
 * start as iova and its place in the exported dmabuf as offset, and no fd
 * is left open. */
static void test_gpu_memory_through_dmabuf(void **state)
{
    struct regcache_params p;
    regcache_t *c = NULL;
    regcache_entry_t *e;
    char *gpu = fake_gpu(0);
    int fds = drv_open_fds();
    uintptr_t start;
    size_t len;
    (void)state;

    assert_int_equal(regcache_params_init(&p), REGCACHE_OK);
    p.pd = fake_pd();
    p.whole_allocation = 0;
    assert_int_equal(regcache_create(&p, &c), REGCACHE_OK);
    assert_int_equal(regcache_method_used(c), REGCACHE_METHOD_DMABUF);
    assert_int_equal(regcache_get(c, gpu + 3 * BLOCK + 10, 100, &e), REGCACHE_OK);
    regcache_entry_range(e, &start, &len);
    assert_int_equal(start, (uintptr_t)gpu + 3 * BLOCK);
    assert_int_equal(len, BLOCK);
    assert_int_equal(fake_verbs.dmabuf_calls, 1);
    assert_int_equal(fake_verbs.last_dmabuf.iova, start);
    assert_int_equal(fake_verbs.last_dmabuf.offset, start - drv.export_ptr);
    assert_int_equal(fake_verbs.last_dmabuf.len, len);
    assert_int_equal((uintptr_t)regcache_entry_mr(e)->addr, start);
    assert_int_equal(drv_open_fds(), fds);
    regcache_put(c, e);
    regcache_destroy(c);
}

/* Two rails on GPU memory through dmabuf: each rail's registration exports
 * the entry's range and closes the dmabuf once registered (each MR holds
 * its own reference on it), at the same offset; no fd stays open between
 * them, so a cache whose entries are used on one rail of several holds no
 * file descriptor per entry. */
static void test_dmabuf_rails_export_each_and_keep_no_fd(void **state)
{
    static struct ibv_pd pd1;
    struct ibv_pd *pds[2] = { fake_pd(), &pd1 };
    struct regcache_params p;
    regcache_t *c = NULL;
    regcache_entry_t *e[2];
    char *gpu = fake_gpu(0) + 3 * BLOCK + 10;
    int fds = drv_open_fds();
    (void)state;

    assert_int_equal(regcache_params_init(&p), REGCACHE_OK);
    p.rails = 2;
    p.pds = pds;
    p.whole_allocation = 0;
    assert_int_equal(regcache_create(&p, &c), REGCACHE_OK);
    assert_int_equal(regcache_method_used(c), REGCACHE_METHOD_DMABUF);

    assert_int_equal(regcache_get_rail(c, 0, gpu, 100, &e[0]), REGCACHE_OK);
    assert_int_equal(drv.calls[FC_GET_HANDLE], 1);
    assert_int_equal(fake_verbs.dmabuf_calls, 1);
    assert_ptr_equal(fake_verbs.last_dmabuf.pd, pds[0]);
    uint64_t offset = fake_verbs.last_dmabuf.offset;
    assert_int_equal(drv_open_fds(), fds);
    assert_cache_stats(c, FX_STAT(fds, 0), FX_STAT(mrs, 1), FX_STAT(entries, 1), NULL);

    assert_int_equal(regcache_get_rail(c, 1, gpu, 100, &e[1]), REGCACHE_OK);
    assert_int_equal(drv.calls[FC_GET_HANDLE], 2);
    assert_int_equal(fake_verbs.dmabuf_calls, 2);
    assert_ptr_equal(fake_verbs.last_dmabuf.pd, pds[1]);
    assert_int_equal(fake_verbs.last_dmabuf.fd, drv.export_fd);
    assert_true(fake_verbs.last_dmabuf.fd_was_open);
    assert_int_equal(fake_verbs.last_dmabuf.offset, offset);
    assert_ptr_equal(regcache_entry_mr(e[0])->pd, pds[0]);
    assert_ptr_equal(regcache_entry_mr(e[1])->pd, pds[1]);
    assert_int_equal(drv_open_fds(), fds);
    assert_cache_stats(c, FX_STAT(fds, 0), FX_STAT(mrs, 2), FX_STAT(entries, 1), NULL);

    regcache_put(c, e[0]);
    regcache_put(c, e[1]);
    regcache_destroy(c);
    assert_int_equal(drv_open_fds(), fds);
}

/* The smallest max_mr_size of the rails' devices bounds every entry (an
 * entry's range is registered on each rail that asks): the whole 8 MiB
 * allocation is not registered when one rail takes 128 KiB at most, the
 * request is, on the rail without a limit too; a request that does not fit
 * fails with TOO_LARGE before anything is exported or registered. */
static void test_max_mr_size_of_the_smallest_rail(void **state)
{
    static struct ibv_pd pd1;
    struct ibv_pd *pds[2] = { fake_pd(), &pd1 };
    struct regcache_params p;
    regcache_t *c = NULL;
    regcache_entry_t *e;
    uintptr_t start;
    size_t len;
    (void)state;

    fake_verbs.max_mr_pd = &pd1;
    fake_verbs.max_mr_size = 2 * BLOCK;
    assert_int_equal(regcache_params_init(&p), REGCACHE_OK);
    p.rails = 2;
    p.pds = pds;
    assert_int_equal(regcache_create(&p, &c), REGCACHE_OK);
    assert_int_equal(regcache_get_rail(c, 0, fake_gpu(BLOCK + 10), 100, &e), REGCACHE_OK);
    regcache_entry_range(e, &start, &len);
    assert_int_equal(start, (uintptr_t)fake_gpu(BLOCK));
    assert_int_equal(len, BLOCK);
    assert_int_equal(fake_verbs.last_dmabuf.len, BLOCK);
    regcache_put(c, e);

    unsigned exports = drv.calls[FC_GET_HANDLE];
    e = (regcache_entry_t *)(uintptr_t)1;
    assert_int_equal(regcache_get_rail(c, 0, fake_gpu(4 * BLOCK), 3 * BLOCK, &e),
                     REGCACHE_ERR_TOO_LARGE);
    assert_null(e);
    const char *why = regcache_last_error();
    if (!strstr(why, "131072 bytes") || !strstr(why, "max_mr_size"))
        fail_msg("message: %s", why);
    assert_int_equal(drv.calls[FC_GET_HANDLE], exports);
    assert_int_equal(fake_verbs.dmabuf_calls, 1);
    assert_cache_stats(c, FX_STAT(entries, 1), FX_STAT(mrs, 1), NULL);
    regcache_destroy(c);
}

/* A cache that found only the host method refuses GPU memory up front,
 * saying what is missing, and never reaches verbs. */
static void test_host_only_cache_refuses_gpu_memory(void **state)
{
    regcache_t *c = host_cache();
    regcache_entry_t *e = NULL;
    (void)state;

    drv.device_count = 1; /* the memory is a GPU allocation */
    assert_int_equal(regcache_get(c, fake_gpu(0) + 10, 100, &e), REGCACHE_ERR_UNSUPPORTED);
    assert_null(e);
    assert_non_null(strstr(regcache_last_error(), "nvidia_peermem"));
    assert_int_equal(fake_verbs.reg_mr_calls + fake_verbs.dmabuf_calls, 0);
    regcache_destroy(c);
}

static void test_create_says_what_to_load(void **state)
{
    struct regcache_params p;
    regcache_t *c = NULL;
    (void)state;

    drv.device_count = 0;
    assert_int_equal(regcache_params_init(&p), REGCACHE_OK);
    p.pd = fake_pd();
    assert_int_equal(regcache_create(&p, &c), REGCACHE_ERR_UNSUPPORTED);
    assert_non_null(strstr(regcache_last_error(), "modprobe nvidia-peermem"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, fake_world_setup, fake_world_teardown)
        T(test_entry_mr_is_the_verbs_mr),
        T(test_exhausted_reg_mr_evicts_and_retries),
        T(test_reg_mr_failures_that_cannot_be_retried),
        T(test_gpu_memory_through_dmabuf),
        T(test_dmabuf_rails_export_each_and_keep_no_fd),
        T(test_max_mr_size_of_the_smallest_rail),
        T(test_create_says_what_to_load),
        T(test_host_only_cache_refuses_gpu_memory),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
