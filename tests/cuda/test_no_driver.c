/* Without libcuda.so.1 the library still loads and works: the seam reports
 * why, every CUDA-backed part declines instead of crashing, and a cache of
 * host memory says why it validates as it does without reading like an
 * error. */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "bar1_budget.h"
#include "cuda_seam.h"
#include "dmabuf_export.h"
#include "fake_backend.h"
#include "gpu_key.h"
#include "last_error.h"
#include "mem_query.h"
#include "regcache.h"

static void seam_is_null_and_says_why(void **state)
{
    (void)state;
    assert_null(rc_cuda_api());
    assert_non_null(strstr(regcache_last_error(), "libcuda.so.1"));
    /* Loaded once; the reason is given again to every caller. */
    rc_clear_error();
    assert_null(rc_cuda_api());
    assert_non_null(strstr(regcache_last_error(), "libcuda.so.1"));
}

static void cuda_parts_decline(void **state)
{
    (void)state;
    struct rc_memory m = { 0 };
    assert_int_equal(rc_cuda_query(&m), REGCACHE_ERR_UNSUPPORTED);
    assert_null(m.query);
    assert_null(m.read_tag);
    int fd = -1;
    uint64_t offset = 7;
    assert_int_equal(rc_dmabuf_export(0x10000, 4096, &fd, &offset), REGCACHE_ERR_UNSUPPORTED);
    assert_int_equal(fd, -1);
    assert_int_equal(offset, 7);
    assert_int_equal(rc_dmabuf_supported(0), 0);
    assert_int_equal(rc_bar1_budget(0), 0);
    /* Custom backends' device numbers are the only GPU names there are. */
    char key[RC_GPU_KEY_LEN];
    assert_int_equal(rc_gpu_key(3, key, sizeof key), REGCACHE_OK);
    assert_string_equal(key, "dev3");
}

/* A backend with no query of its own: the cache sees host memory only. */
static void host_only_cache_says_so(void **state)
{
    (void)state;
    struct fake_backend fb;
    struct regcache_params p;
    regcache_t *c;
    fake_init(&fb);
    fb.ops.query = NULL;
    fake_params(&fb, &p);
    p.host_memory = 1;
    assert_int_equal(regcache_create(&p, &c), REGCACHE_OK);
    assert_int_equal(regcache_validation_mode(c), REGCACHE_VALIDATE_TAG_CHECK);
    /* Then what the cache does with host memory. */
    const char *why = "host memory only: no CUDA driver, nothing to validate on the GPU side; "
                      "host memory: ";
    assert_int_equal(strncmp(regcache_validation_reason(c), why, strlen(why)), 0);
    static char buf[64];
    regcache_entry_t *e;
    assert_int_equal(regcache_get(c, buf, sizeof buf, &e), REGCACHE_OK);
    regcache_put(c, e);
    regcache_destroy(c);
}

int main(void)
{
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (driver) {
        printf("skipped: libcuda.so.1 is installed here\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(seam_is_null_and_says_why),
        cmocka_unit_test(cuda_parts_decline),
        cmocka_unit_test(host_only_cache_says_so),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
