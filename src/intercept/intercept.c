/* Installing the in-process interception and proving it (see intercept.h).
 *
 * Each function of the list gets, in one page mapped within 2 GiB of
 * libcuda, a thunk (the undo of the entry's leading instructions, then an
 * absolute jump to its wrapper here) and a trampoline (the leading
 * instructions, the one at the patch site, then a jump back past it); its
 * patch site gets a jmp rel32 to the thunk (prologue.h says why there).
 * The wrapper calls the driver through the trampoline. */
#include "intercept.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "cuda_seam.h"
#include "patch.h"
#include "proc_maps.h"
#include "prologue.h"
#include "resident.h"
#include "wrap.h"

#define UNAVAILABLE "in-process interception unavailable: "

#define RC_ICPT_INDEX(symbol, proc, version, flags, kind) ICPT_##symbol,
enum { RC_WRAP_SYMBOLS(RC_ICPT_INDEX) ICPT_SYMBOLS };
#define RC_ICPT_KIND(kind) ICPT_KIND_##kind,
enum { RC_WRAP_KINDS(RC_ICPT_KIND) };

/* Each patched function's trampoline: how its wrapper reaches the driver. */
static _Atomic(void *) originals[ICPT_SYMBOLS];

/* Calls that pass the wrappers without telling the caches: the self-test's
 * probes and the library's own calls.  A probe reads which wrapper it
 * reached first (1 + its index; a driver function may call others).  While
 * no thread is quiet the wrappers do not read the thread-local flag, which
 * in a shared library costs a call into the TLS resolver on every free. */
static atomic_int quiet_threads;
static _Thread_local bool quiet;
static _Thread_local int first_reached;

