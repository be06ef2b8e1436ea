/* The dmabuf mapping type and data-direct registration of the built-in
 * backend, with libibverbs, libmlx5 and the CUDA driver replaced: each
 * step of each fallback ladder.  The mapping: PCIe where the driver takes
 * it, the default where it refuses (NOT_SUPPORTED, INVALID_VALUE), and
 * from then on for that GPU; REGCACHE_DMABUF_MAPPING=pcie without a
 * fallback, =default never asking.  Data direct: mlx5dv_reg_dmabuf_mr with
 * DATA_DIRECT on the rails whose device is one, on a PCIe-mapped export
 * only; REGCACHE_DATA_DIRECT=on everywhere (refused without libmlx5), =off
 * nowhere.  The REGCACHE_STATS dump says what each rail does. */
#include <cuda.h>
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
#include "capture_stderr.h"
#include "fake_verbs.h"
#include "regcache.h"

#define BLOCK ((size_t)65536)
#define PCIE CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE

static struct ibv_pd pd1;

static int teardown(void **state)
{
    unsetenv("REGCACHE_DMABUF_MAPPING");
    unsetenv("REGCACHE_DATA_DIRECT");
    unsetenv("REGCACHE_STATS");
    return fake_world_teardown(state);
}

/* A two-rail dmabuf cache registering 64 KiB blocks of the allocation. */
static int try_create(regcache_t **c)
{
    static struct ibv_pd *pds[2];
    struct regcache_params p;
    pds[0] = fake_pd();
    pds[1] = &pd1;
    assert_int_equal(regcache_params_init(&p), REGCACHE_OK);
    p.rails = 2;
    p.pds = pds;
    p.whole_allocation = 0;
    *c = NULL;
    return regcache_create(&p, c);
}

static regcache_t *create(void)
{
    regcache_t *c;
    int rc = try_create(&c);
    if (rc != REGCACHE_OK)
        fail_msg("create: %s (%s)", regcache_err_name(rc), regcache_last_error());
    return c;
}

/* A get of block i on `rail` that must succeed, put at once. */
static void use(regcache_t *c, unsigned rail, size_t i)
{
    regcache_entry_t *e = NULL;
    int rc = regcache_get_rail(c, rail, fake_gpu(i * BLOCK), 100, &e);
    if (rc != REGCACHE_OK)
        fail_msg("get: %s (%s)", regcache_err_name(rc), regcache_last_error());
    regcache_put(c, e);
}

static void assert_says(const char *text, const char *what)
{
    if (!strstr(text, what))
        fail_msg("\"%s\" lacks \"%s\"", text, what);
}

static void test_pcie_where_the_driver_takes_it(void **state)
{
    (void)state;
    regcache_t *c = create();
    use(c, 0, 0);
    assert_int_equal(drv.calls[FC_GET_HANDLE], 1);
    assert_int_equal(drv.export_flags, PCIE);
    assert_int_equal(fake_verbs.dmabuf_calls, 1);
    assert_false(fake_verbs.last_dmabuf.data_direct);
    regcache_destroy(c);
}

/* Refused once, by either answer: that export is made again with the
 * default mapping, and so is every later one on that GPU. */
static void test_refused_pcie_falls_back_to_the_default(void **state)
{
    static const CUresult refusals[] = { CUDA_ERROR_NOT_SUPPORTED, CUDA_ERROR_INVALID_VALUE };
    (void)state;
    setenv("REGCACHE_STATS", "1", 1); /* read by create */
    for (size_t i = 0; i < 2; i++) {
        regcache_t *c = create();
        char out[4096];
        drv.calls[FC_GET_HANDLE] = drv.pcie_exports = 0;
        drv.pcie_answer = refusals[i];
        use(c, 0, 0);
        assert_int_equal(drv.pcie_exports, 1);
        assert_int_equal(drv.calls[FC_GET_HANDLE], 2);
        assert_int_equal(drv.export_flags, 0);
        use(c, 1, 1);
        assert_int_equal(drv.pcie_exports, 1);
        assert_int_equal(drv.calls[FC_GET_HANDLE], 3);
        assert_int_equal(drv.export_flags, 0);
        assert_int_equal(fake_verbs.dmabuf_calls, 2 * (int)(i + 1));
        destroy_capturing_stderr(c, out, sizeof out);
        assert_says(out, "GPU 0 refused the PCIe mapping");
    }
}

/* Another failure of the PCIe export is the export's error, not a reason
 * to try the default. */
