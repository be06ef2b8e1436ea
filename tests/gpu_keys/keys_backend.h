// The counting backend of the device key tests and the benchmark: no NIC
// exists on the GPU machines, so a registration pins nothing; its handle
// is its serial number, which is also its key, and its life is logged -
// the range, the buffer id of the memory at its start, and when it was made
// and deregistered on one clock that kernels read too (host-mapped memory).
// Memory is described by the library's own CUDA query.
#ifndef KEYS_BACKEND_H
#define KEYS_BACKEND_H

#include <cuda.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "regcache.h"

#define KB_MAX_REGS (1u << 22)
#ifndef KB_WATCHDOG_S
#define KB_WATCHDOG_S 90
#endif

struct kb_life {
    uintptr_t start;
    size_t len;
    unsigned long long id;
    uint64_t made, gone;
};

// The address a host get asks for (kb_host_key), which a registration's
// buffer id is read at: its start may lie in a neighbour packed into the
// same 64 KiB page.  0: the start (the table's thread registers so).
static __thread uintptr_t kb_request;

struct kb_state {
    kb_life *lives;            // [KB_MAX_REGS], by serial
    unsigned long long *tick;  // host-mapped: the clock of every event
    unsigned long long *dtick; // the same, as the device sees it
    uint32_t serials;
};

static kb_state kb;

static inline uint64_t kb_now(void)
{
    return __atomic_add_fetch(kb.tick, 1, __ATOMIC_SEQ_CST);
}

static inline unsigned long long kb_buffer_id(uintptr_t addr)
{
    unsigned long long id = 0;
    cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)addr);
    return id;
}

static int kb_reg(void *, void *addr, size_t len, int, int, void **handle)
{
    uint32_t s = __atomic_add_fetch(&kb.serials, 1, __ATOMIC_SEQ_CST);
    if (s >= KB_MAX_REGS)
        return ENOMEM;
    kb_life *l = &kb.lives[s];
    l->start = (uintptr_t)addr;
    l->len = len;
    uintptr_t at = kb_request >= (uintptr_t)addr && kb_request < (uintptr_t)addr + len
                       ? kb_request
                       : (uintptr_t)addr;
    l->id = kb_buffer_id(at);
    __atomic_store_n(&l->made, kb_now(), __ATOMIC_RELEASE);
    *handle = (void *)(uintptr_t)s;
    return 0;
}

static void kb_dereg(void *, void *handle)
{
    __atomic_store_n(&kb.lives[(uintptr_t)handle].gone, kb_now(), __ATOMIC_RELEASE);
}

static uint32_t kb_lkey(void *, void *handle, unsigned)
{
    return (uint32_t)(uintptr_t)handle;
}

static const regcache_backend kb_backend = { kb_reg, kb_dereg, NULL, NULL, NULL };

#define KB_CHECK(call)                                                                         \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

#define KB_OK(call)                                                                               \
    do {                                                                                          \
        int r_ = (call);                                                                          \
        if (r_ != REGCACHE_OK) {                                                                  \
            printf("FAIL %s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call, regcache_err_name(r_), \
                   regcache_last_error());                                                        \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

// What the program is doing, for the watchdog's report.
static const char *volatile kb_phase = "starting";
static volatile long kb_step;

static void kb_watchdog(int sig)
{
    (void)sig;
    char line[256];
    int n = snprintf(line, sizeof line, "HANG: no end after %d s, in phase \"%s\", step %ld\n",
                     KB_WATCHDOG_S, kb_phase, kb_step);
    // Nothing is left to do if the write fails: the exit status says it.
    if (n > 0 && write(1, line, (size_t)n) < 0)
        _exit(4);
    _exit(3);
}

static void kb_enter(const char *phase)
{
    kb_phase = phase;
    printf("phase: %s\n", phase);
}

// Skip (77) without a GPU; set up the log and the clock, and the watchdog
// that turns a hang into a report (KB_WATCHDOG_S seconds).
static void kb_init(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGALRM, kb_watchdog);
    alarm(KB_WATCHDOG_S);
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("skipped: no CUDA device\n");
        exit(77);
    }
    KB_CHECK(cudaSetDevice(0));
    kb.lives = (kb_life *)calloc(KB_MAX_REGS, sizeof(kb_life));
    KB_CHECK(cudaHostAlloc((void **)&kb.tick, 64, cudaHostAllocMapped | cudaHostAllocPortable));
    *kb.tick = 0;
    KB_CHECK(cudaHostGetDevicePointer((void **)&kb.dtick, kb.tick, 0));
    if (!kb.lives) {
        printf("FAIL: out of memory\n");
        exit(1);
    }
}

// A cache over the counting backend with a table on device 0.
static regcache_t *kb_cache(int validation, size_t max_entries,
                            const regcache_device_keys_params *kp, regcache_device_table *t)
{
    regcache_params p;
    regcache_params_init(&p);
    p.backend = &kb_backend;
    p.validation = (regcache_validation)validation;
    p.max_entries = max_entries;
    p.device_keys = 1;
    regcache_t *c = NULL;
    kb_enter("create");
    KB_OK(regcache_create(&p, &c));
    regcache_device_keys_params q = *kp;
    q.lkey = kb_lkey;
    kb_enter("attach");
    KB_OK(regcache_device_keys_attach(c, 0, &q, t));
    return c;
}

// The key the host's get is served for [addr, addr+len): its serial.
static uint32_t kb_host_key(regcache_t *c, uintptr_t addr, size_t len)
{
    regcache_entry_t *e = NULL;
    kb_request = addr;
    int rc = regcache_get(c, (const void *)addr, len, &e);
    kb_request = 0;
    if (rc != REGCACHE_OK)
        return 0;
    uint32_t k = (uint32_t)(uintptr_t)regcache_entry_handle(e);
    regcache_put(c, e);
    return k;
}

#endif
