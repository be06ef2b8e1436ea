/* The in-process interception against the libcuda test double, whose
 * memory functions start with the bytes measured at libcuda's (and
 * cuMemFreeHost with another patcher's jump).  No preload hook: creating a
 * cache with validation AUTO patches the double.  One program, run by ctest
 * in three settings (INTERCEPT_TEST_MODE, see CMakeLists.txt). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capture_stderr.h"
#include "fake_libcuda.h"
#include "hook_fixture.h"
#include "intercept.h"
#include "patch.h"
#include "prologue.h"
#include "quiet_calls.h"

/* push %rbp; mov %rsp,%rbp; push %r12; sub $8,%rsp; cmpl $imm32,x(%rip) */
static const uint8_t measured[] = { 0x55, 0x48, 0x89, 0xe5, 0x41, 0x54,
                                    0x48, 0x83, 0xec, 0x08, 0x81, 0x3d };

/* The exports the interception patches: fixture_exports less the two
 * cuGetProcAddress. */
static int patched(const struct fixture_export *e)
{
    return e->what != FIX_GET_PROC && e->what != FIX_GET_PROC_V2;
}

/* Room for every fixture_exports and fixture_procs row. */
#define ROWS 64

/* Each export's first bytes before any cache existed. */
static uint8_t original[ROWS][RC_PROLOGUE_MAX];

/* Pointers fetched before any cache existed, through dlsym and through
 * cuGetProcAddress, as a program that initialised CUDA first holds them. */
static void *early_dlsym[ROWS];
static void *early_gpa[ROWS];

static void snapshot(uint8_t (*bytes)[RC_PROLOGUE_MAX])
{
    for (size_t i = 0; i < fixture_n_exports; i++)
        memcpy(bytes[i], fixture_own(fixture_exports[i].name), RC_PROLOGUE_MAX);
}

static void assert_unpatched(void)
{
    uint8_t now[ROWS][RC_PROLOGUE_MAX];
    snapshot(now);
    for (size_t i = 0; i < fixture_n_exports; i++)
        assert_memory_equal(now[i], original[i], RC_PROLOGUE_MAX);
}

/* Export i's entry as decoded before it was patched. */
static struct rc_prologue prologue_of(size_t i)
{
    struct rc_prologue p;
    assert_int_equal(rc_prologue_decode(original[i], RC_PROLOGUE_MAX,
                                        (uintptr_t)fixture_own(fixture_exports[i].name), &p),
                     0);
    return p;
}

/* Where export i was patched. */
static const uint8_t *site_of(size_t i)
{
    return (const uint8_t *)fixture_own(fixture_exports[i].name) + prologue_of(i).site;
}

static regcache_t *create(void)
{
    struct regcache_params p;
    fixture_params(&p);
    regcache_t *c = NULL;
    assert_int_equal(regcache_create(&p, &c), REGCACHE_OK);
    return c;
}

/* Where the jmp rel32 at a site goes. */
static const uint8_t *jump_target(const void *site)
{
    const uint8_t *at = site;
    assert_int_equal(at[0], 0xe9);
    int32_t rel;
    memcpy(&rel, at + 1, sizeof rel);
    return at + 5 + rel;
}

/* The double's entries as the interception will find them; taken, with the
 * early pointers, before the first cache. */
static void entries_are_as_measured(void **state)
{
    (void)state;
    assert_true(fixture_n_exports <= ROWS && fixture_n_procs <= ROWS);
    snapshot(original);
    for (size_t i = 0; i < fixture_n_exports; i++) {
        const struct fixture_export *e = &fixture_exports[i];
        early_dlsym[i] = dlsym(fixture_driver(), e->name);
        assert_ptr_equal(early_dlsym[i], fixture_own(e->name));
        if (!patched(e))
            continue;
        assert_int_equal((uintptr_t)early_dlsym[i] % 16, 0);
        if (strcmp(e->name, "cuMemFreeHost") == 0)
            assert_int_equal(original[i][0], 0xe9);
        else
            assert_memory_equal(original[i], measured, sizeof measured);
    }
    CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
        (CUresult(*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *))
            dlsym(fixture_driver(), "cuGetProcAddress_v2");
    for (size_t i = 0; i < fixture_n_procs; i++) {
        const struct fixture_variant *v = &fixture_procs[i];
        assert_int_equal(gpa(v->proc, &early_gpa[i], v->version, v->flags, NULL), CUDA_SUCCESS);
    }
}

