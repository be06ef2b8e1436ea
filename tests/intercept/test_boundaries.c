/* The patch is atomic for every thread position: a thread stopped at any
 * instruction boundary of a patched entry while the patch is written runs
 * on afterwards into the driver, through the wrapper, without crashing.
 *
 * A thread sets the trap flag and calls the libcuda double's cuMemFree_v2
 * on cached memory; a SIGTRAP handler single-steps it and parks it at the
 * boundary under test; meanwhile the first cache is created (the patch is
 * written) and caches that memory; then the thread goes on without the flag.
 * Each boundary in its own child, with an unpatched double, so that a crash
 * fails the case instead of ending the test.  Run over two builds of the
 * double (INTERCEPT_TEST_MODE, see CMakeLists.txt): the measured entry,
 * whose patch site (the cmp at +10) lies in one 8-byte word, and one with
 * the cmp at +6, whose patch crosses an 8-byte boundary and is written as
 * one 16-byte store. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <cuda.h>
#include <dlfcn.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

#include "crash_child.h"
#include "fake_libcuda.h"
#include "hook_fixture.h"
#include "test_sync.h"

#define TRAP_FLAG 0x100
/* Instructions stepped before the thread must have reached its boundary. */
#define STEP_LIMIT 1000000

/* The double's entry: push %rbp (+0); mov %rsp,%rbp (+1); push %r12 (+4);
 * then sub $8,%rsp (+6) and the cmp (+10), or the cmp (+6) and the sub
 * (+16).  Every boundary in its first 16 bytes, and the cmp's start. */
static const size_t measured_boundaries[] = { 0, 1, 4, 6, 10 };
static const size_t across_boundaries[] = { 0, 1, 4, 6 };
static size_t cmp_at = 10;

typedef CUresult (*free_fn)(CUdeviceptr);
static free_fn mem_free;

static uintptr_t park_at;
static atomic_bool parked, released, overran;
static long steps;

/* The single-stepper, on the stepping thread only. */
static void on_trap(int sig, siginfo_t *info, void *context)
{
    (void)sig, (void)info;
    ucontext_t *uc = context;
    if ((uintptr_t)uc->uc_mcontext.gregs[REG_RIP] == park_at) {
        atomic_store(&parked, true);
        while (!atomic_load(&released))
            sched_yield();
        uc->uc_mcontext.gregs[REG_EFL] &= ~(greg_t)TRAP_FLAG;
    } else if (++steps > STEP_LIMIT) {
        uc->uc_mcontext.gregs[REG_EFL] &= ~(greg_t)TRAP_FLAG;
        atomic_store(&overran, true);
    }
}

static void install_stepper(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_trap;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTRAP, &sa, NULL) != 0)
        _exit(20);
}

struct call {
    CUdeviceptr ptr;
    CUresult result;
};

static void call_stepping(void *arg)
{
    struct call *c = arg;
    /* The trap flag: a SIGTRAP after every instruction from here on. */
    __asm__ volatile("pushfq\n\torq $0x100,(%%rsp)\n\tpopfq" ::: "memory", "cc");
    c->result = mem_free(c->ptr);
}

/* In a child: exits 0 when every check held, else with the step that
 * failed (a crash is a signal). */
static void at_boundary(void *arg)
{
    size_t b = *(const size_t *)arg;
    install_stepper();
    park_at = (uintptr_t)mem_free + b;
    fakecuda_reset();
    struct call call = { fakecuda_alloc_unhooked(FIXTURE_SIZE, 0), CUDA_ERROR_UNKNOWN };
    struct dthread t;
    dthread_start(&t, call_stepping, &call);
    for (int i = 0; i < 100000 && !atomic_load(&parked) && !atomic_load(&overran); i++)
        usleep(100);
    if (!atomic_load(&parked))
        _exit(21);
    struct regcache_params p;
    fixture_params(&p);
    regcache_t *c = NULL;
    if (regcache_create(&p, &c) != REGCACHE_OK ||
        regcache_validation_mode(c) != REGCACHE_VALIDATE_HOOKS)
        _exit(22);
    fixture_cache_range(c, call.ptr, FIXTURE_SIZE);
    atomic_store(&released, true);
    if (!dthread_join(&t, HANG_SECONDS))
        _exit(23);
    if (call.result != CUDA_SUCCESS)
        _exit(24);
    /* Through the wrapper: the cache let go before the driver freed. */
    fixture_assert_dereg_before(call.ptr, "cuMemFree_v2", call.ptr);
    regcache_destroy(c);
}

/* Every boundary is tried, so that a failure lists all that fail. */
static void boundaries(const size_t *at, size_t n)
{
    size_t failed = 0;
    for (size_t i = 0; i < n; i++) {
        print_message("  thread at +%zu while the patch is written\n", at[i]);
        failed += !crash_child_run(at_boundary, (void *)&at[i], HANG_SECONDS * 12);
    }
    assert_int_equal(failed, 0);
}

static void thread_at_every_boundary(void **state)
{
    (void)state;
    if (cmp_at == 10)
        boundaries(measured_boundaries, sizeof measured_boundaries / sizeof *measured_boundaries);
    else
        boundaries(across_boundaries, sizeof across_boundaries / sizeof *across_boundaries);
}

int main(void)
{
    const char *mode = getenv("INTERCEPT_TEST_MODE");
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    mem_free = driver ? (free_fn)dlsym(driver, "cuMemFree_v2") : NULL;
    if (!mem_free) {
        fprintf(stderr, "the libcuda double is not loaded\n");
        return 1;
    }
    if (mode && strcmp(mode, "across") == 0) {
        cmp_at = 6;
        const struct CMUnitTest tests[] = { cmocka_unit_test(thread_at_every_boundary) };
        return cmocka_run_group_tests_name("across", tests, NULL, NULL);
    }
    const struct CMUnitTest tests[] = { cmocka_unit_test(thread_at_every_boundary) };
    return cmocka_run_group_tests_name("measured", tests, NULL, NULL);
}