static void test_other_export_errors_do_not_fall_back(void **state)
{
    (void)state;
    regcache_t *c = create();
    regcache_entry_t *e;
    drv.fail[FC_GET_HANDLE] = CUDA_ERROR_OUT_OF_MEMORY;
    assert_int_equal(regcache_get(c, fake_gpu(0), 100, &e), REGCACHE_ERR_BACKEND);
    assert_int_equal(drv.calls[FC_GET_HANDLE], 1);
    assert_says(regcache_last_error(), "CUDA_ERROR_OUT_OF_MEMORY");
    drv.fail[FC_GET_HANDLE] = CUDA_SUCCESS;
    use(c, 0, 0);
    assert_int_equal(drv.export_flags, PCIE);
    regcache_destroy(c);
}

static void test_pcie_mapping_has_no_fallback(void **state)
{
    (void)state;
    setenv("REGCACHE_DMABUF_MAPPING", "pcie", 1);
    regcache_t *c = create();
    regcache_entry_t *e;
    drv.pcie_answer = CUDA_ERROR_NOT_SUPPORTED;
    assert_int_equal(regcache_get(c, fake_gpu(0), 100, &e), REGCACHE_ERR_BACKEND);
    assert_says(regcache_last_error(), "PCIe mapping");
    assert_int_equal(drv.calls[FC_GET_HANDLE], 1);
    assert_int_equal(fake_verbs.dmabuf_calls, 0);
    drv.pcie_answer = CUDA_SUCCESS;
    use(c, 0, 0);
    assert_int_equal(drv.export_flags, PCIE);
    regcache_destroy(c);
}

static void test_default_mapping_never_asks_for_pcie(void **state)
{
    (void)state;
    setenv("REGCACHE_DMABUF_MAPPING", "default", 1);
    regcache_t *c = create();
    use(c, 0, 0);
    use(c, 1, 1);
    assert_int_equal(drv.pcie_exports, 0);
    assert_int_equal(drv.export_flags, 0);
    regcache_destroy(c);
}

/* Rail 1's device is a data-direct one: its registrations go through
 * mlx5dv on PCIe-mapped exports, rail 0's through ibv_reg_dmabuf_mr; the
 * dump says so. */
static void test_data_direct_where_the_device_is_one(void **state)
{
    (void)state;
    char out[4096];
    fake_verbs.mlx5 = 1;
    fake_verbs.data_direct_pd = &pd1;
    setenv("REGCACHE_STATS", "1", 1);
    regcache_t *c = create();
    use(c, 0, 0);
    assert_false(fake_verbs.last_dmabuf.data_direct);
    assert_ptr_equal(fake_verbs.last_dmabuf.pd, fake_pd());
    use(c, 1, 0);
    assert_true(fake_verbs.last_dmabuf.data_direct);
    assert_ptr_equal(fake_verbs.last_dmabuf.pd, &pd1);
    assert_int_equal(drv.export_flags, PCIE);
    destroy_capturing_stderr(c, out, sizeof out);
    assert_says(out, "dmabuf mapping auto");
    assert_says(out, "rail 0: ibv_reg_dmabuf_mr (data direct not a data-direct device)");
    assert_says(out, "rail 1: mlx5dv_reg_dmabuf_mr DATA_DIRECT");
}

/* The choice of each rail, in the statistics of the cache and of the GPU:
 * PCIe on both, data direct on rail 1's data-direct device; once the GPU
 * refused the PCIe mapping, the default, and data direct nowhere. */
static void assert_rails(regcache_t *c, int device, uint32_t mapping, uint32_t dd0, uint32_t dd1)
{
    struct regcache_stats s;
    if (device == REGCACHE_DEVICE_ALL)
        assert_int_equal(regcache_get_stats(c, &s), REGCACHE_OK);
    else
        assert_int_equal(regcache_get_device_stats(c, device, &s), REGCACHE_OK);
    assert_int_equal(s.rails, 2);
    assert_int_equal(s.dmabuf_mapping[0], mapping);
    assert_int_equal(s.dmabuf_mapping[1], mapping);
    assert_int_equal(s.data_direct[0], dd0);
    assert_int_equal(s.data_direct[1], dd1);
}

