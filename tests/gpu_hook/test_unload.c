/* libregcache.so dlopen()ed by a program that drives the real CUDA driver,
 * used (its first cache patches libcuda in-process; a thread gets a hold)
 * and dlclose()d: afterwards cuMemAlloc/cuMemFree and a thread's exit must
 * still work.  Prints the entry bytes of cuMemFree_v2 before and after the
 * patch, a record of where it went.  Run by gpu-test.sh linked-init-first;
 * 77 without a device. */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "cu_check.h"
#include "loaded_regcache.h"

static struct loaded_regcache api;

/* Nothing is pinned: no NIC here. */
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

static const struct regcache_backend backend = { .reg = reg, .dereg = dereg };

static void print_entry(const char *when)
{
    const uint8_t *at = (const uint8_t *)(uintptr_t)cuMemFree;
    printf("cuMemFree_v2 %s:", when);
    for (int i = 0; i < 24; i++)
        printf(" %02x", at[i]);
    printf("\n");
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int stage; /* 1: the thread used the cache; 2: the library is gone */
static CUcontext ctx;

static void *use_then_wait(void *arg)
{
    regcache_t *c = arg;
    CUdeviceptr p;
    regcache_entry_t *e = NULL;
    int ok = cuCtxSetCurrent(ctx) == CUDA_SUCCESS && cuMemAlloc(&p, 1 << 20) == CUDA_SUCCESS &&
             api.get(c, (void *)(uintptr_t)p, 1 << 20, &e) == REGCACHE_OK;
    if (ok)
        api.put(c, e);
    pthread_mutex_lock(&lock);
    stage = ok ? 1 : -1;
    pthread_cond_broadcast(&cond);
    while (stage == 1)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    /* After the dlclose: the free runs through the patched entry. */
    if (ok && cuMemFree(p) != CUDA_SUCCESS)
        return (void *)1;
    return ok ? NULL : (void *)1;
}

/* Device 0's primary context, current: 0, or 77 without a device. */
static int primary_context(void)
{
    CUdevice device;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&device, 0) != CUDA_SUCCESS) {
        printf("skipped: no CUDA device\n");
        return 77;
    }
    CU(cuDevicePrimaryCtxRetain(&ctx, device));
    CU(cuCtxSetCurrent(ctx));
    return 0;
}

int main(void)
{
    int rc = primary_context();
    if (rc != 0)
        return rc;
    print_entry("before");

    if (loaded_regcache_open(REGCACHE_LIBRARY, &api) != 0)
        return 1;
    struct regcache_params p;
    api.params_init(&p);
    p.backend = &backend;
    regcache_t *c = NULL;
    if (api.create(&p, &c) != REGCACHE_OK) {
        printf("FAIL regcache_create\n");
        return 1;
    }
    printf("validation %d: %s\n", api.validation_mode(c), api.validation_reason(c));
    if (api.validation_mode(c) != REGCACHE_VALIDATE_HOOKS) {
        printf("FAIL not HOOKS\n");
        return 1;
    }
    print_entry("patched");

    pthread_t t;
    pthread_create(&t, NULL, use_then_wait, c);
    pthread_mutex_lock(&lock);
    while (stage == 0)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    api.destroy(c);
    dlclose(api.handle);
    pthread_mutex_lock(&lock);
    stage = stage == 1 ? 2 : stage;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    void *failed;
    pthread_join(t, &failed);

    /* The patched entries still lead somewhere mapped. */
    CUdeviceptr d;
    CU(cuMemAlloc(&d, 1 << 20));
    CU(cuMemFree(d));
    printf("unload after patching: %s\n", failed ? "FAIL" : "PASS");
    return failed ? 1 : 0;
}
