/* Patching libc never depends on the application's signal mask.  A thread
 * that blocks every signal (as worker threads often do) calls mremap over
 * and over while the first cache patches libc; the patching thread's
 * membarrier system calls (made while a jump is written, or once it is)
 * are trapped (seccomp), and at each that finds mremap's entry changed the
 * patching thread waits until the other has gone through mremap twice
 * more.  A jump written in steps, through an int3 whose SIGTRAP the other
 * thread cannot take, would have the kernel kill the process there.
 * In a child process: that death is the failure. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache_fixture.h"
#include "crash_child.h"
#include "host_case.h"
#include "syscall_trap.h"
#include "test_sync.h"

static uint8_t mremap_was[ENTRY_BYTES];
static const uint8_t *mremap_entry;
static atomic_long remaps;
static atomic_int caught; /* membarrier calls made with mremap's entry changed */
static atomic_bool stop, creating;

/* All signals blocked, mremap in a loop on a page of its own. */
static void *remapping(void *unused)
{
    (void)unused;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *p = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    while (!atomic_load(&stop)) {
        if (mremap(p, page, page, 0) != p)
            _exit(40);
        atomic_fetch_add(&remaps, 1);
    }
    munmap(p, page);
    return NULL;
}

static long on_membarrier(const long args[6], void *unused)
{
    (void)unused;
    if (atomic_load(&creating) && memcmp(mremap_entry, mremap_was, ENTRY_BYTES) != 0) {
        atomic_fetch_add(&caught, 1);
        long from = atomic_load(&remaps);
        for (int i = 0; atomic_load(&remaps) < from + 2; i++)
            if (i == 10000000)
                _exit(41); /* the other thread no longer comes back */
            else
                sched_yield();
    }
    return syscall_trap_pass(args);
}

static void patch_beside_a_blocking_thread(void *unused)
{
    (void)unused;
    mremap_entry = libc_fn("mremap");
    memcpy(mremap_was, mremap_entry, ENTRY_BYTES);
    pthread_t t;
    if (pthread_create(&t, NULL, remapping, NULL) != 0)
        _exit(42);
    while (atomic_load(&remaps) == 0)
        sched_yield();
    if (syscall_trap_install(SYS_membarrier, on_membarrier, NULL) != 0)
        _exit(43);
    void *state;
    fx_setup(&state);
    struct fx *f = state;
    f->p.host_memory = 1;
    f->p.alignment = 4096;
    atomic_store(&creating, true);
    if (regcache_create(&f->p, &f->c) != REGCACHE_OK)
        _exit(44);
    atomic_store(&creating, false);
    atomic_store(&stop, true);
    pthread_join(t, NULL);
    if (atomic_load(&caught) == 0)
        _exit(45); /* the patch was never caught while being written */
    regcache_destroy(f->c);
}

static void patching_never_traps(void **state)
{
    (void)state;
    assert_true(crash_child_run(patch_beside_a_blocking_thread, NULL, HANG_SECONDS * 6));
}

int main(void)
{
    const struct CMUnitTest tests[] = { cmocka_unit_test(patching_never_traps) };
    return cmocka_run_group_tests_name("self_test_sigtrap", tests, NULL, NULL);
}
