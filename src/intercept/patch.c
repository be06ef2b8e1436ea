/* Writing code (see patch.h). */
#include "patch.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/ucontext.h>
#include <unistd.h>

#include "proc_maps.h"

/* jmp rel32 spans +-2 GiB; a margin keeps every byte of the page and every
 * entry of the library inside it. */
#define REACH (((uintptr_t)1 << 31) - ((uintptr_t)1 << 20))

void *rc_patch_page_near(uintptr_t lo, uintptr_t hi, size_t size, char *why, size_t n)
{
    uintptr_t from = hi > REACH ? hi - REACH : 0;
    uintptr_t to = lo + REACH;
    /* Another thread may map the gap first: look again. */
    for (int attempt = 0; attempt < 4; attempt++) {
        uintptr_t at;
        if (rc_maps_free_near(from, to, size, lo, &at) != 0) {
            snprintf(why, n, "no free address within 2 GiB of libcuda's code");
            return NULL;
        }
        void *p = mmap((void *)at, size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p == (void *)at)
            return p;
        if (p == MAP_FAILED && errno != EEXIST) {
            snprintf(why, n, "cannot map a page near libcuda's code: %s", strerror(errno));
            return NULL;
        }
        /* Kernels before 4.17 take the address as a hint only. */
        if (p != MAP_FAILED)
            munmap(p, size);
    }
    snprintf(why, n, "no page within 2 GiB of libcuda's code stayed free");
    return NULL;
}

int rc_patch_seal(void *page, size_t size, char *why, size_t n)
{
    if (mprotect(page, size, PROT_READ | PROT_EXEC) == 0)
        return 0;
    snprintf(why, n, "cannot make the trampoline page executable: %s", strerror(errno));
    munmap(page, size);
    return -1;
}

/* The sites written the int3 way and where a thread that meets their int3
 * goes.  Rows stay: a thread may take the trap before its site is complete
 * and run the handler after. */
#define TRAPS 64
static struct {
    _Atomic uintptr_t site, detour;
} traps[TRAPS];
static atomic_int n_traps;
static struct sigaction replaced; /* the SIGTRAP handler before ours */

/* Traps that are not at a site go where they went before. */
static void pass_on(int sig, siginfo_t *info, void *context)
{
    if (replaced.sa_flags & SA_SIGINFO) {
        replaced.sa_sigaction(sig, info, context);
    } else if (replaced.sa_handler == SIG_DFL) {
        /* Delivered when this handler returns, to the default action. */
        signal(sig, SIG_DFL);
        raise(sig);
    } else if (replaced.sa_handler != SIG_IGN) {
        replaced.sa_handler(sig);
    }
}

static void on_trap(int sig, siginfo_t *info, void *context)
{
    ucontext_t *uc = context;
    /* After an int3 the instruction pointer is one byte past it; no other
     * trap stops there, inside the site's instruction. */
    uintptr_t at = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP] - 1;
    int n = atomic_load_explicit(&n_traps, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (atomic_load_explicit(&traps[i].site, memory_order_relaxed) == at) {
            uc->uc_mcontext.gregs[REG_RIP] =
                (greg_t)atomic_load_explicit(&traps[i].detour, memory_order_relaxed);
            return;
        }
    pass_on(sig, info, context);
}

static pthread_once_t trap_once = PTHREAD_ONCE_INIT;
static int trap_error; /* errno of a failed install, 0 once installed */

static void install_trap_handler(void)
{
    struct sigaction mine;
    memset(&mine, 0, sizeof mine);
    mine.sa_sigaction = on_trap;
    mine.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&mine.sa_mask);
    /* The old handler is read first: ours may run as soon as it is set. */
    if (sigaction(SIGTRAP, NULL, &replaced) != 0 || sigaction(SIGTRAP, &mine, NULL) != 0)
        trap_error = errno;
}

