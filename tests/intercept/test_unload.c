/* libregcache.so dlopen()ed, used and dlclose()d, as Python frameworks and
 * plugin-style middleware load it: what it left behind in the process (the
 * jumps patched into libcuda, its thread-key destructor) must still lead to
 * mapped code afterwards.  The program does not link the library; each case
 * runs in a child, so that a crash fails the case instead of ending the
 * test. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include "crash_child.h"
#include "loaded_regcache.h"
#include "test_sync.h"

static struct loaded_regcache api;

static void load(void)
{
    if (loaded_regcache_open(REGCACHE_LIBRARY, &api) != 0)
        _exit(10);
}

/* A backend over host memory of this program, which lives on after the
 * library is gone. */
static int reg(void *arg, void *addr, size_t len, int device, int rail, void **handle)
{
    (void)arg, (void)len, (void)device, (void)rail;
    *handle = addr;
    return 0;
}

static void dereg(void *arg, void *handle)
{
    (void)arg, (void)handle;
}

static char memory[1 << 16] __attribute__((aligned(1 << 16)));

static int query(void *arg, const void *addr, size_t len, struct regcache_mem_info *info)
{
    (void)arg, (void)addr, (void)len;
    info->base = (uintptr_t)memory;
    info->size = sizeof memory;
    info->device = REGCACHE_DEVICE_HOST;
    info->type = REGCACHE_MEM_HOST;
    return REGCACHE_OK;
}

static const struct regcache_backend backend = { .reg = reg, .dereg = dereg, .query = query };

static regcache_t *create(enum regcache_validation validation)
{
    struct regcache_params p;
    api.params_init(&p);
    p.backend = &backend;
    p.host_memory = 1;
    p.validation = validation;
    regcache_t *c = NULL;
    if (api.create(&p, &c) != REGCACHE_OK)
        _exit(12);
    return c;
}

/* The first cache patches libcuda (the test double) with jumps into the
 * library; its last destroy and the dlclose leave them in place, and the
 * next free runs through them. */
static void free_after_patch_and_unload(void *unused)
{
    (void)unused;
    void *driver = dlopen("libcuda.so.1", RTLD_NOW);
    if (!driver)
        _exit(13);
    CUresult (*mem_free)(CUdeviceptr) = (CUresult(*)(CUdeviceptr))dlsym(driver, "cuMemFree_v2");
    load();
    regcache_t *c = create(REGCACHE_VALIDATE_AUTO);
    if (api.validation_mode(c) != REGCACHE_VALIDATE_HOOKS)
        _exit(14);
    api.destroy(c);
    dlclose(api.handle);
    /* The double refuses a pointer it never handed out. */
    if (mem_free((CUdeviceptr)0x1000) != CUDA_ERROR_INVALID_VALUE)
        _exit(15);
}

static void patched_driver_survives_dlclose(void **state)
{
    (void)state;
    assert_true(crash_child_run(free_after_patch_and_unload, NULL, HANG_SECONDS * 6));
}

static struct gate used, go;

static void use_then_wait(void *arg)
{
    regcache_t *c = arg;
    regcache_entry_t *e = NULL;
    if (api.get(c, memory, 4096, &e) != REGCACHE_OK)
        _exit(16);
    api.put(c, e);
    gate_open(&used);
    gate_pass(&go);
}

/* A thread that used a cache exits after the dlclose: its record's
 * destructor, registered with the thread key, must still be mapped. */
static void thread_exit_after_unload(void *unused)
{
    (void)unused;
    load();
    regcache_t *c = create(REGCACHE_VALIDATE_TAG_CHECK);
    gate_init(&used);
    gate_init(&go);
    struct dthread t;
    dthread_start(&t, use_then_wait, c);
    gate_pass(&used);
    api.destroy(c);
    dlclose(api.handle);
    gate_open(&go);
    if (!dthread_join(&t, HANG_SECONDS))
        _exit(17);
}

static void thread_exit_survives_dlclose(void **state)
{
    (void)state;
    assert_true(crash_child_run(thread_exit_after_unload, NULL, HANG_SECONDS * 6));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(patched_driver_survives_dlclose),
        cmocka_unit_test(thread_exit_survives_dlclose),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
