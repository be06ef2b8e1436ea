/* Mappings of ledger segments that survive being truncated (see
 * ledger_guard.h). */
#include "ledger_guard.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>

#include "ledger_segment.h"
#include "resident.h"

/* Slots of guarded mappings: the handler reads them without a lock (it
 * may run in any thread, at any time), so each is a pair of atomics, the
 * length written before the base that makes the slot count. */
static _Atomic uintptr_t bases[RC_LEDGER_GUARDS];
static _Atomic size_t lens[RC_LEDGER_GUARDS];

static struct sigaction previous;
static pthread_once_t install_once = PTHREAD_ONCE_INIT;
static bool installed;

/* A SIGBUS that is not a guarded mapping's: what would have happened
 * without this handler. */
static void pass_on(int sig, siginfo_t *info, void *context)
{
    if (previous.sa_flags & SA_SIGINFO) {
        previous.sa_sigaction(sig, info, context);
        return;
    }
    /* Ignoring a SIGBUS that a fault raised is not possible: the kernel
     * kills the process; only one sent by a process may be ignored. */
    if (previous.sa_handler == SIG_IGN && info->si_code <= 0)
        return;
    if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
        return;
    }
    struct sigaction dfl = { .sa_handler = SIG_DFL };
    sigaction(SIGBUS, &dfl, NULL);
    /* Pending until the handler returns, then the default action. */
    raise(SIGBUS);
}

static void on_sigbus(int sig, siginfo_t *info, void *context)
{
    uintptr_t at = (uintptr_t)info->si_addr;
    /* si_code > 0: raised by a fault, whose address is real. */
    for (unsigned i = 0; info->si_code > 0 && i < RC_LEDGER_GUARDS; i++) {
        uintptr_t base = atomic_load_explicit(&bases[i], memory_order_acquire);
        size_t len = atomic_load_explicit(&lens[i], memory_order_relaxed);
        if (!base || at < base || at - base >= len)
            continue;
        int saved = errno;
        void *p = mmap((void *)base, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        errno = saved;
        if (p == MAP_FAILED)
            break;
        *(uint64_t *)p = RC_LEDGER_CUT;
        return; /* the faulting access runs again, on the new memory */
    }
    pass_on(sig, info, context);
}

static void install(void)
{
    /* The handler stays the process's after any dlclose() of the library. */
    rc_stay_resident();
    struct sigaction sa = { .sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO | SA_ONSTACK };
    sigemptyset(&sa.sa_mask);
    installed = sigaction(SIGBUS, &sa, &previous) == 0;
}

bool rc_ledger_guard(void *base, size_t len)
{
    pthread_once(&install_once, install);
    if (!installed)
        return false;
    for (unsigned i = 0; i < RC_LEDGER_GUARDS; i++) {
        uintptr_t free_slot = 0;
        if (atomic_load_explicit(&bases[i], memory_order_relaxed) ||
            !atomic_compare_exchange_strong(&bases[i], &free_slot, UINTPTR_MAX))
            continue;
        /* UINTPTR_MAX holds the slot and matches no address meanwhile. */
        atomic_store_explicit(&lens[i], len, memory_order_relaxed);
        atomic_store_explicit(&bases[i], (uintptr_t)base, memory_order_release);
        return true;
    }
    return false;
}

void rc_ledger_unguard(void *base)
{
    for (unsigned i = 0; i < RC_LEDGER_GUARDS; i++) {
        uintptr_t b = (uintptr_t)base;
        if (atomic_compare_exchange_strong(&bases[i], &b, 0))
            return;
    }
}
