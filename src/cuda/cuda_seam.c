/* Loads the CUDA driver's entry points (see cuda_seam.h). */
#include "cuda_seam.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "capture_mode.h"
#include "last_error.h"
#include "regcache.h"

typedef CUresult (*get_proc_fn)(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                CUdriverProcAddressQueryResult *status);

/* Each field with the CUDA version whose ABI its prototype in cuda_seam.h
 * follows: asking cuGetProcAddress for that version returns the matching
 * variant (e.g. cuPointerGetAttribute at 4000). */
static const struct entry {
    size_t offset;
    const char *name;
    int version;
} entries[] = {
#define ENTRY(field, name, version, how, params, args) \
    { offsetof(struct rc_cuda_api, field), name, version },
    RC_CUDA_ENTRIES(ENTRY)
#undef ENTRY
};

static struct rc_cuda_api driver_api;    /* the driver's functions */
static struct rc_cuda_api driver_facing; /* what rc_cuda_api() hands out */
static const struct rc_cuda_api *loaded; /* written once, under load_once */
/* CUDA does not survive fork(): in a child of a process that initialized
 * it, every driver call fails (CUDA_ERROR_NOT_INITIALIZED), and no GPU
 * memory of the parent can be used.  Such a child has no driver. */
static atomic_bool forked_after_init;
static _Atomic(const struct rc_cuda_api *) override_api;
static struct rc_cuda_api override_facing;       /* of override_api */
static const struct rc_cuda_api *override_faced; /* the api override_facing was made of */

/* The functions the relaxed entries reach: a test's, or the driver's. */
static const struct rc_cuda_api *raw(void)
{
    const struct rc_cuda_api *api = atomic_load_explicit(&override_api, memory_order_acquire);
    return api ? api : &driver_api;
}

/* One wrapper per relaxed entry: the call between two exchanges of the
 * calling thread's capture mode, restored whatever the call returned. */
#define WRAPPER_as_is(field, params, args)
#define WRAPPER_relaxed(field, params, args)                                     \
    static CUresult relaxed_##field params                                       \
    {                                                                            \
        const struct rc_cuda_api *api = raw();                                   \
        struct rc_relaxed mode = rc_relax(api->ThreadExchangeStreamCaptureMode); \
        CUresult r = api->field args;                                            \
        rc_unrelax(api->ThreadExchangeStreamCaptureMode, &mode);                 \
        return r;                                                                \
    }
#define WRAPPER(field, name, version, how, params, args) WRAPPER_##how(field, params, args)
RC_CUDA_ENTRIES(WRAPPER)
#undef WRAPPER
#undef WRAPPER_relaxed
#undef WRAPPER_as_is

/* What callers get of `api`: its as_is functions, and the wrappers. */
static void face(struct rc_cuda_api *facing, const struct rc_cuda_api *api)
{
#define FACE_as_is(field) api->field
#define FACE_relaxed(field) relaxed_##field
#define FACE(field, name, version, how, params, args) facing->field = FACE_##how(field);
    RC_CUDA_ENTRIES(FACE)
#undef FACE
#undef FACE_relaxed
#undef FACE_as_is
}

static char load_error[256];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static bool load_entries(get_proc_fn get_proc)
{
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        CUresult r = get_proc(entries[i].name, &fn, entries[i].version, CU_GET_PROC_ADDRESS_DEFAULT,
                              &status);
        if (r != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || !fn) {
            snprintf(load_error, sizeof load_error,
                     "CUDA driver has no %s (version %d): driver too old", entries[i].name,
                     entries[i].version);
            return false;
        }
        /* memcpy: the fields are function pointers of differing types. */
        memcpy((char *)&driver_api + entries[i].offset, &fn, sizeof fn);
    }
    return true;
}

static void forgotten_in_child(void)
{
    atomic_store_explicit(&forked_after_init, true, memory_order_relaxed);
}

static void load(void)
{
    rc_dlsym_fn sym = rc_cuda_real_dlsym();
    if (!sym) {
        snprintf(load_error, sizeof load_error, "cannot find glibc's dlsym");
        return;
    }
    /* Never closed: the entry points stay in use until the process exits. */
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(load_error, sizeof load_error, "cannot load the CUDA driver: %s", dlerror());
        return;
    }
    void *gp = sym(lib, "cuGetProcAddress_v2");
    if (!gp) {
        snprintf(load_error, sizeof load_error,
                 "CUDA driver has no cuGetProcAddress_v2: driver older than CUDA 12.0");
        return;
    }
    get_proc_fn get_proc;
    memcpy(&get_proc, &gp, sizeof get_proc);
    if (!load_entries(get_proc))
        return;
    face(&driver_facing, &driver_api);
    CUresult r = driver_facing.Init(0);
    if (r != CUDA_SUCCESS) {
        const char *name = "unknown error";
        driver_api.GetErrorName(r, &name);
        snprintf(load_error, sizeof load_error, "cuInit failed: %s (%d)", name, (int)r);
        return;
    }
    loaded = &driver_facing;
    pthread_atfork(NULL, NULL, forgotten_in_child);
}

const struct rc_cuda_api *rc_cuda_api(void)
{
    if (atomic_load_explicit(&override_api, memory_order_acquire))
        return &override_facing;
    pthread_once(&load_once, load);
    if (loaded && !atomic_load_explicit(&forked_after_init, memory_order_relaxed))
        return loaded;
    if (loaded)
        rc_set_error("no CUDA driver in this process: it was initialized before fork(), and "
                     "CUDA cannot be used in a fork child");
    else
        rc_set_error("%s", load_error);
    return NULL;
}

void rc_cuda_api_override(const struct rc_cuda_api *api)
{
    /* Made once per table, so that a table in use is never rewritten. */
    if (api && api != override_faced) {
        face(&override_facing, api);
        override_faced = api;
    }
    atomic_store_explicit(&override_api, api, memory_order_release);
}

int rc_cuda_error(const struct rc_cuda_api *api, const char *call, CUresult r)
{
    const char *name = NULL;
    if (api->GetErrorName(r, &name) != CUDA_SUCCESS || !name)
        name = "unknown CUDA error";
    rc_set_error("%s failed: %s (%d)", call, name, (int)r);
    return REGCACHE_ERR_CUDA;
}
