/* What the built-in verbs backend's reg and dereg hand to libibverbs, which
 * errno values come back, and that no dmabuf fd outlives a registration. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>
#include <infiniband/verbs.h>

#include "dmabuf_export.h"
#include "fake_verbs.h"
#include "regcache.h"
#include "verbs_backend.h"

#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

/* Every errno a provider may plausibly return, exhaustion or not. */
static const int verbs_errnos[] = { ENOMEM, ENOSPC, EAGAIN, EFAULT,
                                    EINVAL, EPERM,  EACCES, EOPNOTSUPP };
#define N_ERRNOS (sizeof(verbs_errnos) / sizeof(verbs_errnos[0]))

static struct rc_backend be;

static int teardown(void **state)
{
    if (be.arg)
        rc_verbs_backend_destroy(&be);
    return fake_world_teardown(state);
}

static void make_backend(enum regcache_method method, int expect_method)
{
    struct regcache_params p;
    int used = -1;

    regcache_params_init(&p);
    p.pd = fake_pd();
    p.access = ACCESS;
    p.method = method;
    p.host_memory = 1;

    if (method == REGCACHE_METHOD_PEERMEM)
        fake_sysfs_module("nvidia_peermem");
    assert_int_equal(rc_verbs_backend_create(&p, RC_MAPPING_AUTO, RC_DATA_DIRECT_AUTO, &be, &used),
                     REGCACHE_OK);
    assert_int_equal(used, expect_method);
}

static void *gpu_addr(size_t offset)
{
    return fake_gpu(offset);
}

static int reg(void *addr, size_t len, int device, struct ibv_mr **mr)
{
    void *handle = NULL;
    int err = be.reg(be.arg, (uintptr_t)addr, len, device, 0, ACCESS, NULL, &handle);
    *mr = handle;
    /* Nothing stays open after a registration, failed or not. */
    assert_int_equal(be.fds_held(be.arg), 0);
    return err;
}

static void assert_fd_closed(int fd)
{
    assert_int_equal(fcntl(fd, F_GETFD), -1);
    assert_int_equal(errno, EBADF);
}

static void test_host_memory_uses_reg_mr_on_any_method(void **state)
{
    static const enum regcache_method methods[] = { REGCACHE_METHOD_DMABUF,
                                                    REGCACHE_METHOD_PEERMEM };
    char *buf = malloc(8192);
    struct ibv_mr *mr;
    (void)state;

    for (size_t i = 0; i < 2; i++) {
        make_backend(methods[i], (int)methods[i]);
        assert_int_equal(reg(buf, 8192, REGCACHE_DEVICE_HOST, &mr), 0);
        assert_int_equal(fake_verbs.reg_mr_calls, (int)i + 1);
        assert_ptr_equal(fake_verbs.last_reg_mr.pd, fake_pd());
        assert_ptr_equal(fake_verbs.last_reg_mr.addr, buf);
        assert_int_equal(fake_verbs.last_reg_mr.len, 8192);
        assert_int_equal(fake_verbs.last_reg_mr.access, ACCESS);
        assert_ptr_equal(mr->addr, buf);
        be.dereg(be.arg, mr);
        assert_int_equal(fake_verbs.live_mrs, 0);
        rc_verbs_backend_destroy(&be);
    }
    assert_int_equal(drv.calls[FC_GET_HANDLE], 0);
    assert_int_equal(fake_verbs.dmabuf_calls, 0);
    free(buf);
}

static void test_peermem_registers_the_gpu_va(void **state)
{
    struct ibv_mr *mr;
    (void)state;
    make_backend(REGCACHE_METHOD_PEERMEM, REGCACHE_METHOD_PEERMEM);
    assert_int_equal(reg(gpu_addr(0x10000), 0x20000, 0, &mr), 0);
    assert_ptr_equal(fake_verbs.last_reg_mr.addr, gpu_addr(0x10000));
    assert_int_equal(fake_verbs.last_reg_mr.len, 0x20000);
    assert_int_equal(fake_verbs.last_reg_mr.access, ACCESS);
    assert_int_equal(drv.calls[FC_GET_HANDLE], 0);
    be.dereg(be.arg, mr);
}

/* The MR must describe exactly [addr, addr+len) of the exported range, with
 * the virtual address as iova, whatever rounding the export did. */
static void test_dmabuf_offset_iova_and_fd(void **state)
{
    static const struct {
        size_t off, len;
    } ranges[] = { { 0, 0x10000 }, { 0x12000, 0x30000 }, { 0x12345, 100 } };
    (void)state;
    make_backend(REGCACHE_METHOD_DMABUF, REGCACHE_METHOD_DMABUF);

    for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
        uintptr_t addr = (uintptr_t)gpu_addr(ranges[i].off);
        size_t len = ranges[i].len;
        int fds = drv_open_fds();
        struct ibv_mr *mr;

        assert_int_equal(reg((void *)addr, len, 0, &mr), 0);
        assert_int_equal(drv.calls[FC_GET_HANDLE], (int)i + 1);
        assert_true(drv.export_ptr <= addr);
        assert_true(drv.export_ptr + drv.export_size >= addr + len);
        assert_int_equal(fake_verbs.last_dmabuf.offset, addr - drv.export_ptr);
        assert_int_equal(fake_verbs.last_dmabuf.len, len);
        assert_int_equal(fake_verbs.last_dmabuf.iova, addr);
        assert_int_equal(fake_verbs.last_dmabuf.access, ACCESS);
        assert_ptr_equal(fake_verbs.last_dmabuf.pd, fake_pd());
        assert_int_equal(fake_verbs.last_dmabuf.fd, drv.export_fd);
        assert_true(fake_verbs.last_dmabuf.fd_was_open);
        assert_fd_closed(drv.export_fd);
        assert_int_equal(drv_open_fds(), fds);
        assert_int_equal((uintptr_t)mr->addr, addr);
        assert_int_equal(mr->length, len);
        be.dereg(be.arg, mr);
    }
    assert_int_equal(fake_verbs.reg_mr_calls, 0);
}

