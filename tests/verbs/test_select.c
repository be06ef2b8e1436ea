/* How the built-in verbs backend picks its registration method, and what it
 * says when none is available. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <infiniband/verbs.h>

#include "fake_verbs.h"
#include "regcache.h"
#include "verbs_backend.h"

#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ)

/* Create a backend; on success check its shape and destroy it. */
static int create(enum regcache_method method, int host_memory, int *method_used)
{
    struct regcache_params p;
    struct rc_backend be;
    int status;

    regcache_params_init(&p);
    p.pd = fake_pd();
    p.access = ACCESS;
    p.method = method;
    p.host_memory = host_memory;

    *method_used = -1;
    status = rc_verbs_backend_create(&p, RC_MAPPING_AUTO, RC_DATA_DIRECT_AUTO, &be, method_used);
    if (status == REGCACHE_OK) {
        assert_non_null(be.reg);
        assert_non_null(be.dereg);
        assert_non_null(be.arg);
        assert_non_null(be.fds_held);
        rc_verbs_backend_destroy(&be);
    }
    assert_int_equal(fake_verbs.live_mrs, 0);
    return status;
}

static void assert_error_mentions(const char *what)
{
    const char *msg = regcache_last_error();
    if (!strstr(msg, what))
        fail_msg("last error \"%s\" lacks \"%s\"", msg, what);
}

static void test_null_pd_is_invalid(void **state)
{
    struct regcache_params p;
    struct rc_backend be;
    int used = -1;
    (void)state;
    regcache_params_init(&p);
    p.access = ACCESS;
    assert_int_equal(rc_verbs_backend_create(&p, RC_MAPPING_AUTO, RC_DATA_DIRECT_AUTO, &be, &used),
                     REGCACHE_ERR_INVALID);
    assert_error_mentions("pd");
    assert_int_equal(fake_verbs.probe_calls, 0);
}

static void test_auto_picks_dmabuf_when_provider_answers_ebadf(void **state)
{
    int used;
    (void)state;
    assert_int_equal(create(REGCACHE_METHOD_AUTO, 0, &used), REGCACHE_OK);
    assert_int_equal(used, REGCACHE_METHOD_DMABUF);
    assert_int_equal(fake_verbs.probe_calls, 1);
    assert_ptr_equal(fake_verbs.last_probe.pd, fake_pd());
    assert_int_equal(fake_verbs.last_probe.access, ACCESS);
    assert_int_equal(fake_verbs.last_probe.fd, -1);
}

static void test_auto_falls_back_to_peermem_on_eopnotsupp(void **state)
{
    int used;
    (void)state;
    fake_verbs.probe_errno = EOPNOTSUPP;
    fake_sysfs_module("nvidia_peermem");
    assert_int_equal(create(REGCACHE_METHOD_AUTO, 0, &used), REGCACHE_OK);
    assert_int_equal(used, REGCACHE_METHOD_PEERMEM);
    assert_int_equal(fake_verbs.probe_calls, 1);
}

static void test_auto_falls_back_to_host_on_eprotonosupport(void **state)
{
    int used;
    (void)state;
    fake_verbs.probe_errno = EPROTONOSUPPORT;
    assert_int_equal(create(REGCACHE_METHOD_AUTO, 1, &used), REGCACHE_OK);
    assert_int_equal(used, REGCACHE_METHOD_HOST);
}

static void test_auto_does_not_trust_other_probe_errors(void **state)
{
    int used;
    (void)state;
    fake_verbs.probe_errno = EINVAL;
    assert_int_equal(create(REGCACHE_METHOD_AUTO, 0, &used), REGCACHE_ERR_UNSUPPORTED);
    assert_error_mentions("unexpectedly (errno 22");
    fake_sysfs_module("nvidia_peermem");
    assert_int_equal(create(REGCACHE_METHOD_AUTO, 0, &used), REGCACHE_OK);
    assert_int_equal(used, REGCACHE_METHOD_PEERMEM);
}

/* What the explicit request reports for each refusal of the probe. */
static void test_probe_refusals_are_explained(void **state)
{
    static const struct {
        int err;
        const char *why;
    } answers[] = {
        { EOPNOTSUPP, "lacks ibv_reg_dmabuf_mr" },
        { EPROTONOSUPPORT, "lacks ibv_reg_dmabuf_mr" },
        { EINVAL, "failed unexpectedly (errno 22" },
        { EIO, "failed unexpectedly (errno 5" },
    };
    int used;
    (void)state;

    for (size_t i = 0; i < sizeof(answers) / sizeof(answers[0]); i++) {
        fake_verbs.probe_errno = answers[i].err;
        assert_int_equal(create(REGCACHE_METHOD_DMABUF, 1, &used), REGCACHE_ERR_UNSUPPORTED);
        assert_error_mentions(answers[i].why);
    }
}

static void test_probe_mr_is_deregistered(void **state)
{
    int used;
    (void)state;
    fake_verbs.probe_errno = 0;
    assert_int_equal(create(REGCACHE_METHOD_AUTO, 0, &used), REGCACHE_OK);
    assert_int_equal(used, REGCACHE_METHOD_DMABUF);
    assert_int_equal(fake_verbs.dereg_calls, 1);
}

/* One GPU that cannot export is enough to rule dmabuf out, and then the
 * provider is not even asked. */
