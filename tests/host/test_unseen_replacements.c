/* Pages replaced behind libc's exported unmapping functions and the
 * userfaultfd's events: each is either seen, or its mapping is never
 * watched - its entries keep the explicit contract, counted in
 * host_unmonitored and said by the reason.
 * - shmat(SHM_REMAP) over a cached range: seen through hooks (libc's or
 *   UCX's); the kernel tells no userfaultfd of it (documented), so not run
 *   there;
 * - a shared mapping (a memfd's here) loses its pages through its file,
 *   fallocate(PUNCH_HOLE), which no way sees: never watched;
 * - dlclose() of a plugin whose static buffer was registered: the loader
 *   unmaps it with its own munmap, which no hook sees (never watched
 *   then), while the userfaultfd sees it. */
#include <dlfcn.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#include <cmocka.h>

#include "host_fixture.h"

#define LEN (2 * MiB)

static void shm_remap_over_a_cached_range(void **state)
{
    struct fx *f = *state;
    hx_create(f);
    char *p = hx_anon(NULL, LEN, 0);
    p[0] = 1;
    fx_use(f, (uintptr_t)p, LEN);
    int id = shmget(IPC_PRIVATE, LEN, IPC_CREAT | 0600);
    assert_true(id >= 0);
    char *q = shmat(id, p, SHM_REMAP);
    shmctl(id, IPC_RMID, NULL);
    assert_ptr_equal(q, p);
    fx_use(f, (uintptr_t)p, LEN);
    fx_assert_stats(f, FX_STAT(misses, 2), FX_STAT(hits, 0), FX_STAT(invalidations_monitor, 1),
                    NULL);
    regcache_destroy(f->c);
    f->c = NULL;
    assert_int_equal(shmdt(q), 0);
}

static void reason_says(struct fx *f, const char *what)
{
    const char *why = regcache_validation_reason(f->c);
    if (!strstr(why, what))
        fail_msg("%s", why);
}

static void shared_mapping_keeps_the_explicit_contract(void **state)
{
    struct fx *f = *state;
    hx_create(f);
    int fd = memfd_create("regcache-test", MFD_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, LEN), 0);
    char *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(p != MAP_FAILED);
    p[0] = 1;
    fx_use(f, (uintptr_t)p, LEN);
    fx_assert_stats(f, FX_STAT(host_unmonitored, 1), NULL);
    reason_says(f, "shared mappings");
    /* What the application then owes: its invalidation. */
    assert_int_equal(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, LEN), 0);
    assert_int_equal(regcache_invalidate(f->c, p, LEN), REGCACHE_OK);
    p[0] = 2;
    fx_use(f, (uintptr_t)p, LEN);
    fx_assert_stats(f, FX_STAT(misses, 2), FX_STAT(hits, 0), NULL);
    hx_destroy_then_unmap(f, p, LEN);
    close(fd);
}

static void plugin_unloaded(void **state)
{
    struct fx *f = *state;
    hx_create(f);
    void *plugin = dlopen(HOST_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(plugin);
    char *(*buffer_of)(size_t *) =
        (char *(*)(size_t *))(uintptr_t)dlsym(plugin, "host_plugin_buffer");
    assert_non_null(buffer_of);
    size_t len;
    char *p = buffer_of(&len);
    p[0] = 1;
    fx_use(f, (uintptr_t)p, len);
    if (hx_by_hooks) {
        fx_assert_stats(f, FX_STAT(host_unmonitored, 1), NULL);
        reason_says(f, "dlopen");
        assert_int_equal(regcache_invalidate(f->c, p, len), REGCACHE_OK);
        assert_int_equal(dlclose(plugin), 0);
        return;
    }
    fx_assert_stats(f, FX_STAT(host_unmonitored, 0), NULL);
    assert_int_equal(dlclose(plugin), 0);
    char *q = mmap(p, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    assert_ptr_equal(q, p);
    fx_use(f, (uintptr_t)q, len);
    fx_assert_stats(f, FX_STAT(misses, 2), FX_STAT(hits, 0), FX_STAT(invalidations_monitor, 1),
                    NULL);
    hx_destroy_then_unmap(f, q, len);
}

int main(void)
{
    int status = hx_start();
    if (status)
        return status;
    if (hx_by_hooks)
        return FX_RUN(fx_setup, fx_teardown, shm_remap_over_a_cached_range,
                      shared_mapping_keeps_the_explicit_contract, plugin_unloaded);
    return FX_RUN(fx_setup, fx_teardown, shared_mapping_keeps_the_explicit_contract,
                  plugin_unloaded);
}
