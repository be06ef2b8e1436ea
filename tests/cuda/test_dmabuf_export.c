/* rc_dmabuf_export(): host-page rounding, the offset, borrowed contexts, and
 * no file descriptor left behind on any path. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "dmabuf_export.h"
#include "fake_driver.h"
#include "regcache.h"

#define MIB ((size_t)1 << 20)

static size_t page;
static int fds_before;

static int setup(void **state)
{
    (void)state;
    drv_install();
    page = (size_t)sysconf(_SC_PAGESIZE);
    fds_before = drv_open_fds();
    return 0;
}

/* Every test leaves the fds, the context stack and the primary context
 * references as it found them. */
static int teardown(void **state)
{
    (void)state;
    assert_int_equal(drv_open_fds(), fds_before);
    assert_int_equal(drv.pushed, 0);
    assert_int_equal(drv.retained, 0);
    drv_uninstall();
    return 0;
}

static void export_ok(uintptr_t addr, size_t len, uintptr_t want_ptr, size_t want_size)
{
    int fd = -1;
    uint64_t offset = 0;
    assert_int_equal(rc_dmabuf_export(addr, len, &fd, &offset), REGCACHE_OK);
    assert_true(fcntl(fd, F_GETFD) >= 0);
    assert_int_equal(drv.export_ptr, want_ptr);
    assert_int_equal(drv.export_size, want_size);
    assert_int_equal(offset, addr - want_ptr);
    close(fd);
}

static void rounds_out_to_host_pages(void **state)
{
    (void)state;
    drv_legacy(0, MIB);
    export_ok(drv_addr(page + 100), 2 * page, drv_addr(page), 3 * page);
    export_ok(drv_addr(page - 1), 2, drv_addr(0), 2 * page);
}

static void aligned_range_is_exported_as_is(void **state)
{
    (void)state;
    drv_pool(0, MIB);
    export_ok(drv_addr(4 * page), 8 * page, drv_addr(4 * page), 8 * page);
    assert_int_equal(drv.calls[FC_CTX_PUSH], 0);
}

static void borrows_the_owning_context(void **state)
{
    (void)state;
    drv_legacy(0, MIB); /* owned by DRV_OTHER_CTX */
    drv.current = NULL;
    export_ok(drv_addr(0), page, drv_addr(0), page);
    assert_int_equal(drv.calls[FC_CTX_PUSH], 1);
    assert_int_equal(drv.calls[FC_PRIMARY_RETAIN], 0);
    assert_null(drv.current);
}

static void borrows_the_primary_context_for_pool_memory(void **state)
{
    (void)state;
    drv_pool(0, MIB); /* belongs to no context */
    drv.current = NULL;
    export_ok(drv_addr(0), page, drv_addr(0), page);
    assert_int_equal(drv.calls[FC_PRIMARY_RETAIN], 1);
    assert_int_equal(drv.calls[FC_PRIMARY_RELEASE], 1);
    assert_null(drv.current);
}

static void unknown_memory_without_context(void **state)
{
    (void)state;
    drv.current = NULL;
    int fd = -1;
    uint64_t offset;
    assert_int_equal(rc_dmabuf_export(drv_addr(0), page, &fd, &offset), REGCACHE_ERR_CUDA);
    assert_non_null(strstr(regcache_last_error(), "not GPU memory"));
    assert_int_equal(drv.calls[FC_GET_HANDLE], 0);
}

static const CUresult errors[] = { CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_INITIALIZED,
                                   CUDA_ERROR_DEINITIALIZED, CUDA_ERROR_NOT_SUPPORTED,
                                   (CUresult)12345 };

/* Inject each error into `call` and expect `status` (NOT_SUPPORTED from the
 * export itself is UNSUPPORTED) with the call named in the message. */
static void each_error(enum drv_call call, const char *name)
{
    for (size_t e = 0; e < sizeof errors / sizeof errors[0]; e++) {
        drv.fail[call] = errors[e];
        int fd = -1;
        uint64_t offset;
        int status = rc_dmabuf_export(drv_addr(0), page, &fd, &offset);
        int want = call == FC_GET_HANDLE && errors[e] == CUDA_ERROR_NOT_SUPPORTED
                       ? REGCACHE_ERR_UNSUPPORTED
                       : REGCACHE_ERR_CUDA;
        assert_int_equal(status, want);
        assert_int_equal(fd, -1);
        assert_non_null(strstr(regcache_last_error(), name));
        assert_int_equal(drv_open_fds(), fds_before);
        assert_int_equal(drv.pushed, 0);
        assert_int_equal(drv.retained, 0);
    }
}