static pthread_barrier_t start;

struct made {
    int status;
    regcache_t *cache;
};

static void *create_at_once(void *arg)
{
    struct made *m = arg;
    struct regcache_params p;
    fixture_params(&p);
    pthread_barrier_wait(&start);
    m->status = regcache_create(&p, &m->cache);
    return NULL;
}

/* Eight caches created at once patch each entry once: with the jump to a
 * thunk to this program's wrapper, which a second patch by the same code
 * would replace by a jump to a thunk to a trampoline back into the first.
 * The jump goes over the cmp at +10, the first instruction of the measured
 * entries as long as the jump; the bytes before and after it stay. */
static void concurrent_creation_installs_once(void **state)
{
    (void)state;
    enum { THREADS = 8 };
    struct made made[THREADS];
    pthread_t t[THREADS];
    pthread_barrier_init(&start, NULL, THREADS);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, create_at_once, &made[i]), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(made[i].status, REGCACHE_OK);
        assert_int_equal(regcache_validation_mode(made[i].cache), REGCACHE_VALIDATE_HOOKS);
        regcache_destroy(made[i].cache);
    }
    Dl_info self, wrapper;
    assert_true(dladdr((void *)concurrent_creation_installs_once, &self));
    static const uint8_t jmp_through[2] = { 0xff, 0x25 };
    for (size_t i = 0; i < fixture_n_exports; i++) {
        if (!patched(&fixture_exports[i]))
            continue;
        struct rc_prologue p = prologue_of(i);
        if (strcmp(fixture_exports[i].name, "cuMemFreeHost") != 0)
            assert_int_equal(p.site, 10);
        /* The thunk jumps through a word that holds the wrapper. */
        const uint8_t *thunk = jump_target(site_of(i));
        assert_memory_equal(thunk + p.undo_len, jmp_through, sizeof jmp_through);
        int32_t disp;
        memcpy(&disp, thunk + p.undo_len + sizeof jmp_through, sizeof disp);
        uint64_t to;
        memcpy(&to, thunk + p.undo_len + 6 + disp, sizeof to);
        assert_true(dladdr((void *)(uintptr_t)to, &wrapper));
        assert_ptr_equal(wrapper.dli_fbase, self.dli_fbase);
        const uint8_t *entry = fixture_own(fixture_exports[i].name);
        assert_memory_equal(entry, original[i], p.site);
        assert_memory_equal(entry + p.site + 5, original[i] + p.site + 5, 3);
    }
}

/* Every pointer - fetched before the first cache, fetched now, or a direct
 * call - reaches a wrapper that lets the caches go first. */
static void every_path_is_reported(void **state)
{
    (void)state;
    for (size_t i = 0; i < fixture_n_exports; i++) {
        const struct fixture_export *e = &fixture_exports[i];
        print_message("  early dlsym, direct %s\n", e->name);
        fixture_check(e->what, early_dlsym[i], fixture_runs(e));
        fixture_check(e->what, e->direct, fixture_runs(e));
    }
    for (size_t i = 0; i < fixture_n_procs; i++) {
        const struct fixture_variant *v = &fixture_procs[i];
        print_message("  early %s version %d flags %u\n", v->proc, v->version, v->flags);
        fixture_check(v->what, early_gpa[i], v->runs);
    }
    fixture_check_procs(dlsym(fixture_driver(), "cuGetProcAddress_v2"), 1);
    fixture_check_procs(dlsym(fixture_driver(), "cuGetProcAddress"), 0);
}

/* cuMemFreeHost came with another patcher's jump: the chain goes on
 * through it, once per call. */