static void check_reg_mr_errnos(int device)
{
    struct ibv_mr *mr;

    for (size_t i = 0; i < N_ERRNOS; i++) {
        fake_verbs.reg_mr_failures = 1;
        fake_verbs.reg_mr_errno = verbs_errnos[i];
        assert_int_equal(reg(gpu_addr(0), 0x10000, device, &mr), verbs_errnos[i]);
    }
    /* A provider that fails without setting errno is still a failure. */
    fake_verbs.reg_mr_failures = 1;
    fake_verbs.reg_mr_errno = 0;
    assert_int_equal(reg(gpu_addr(0), 0x10000, device, &mr), EIO);
    assert_int_equal(fake_verbs.live_mrs, 0);
}

static void test_reg_mr_errno_passes_through(void **state)
{
    (void)state;
    make_backend(REGCACHE_METHOD_PEERMEM, REGCACHE_METHOD_PEERMEM);
    check_reg_mr_errnos(0);
    check_reg_mr_errnos(REGCACHE_DEVICE_HOST);
    assert_int_equal(fake_verbs.reg_mr_calls, 2 * (N_ERRNOS + 1));
}

static void test_dmabuf_errno_passes_through_and_fd_is_closed(void **state)
{
    (void)state;
    make_backend(REGCACHE_METHOD_DMABUF, REGCACHE_METHOD_DMABUF);
    for (size_t i = 0; i <= N_ERRNOS; i++) {
        int want = i < N_ERRNOS ? verbs_errnos[i] : EIO;
        int fds = drv_open_fds();
        struct ibv_mr *mr;

        fake_verbs.dmabuf_failures = 1;
        fake_verbs.dmabuf_errno = i < N_ERRNOS ? verbs_errnos[i] : 0;
        assert_int_equal(reg(gpu_addr(0x20000), 0x10000, 0, &mr), want);
        assert_true(fake_verbs.last_dmabuf.fd_was_open);
        assert_fd_closed(drv.export_fd);
        assert_int_equal(drv_open_fds(), fds);
    }
    assert_int_equal(fake_verbs.dmabuf_calls, N_ERRNOS + 1);
    assert_int_equal(fake_verbs.live_mrs, 0);
}

/* A failed export is never "resources exhausted" (the cache must not evict
 * and retry on it): UNSUPPORTED maps to EOPNOTSUPP, anything else to EIO. */
static void test_export_failure_maps_to_errno(void **state)
{
    static const CUresult failures[] = { CUDA_ERROR_NOT_SUPPORTED, CUDA_ERROR_INVALID_VALUE,
                                         CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_UNKNOWN };
    int saw_unsupported = 0;
    (void)state;
    make_backend(REGCACHE_METHOD_DMABUF, REGCACHE_METHOD_DMABUF);

    for (size_t i = 0; i < sizeof(failures) / sizeof(failures[0]); i++) {
        int fd = -1, fds = drv_open_fds();
        uint64_t offset;
        struct ibv_mr *mr;
        int status, want;

        drv.fail[FC_GET_HANDLE] = failures[i];
        status = rc_dmabuf_export((uintptr_t)gpu_addr(0), 0x10000, &fd, &offset);
        assert_int_not_equal(status, REGCACHE_OK);
        saw_unsupported |= status == REGCACHE_ERR_UNSUPPORTED;
        want = status == REGCACHE_ERR_UNSUPPORTED ? EOPNOTSUPP : EIO;
        assert_int_equal(reg(gpu_addr(0), 0x10000, 0, &mr), want);
        assert_int_equal(drv_open_fds(), fds);
    }
    assert_true(saw_unsupported);
    assert_int_equal(fake_verbs.dmabuf_calls, 0);
}

static void test_host_only_backend_refuses_gpu_memory(void **state)
{
    char buf[4096];
    struct ibv_mr *mr;
    (void)state;
    drv.device_count = 0;
    make_backend(REGCACHE_METHOD_AUTO, REGCACHE_METHOD_HOST);
    assert_int_equal(reg(gpu_addr(0), 0x10000, 0, &mr), EOPNOTSUPP);
    assert_int_equal(fake_verbs.reg_mr_calls, 0);
    assert_int_equal(drv.calls[FC_GET_HANDLE], 0);
    assert_int_equal(reg(buf, sizeof(buf), REGCACHE_DEVICE_HOST, &mr), 0);
    be.dereg(be.arg, mr);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, fake_world_setup, teardown)
        T(test_host_memory_uses_reg_mr_on_any_method),
        T(test_peermem_registers_the_gpu_va),
        T(test_dmabuf_offset_iova_and_fd),
        T(test_reg_mr_errno_passes_through),
        T(test_dmabuf_errno_passes_through_and_fd_is_closed),
        T(test_export_failure_maps_to_errno),
        T(test_host_only_backend_refuses_gpu_memory),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