static void export_errors(void **state)
{
    (void)state;
    drv_legacy(0, MIB);
    each_error(FC_GET_HANDLE, "cuMemGetHandleForAddressRange");
}

static void export_errors_with_a_borrowed_context(void **state)
{
    (void)state;
    drv_pool(0, MIB);
    drv.current = NULL;
    each_error(FC_GET_HANDLE, "cuMemGetHandleForAddressRange");
    assert_null(drv.current);
}

static void context_errors(void **state)
{
    (void)state;
    static const struct {
        enum drv_call call;
        const char *name;
    } calls[] = {
        { FC_CTX_GET_CURRENT, "cuCtxGetCurrent" },
        { FC_GET_ATTRIBUTES, "cuPointerGetAttributes" },
        { FC_DEVICE_GET, "cuDeviceGet" },
        { FC_PRIMARY_RETAIN, "cuDevicePrimaryCtxRetain" },
        { FC_CTX_PUSH, "cuCtxPushCurrent" },
    };
    drv_pool(0, MIB);
    for (size_t c = 0; c < sizeof calls / sizeof calls[0]; c++) {
        drv.current = NULL;
        unsigned int exports = drv.calls[FC_GET_HANDLE];
        each_error(calls[c].call, calls[c].name);
        drv.fail[calls[c].call] = CUDA_SUCCESS;
        assert_int_equal(drv.calls[FC_GET_HANDLE], exports);
    }
}

/* The export succeeded but the borrowed context cannot be given back: the
 * new fd must be closed, not leaked. */
static void pop_failure_closes_the_new_fd(void **state)
{
    (void)state;
    drv_pool(0, MIB);
    for (size_t e = 0; e < sizeof errors / sizeof errors[0]; e++) {
        /* The fake driver leaves the context pushed when pop fails. */
        drv.current = NULL;
        drv.pushed = 0;
        drv.fail[FC_CTX_POP] = errors[e];
        int fd = -1;
        uint64_t offset;
        assert_int_equal(rc_dmabuf_export(drv_addr(0), page, &fd, &offset), REGCACHE_ERR_CUDA);
        assert_int_equal(fd, -1);
        assert_non_null(strstr(regcache_last_error(), "cuCtxPopCurrent"));
        assert_int_equal(drv_open_fds(), fds_before);
        assert_int_equal(drv.retained, 0);
    }
    assert_int_equal(drv.calls[FC_GET_HANDLE], 5);
    drv.pushed = 0;
}

static void dmabuf_supported_follows_the_attribute(void **state)
{
    (void)state;
    assert_int_equal(rc_dmabuf_supported(0), 1);
    drv.dmabuf_supported[0] = 0;
    assert_int_equal(rc_dmabuf_supported(0), 0);
    drv.dmabuf_supported[0] = 1;
    assert_int_equal(rc_dmabuf_supported(1), 0); /* no such device */
    /* Any driver error reads as "no". */
    for (size_t e = 0; e < sizeof errors / sizeof errors[0]; e++) {
        drv.fail[FC_DEVICE_GET_ATTRIBUTE] = errors[e];
        assert_int_equal(rc_dmabuf_supported(0), 0);
        drv.fail[FC_DEVICE_GET_ATTRIBUTE] = CUDA_SUCCESS;
        drv.fail[FC_DEVICE_GET] = errors[e];
        assert_int_equal(rc_dmabuf_supported(0), 0);
        drv.fail[FC_DEVICE_GET] = CUDA_SUCCESS;
    }
    assert_int_equal(rc_dmabuf_supported(0), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
        T(rounds_out_to_host_pages),
        T(aligned_range_is_exported_as_is),
        T(borrows_the_owning_context),
        T(borrows_the_primary_context_for_pool_memory),
        T(unknown_memory_without_context),
        T(export_errors),
        T(export_errors_with_a_borrowed_context),
        T(context_errors),
        T(pop_failure_closes_the_new_fd),
        T(dmabuf_supported_follows_the_attribute),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
