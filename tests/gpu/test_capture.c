/*
 * Gets while the application captures a stream into a CUDA graph, on the
 * real driver: for each validation mode (TAG_CHECK, AUTO, HOOKS) and each
 * capture (GLOBAL, THREAD_LOCAL and RELAXED mode with the gets on the
 * capturing thread, GLOBAL with the gets on another thread that has no
 * context), a hit, a miss (the first registration of an allocation, which
 * sets SYNC_MEMOPS) and a dmabuf export during the capture; then the
 * capture ends, its graph (a memset captured before the gets) is
 * instantiated and launched, and the memset is read back.  Every step must
 * succeed, and the getting thread's capture mode must be what it was.  Also
 * a cache created, used and destroyed during a capture, and a capture on a
 * stream that synchronises with the legacy stream.  Each step prints what it
 * returned.
 *
 * Its own program (gpu_capture): AUTO and HOOKS caches patch libcuda
 * in-process, which the other GPU tests must not meet.  The driver is
 * dlopened, so the program also runs, and skips, where there is none.
 */
#include "gpu_cache.h"

#define PATTERN 0x5eedf00du

static const char *mode_name(int validation)
{
    static const char *const names[] = { "AUTO", "TAG_CHECK", "HOOKS", "NOTIFY" };
    return validation >= 0 && validation <= REGCACHE_VALIDATE_NOTIFY ? names[validation] : "?";
}

static const char *capture_name(CUstreamCaptureMode mode)
{
    return mode == CU_STREAM_CAPTURE_MODE_GLOBAL         ? "GLOBAL"
           : mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ? "THREAD_LOCAL"
           : mode == CU_STREAM_CAPTURE_MODE_RELAXED      ? "RELAXED"
                                                         : "?";
}

/* Print a driver call's result; count it when it failed. */
static int failed_steps;

static CUresult said(const char *what, CUresult r)
{
    const char *name = "?";
    cu.cuGetErrorName(r, &name);
    printf("    %-44s %s (%d)\n", what, name, (int)r);
    if (r != CUDA_SUCCESS)
        failed_steps++;
    return r;
}

static int said_rc(const char *what, int rc)
{
    printf("    %-44s %s%s%s%s\n", what, regcache_strerror(rc), rc ? " (" : "",
           rc ? regcache_last_error() : "", rc ? ")" : "");
    if (rc != REGCACHE_OK)
        failed_steps++;
    return rc;
}

/* The calling thread's capture interaction mode, left as it is. */
static CUstreamCaptureMode thread_mode(void)
{
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    cu.cuThreadExchangeStreamCaptureMode(&mode);
    CUstreamCaptureMode was = mode;
    cu.cuThreadExchangeStreamCaptureMode(&mode);
    return was;
}

/* What the getting thread does during the capture. */
struct gets {
    regcache_t *cache;
    CUdeviceptr hit, miss;
    struct handle *miss_handle;
    CUstreamCaptureMode before, after;
};

static void *get_during_capture(void *arg)
{
    struct gets *g = arg;
    regcache_entry_t *e;
    g->before = thread_mode();
    requested = g->hit;
    if (said_rc("regcache_get (hit)", regcache_get(g->cache, (const void *)g->hit, 4096, &e)) ==
        REGCACHE_OK)
        regcache_put(g->cache, e);
    requested = g->miss;
    if (said_rc("regcache_get (miss, sets SYNC_MEMOPS)",
                regcache_get(g->cache, (const void *)g->miss, 4096, &e)) == REGCACHE_OK) {
        g->miss_handle = regcache_entry_handle(e);
        regcache_put(g->cache, e);
    }
    int fd = -1;
    uint64_t offset;
    if (said_rc("rc_dmabuf_export (miss)", rc_dmabuf_export(g->miss, 65536, &fd, &offset)) ==
        REGCACHE_OK)
        close(fd);
    g->after = thread_mode();
    printf("    getting thread's capture mode              %s before, %s after\n",
           capture_name(g->before), capture_name(g->after));
    return NULL;
}

/* Capture `mode` on a stream of `flags`: a memset of hit, then `during`
 * (on another thread when `elsewhere`), then end, instantiate, launch, and
 * read the memset back. */