static void test_statistics_report_each_rails_choice(void **state)
{
    (void)state;
    fake_verbs.mlx5 = 1;
    fake_verbs.data_direct_pd = &pd1;
    regcache_t *c = create();
    assert_rails(c, REGCACHE_DEVICE_ALL, REGCACHE_DMABUF_PCIE, 0, 1); /* no GPU seen yet */
    use(c, 1, 0);
    assert_rails(c, REGCACHE_DEVICE_ALL, REGCACHE_DMABUF_PCIE, 0, 1);
    assert_rails(c, 0, REGCACHE_DMABUF_PCIE, 0, 1);
    regcache_destroy(c);

    drv.pcie_answer = CUDA_ERROR_NOT_SUPPORTED;
    c = create();
    use(c, 1, 0);
    assert_rails(c, 0, REGCACHE_DMABUF_DEFAULT, 0, 0);
    assert_rails(c, REGCACHE_DEVICE_ALL, REGCACHE_DMABUF_DEFAULT, 0, 0);
    regcache_destroy(c);

    setenv("REGCACHE_DMABUF_MAPPING", "default", 1);
    drv.pcie_answer = CUDA_SUCCESS;
    c = create();
    assert_rails(c, REGCACHE_DEVICE_ALL, REGCACHE_DMABUF_DEFAULT, 0, 0);
    regcache_destroy(c);
}

/* Data direct needs the PCIe mapping: where the driver refuses it, the
 * data-direct rail registers the default export with ibv_reg_dmabuf_mr. */
static void test_data_direct_without_pcie_registers_plainly(void **state)
{
    (void)state;
    fake_verbs.mlx5 = 1;
    fake_verbs.data_direct_pd = &pd1;
    drv.pcie_answer = CUDA_ERROR_NOT_SUPPORTED;
    regcache_t *c = create();
    use(c, 1, 0);
    assert_int_equal(drv.export_flags, 0);
    assert_false(fake_verbs.last_dmabuf.data_direct);
    assert_int_equal(fake_verbs.live_mrs, 1);
    regcache_destroy(c);

    setenv("REGCACHE_DMABUF_MAPPING", "default", 1);
    drv.pcie_answer = CUDA_SUCCESS;
    c = create();
    use(c, 1, 0);
    assert_int_equal(drv.export_flags, 0);
    assert_false(fake_verbs.last_dmabuf.data_direct);
    regcache_destroy(c);
}

/* Without libmlx5's calls nothing is data direct; =on then refuses to
 * create the cache, saying what is missing. */
static void test_data_direct_on_needs_libmlx5(void **state)
{
    (void)state;
    regcache_t *c = create();
    use(c, 1, 0);
    assert_false(fake_verbs.last_dmabuf.data_direct);
    regcache_destroy(c);
    setenv("REGCACHE_DATA_DIRECT", "on", 1);
    assert_int_equal(try_create(&c), REGCACHE_ERR_UNSUPPORTED);
    assert_null(c);
    assert_says(regcache_last_error(), "REGCACHE_DATA_DIRECT=on: libmlx5.so.1");
}

static void test_data_direct_on_and_off(void **state)
{
    (void)state;
    fake_verbs.mlx5 = 1;
    fake_verbs.data_direct_pd = &pd1;
    setenv("REGCACHE_DATA_DIRECT", "on", 1);
    regcache_t *c = create();
    use(c, 0, 0);
    assert_true(fake_verbs.last_dmabuf.data_direct);
    regcache_destroy(c);
    setenv("REGCACHE_DATA_DIRECT", "off", 1);
    c = create();
    use(c, 1, 0);
    assert_false(fake_verbs.last_dmabuf.data_direct);
    regcache_destroy(c);
}

static void test_bad_values_are_refused(void **state)
{
    (void)state;
    regcache_t *c;
    setenv("REGCACHE_DMABUF_MAPPING", "nvlink", 1);
    assert_int_equal(try_create(&c), REGCACHE_ERR_INVALID);
    assert_says(regcache_last_error(), "REGCACHE_DMABUF_MAPPING=\"nvlink\"");
    unsetenv("REGCACHE_DMABUF_MAPPING");
    setenv("REGCACHE_DATA_DIRECT", "maybe", 1);
    assert_int_equal(try_create(&c), REGCACHE_ERR_INVALID);
    assert_says(regcache_last_error(), "REGCACHE_DATA_DIRECT=\"maybe\"");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, fake_world_setup, teardown)
        T(test_pcie_where_the_driver_takes_it),
        T(test_refused_pcie_falls_back_to_the_default),
        T(test_other_export_errors_do_not_fall_back),
        T(test_pcie_mapping_has_no_fallback),
        T(test_default_mapping_never_asks_for_pcie),
        T(test_data_direct_where_the_device_is_one),
        T(test_data_direct_without_pcie_registers_plainly),
        T(test_data_direct_on_needs_libmlx5),
        T(test_data_direct_on_and_off),
        T(test_statistics_report_each_rails_choice),
        T(test_bad_values_are_refused),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
