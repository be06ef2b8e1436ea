/* Installing the in-process interception and proving it (see intercept.h).
 * Every function of the list is patched as one set (patch_set.h) in
 * libcuda; the wrapper calls the driver through the trampoline. */
#include "intercept.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "capture_mode.h"
#include "cuda_seam.h"
#include "patch_set.h"
#include "quiet_calls.h"
#include "wrap.h"

#define UNAVAILABLE "in-process interception unavailable: "

#define RC_ICPT_INDEX(symbol, proc, version, flags, kind) ICPT_##symbol,
enum { RC_WRAP_SYMBOLS(RC_ICPT_INDEX) ICPT_SYMBOLS };
#define RC_ICPT_KIND(kind) ICPT_KIND_##kind,
enum { RC_WRAP_KINDS(RC_ICPT_KIND) };

/* Each patched function's trampoline: how its wrapper reaches the driver. */
static _Atomic(void *) originals[ICPT_SYMBOLS];

/* Quiet calls (quiet_calls.h) pass the wrappers without telling the
 * caches: the library's own, and the self-test's probes, each of which
 * reads which wrapper it reached first (1 + its index; a driver function
 * may call others). */
static _Thread_local int first_reached;

#define RC_ICPT_WRAPPER(symbol, proc, version, flags, kind)                                 \
    static CUresult wrapper_##symbol(RC_WRAP_PARAMS_##kind)                                 \
    {                                                                                       \
        void *real = atomic_load_explicit(&originals[ICPT_##symbol], memory_order_acquire); \
        if (!rc_cuda_quiet_here())                                                          \
            return rc_wrap_##kind(real, RC_WRAP_ARGS_##kind);                               \
        if (first_reached == 0)                                                             \
            first_reached = ICPT_##symbol + 1;                                              \
        return ((CUresult(*)(RC_WRAP_PARAMS_##kind))real)(RC_WRAP_ARGS_##kind);             \
    }
RC_WRAP_SYMBOLS(RC_ICPT_WRAPPER)

static const struct row {
    const char *symbol, *proc;
    int version;
    unsigned flags;
    int kind;
    void *wrapper;
} rows[ICPT_SYMBOLS] = {
#define RC_ICPT_ROW(symbol, proc, version, flags, kind) \
    { #symbol, proc, version, flags, ICPT_KIND_##kind, (void *)wrapper_##symbol },
    RC_WRAP_SYMBOLS(RC_ICPT_ROW)
};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static rc_dlsym_fn sym;
static void *driver;                /* libcuda.so.1, never closed */
static rc_exchange_fn exchange;     /* its cuThreadExchangeStreamCaptureMode */
static void *entries[ICPT_SYMBOLS]; /* libcuda's exports; NULL where it has none */
static int patched;                 /* how many */
/* Each entry as patched: what a later patcher must leave alone for the
 * wrapper to see every call. */
static struct rc_patch_fn fns[ICPT_SYMBOLS];
static char install_failure[256]; /* empty once installed */

/* Two names for one function (an old and a new ABI the driver implements
 * alike) are patched once, under the first; probing that one covers both. */
static bool patched_under_another_name(int i)
{
    for (int j = 0; j < i; j++)
        if (entries[j] == entries[i])
            return true;
    return false;
}

static int patch_all(char *why, size_t n)
{
#if !defined(__x86_64__)
    snprintf(why, n, "it patches x86-64 code only");
    return -1;
#endif
    sym = rc_cuda_real_dlsym();
    if (!sym) {
        snprintf(why, n, "cannot find glibc's dlsym");
        return -1;
    }
    /* Loaded here if the application has not yet: the patches must be in
     * place before it fetches any function. */
    driver = dlopen("libcuda.so.1", RTLD_NOW);
    if (!driver) {
        snprintf(why, n, "cannot load libcuda.so.1: %s", dlerror());
        return -1;
    }
    exchange = (rc_exchange_fn)sym(driver, "cuThreadExchangeStreamCaptureMode");
    bool any = false;
    for (int i = 0; i < ICPT_SYMBOLS; i++) {
        entries[i] = sym(driver, rows[i].symbol);
        if (entries[i] && patched_under_another_name(i))
            entries[i] = NULL;
        fns[i] = (struct rc_patch_fn){ .name = rows[i].symbol,
                                       .entry = entries[i],
                                       .wrapper = rows[i].wrapper,
                                       .original = &originals[i] };
        any |= entries[i] != NULL;
    }
    if (!any) {
        snprintf(why, n, "libcuda.so.1 exports none of the memory functions");
        return -1;
    }
    return rc_patch_set(fns, ICPT_SYMBOLS, NULL, &patched, why, n) == 0 ? 0 : -1;
}

static void install(void)
{
    char why[sizeof install_failure - sizeof UNAVAILABLE];
    if (patch_all(why, sizeof why) != 0)
        snprintf(install_failure, sizeof install_failure, UNAVAILABLE "%s", why);
}

/* Arguments every function of a kind rejects before it touches anything
 * (no pointer, size 0, device -1): a probe that escaped the wrapper would
 * do no harm either. */
#define PROBE_free 0
#define PROBE_free_async 0, NULL
#define PROBE_free_host NULL
#define PROBE_free_range 0, 0
#define PROBE_ctx_gone NULL
#define PROBE_device_gone -1
#define PROBE_alloc NULL, 0
#define PROBE_alloc_async NULL, 0, NULL
#define PROBE_alloc_pool NULL, 0, NULL, NULL
#define PROBE_map 0, 0, 0, 0, 0
#define PROBE_alloc_host NULL, 0
#define PROBE_alloc_host_flags NULL, 0, 0

/* Call fn, a function of `kind`, quietly: 1 + the index of the first
 * wrapper it reached, or 0. */
static int probe(int kind, void *fn)
{
    first_reached = 0;
    switch (kind) {
#define RC_ICPT_PROBE(kind)                                     \
    case ICPT_KIND_##kind:                                      \
        ((CUresult(*)(RC_WRAP_PARAMS_##kind))fn)(PROBE_##kind); \
        break;
        RC_WRAP_KINDS(RC_ICPT_PROBE)
    }
    return first_reached;
}

/* Each export, as dlsym (or a direct call) finds it, reaches its own
 * wrapper. */
static int probe_exports(char *why, size_t n)
{
    for (int i = 0; i < ICPT_SYMBOLS; i++)
        if (entries[i] && probe(rows[i].kind, entries[i]) != i + 1) {
            snprintf(why, n, UNAVAILABLE "%s called through dlsym does not reach its wrapper",
                     rows[i].symbol);
            return 0;
        }
    return 1;
}

/* What cuGetProcAddress hands out - at the first version of each ABI and
 * at the newest the driver knows, under each flags value that selects a
 * different function - reaches a wrapper of the same kind. */
static int probe_proc_addresses(char *why, size_t n)
{
    typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t,
                               CUdriverProcAddressQueryResult *);
    gpa_fn gpa = (gpa_fn)sym(driver, "cuGetProcAddress_v2");
    if (!gpa) {
        snprintf(why, n,
                 UNAVAILABLE "libcuda.so.1 has no cuGetProcAddress_v2 "
                             "(a driver older than CUDA 12.0)");
        return 0;
    }
    int newest = 0;
    CUresult (*driver_version)(int *) = (CUresult(*)(int *))sym(driver, "cuDriverGetVersion");
    if (!driver_version || driver_version(&newest) != CUDA_SUCCESS)
        newest = 0;
    for (int i = 0; i < ICPT_SYMBOLS; i++) {
        const struct row *r = &rows[i];
        int versions[2] = { r->version, newest };
        for (int v = 0; v < (newest > r->version ? 2 : 1); v++) {
            void *fn = NULL;
            CUdriverProcAddressQueryResult status;
            CUresult got = gpa(r->proc, &fn, versions[v], r->flags, &status);
            /* A function this driver does not hand out needs no proof. */
            if (got == CUDA_ERROR_NOT_FOUND)
                continue;
            if (got != CUDA_SUCCESS || !fn) {
                snprintf(why, n,
                         UNAVAILABLE "cuGetProcAddress(%s, version %d, flags %u) "
                                     "failed (%d)",
                         r->proc, versions[v], r->flags, (int)got);
                return 0;
            }
            int reached = probe(r->kind, fn);
            if (reached == 0 || rows[reached - 1].kind != r->kind) {
                snprintf(why, n,
                         UNAVAILABLE "%s (version %d, flags %u) from "
                                     "cuGetProcAddress does not reach a wrapper",
                         r->proc, versions[v], r->flags);
                return 0;
            }
        }
    }
    return 1;
}

int rc_intercept_intact(char *why, size_t n)
{
    const struct rc_patch_fn *lost = rc_patch_set_lost(fns, ICPT_SYMBOLS);
    if (!lost)
        return 1;
    snprintf(why, n,
             "in-process interception lost: another patcher rewrote %s's entry "
             "after the cache was created",
             lost->name);
    return 0;
}

int rc_intercept_ensure(char *why, size_t n)
{
    pthread_once(&once, install);
    if (install_failure[0] != '\0') {
        snprintf(why, n, "%s", install_failure);
        return 0;
    }
    /* The probes call cuMemAlloc and cuMemFree, which a stream capture in
     * progress on any thread would refuse, and be invalidated by. */
    struct rc_relaxed mode = rc_relax(exchange);
    rc_cuda_quiet(true);
    int live = probe_exports(why, n) && probe_proc_addresses(why, n);
    rc_cuda_quiet(false);
    rc_unrelax(exchange, &mode);
    if (live)
        snprintf(why, n,
                 "in-process interception: %d libcuda functions patched, each "
                 "reached through dlsym and cuGetProcAddress",
                 patched);
    return live;
}
