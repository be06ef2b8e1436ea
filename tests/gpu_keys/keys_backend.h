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
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
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
// The cache whose table the watchdog reports on.
static regcache_t *volatile kb_watched;
// Its deadline, in seconds: KB_WATCHDOG_S, or $KB_WATCHDOG.
static int kb_deadline = KB_WATCHDOG_S;

static uint64_t kb_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// A report line, or an exit when stdout is gone: nothing is left to do.
static void kb_say(const char *s, size_t n)
{
    if (write(1, s, n) < 0)
        _exit(4);
}

// The table's counters in one line: its threads' work, where a miss's
// time went on the host.
static void kb_table_line(regcache_t *c, const char *label)
{
    struct regcache_device_keys_stats s;
    if (!c || regcache_device_keys_stats(c, 0, &s) != REGCACHE_OK)
        return;
    char line[512];
    double req = s.requests ? (double)s.requests : 1, fl = s.flushes ? (double)s.flushes : 1;
    int n = snprintf(
        line, sizeof line,
        "%s: table: requests %llu (failed %llu), answer mean %.1f us max %.1f us, "
        "of it gets mean %.1f us max %.1f us; writes %llu (failed %llu) mean %.1f us "
        "max %.1f us; drains %llu max %.1f us (timeouts %llu)\n",
        label, (unsigned long long)s.requests, (unsigned long long)s.request_failures,
        s.answer_ns_total / req / 1e3, s.answer_ns_max / 1e3, s.register_ns_total / req / 1e3,
        s.register_ns_max / 1e3, (unsigned long long)s.flushes,
        (unsigned long long)s.flush_failures, s.flush_ns_total / fl / 1e3, s.flush_ns_max / 1e3,
        (unsigned long long)s.drains, s.drain_ns_max / 1e3, (unsigned long long)s.drain_timeouts);
    if (n > 0)
        kb_say(line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

// Each thread's stack, one thread at a time, on SIGUSR1.
static volatile sig_atomic_t kb_dumped;

static void kb_stack(int sig)
{
    (void)sig;
    void *frames[40];
    int n = backtrace(frames, 40);
    backtrace_symbols_fd(frames, n, 1);
    kb_dumped = 1;
}

static void kb_dump_threads(void)
{
    pid_t self = (pid_t)syscall(SYS_gettid);
    int dir = open("/proc/self/task", O_RDONLY | O_DIRECTORY);
    char buf[4096];
    long got;
    while (dir >= 0 && (got = syscall(SYS_getdents64, dir, buf, sizeof buf)) > 0) {
        for (long off = 0; off < got;) {
            // struct linux_dirent64: inode, offset, record length, type, name.
            unsigned short reclen;
            memcpy(&reclen, buf + off + 16, sizeof reclen);
            const char *name = buf + off + 19;
            off += reclen;
            if (name[0] < '0' || name[0] > '9')
                continue;
            pid_t tid = (pid_t)atoi(name);
            char path[64], comm[32] = "?", line[128];
            snprintf(path, sizeof path, "/proc/self/task/%d/comm", (int)tid);
            int fd = open(path, O_RDONLY);
            long k = fd >= 0 ? read(fd, comm, sizeof comm - 1) : -1;
            if (fd >= 0)
                close(fd);
            comm[k > 0 ? k - 1 : 1] = 0;
            int n = snprintf(line, sizeof line, "thread %d (%s)%s:\n", (int)tid, comm,
                             tid == self ? ", the watchdog's" : "");
            kb_say(line, (size_t)n);
            kb_dumped = 0;
            if (tid == self) {
                kb_stack(SIGUSR1);
                continue;
            }
            syscall(SYS_tgkill, getpid(), tid, SIGUSR1);
            struct timespec tick = { 0, 10000000 };
            for (int i = 0; i < 50 && !kb_dumped; i++)
                nanosleep(&tick, NULL);
            if (!kb_dumped)
                kb_say("  (no answer: the signal is blocked there)\n",
                       strlen("  (no answer: the signal is blocked there)\n"));
        }
    }
}

static void kb_watchdog(int sig)
{
    (void)sig;
    char line[256];
    int n = snprintf(line, sizeof line, "HANG: no end after %d s, in phase \"%s\", step %ld\n",
                     kb_deadline, kb_phase, kb_step);
    if (n > 0)
        kb_say(line, (size_t)n);
    kb_table_line(kb_watched, "HANG");
    kb_dump_threads();
    _exit(3);
}

static void kb_enter(const char *phase)
{
    kb_phase = phase;
    printf("phase: %s\n", phase);
}

// Skip (77) without a GPU; set up the log and the clock, and the watchdog
// that turns a hang into a report (KB_WATCHDOG_S seconds, or as many as
// $KB_WATCHDOG says).
static void kb_init(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    void *warm[2];
    backtrace(warm, 2); // loads what unwinding needs now, not in a handler
    signal(SIGUSR1, kb_stack);
    signal(SIGALRM, kb_watchdog);
    const char *deadline = getenv("KB_WATCHDOG");
    if (deadline && atoi(deadline) > 0)
        kb_deadline = atoi(deadline);
    alarm((unsigned)kb_deadline);
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

// A cache over `backend` (whose handles are the counting backend's) with a
// table on device 0.
static regcache_t *kb_cache_over(const regcache_backend *backend, int validation,
                                 size_t max_entries, const regcache_device_keys_params *kp,
                                 regcache_device_table *t)
{
    regcache_params p;
    regcache_params_init(&p);
    p.backend = backend;
    p.validation = (regcache_validation)validation;
    p.max_entries = max_entries;
    p.device_keys = 1;
    regcache_t *c = NULL;
    kb_enter("create");
    KB_OK(regcache_create(&p, &c));
    regcache_device_keys_params q = *kp;
    q.lkey = kb_lkey;
    kb_enter("attach");
    uint64_t t0 = kb_clock_ns();
    KB_OK(regcache_device_keys_attach(c, 0, &q, t));
    printf("attach: %.1f ms\n", (kb_clock_ns() - t0) / 1e6);
    kb_watched = c;
    return c;
}

// A cache over the counting backend with a table on device 0.
static regcache_t *kb_cache(int validation, size_t max_entries,
                            const regcache_device_keys_params *kp, regcache_device_table *t)
{
    return kb_cache_over(&kb_backend, validation, max_entries, kp, t);
}

// The watchdog reports on a cache only until it goes.
static void kb_destroy(regcache_t *c)
{
    if (kb_watched == c)
        kb_watched = NULL;
    regcache_destroy(c);
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