static void another_patchers_hook_still_runs(void **state)
{
    (void)state;
    regcache_t *c = fixture_cache();
    uintptr_t p = fixture_cached_alloc(c, 1);
    int before = fakecuda_other_patcher_calls();
    CUresult (*free_host)(void *) = (CUresult(*)(void *))fixture_own("cuMemFreeHost");
    assert_int_equal(free_host((void *)p), CUDA_SUCCESS);
    assert_int_equal(fakecuda_other_patcher_calls(), before + 1);
    fixture_assert_dereg_before(p, "cuMemFreeHost", p);
    regcache_destroy(c);
}

/* The permissions /proc/self/maps lists for the page holding addr. */
static void permissions_of(const void *addr, char perms[5])
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[512];
    perms[0] = '\0';
    unsigned long long from, to;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "%llx-%llx %4s", &from, &to, perms) == 3 && (uintptr_t)addr >= from &&
            (uintptr_t)addr < to)
            break;
        else
            perms[0] = '\0';
    fclose(f);
}

/* The double's code is read-only again, and the page of thunks and
 * trampolines executable and read-only. */
static void code_protections_are_restored(void **state)
{
    (void)state;
    for (size_t i = 0; i < fixture_n_exports; i++) {
        if (!patched(&fixture_exports[i]))
            continue;
        const void *entry = fixture_own(fixture_exports[i].name);
        char perms[5];
        permissions_of(entry, perms);
        assert_string_equal(perms, "r-xp");
        permissions_of(jump_target(site_of(i)), perms);
        assert_string_equal(perms, "r-xp");
    }
}

static void reason_error_and_stats(void **state)
{
    (void)state;
    setenv("REGCACHE_STATS", "1", 1);
    regcache_t *c = create();
    unsetenv("REGCACHE_STATS");
    assert_string_equal(regcache_last_error(), "");
    assert_non_null(strstr(regcache_validation_reason(c),
                           "in-process interception: 22 libcuda functions patched"));
    char buf[1024];
    destroy_capturing_stderr(c, buf, sizeof buf);
    assert_non_null(strstr(buf, "validation HOOKS: in-process interception: "));
}

/* The library's own calls (a primary context it retained for a dmabuf
 * export) reach the driver without dropping the cache. */
static void quiet_calls_are_not_reported(void **state)
{
    (void)state;
    regcache_t *c = fixture_cache();
    fixture_cached_alloc(c, 0);
    CUresult (*release)(CUdevice) =
        (CUresult(*)(CUdevice))fixture_own("cuDevicePrimaryCtxRelease_v2");
    rc_cuda_quiet(true);
    assert_int_equal(release(0), CUDA_SUCCESS);
    rc_cuda_quiet(false);
    assert_int_equal(fixture_notified(c), 0);
    assert_int_equal(release(0), CUDA_SUCCESS);
    assert_int_equal(fixture_notified(c), 1);
    regcache_destroy(c);
}

/* Another patcher puts cuMemUnmap's own bytes back. */
static void restore_unmap(void)
{
    for (size_t i = 0; i < fixture_n_exports; i++)
        if (strcmp(fixture_exports[i].name, "cuMemUnmap") == 0) {
            size_t site = prologue_of(i).site;
            uint8_t jump[RC_PATCH_LEN];
            memcpy(jump, site_of(i), sizeof jump);
            char why[160];
            assert_int_equal(
                rc_patch_site((uintptr_t)site_of(i), jump, original[i] + site, why, sizeof why), 0);
        }
}

/* The cache's reason: why, then what it does with host memory. */
static void assert_reason(const regcache_t *c, const char *why)
{
    const char *reason = regcache_validation_reason(c);
    assert_int_equal(strncmp(reason, why, strlen(why)), 0);
    assert_int_equal(strncmp(reason + strlen(why), "; host memory: ", 15), 0);
}

/* A patch lost after the cache trusted it: the next miss sees it and turns
 * the cache to TAG_CHECK, whose hits then catch the memory whose free went
 * unseen. */