static void test_auto_skips_dmabuf_when_one_gpu_cannot_export(void **state)
{
    int used;
    (void)state;
    drv.device_count = 2;
    drv.dmabuf_supported[0] = 1;
    drv.dmabuf_supported[1] = 0;
    fake_sysfs_module("nvidia_peermem");
    assert_int_equal(create(REGCACHE_METHOD_AUTO, 0, &used), REGCACHE_OK);
    assert_int_equal(used, REGCACHE_METHOD_PEERMEM);
    assert_int_equal(fake_verbs.probe_calls, 0);
}

static void test_auto_without_gpu_is_host_only(void **state)
{
    int used;
    (void)state;
    drv.device_count = 0;
    assert_int_equal(create(REGCACHE_METHOD_AUTO, 1, &used), REGCACHE_OK);
    assert_int_equal(used, REGCACHE_METHOD_HOST);
    assert_int_equal(fake_verbs.probe_calls, 0);
}

static void test_auto_without_any_method_says_what_to_load(void **state)
{
    int used;
    (void)state;
    fake_verbs.probe_errno = EOPNOTSUPP;
    assert_int_equal(create(REGCACHE_METHOD_AUTO, 0, &used), REGCACHE_ERR_UNSUPPORTED);
    assert_error_mentions("modprobe nvidia-peermem");
    assert_error_mentions("lacks ibv_reg_dmabuf_mr");
}

static void test_auto_without_gpu_or_host_memory_is_unsupported(void **state)
{
    int used;
    (void)state;
    drv.device_count = 0;
    assert_int_equal(create(REGCACHE_METHOD_AUTO, 0, &used), REGCACHE_ERR_UNSUPPORTED);
    assert_error_mentions("no CUDA device");
}

static void test_explicit_dmabuf(void **state)
{
    int used;
    (void)state;
    assert_int_equal(create(REGCACHE_METHOD_DMABUF, 0, &used), REGCACHE_OK);
    assert_int_equal(used, REGCACHE_METHOD_DMABUF);
}

/* The answer a real provider without dmabuf (rxe) gives; peermem being
 * there must not change an explicit request. */
static void test_explicit_dmabuf_refused_by_provider(void **state)
{
    int used;
    (void)state;
    fake_verbs.probe_errno = EOPNOTSUPP;
    fake_sysfs_module("nvidia_peermem");
    assert_int_equal(create(REGCACHE_METHOD_DMABUF, 1, &used), REGCACHE_ERR_UNSUPPORTED);
    assert_error_mentions("method DMABUF unavailable");
    assert_error_mentions("lacks ibv_reg_dmabuf_mr");
}

static void test_explicit_dmabuf_refused_by_gpu(void **state)
{
    int used;
    (void)state;
    drv.dmabuf_supported[0] = 0;
    assert_int_equal(create(REGCACHE_METHOD_DMABUF, 0, &used), REGCACHE_ERR_UNSUPPORTED);
    assert_error_mentions("CUDA device 0 cannot export dmabuf");
    assert_int_equal(fake_verbs.probe_calls, 0);
}

static void test_explicit_peermem_without_module(void **state)
{
    int used;
    (void)state;
    assert_int_equal(create(REGCACHE_METHOD_PEERMEM, 1, &used), REGCACHE_ERR_UNSUPPORTED);
    assert_error_mentions("method PEERMEM unavailable");
    assert_error_mentions("modprobe nvidia-peermem");
}

static void test_explicit_peermem_with_module(void **state)
{
    int used;
    (void)state;
    fake_sysfs_module("nvidia_peermem");
    assert_int_equal(create(REGCACHE_METHOD_PEERMEM, 0, &used), REGCACHE_OK);
    assert_int_equal(used, REGCACHE_METHOD_PEERMEM);
    assert_int_equal(fake_verbs.probe_calls, 0);
}

static void test_legacy_nv_peer_mem_counts_as_peermem(void **state)
{
    int used;
    (void)state;
    fake_sysfs_module("nv_peer_mem");
    assert_int_equal(create(REGCACHE_METHOD_PEERMEM, 0, &used), REGCACHE_OK);
    assert_int_equal(used, REGCACHE_METHOD_PEERMEM);
}

static void test_unknown_method_is_invalid(void **state)
{
    int used;
    (void)state;
    assert_int_equal(create((enum regcache_method)7, 1, &used), REGCACHE_ERR_INVALID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, fake_world_setup, fake_world_teardown)
        T(test_null_pd_is_invalid),
        T(test_auto_picks_dmabuf_when_provider_answers_ebadf),
        T(test_auto_falls_back_to_peermem_on_eopnotsupp),
        T(test_auto_falls_back_to_host_on_eprotonosupport),
        T(test_auto_does_not_trust_other_probe_errors),
        T(test_probe_refusals_are_explained),
        T(test_probe_mr_is_deregistered),
        T(test_auto_skips_dmabuf_when_one_gpu_cannot_export),
        T(test_auto_without_gpu_is_host_only),
        T(test_auto_without_any_method_says_what_to_load),
        T(test_auto_without_gpu_or_host_memory_is_unsupported),
        T(test_explicit_dmabuf),
        T(test_explicit_dmabuf_refused_by_provider),
        T(test_explicit_dmabuf_refused_by_gpu),
        T(test_explicit_peermem_without_module),
        T(test_explicit_peermem_with_module),
        T(test_legacy_nv_peer_mem_counts_as_peermem),
        T(test_unknown_method_is_invalid),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