static void capture_around(CUstreamCaptureMode mode, unsigned flags, bool elsewhere,
                           CUdeviceptr target, void *(*during)(void *), void *arg)
{
    CUstream s;
    CK(cu.cuStreamCreate(&s, flags));
    CK(cu.cuMemsetD32Async(target, 0, MIB / 4, s));
    CK(cu.cuStreamSynchronize(s));
    said("cuStreamBeginCapture", cu.cuStreamBeginCapture(s, mode));
    said("cuMemsetD32Async (captured)", cu.cuMemsetD32Async(target, PATTERN, MIB / 4, s));
    if (elsewhere) {
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, during, arg), 0);
        pthread_join(t, NULL);
    } else {
        during(arg);
    }
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    said("cuStreamIsCapturing", cu.cuStreamIsCapturing(s, &status));
    printf("    capture status after the gets              %s\n",
           status == CU_STREAM_CAPTURE_STATUS_ACTIVE        ? "ACTIVE"
           : status == CU_STREAM_CAPTURE_STATUS_INVALIDATED ? "INVALIDATED"
                                                            : "NONE");
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    if (said("cuStreamEndCapture", cu.cuStreamEndCapture(s, &graph)) == CUDA_SUCCESS &&
        said("cuGraphInstantiate", cu.cuGraphInstantiate(&exec, graph, 0)) == CUDA_SUCCESS) {
        said("cuGraphLaunch", cu.cuGraphLaunch(exec, s));
        said("cuStreamSynchronize", cu.cuStreamSynchronize(s));
        unsigned int back[4] = { 0 };
        CK(cu.cuMemcpyDtoH(back, target, sizeof back));
        printf("    the graph's memset read back               %#x (want %#x)\n", back[0], PATTERN);
        if (back[0] != PATTERN || back[3] != PATTERN)
            failed_steps++;
        CK(cu.cuGraphExecDestroy(exec));
    }
    if (graph)
        CK(cu.cuGraphDestroy(graph));
    CK(cu.cuStreamDestroy(s));
}

struct capture_case {
    enum regcache_validation validation;
    CUstreamCaptureMode mode;
    bool elsewhere;
};

static void gets_during_a_capture(void **state)
{
    const struct capture_case *k = *state;
    failed_steps = 0;
    printf("validation %s, capture %s, gets on %s\n", mode_name(k->validation),
           capture_name(k->mode), k->elsewhere ? "another thread" : "the capturing thread");
    regcache_t *c = new_cache_validated(0, k->validation);
    assert_non_null(c);
    printf("    cache validation                           %s (%s)\n",
           mode_name(regcache_validation_mode(c)), regcache_validation_reason(c));
    if (k->validation != REGCACHE_VALIDATE_AUTO)
        assert_int_equal(regcache_validation_mode(c), k->validation);
    struct gets g = { .cache = c };
    CK(cu.cuMemAlloc(&g.hit, MIB));
    CK(cu.cuMemAlloc(&g.miss, MIB));
    regcache_entry_t *e;
    get_checked(c, g.hit, 4096, &e);
    regcache_put(c, e);

    capture_around(k->mode, CU_STREAM_NON_BLOCKING, k->elsewhere, g.hit, get_during_capture, &g);

    assert_int_equal(failed_steps, 0);
    assert_int_equal(g.after, g.before);
    assert_non_null(g.miss_handle);
    assert_int_equal(g.miss_handle->id, buffer_id(g.miss));
    assert_int_equal(g.miss_handle->sync, 1);
    assert_int_equal(sync_memops_of(g.miss), 1);
    assert_int_equal(atomic_load(&regs), 2);
    get_checked(c, g.hit, 4096, &e); /* a hit, as before the capture */
    regcache_put(c, e);
    assert_int_equal(atomic_load(&regs), 2);
    regcache_destroy(c);
    CK(cu.cuMemFree(g.hit));
    CK(cu.cuMemFree(g.miss));
}