static void miss_sees_a_lost_patch(void **state)
{
    (void)state;
    setenv("REGCACHE_STATS", "1", 1);
    regcache_t *c = fixture_cache();
    unsetenv("REGCACHE_STATS");
    uintptr_t stale = fixture_cached_alloc(c, 0);
    assert_int_equal(regcache_validation_mode(c), REGCACHE_VALIDATE_HOOKS);
    restore_unmap();
    /* Hits are not slowed down to look: still HOOKS until a miss. */
    fixture_cache_range(c, stale, FIXTURE_SIZE);
    assert_int_equal(regcache_validation_mode(c), REGCACHE_VALIDATE_HOOKS);
    fixture_cached_alloc(c, 0);
    assert_int_equal(regcache_validation_mode(c), REGCACHE_VALIDATE_TAG_CHECK);
    assert_reason(c, "in-process interception lost: another patcher rewrote cuMemUnmap's "
                     "entry after the cache was created");
    /* Freed and allocated again unseen: the same address, a new buffer id. */
    fakecuda_free_unhooked(stale);
    assert_int_equal(fakecuda_alloc_unhooked(FIXTURE_SIZE, 0), stale);
    struct regcache_stats before, after;
    assert_int_equal(regcache_get_stats(c, &before), REGCACHE_OK);
    fixture_cache_range(c, stale, FIXTURE_SIZE);
    assert_int_equal(regcache_get_stats(c, &after), REGCACHE_OK);
    assert_int_equal(after.invalidations_tag, before.invalidations_tag + 1);
    char buf[1024];
    destroy_capturing_stderr(c, buf, sizeof buf);
    assert_non_null(strstr(buf, "validation TAG_CHECK: in-process interception lost: "));
}

/* A cache created while the thread captures a stream in GLOBAL mode: the
 * self-test's probes (cuMemFree, cuMemAlloc... with arguments the driver
 * rejects), which a capture refuses, run relaxed and leave it intact. */
static void creation_leaves_a_capture_intact(void **state)
{
    (void)state;
    fakecuda_reset();
    int capture = fakecuda_capture_begin(CU_STREAM_CAPTURE_MODE_GLOBAL);
    regcache_t *c = create();
    assert_int_equal(regcache_validation_mode(c), REGCACHE_VALIDATE_HOOKS);
    assert_int_equal(fakecuda_thread_mode(), CU_STREAM_CAPTURE_MODE_GLOBAL);
    assert_int_equal(fakecuda_capture_refusals(), 0);
    assert_int_equal(fakecuda_capture_end(capture), CUDA_SUCCESS);
    regcache_destroy(c);
}

/* A stream-ordered free captured into a graph: the wrapper's range query
 * runs relaxed, so the capture stays intact and the cache lets go of that
 * allocation alone, before the driver frees it. */
static void captured_free_leaves_the_capture_intact(void **state)
{
    (void)state;
    regcache_t *c = fixture_cache();
    uintptr_t kept = fixture_cached_alloc(c, 0);
    uintptr_t freed = fixture_cached_alloc(c, 0);
    int capture = fakecuda_capture_begin(CU_STREAM_CAPTURE_MODE_GLOBAL);
    CUresult (*free_async)(CUdeviceptr, CUstream) =
        (CUresult(*)(CUdeviceptr, CUstream))dlsym(fixture_driver(), "cuMemFreeAsync");
    assert_int_equal(free_async(freed, NULL), CUDA_SUCCESS);
    assert_int_equal(fakecuda_thread_mode(), CU_STREAM_CAPTURE_MODE_GLOBAL);
    assert_int_equal(fakecuda_capture_refusals(), 0);
    assert_int_equal(fakecuda_capture_end(capture), CUDA_SUCCESS);
    fixture_assert_dereg_before(freed, "cuMemFreeAsync", freed);
    assert_int_equal(fixture_dereg_at(kept), -1);
    assert_int_equal(fixture_notified(c), 1);
    regcache_destroy(c);
}

