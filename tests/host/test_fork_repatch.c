/* A fork while the monitor patches libc again (another patcher rewrote
 * munmap's entry) waits for that patch to end: the child's lock is free,
 * and its first miss of host memory, which looks at the patches under that
 * lock, goes on (alarm otherwise).  The patching thread is held at the
 * mprotect that seals its new page (seccomp) until the fork has begun. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "chain_patcher.h"
#include "hang_alarm.h"
#include "host_case.h"
#include "syscall_trap.h"

#define LEN (4 * MiB)

static struct chain_patch other;

static int other_munmap(void *addr, size_t len)
{
    return ((int (*)(void *, size_t))other.displaced)(addr, len);
}

static atomic_bool held, forking;

/* The first mprotect to read and execute only: the seal of the new page. */
static long on_mprotect(const long args[6], void *unused)
{
    (void)unused;
    if (args[2] == (PROT_READ | PROT_EXEC) && !atomic_exchange(&held, true))
        for (int i = 0; !atomic_load(&forking) && i < 10000000; i++)
            sched_yield();
    return syscall_trap_pass(args);
}

static void fork_begins(void)
{
    atomic_store(&forking, true);
}

struct miss {
    struct fx *f;
    char *p;
};

static void *miss_trapped(void *arg)
{
    struct miss *m = arg;
    if (syscall_trap_install(SYS_mprotect, on_mprotect, NULL) != 0)
        _exit(50);
    regcache_entry_t *e;
    if (regcache_get(m->f->c, m->p, LEN, &e) != REGCACHE_OK)
        _exit(51);
    regcache_put(m->f->c, e);
    return NULL;
}

static char *anon(void)
{
    char *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    return p;
}

static void fork_waits_for_the_patch(void **state)
{
    struct fx *f = *state;
    host_create(f);
    /* The monitor's thread started (by a watched range, then none): not
     * by the trapped thread, whose filter it would inherit. */
    char *first = anon();
    fx_use(f, (uintptr_t)first, LEN);
    assert_int_equal(regcache_invalidate(f->c, first, LEN), REGCACHE_OK);
    assert_int_equal(chain_patch(&other, libc_fn("munmap"), (void *)other_munmap), 0);
    /* Registered after the library's own: runs before them. */
    pthread_atfork(fork_begins, NULL, NULL);
    struct miss m = { f, anon() };
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, miss_trapped, &m), 0);
    while (!atomic_load(&held))
        sched_yield();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        hang_alarm(20, "the child's first miss of host memory waited for a lock that a patch "
                       "under way at the fork had taken");
        struct regcache_params params = f->p;
        regcache_t *c;
        regcache_entry_t *e;
        char *q = anon();
        if (regcache_create(&params, &c) != REGCACHE_OK || regcache_get(c, q, LEN, &e) != 0)
            _exit(2);
        regcache_put(c, e);
        regcache_destroy(c);
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    pthread_join(t, NULL);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    regcache_destroy(f->c);
    f->c = NULL;
    munmap(m.p, LEN);
    munmap(first, LEN);
}

FX_MAIN(fork_waits_for_the_patch)