#define RC_ICPT_WRAPPER(symbol, proc, version, flags, kind)                                 \
    static CUresult wrapper_##symbol(RC_WRAP_PARAMS_##kind)                                 \
    {                                                                                       \
        void *real = atomic_load_explicit(&originals[ICPT_##symbol], memory_order_acquire); \
        if (atomic_load_explicit(&quiet_threads, memory_order_relaxed) == 0 || !quiet)      \
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

/* Per function in the page: the thunk, then the trampoline. */
#define TRAMPOLINE_AT RC_THUNK_MAX
#define SLOT (RC_THUNK_MAX + RC_TRAMPOLINE_MAX)

static pthread_once_t once = PTHREAD_ONCE_INIT;
static rc_dlsym_fn sym;
static void *driver;                /* libcuda.so.1, never closed */
static void *entries[ICPT_SYMBOLS]; /* libcuda's exports; NULL where it has none */
static int patched;                 /* how many */
/* Each entry as patched, up to the end of the jump: what a later patcher
 * must leave alone for the wrapper to see every call. */
static uint8_t written[ICPT_SYMBOLS][RC_PROLOGUE_MAX];
static size_t written_len[ICPT_SYMBOLS];
static char install_failure[256];   /* empty once installed */

void *rc_wrap_driver_symbol(const char *symbol)
{
    return driver ? sym(driver, symbol) : NULL;
}

void rc_intercept_quiet(bool on)
{
    if (quiet == on)
        return;
    quiet = on;
    atomic_fetch_add_explicit(&quiet_threads, on ? 1 : -1, memory_order_relaxed);
}

/* Copy and decode the entry of rows[i]. */
static int read_entry(int i, uint8_t *code, struct rc_prologue *p, char *why, size_t n)
{
    uintptr_t at = (uintptr_t)entries[i];
    struct rc_mapping m;
    if (rc_maps_find(at, &m) != 0) {
        snprintf(why, n, "%s at %#jx is in no mapping", rows[i].symbol, (uintmax_t)at);
        return -1;
    }
    size_t len = m.end - at < RC_PROLOGUE_MAX ? m.end - at : RC_PROLOGUE_MAX;
    memcpy(code, entries[i], len);
    if (rc_prologue_decode(code, len, at, p) == 0)
        return 0;
    int k = snprintf(why, n, "%s prologue not recognised (bytes", rows[i].symbol);
    for (size_t b = 0; b < len && k > 0 && (size_t)k < n; b++)
        k += snprintf(why + k, n - (size_t)k, " %02x", code[b]);
    if (k > 0 && (size_t)k < n)
        snprintf(why + k, n - (size_t)k, ")");
    return -1;
}

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
    /* Every entry is decoded before any is touched: all or nothing. */
    uint8_t code[ICPT_SYMBOLS][RC_PROLOGUE_MAX];
    struct rc_prologue prologue[ICPT_SYMBOLS];
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < ICPT_SYMBOLS; i++) {
        entries[i] = sym(driver, rows[i].symbol);
        if (!entries[i] || patched_under_another_name(i)) {
            entries[i] = NULL;
            continue;
        }
        if (read_entry(i, code[i], &prologue[i], why, n) != 0)
            return -1;
        /* The page must reach the entry, and what the relocated site
         * instruction reads. */
        uintptr_t at = (uintptr_t)entries[i], far = prologue[i].rip_target;
        lo = at < lo ? at : lo;
        hi = at + RC_PROLOGUE_MAX > hi ? at + RC_PROLOGUE_MAX : hi;
        if (far) {
            lo = far < lo ? far : lo;
            hi = far + 1 > hi ? far + 1 : hi;
        }
    }
    if (hi == 0) {
        snprintf(why, n, "libcuda.so.1 exports none of the memory functions");
        return -1;
    }
    size_t size = (size_t)ICPT_SYMBOLS * SLOT;
    uint8_t *page = rc_patch_page_near(lo, hi, size, why, n);
    if (!page)
        return -1;
    memset(page, 0xcc, size); /* int3 between the pieces */
    for (int i = 0; i < ICPT_SYMBOLS; i++)
        if (entries[i]) {
            uint8_t *thunk = page + i * SLOT, *trampoline = thunk + TRAMPOLINE_AT;
            rc_prologue_thunk(thunk, &prologue[i], (uintptr_t)rows[i].wrapper);
            if (rc_prologue_trampoline(trampoline, (uintptr_t)trampoline, code[i], &prologue[i]) ==
                0) {
                snprintf(why, n, "%s: the trampoline cannot reach what its entry reads",
                         rows[i].symbol);
                munmap(page, size);
                return -1;
            }
        }
    if (rc_patch_seal(page, size, why, n) != 0)
        return -1;
    /* Published before any entry leads to a wrapper that reads them. */
    for (int i = 0; i < ICPT_SYMBOLS; i++)
        if (entries[i])
            atomic_store_explicit(&originals[i], page + i * SLOT + TRAMPOLINE_AT,
                                  memory_order_release);
    /* From the first jump on, libcuda leads into this library's wrappers
     * for the rest of the process. */
    rc_stay_resident();
    for (int i = 0; i < ICPT_SYMBOLS; i++) {
        if (!entries[i])
            continue;
        uintptr_t site = (uintptr_t)entries[i] + prologue[i].site;
        uintptr_t thunk = (uintptr_t)(page + i * SLOT);
        int32_t rel = (int32_t)((intptr_t)thunk - (intptr_t)(site + RC_PATCH_LEN));
        memcpy(written[i], code[i], prologue[i].site);
        uint8_t *jmp = written[i] + prologue[i].site;
        jmp[0] = 0xe9;
        memcpy(jmp + 1, &rel, sizeof rel);
        written_len[i] = prologue[i].site + RC_PATCH_LEN;
        char detail[160];
        if (rc_patch_site(site, jmp, thunk, detail, sizeof detail) != 0) {
            /* The entries patched so far stay: each reaches its wrapper,
             * which reports and calls the driver as before. */
            snprintf(why, n, "%s: %s", rows[i].symbol, detail);
            return -1;
        }
        patched++;
    }
    return 0;
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
    for (int i = 0; i < ICPT_SYMBOLS; i++)
        if (entries[i] && !rc_patch_holds((uintptr_t)entries[i], written[i], written_len[i])) {
            snprintf(why, n,
                     "in-process interception lost: another patcher rewrote %s's entry "
                     "after the cache was created",
                     rows[i].symbol);
            return 0;
        }
    return 1;
}

int rc_intercept_ensure(char *why, size_t n)
{
    pthread_once(&once, install);
    if (install_failure[0] != '\0') {
        snprintf(why, n, "%s", install_failure);
        return 0;
    }
    rc_intercept_quiet(true);
    int live = probe_exports(why, n) && probe_proc_addresses(why, n);
    rc_intercept_quiet(false);
    if (live)
        snprintf(why, n,
                 "in-process interception: %d libcuda functions patched, each "
                 "reached through dlsym and cuGetProcAddress",
                 patched);
    return live;
}