#define CASES(V)                                                               \
    { REGCACHE_VALIDATE_##V, CU_STREAM_CAPTURE_MODE_GLOBAL, false },           \
        { REGCACHE_VALIDATE_##V, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, false }, \
        { REGCACHE_VALIDATE_##V, CU_STREAM_CAPTURE_MODE_RELAXED, false },      \
    {                                                                          \
        REGCACHE_VALIDATE_##V, CU_STREAM_CAPTURE_MODE_GLOBAL, true             \
    }
static const struct capture_case cases[] = { CASES(TAG_CHECK), CASES(AUTO), CASES(HOOKS) };
#undef CASES

/* A cache created during the capture (its self-test of the interception),
 * its first miss (the device's budget and key) and its destroy (the
 * deregistration). */
struct lifetime {
    CUdeviceptr memory;
    int created, got;
};

static void *cache_lifetime(void *arg)
{
    struct lifetime *l = arg;
    regcache_t *c = new_cache_validated(0, REGCACHE_VALIDATE_HOOKS);
    l->created = c != NULL;
    said_rc("regcache_create (HOOKS)", c ? REGCACHE_OK : REGCACHE_ERR_UNSUPPORTED);
    if (!c)
        return NULL;
    regcache_entry_t *e;
    requested = l->memory;
    if (said_rc("regcache_get (first miss of the cache)",
                regcache_get(c, (const void *)l->memory, 4096, &e)) == REGCACHE_OK) {
        l->got = 1;
        regcache_put(c, e);
    }
    regcache_destroy(c);
    printf("    regcache_destroy                           done\n");
    return NULL;
}

static void cache_made_and_destroyed_during_a_capture(void **state)
{
    (void)state;
    failed_steps = 0;
    printf("a cache created, used and destroyed during a GLOBAL capture\n");
    struct lifetime l = { 0 };
    CUdeviceptr target;
    CK(cu.cuMemAlloc(&target, MIB));
    CK(cu.cuMemAlloc(&l.memory, MIB));
    capture_around(CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_NON_BLOCKING, false, target,
                   cache_lifetime, &l);
    assert_int_equal(failed_steps, 0);
    assert_true(l.created && l.got);
    assert_int_equal(atomic_load(&regs), 1);
    CK(cu.cuMemFree(target));
    CK(cu.cuMemFree(l.memory));
}

/* A capture on a stream created without CU_STREAM_NON_BLOCKING, which
 * synchronises with the legacy stream: nothing the gets do may touch it. */
static void gets_during_a_capture_on_a_blocking_stream(void **state)
{
    (void)state;
    failed_steps = 0;
    printf("validation TAG_CHECK, capture GLOBAL on a blocking stream\n");
    regcache_t *c = new_cache_validated(0, REGCACHE_VALIDATE_TAG_CHECK);
    assert_non_null(c);
    struct gets g = { .cache = c };
    CK(cu.cuMemAlloc(&g.hit, MIB));
    CK(cu.cuMemAlloc(&g.miss, MIB));
    regcache_entry_t *e;
    get_checked(c, g.hit, 4096, &e);
    regcache_put(c, e);
    capture_around(CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_DEFAULT, false, g.hit,
                   get_during_capture, &g);
    assert_int_equal(failed_steps, 0);
    assert_int_equal(g.after, g.before);
    assert_non_null(g.miss_handle);
    assert_int_equal(g.miss_handle->id, buffer_id(g.miss));
    regcache_destroy(c);
    CK(cu.cuMemFree(g.hit));
    CK(cu.cuMemFree(g.miss));
}

int main(void)
{
    const char *why = driver_missing();
    if (why) {
        printf("skipped: %s\n", why);
        return 77;
    }
    enum { N = sizeof cases / sizeof cases[0] };
    struct CMUnitTest tests[N + 2];
    static char names[N][64];
    for (size_t i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "%s_%s_%s", mode_name(cases[i].validation),
                 capture_name(cases[i].mode), cases[i].elsewhere ? "elsewhere" : "here");
        tests[i] = (struct CMUnitTest){ .name = names[i],
                                        .test_func = gets_during_a_capture,
                                        .setup_func = reset,
                                        .teardown_func = release_handles,
                                        .initial_state = (void *)&cases[i] };
    }
    tests[N] = (struct CMUnitTest)cmocka_unit_test_setup_teardown(
        cache_made_and_destroyed_during_a_capture, reset, release_handles);
    tests[N + 1] = (struct CMUnitTest)cmocka_unit_test_setup_teardown(
        gets_during_a_capture_on_a_blocking_stream, reset, release_handles);
    return _cmocka_run_group_tests("gpu_capture", tests, N + 2, NULL, NULL);
}