/* The self-test of the next cache finds the path unreported and falls
 * back to TAG_CHECK. */
static void self_test_sees_a_lost_patch(void **state)
{
    (void)state;
    restore_unmap();
    regcache_t *c = create();
    assert_int_equal(regcache_validation_mode(c), REGCACHE_VALIDATE_TAG_CHECK);
    const char *why = "in-process interception unavailable: cuMemUnmap called through "
                      "dlsym does not reach its wrapper";
    assert_reason(c, why);
    assert_non_null(strstr(regcache_last_error(), why));
    regcache_destroy(c);
}

/* A cache that asks for HOOKS where nothing can see frees is refused, with
 * why; one whose application notifies by itself (NOTIFY) patches nothing. */
static void hooks_refused_and_notify_patches_nothing(const char *why)
{
    struct regcache_params p;
    fixture_params(&p);
    p.validation = REGCACHE_VALIDATE_HOOKS;
    regcache_t *c = (regcache_t *)1;
    assert_int_equal(regcache_create(&p, &c), REGCACHE_ERR_UNSUPPORTED);
    assert_null(c);
    assert_non_null(
        strstr(regcache_last_error(), "validation HOOKS: no hook sees every CUDA free"));
    assert_non_null(strstr(regcache_last_error(), why));
    assert_non_null(strstr(regcache_last_error(), "REGCACHE_VALIDATE_NOTIFY"));
    p.validation = REGCACHE_VALIDATE_NOTIFY;
    assert_int_equal(regcache_create(&p, &c), REGCACHE_OK);
    assert_int_equal(regcache_validation_mode(c), REGCACHE_VALIDATE_NOTIFY);
    regcache_destroy(c);
    assert_unpatched();
}

/* cuMemUnmap's entry is refused: nothing is patched, and every cache says
 * why, with the bytes it met. */
static void unrecognised_entry_patches_nothing(void **state)
{
    (void)state;
    snapshot(original);
    const char *why = "in-process interception unavailable: cuMemUnmap prologue not "
                      "recognised (bytes 8b 05 ";
    setenv("REGCACHE_STATS", "1", 1);
    for (int round = 0; round < 2; round++) {
        regcache_t *c = create();
        assert_int_equal(regcache_validation_mode(c), REGCACHE_VALIDATE_TAG_CHECK);
        assert_non_null(strstr(regcache_last_error(), why));
        assert_non_null(strstr(regcache_validation_reason(c), why));
        char buf[1024];
        destroy_capturing_stderr(c, buf, sizeof buf);
        assert_non_null(strstr(buf, "validation TAG_CHECK: in-process interception "
                                    "unavailable: cuMemUnmap prologue not recognised"));
    }
    unsetenv("REGCACHE_STATS");
    assert_unpatched();
    hooks_refused_and_notify_patches_nothing(why);
}

/* REGCACHE_HOOKS=off: nothing is patched until a cache is created without
 * it. */
static void off_patches_nothing(void **state)
{
    (void)state;
    snapshot(original);
    regcache_t *c = create();
    assert_int_equal(regcache_validation_mode(c), REGCACHE_VALIDATE_TAG_CHECK);
    assert_non_null(strstr(regcache_validation_reason(c), "REGCACHE_HOOKS=off"));
    assert_string_equal(regcache_last_error(), "");
    regcache_destroy(c);
    assert_unpatched();
    hooks_refused_and_notify_patches_nothing("REGCACHE_HOOKS=off");
    unsetenv("REGCACHE_HOOKS");
    c = create();
    assert_int_equal(regcache_validation_mode(c), REGCACHE_VALIDATE_HOOKS);
    regcache_destroy(c);
}

/* validation HOOKS asked for by the first cache of a process without the
 * preload hook: creating it installs the interception, so a VMM range
 * unmapped and mapped again over new memory is registered anew. */