/* Intel's rule for code modified while other processors may run it: they
 * must execute a serialising instruction before they run the new bytes.
 * This makes every thread of the process do so.  Kernels before 4.16 (or a
 * seccomp filter) refuse it. */
static bool sync_cores(void)
{
    return syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0) ==
               0 &&
           syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0) == 0;
}

static void store_byte(uintptr_t at, uint8_t value)
{
    __atomic_store_n((uint8_t *)at, value, __ATOMIC_SEQ_CST);
}

/* The int3 way, for bytes across an 8-byte boundary: no single store
 * writes them all. */
static int write_trapped(uintptr_t site, const uint8_t *bytes, uintptr_t detour, char *why,
                         size_t n)
{
    pthread_once(&trap_once, install_trap_handler);
    if (trap_error) {
        snprintf(why, n, "cannot install a SIGTRAP handler: %s", strerror(trap_error));
        return -1;
    }
    /* Without it a core may run a mix of old and new bytes: refused before
     * anything is written. */
    if (!sync_cores()) {
        snprintf(why, n, "the kernel cannot serialise other cores (membarrier SYNC_CORE): %s",
                 strerror(errno));
        return -1;
    }
    int i = atomic_load_explicit(&n_traps, memory_order_relaxed);
    if (i == TRAPS) {
        snprintf(why, n, "more than %d sites across an 8-byte boundary", TRAPS);
        return -1;
    }
    atomic_store_explicit(&traps[i].site, site, memory_order_relaxed);
    atomic_store_explicit(&traps[i].detour, detour, memory_order_relaxed);
    atomic_store_explicit(&n_traps, i + 1, memory_order_release);
    store_byte(site, 0xcc);
    sync_cores();
    for (size_t b = 1; b < RC_PATCH_LEN; b++)
        store_byte(site + b, bytes[b]);
    sync_cores();
    store_byte(site, bytes[0]);
    sync_cores();
    return 0;
}

int rc_patch_site(uintptr_t site, const uint8_t *bytes, uintptr_t detour, char *why, size_t n)
{
    struct rc_mapping m;
    if (rc_maps_find(site, &m) != 0 || m.end < site + RC_PATCH_LEN) {
        snprintf(why, n, "site %#jx is not within one mapping of /proc/self/maps",
                 (uintmax_t)site);
        return -1;
    }
    uintptr_t page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t from = site & ~(page_size - 1);
    size_t span = ((site + RC_PATCH_LEN - 1) & ~(page_size - 1)) + page_size - from;
    /* Executable all along: other threads may be running this code. */
    if (mprotect((void *)from, span, m.prot | PROT_WRITE) != 0) {
        snprintf(why, n, "cannot make libcuda's code writable: %s", strerror(errno));
        return -1;
    }
    int rc = 0;
    uintptr_t word = site & ~(uintptr_t)7;
    if (site + RC_PATCH_LEN <= word + sizeof(uint64_t)) {
        uint64_t *at = (uint64_t *)word;
        uint64_t value = __atomic_load_n(at, __ATOMIC_RELAXED);
        memcpy((uint8_t *)&value + (site - word), bytes, RC_PATCH_LEN);
        __atomic_store_n(at, value, __ATOMIC_SEQ_CST);
        /* The store alone makes other cores run the old instruction or the
         * new one; this makes sure none still runs the old one once a cache
         * trusts the patch.  Best effort: the window it closes is a few
         * instructions long. */
        sync_cores();
    } else {
        rc = write_trapped(site, bytes, detour, why, n);
    }
    if (mprotect((void *)from, span, m.prot) != 0) {
        snprintf(why, n, "cannot restore the protection of libcuda's code: %s", strerror(errno));
        return -1;
    }
    return rc;
}

bool rc_patch_holds(uintptr_t at, const uint8_t *bytes, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (__atomic_load_n((const uint8_t *)at + i, __ATOMIC_RELAXED) != bytes[i])
            return false;
    return true;
}
