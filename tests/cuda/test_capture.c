/*
 * Gets while the application captures a stream into a CUDA graph, over the
 * fake driver's model of capture (fake_driver.h): whatever the capture's
 * mode and whichever thread captures, a hit or a miss (which sets
 * SYNC_MEMOPS, a call the driver refuses during a capture that restricts
 * the calling thread) and a dmabuf export leave the capture intact and the
 * calling thread's capture mode as they found it, under every validation
 * mode, also when a driver call fails.
 *
 * Run twice (CMakeLists.txt): as cuda_capture with REGCACHE_HOOKS=off, where
 * an explicit HOOKS cannot be had, and as cuda_capture_intercepted with the
 * libcuda test double on the library path (CAPTURE_TEST_INTERCEPTED=1),
 * which the in-process interception patches: there AUTO and HOOKS rest on
 * it.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cuda_seam.h"
#include "dmabuf_export.h"
#include "drv_cache.h"
#include "fake_driver.h"
#include "regcache.h"

static int intercepted(void)
{
    const char *v = getenv("CAPTURE_TEST_INTERCEPTED");
    return v && strcmp(v, "1") == 0;
}

/* Who captures, and in which mode. */
enum who { HERE, ELSEWHERE };

struct capture_case {
    const char *name;
    enum regcache_validation validation;
    CUstreamCaptureMode mode;
    enum who who;
};

/* A capture begun by a thread of its own, which ends it when told: a
 * capture in GLOBAL mode restricts every other thread. */
struct other_capturer {
    pthread_t thread;
    pthread_barrier_t begun, done;
    CUstreamCaptureMode mode;
    int index;
    CUresult ended;
};

static void *capture_elsewhere(void *arg)
{
    struct other_capturer *o = arg;
    o->index = drv_capture_begin(o->mode);
    pthread_barrier_wait(&o->begun);
    pthread_barrier_wait(&o->done);
    o->ended = drv_capture_end(o->index);
    return NULL;
}

/* The capture of the test running: static, so that a teardown after a
 * failed assertion still ends it and lets its thread go. */
static struct capture {
    int active;
    enum who who;
    int index;
    struct other_capturer other;
} capture;

static void begin(CUstreamCaptureMode mode, enum who who)
{
    capture.active = 1;
    capture.who = who;
    if (who == HERE) {
        capture.index = drv_capture_begin(mode);
        return;
    }
    capture.other.mode = mode;
    pthread_barrier_init(&capture.other.begun, NULL, 2);
    pthread_barrier_init(&capture.other.done, NULL, 2);
    assert_int_equal(pthread_create(&capture.other.thread, NULL, capture_elsewhere, &capture.other),
                     0);
    pthread_barrier_wait(&capture.other.begun);
}

static CUresult end(void)
{
    capture.active = 0;
    if (capture.who == HERE)
        return drv_capture_end(capture.index);
    pthread_barrier_wait(&capture.other.done);
    pthread_join(capture.other.thread, NULL);
    pthread_barrier_destroy(&capture.other.begun);
    pthread_barrier_destroy(&capture.other.done);
    return capture.other.ended;
}

static int teardown(void **state)
{
    if (capture.active)
        end();
    return drv_cache_teardown(state);
}

/* The thread's capture mode, as an application sets it. */
static void set_thread_mode(CUstreamCaptureMode mode)
{
    assert_int_equal(rc_cuda_api()->ThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);
}

/* Every driver call made while the capture restricted this thread ran
 * relaxed, except the tag checks of TAG_CHECK hits, which the driver
 * allows; none was refused. */
static void assert_all_relaxed(void)
{
    for (int call = 0; call < FC_COUNT; call++)
        if (call != FC_GET_ATTRIBUTE && drv.unrelaxed[call])
            fail_msg("driver call %d ran %u times restricted by the capture", call,
                     drv.unrelaxed[call]);
    assert_int_equal(drv.refused, 0);
}

/* The cache of f in `validation`, with what that resolved to checked. */
static void reopen(struct fx *f, enum regcache_validation validation)
{
    f->p.validation = validation;
    drv_cache_reopen(f, 0);
    int want = validation == REGCACHE_VALIDATE_AUTO
                   ? (intercepted() ? REGCACHE_VALIDATE_HOOKS : REGCACHE_VALIDATE_TAG_CHECK)
                   : (int)validation;
    assert_int_equal(regcache_validation_mode(f->c), want);
}

/* One case: a hit on memory registered before the capture, a miss on memory
 * never registered, both put back, during the capture. */
