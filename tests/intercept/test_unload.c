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
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "regcache.h"
#include "test_sync.h"

/* The library's functions, as the loader of a plugin reaches them. */
static struct api {
    int (*params_init)(struct regcache_params *);
    int (*create)(const struct regcache_params *, regcache_t **);
    void (*destroy)(regcache_t *);
    int (*get)(regcache_t *, const void *, size_t, regcache_entry_t **);
    void (*put)(regcache_t *, regcache_entry_t *);
    int (*validation_mode)(const regcache_t *);
} api;

static void *load(void)
{
    void *lib = dlopen(REGCACHE_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        _exit(10);
    api.params_init = (int (*)(struct regcache_params *))dlsym(lib, "regcache_params_init");
    api.create = (int (*)(const struct regcache_params *, regcache_t **))dlsym(lib, "regcache_create");
    api.destroy = (void (*)(regcache_t *))dlsym(lib, "regcache_destroy");
    api.get = (int (*)(regcache_t *, const void *, size_t, regcache_entry_t **))dlsym(lib, "regcache_get");
    api.put = (void (*)(regcache_t *, regcache_entry_t *))dlsym(lib, "regcache_put");
    api.validation_mode = (int (*)(const regcache_t *))dlsym(lib, "regcache_validation_mode");
    if (!api.params_init || !api.create || !api.destroy || !api.get || !api.put ||
        !api.validation_mode)
        _exit(11);
    return lib;
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

static const struct regcache_backend backend = { reg, dereg, NULL, query };

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

/* Run body in a child: it must exit 0, neither fail nor crash. */
static void in_child(void (*body)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* A crash ends the child (cmocka's handlers would carry on with
         * the next test in it). */
        int crashes[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGABRT };
        for (size_t i = 0; i < sizeof crashes / sizeof crashes[0]; i++)
            signal(crashes[i], SIG_DFL);
        alarm(60);
        body();
        _exit(0);
    }
    int status;
    assert_true(child_wait(pid, 120, &status));
    if (WIFSIGNALED(status))
        fail_msg("the child died of signal %d", WTERMSIG(status));
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* The first cache patches libcuda (the test double) with jumps into the
 * library; its last destroy and the dlclose leave them in place, and the
 * next free runs through them. */
static void free_after_patch_and_unload(void)
{
    void *driver = dlopen("libcuda.so.1", RTLD_NOW);
    if (!driver)
        _exit(13);
    CUresult (*mem_free)(CUdeviceptr) = (CUresult(*)(CUdeviceptr))dlsym(driver, "cuMemFree_v2");
    void *lib = load();
    regcache_t *c = create(REGCACHE_VALIDATE_AUTO);
    if (api.validation_mode(c) != REGCACHE_VALIDATE_HOOKS)
        _exit(14);
    api.destroy(c);
    dlclose(lib);
    /* The double refuses a pointer it never handed out. */
    if (mem_free((CUdeviceptr)0x1000) != CUDA_ERROR_INVALID_VALUE)
        _exit(15);
}

static void patched_driver_survives_dlclose(void **state)
{
    (void)state;
    in_child(free_after_patch_and_unload);
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
static void thread_exit_after_unload(void)
{
    void *lib = load();
    regcache_t *c = create(REGCACHE_VALIDATE_TAG_CHECK);
    gate_init(&used);
    gate_init(&go);
    struct dthread t;
    dthread_start(&t, use_then_wait, c);
    gate_pass(&used);
    api.destroy(c);
    dlclose(lib);
    gate_open(&go);
    if (!dthread_join(&t, HANG_SECONDS))
        _exit(17);
}

static void thread_exit_survives_dlclose(void **state)
{
    (void)state;
    in_child(thread_exit_after_unload);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(patched_driver_survives_dlclose),
        cmocka_unit_test(thread_exit_survives_dlclose),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
