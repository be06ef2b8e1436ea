/* Registration method selection against a real provider.  rxe has no
 * dmabuf MRs, and the VM has no GPU and no nvidia_peermem: AUTO must fall
 * back, explicit methods must fail with a message that says why, and the
 * backend's dmabuf probe must reach the same verdict as a real
 * ibv_reg_dmabuf_mr on a real dmabuf (udmabuf over a memfd).  Where the
 * GPU side must say "yes" so that only the provider decides, a stand-in
 * CUDA driver answers for it (tests/common/fake_driver.h), and a stand-in
 * sysfs for the peermem module (tests/verbs); the provider is always the
 * real one. */
#include "fake_driver.h"
#include "fake_verbs.h"
#include "vm_env.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/udmabuf.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#define DMABUF_LEN ((size_t)1 << 20)

static struct vm_dev dev;

static int create(enum regcache_method method, int host_memory, regcache_t **cache)
{
    struct regcache_params p;
    regcache_params_init(&p);
    p.pd = dev.pd;
    p.method = method;
    p.host_memory = host_memory;
    *cache = NULL;
    return regcache_create(&p, cache);
}

/* A GPU that can export dmabuf, for the tests where only the provider
 * should decide; the teardown removes every stand-in, even after a failed
 * assertion. */
static int install_fake_gpu(void **state)
{
    (void)state;
    drv_install();
    return 0;
}

static int remove_fakes(void **state)
{
    (void)state;
    drv_uninstall();
    fake_sysfs_remove();
    return 0;
}

static void assert_error_mentions(const char *what)
{
    const char *msg = regcache_last_error();
    printf("regcache_last_error: %s\n", msg);
    assert_non_null(strstr(msg, what));
}

/* Offer a real dmabuf to the provider: 0 if it registered, else errno. */
static int real_dmabuf_registration(void)
{
    int ufd = open("/dev/udmabuf", O_RDWR);
    if (ufd < 0)
        print_error("open /dev/udmabuf: %s (needs the 6.12 guest kernel)\n", strerror(errno));
    assert_true(ufd >= 0);
    int mfd = memfd_create("vm-dmabuf", MFD_ALLOW_SEALING);
    assert_true(mfd >= 0);
    assert_int_equal(ftruncate(mfd, (off_t)DMABUF_LEN), 0);
    assert_int_equal(fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
    struct udmabuf_create uc = { .memfd = (uint32_t)mfd,
                                 .flags = UDMABUF_FLAGS_CLOEXEC,
                                 .size = DMABUF_LEN };
    int dfd = ioctl(ufd, UDMABUF_CREATE, &uc);
    assert_true(dfd >= 0);

    errno = 0;
    struct ibv_mr *mr = ibv_reg_dmabuf_mr(dev.pd, 0, DMABUF_LEN, 0, dfd, VM_ACCESS_ALL);
    int err = mr ? 0 : errno ? errno : EIO;
    if (mr)
        ibv_dereg_mr(mr);
    close(dfd);
    close(mfd);
    close(ufd);
    return err;
}

/* With a GPU that can export dmabuf, only the provider decides whether
 * DMABUF is usable: the backend's probe and a real registration agree. */
static void dmabuf_probe_agrees_with_real_registration(void **state)
{
    (void)state;
    int err = real_dmabuf_registration();
    printf("ibv_reg_dmabuf_mr on a udmabuf: %s\n", err ? strerror(err) : "OK");
    if (strncmp(ibv_get_device_name(dev.ctx->device), "rxe", 3) == 0)
        assert_int_equal(err, EOPNOTSUPP); /* soft-RoCE has no dmabuf MRs */

    regcache_t *cache;
    int rc = create(REGCACHE_METHOD_DMABUF, 0, &cache);
    if (err == 0) {
        assert_int_equal(rc, REGCACHE_OK);
        assert_int_equal(regcache_method_used(cache), REGCACHE_METHOD_DMABUF);
        regcache_destroy(cache);
        return;
    }
    assert_int_equal(rc, REGCACHE_ERR_UNSUPPORTED);
    assert_null(cache);
    assert_error_mentions("provider");
}

/* GPU present, provider refuses dmabuf: AUTO goes on to peermem when the
 * module is loaded, and to host-only when it is not. */
static void auto_falls_back_past_refused_dmabuf(void **state)
{
    (void)state;
    regcache_t *cache;

    fake_sysfs_module("nvidia_peermem");
    assert_int_equal(create(REGCACHE_METHOD_AUTO, 0, &cache), REGCACHE_OK);
    assert_int_equal(regcache_method_used(cache), REGCACHE_METHOD_PEERMEM);
    regcache_destroy(cache);
    fake_sysfs_remove();

    assert_int_equal(create(REGCACHE_METHOD_AUTO, 1, &cache), REGCACHE_OK);
    assert_int_equal(regcache_method_used(cache), REGCACHE_METHOD_HOST);
    regcache_destroy(cache);

    assert_int_equal(create(REGCACHE_METHOD_AUTO, 0, &cache), REGCACHE_ERR_UNSUPPORTED);
    assert_null(cache);
    assert_error_mentions("nvidia_peermem");
}

/* The VM as it is (no CUDA driver, no peermem): AUTO with host memory is a
 * host-only cache that registers for real; explicit GPU methods fail and
 * say why. */
static void no_gpu_method_is_host_only(void **state)
{
    (void)state;
    regcache_t *cache;
    assert_int_not_equal(access("/sys/module/nvidia_peermem", F_OK), 0);

    assert_int_equal(create(REGCACHE_METHOD_AUTO, 1, &cache), REGCACHE_OK);
    assert_int_equal(regcache_method_used(cache), REGCACHE_METHOD_HOST);
    size_t len = (size_t)sysconf(_SC_PAGESIZE);
    char *buf = vm_pages(len);
    int before = vm_provider_mrs();
    regcache_entry_t *e;
    assert_int_equal(regcache_get(cache, buf, len, &e), REGCACHE_OK);
    assert_non_null(regcache_entry_mr(e));
    assert_int_equal(vm_provider_mrs(), before + 1);
    regcache_put(cache, e);
    regcache_destroy(cache);
    assert_int_equal(vm_provider_mrs(), before);
    vm_pages_free(buf, len);

    assert_int_equal(create(REGCACHE_METHOD_DMABUF, 1, &cache), REGCACHE_ERR_UNSUPPORTED);
    assert_null(cache);
    assert_error_mentions("DMABUF");
    assert_int_equal(create(REGCACHE_METHOD_PEERMEM, 1, &cache), REGCACHE_ERR_UNSUPPORTED);
    assert_null(cache);
    assert_error_mentions("nvidia_peermem");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(dmabuf_probe_agrees_with_real_registration,
                                        install_fake_gpu, remove_fakes),
        cmocka_unit_test_setup_teardown(auto_falls_back_past_refused_dmabuf, install_fake_gpu,
                                        remove_fakes),
        cmocka_unit_test(no_gpu_method_is_host_only),
    };
    vm_dev_open(&dev);
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    vm_dev_close(&dev);
    return failed;
}