static void get_during_capture(void **state)
{
    struct fx *f = *state;
    const struct capture_case *cs = f->param;
    reopen(f, cs->validation);
    int hit = drv_legacy(0, MiB);
    int miss = drv_legacy(2 * MiB, MiB);
    fx_use(f, drv_addr(0), 4096);
    /* An application that captures in THREAD_LOCAL mode may have set its
     * threads' interaction mode to match. */
    CUstreamCaptureMode mine = cs->mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
                                   ? CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
                                   : CU_STREAM_CAPTURE_MODE_GLOBAL;
    set_thread_mode(mine);
    begin(cs->mode, cs->who);
    memset(drv.unrelaxed, 0, sizeof drv.unrelaxed);

    regcache_entry_t *e;
    assert_int_equal(regcache_get(f->c, (const void *)drv_addr(4096), 4096, &e), REGCACHE_OK);
    regcache_put(f->c, e);
    int rc = regcache_get(f->c, (const void *)drv_addr(2 * MiB), 4096, &e);
    if (rc != REGCACHE_OK)
        fail_msg("miss during the capture: %s (%s)", regcache_strerror(rc), regcache_last_error());
    const struct fake_handle *h = fx_handle(e);
    regcache_put(f->c, e);

    assert_int_equal(drv_thread_mode(), mine);
    assert_all_relaxed();
    assert_int_equal(end(), CUDA_SUCCESS);
    assert_int_equal(h->id, drv.allocs[miss].id);
    assert_int_equal(h->sync_memops, 1);
    assert_int_equal(drv.allocs[miss].sync_memops, 1);
    assert_int_equal(drv.allocs[hit].sync_memops, 1);
    fx_assert_stats(f, FX_STAT(hits, 1), FX_STAT(misses, 2), NULL);
    set_thread_mode(CU_STREAM_CAPTURE_MODE_GLOBAL);
}