static void explicit_hooks_installs_the_interception(void **state)
{
    (void)state;
    snapshot(original);
    fakecuda_reset();
    struct regcache_params p;
    fixture_params(&p);
    p.validation = REGCACHE_VALIDATE_HOOKS;
    regcache_t *c = NULL;
    assert_int_equal(regcache_create(&p, &c), REGCACHE_OK);
    void *lib = fixture_driver();
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long) =
        (CUresult(*)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))dlsym(
            lib, "cuMemAddressReserve");
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) =
        (CUresult(*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                     unsigned long long))dlsym(lib, "cuMemMap");
    CUresult (*unmap)(CUdeviceptr, size_t) =
        (CUresult(*)(CUdeviceptr, size_t))dlsym(lib, "cuMemUnmap");
    CUdeviceptr va;
    assert_int_equal(reserve(&va, FIXTURE_SIZE, 0, 0, 0), CUDA_SUCCESS);
    assert_int_equal(map(va, FIXTURE_SIZE, 0, 1, 0), CUDA_SUCCESS);
    fixture_cache_range(c, va, FIXTURE_SIZE);
    uintptr_t base;
    size_t size;
    uint64_t first, second;
    int host;
    assert_int_equal(fakecuda_describe(va, &base, &size, &first, &host), 0);
    assert_int_equal(unmap(va, FIXTURE_SIZE), CUDA_SUCCESS);
    assert_int_equal(map(va, FIXTURE_SIZE, 0, 2, 0), CUDA_SUCCESS);
    assert_int_equal(fakecuda_describe(va, &base, &size, &second, &host), 0);
    assert_int_not_equal(first, second);
    fixture_cache_range(c, va, FIXTURE_SIZE);
    struct regcache_stats s;
    assert_int_equal(regcache_get_stats(c, &s), REGCACHE_OK);
    print_message("  buffer id %llu -> %llu: %llu registrations, %llu hits\n",
                  (unsigned long long)first, (unsigned long long)second,
                  (unsigned long long)s.registrations, (unsigned long long)s.hits);
    assert_int_equal(s.registrations, 2);
    assert_int_equal(s.hits, 0);
    fixture_assert_dereg_before(va, "cuMemUnmap", va);
    assert_int_equal(regcache_validation_mode(c), REGCACHE_VALIDATE_HOOKS);
    assert_non_null(strstr(regcache_validation_reason(c),
                           "in-process interception: 22 libcuda functions patched"));
    regcache_destroy(c);
}

int main(void)
{
    const char *mode = getenv("INTERCEPT_TEST_MODE");
    if (mode && strcmp(mode, "hooks") == 0) {
        const struct CMUnitTest tests[] = { cmocka_unit_test(
            explicit_hooks_installs_the_interception) };
        return cmocka_run_group_tests_name("hooks", tests, NULL, NULL);
    }
    if (mode && strcmp(mode, "unrecognised") == 0) {
        const struct CMUnitTest tests[] = { cmocka_unit_test(unrecognised_entry_patches_nothing) };
        return cmocka_run_group_tests_name("unrecognised", tests, NULL, NULL);
    }
    if (mode && strcmp(mode, "off") == 0) {
        const struct CMUnitTest tests[] = { cmocka_unit_test(off_patches_nothing) };
        return cmocka_run_group_tests_name("off", tests, NULL, NULL);
    }
    /* In this order: the first cache is created by the second test. */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(entries_are_as_measured),
        cmocka_unit_test(concurrent_creation_installs_once),
        cmocka_unit_test(every_path_is_reported),
        cmocka_unit_test(another_patchers_hook_still_runs),
        cmocka_unit_test(code_protections_are_restored),
        cmocka_unit_test(reason_error_and_stats),
        cmocka_unit_test(quiet_calls_are_not_reported),
        cmocka_unit_test(creation_leaves_a_capture_intact),
        cmocka_unit_test(captured_free_leaves_the_capture_intact),
        cmocka_unit_test(miss_sees_a_lost_patch),
        cmocka_unit_test(self_test_sees_a_lost_patch),
    };
    return cmocka_run_group_tests_name("patched", tests, NULL, NULL);
}