#define MODES(v, V)                                                                             \
    { #v "_global_here", REGCACHE_VALIDATE_##V, CU_STREAM_CAPTURE_MODE_GLOBAL, HERE },          \
        { #v "_thread_local_here", REGCACHE_VALIDATE_##V, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,  \
          HERE },                                                                               \
        { #v "_relaxed_here", REGCACHE_VALIDATE_##V, CU_STREAM_CAPTURE_MODE_RELAXED, HERE },    \
    {                                                                                           \
#v "_global_elsewhere", REGCACHE_VALIDATE_##V, CU_STREAM_CAPTURE_MODE_GLOBAL, ELSEWHERE \
    }

static const struct capture_case plain_cases[] = {
    MODES(tag_check, TAG_CHECK),
    MODES(auto, AUTO),
    MODES(notify, NOTIFY),
};

static const struct capture_case intercepted_cases[] = {
    MODES(tag_check, TAG_CHECK),
    MODES(auto, AUTO),
    MODES(hooks, HOOKS),
    MODES(notify, NOTIFY),
};

/* A driver call that fails during the capture fails the get, and still
 * leaves the capture and the thread's mode as they were. */
static void failed_call_restores_the_mode(void **state)
{
    struct fx *f = *state;
    drv_legacy(0, MiB);
    begin(CU_STREAM_CAPTURE_MODE_GLOBAL, HERE);
    drv.fail[FC_SET_ATTRIBUTE] = CUDA_ERROR_UNKNOWN;
    fx_get_fails(f, drv_addr(0), 4096, REGCACHE_ERR_CUDA);
    fx_assert_error_says("cuPointerSetAttribute(SYNC_MEMOPS)", "CUDA_ERROR_UNKNOWN", NULL);
    drv.fail[FC_SET_ATTRIBUTE] = CUDA_SUCCESS;
    assert_int_equal(drv_thread_mode(), CU_STREAM_CAPTURE_MODE_GLOBAL);
    assert_all_relaxed();
    assert_int_equal(end(), CUDA_SUCCESS);
}

/* A driver that cannot exchange the mode: the calls are made as they are,
 * and the thread's mode is left alone. */
static void failed_exchange_leaves_the_mode(void **state)
{
    struct fx *f = *state;
    drv_legacy(0, MiB);
    set_thread_mode(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    drv.fail[FC_EXCHANGE] = CUDA_ERROR_NOT_INITIALIZED;
    regcache_entry_t *e = fx_get(f, drv_addr(0), 4096);
    regcache_put(f->c, e);
    drv.fail[FC_EXCHANGE] = CUDA_SUCCESS;
    assert_int_equal(drv_thread_mode(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    assert_int_equal(drv.allocs[0].sync_memops, 1);
    set_thread_mode(CU_STREAM_CAPTURE_MODE_GLOBAL);
}

/* Exchanges come in pairs, one pair per driver call but the tag check. */
static void every_exchange_is_undone(void **state)
{
    struct fx *f = *state;
    drv_legacy(0, MiB);
    unsigned int before = drv.calls[FC_EXCHANGE];
    regcache_entry_t *e = fx_get(f, drv_addr(0), 4096);
    regcache_put(f->c, e);
    unsigned int made = drv.calls[FC_EXCHANGE] - before;
    assert_true(made >= 4); /* the query and SYNC_MEMOPS at least */
    assert_int_equal(made % 2, 0);
}

/* The first miss of a cache on a device reads the device's budget and key:
 * during a capture too. */
static void first_miss_of_a_cache_during_a_capture(void **state)
{
    struct fx *f = *state;
    drv.device_memory = (size_t)16 << 30;
    f->p.max_bytes = 0;
    drv_cache_reopen(f, 0);
    drv_legacy(0, MiB);
    begin(CU_STREAM_CAPTURE_MODE_GLOBAL, ELSEWHERE);
    memset(drv.unrelaxed, 0, sizeof drv.unrelaxed);
    regcache_entry_t *e = fx_get(f, drv_addr(0), 4096);
    regcache_put(f->c, e);
    assert_all_relaxed();
    assert_int_equal(end(), CUDA_SUCCESS);
    assert_int_equal(drv_thread_mode(), CU_STREAM_CAPTURE_MODE_GLOBAL);
}

/* dmabuf export on a thread without a context borrows the primary one:
 * retain, push, export, pop, release, all refused by a capture that
 * restricts the thread unless relaxed; also when the push fails. */
static void dmabuf_export_during_a_capture(void **state)
{
    (void)state;
    drv_pool(0, MiB); /* no owning context: the primary one is retained */
    drv.current = NULL;
    begin(CU_STREAM_CAPTURE_MODE_GLOBAL, HERE);
    int fd = -1;
    uint64_t offset;
    assert_int_equal(rc_dmabuf_export(drv_addr(0), 4096, &fd, &offset), REGCACHE_OK);
    close(fd);
    assert_int_equal(drv.calls[FC_PRIMARY_RETAIN], 1);
    drv.fail[FC_CTX_PUSH] = CUDA_ERROR_INVALID_CONTEXT;
    assert_int_equal(rc_dmabuf_export(drv_addr(0), 4096, &fd, &offset), REGCACHE_ERR_CUDA);
    drv.fail[FC_CTX_PUSH] = CUDA_SUCCESS;
    assert_int_equal(drv.retained, 0);
    assert_int_equal(drv.pushed, 0);
    assert_int_equal(drv_thread_mode(), CU_STREAM_CAPTURE_MODE_GLOBAL);
    assert_all_relaxed();
    assert_int_equal(end(), CUDA_SUCCESS);
}

/* The model itself: without the exchange the driver refuses SYNC_MEMOPS and
 * invalidates the capture, so the tests above can fail. */
static void unrelaxed_sync_memops_breaks_the_capture(void **state)
{
    (void)state;
    int i = drv_legacy(0, MiB);
    begin(CU_STREAM_CAPTURE_MODE_GLOBAL, ELSEWHERE);
    unsigned int one = 1;
    assert_int_equal(
        drv_raw_api()->PointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, drv_addr(0)),
        CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    assert_int_equal(drv.allocs[i].sync_memops, 0);
    assert_int_equal(end(), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
}

/* Where no hook can see CUDA frees, an explicit HOOKS is refused, and the
 * application that notifies by itself says so with NOTIFY. */
static void hooks_without_a_hook_is_refused(void **state)
{
    struct fx *f = *state;
    struct regcache_params p = f->p;
    p.validation = REGCACHE_VALIDATE_HOOKS;
    regcache_t *c = (regcache_t *)1;
    assert_int_equal(regcache_create(&p, &c), REGCACHE_ERR_UNSUPPORTED);
    assert_null(c);
    fx_assert_error_says("validation HOOKS", "REGCACHE_HOOKS=off", "REGCACHE_VALIDATE_NOTIFY",
                         NULL);
    p.validation = REGCACHE_VALIDATE_NOTIFY;
    assert_int_equal(regcache_create(&p, &c), REGCACHE_OK);
    assert_int_equal(regcache_validation_mode(c), REGCACHE_VALIDATE_NOTIFY);
    regcache_destroy(c);
}

int main(void)
{
    if (intercepted())
        return fx_run(drv_cache_setup, teardown, "", NULL, 0, get_during_capture, intercepted_cases,
                      sizeof intercepted_cases / sizeof intercepted_cases[0],
                      sizeof intercepted_cases[0]);
    return fx_run(drv_cache_setup, teardown,
                  "failed_call_restores_the_mode, failed_exchange_leaves_the_mode, "
                  "every_exchange_is_undone, first_miss_of_a_cache_during_a_capture, "
                  "dmabuf_export_during_a_capture, unrelaxed_sync_memops_breaks_the_capture, "
                  "hooks_without_a_hook_is_refused",
                  FX_FNS(failed_call_restores_the_mode, failed_exchange_leaves_the_mode,
                         every_exchange_is_undone, first_miss_of_a_cache_during_a_capture,
                         dmabuf_export_during_a_capture, unrelaxed_sync_memops_breaks_the_capture,
                         hooks_without_a_hook_is_refused),
                  7, get_during_capture, plain_cases, sizeof plain_cases / sizeof plain_cases[0],
                  sizeof plain_cases[0]);
}
