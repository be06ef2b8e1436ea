/* The libc hooks' self-test moves nothing under the application.  malloc
 * in another thread may grow the heap at any moment; a self-test that set
 * the break back to where it had read it a moment before would take away
 * what malloc had just handed out.  Here the creating thread's brk system
 * calls are trapped (seccomp): at the first, another thread grows the
 * break, as malloc would, before the call goes through.  The break must
 * stay where that thread left it: the self-test makes no brk system call
 * at all (its calls of brk and sbrk stop at their hooks). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache_fixture.h"
#include "syscall_trap.h"

static atomic_int brk_calls;
static long grown_to;

static long on_brk(const long args[6], void *unused)
{
    (void)unused;
    if (atomic_fetch_add(&brk_calls, 1) == 0) {
        const long now[6] = { 0 };
        const long grow[6] = { syscall_trap_pass(now) + 64 * 1024 };
        grown_to = syscall_trap_pass(grow);
    }
    return syscall_trap_pass(args);
}

struct create {
    struct fx *f;
    int status;
};

/* A thread of its own: the filter stays with it. */
static void *create_trapped(void *arg)
{
    struct create *c = arg;
    c->status =
        syscall_trap_install(SYS_brk, on_brk, NULL) != 0 ? -1 : regcache_create(&c->f->p, &c->f->c);
    return NULL;
}

static void self_test_leaves_the_break(void **state)
{
    struct fx *f = *state;
    f->p.host_memory = 1;
    f->p.alignment = 4096;
    struct create c = { f, -1 };
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, create_trapped, &c), 0);
    pthread_join(t, NULL);
    assert_int_equal(c.status, REGCACHE_OK);
    long now = syscall(SYS_brk, 0);
    if (atomic_load(&brk_calls) && now != grown_to)
        fail_msg("the self-test set the break to %#lx, under the %#lx another thread had just "
                 "grown it to",
                 (unsigned long)now, (unsigned long)grown_to);
    if (atomic_load(&brk_calls))
        fail_msg("creating the cache made %d brk system call(s)", atomic_load(&brk_calls));
    print_message("  %s\n", regcache_validation_reason(f->c));
}

FX_MAIN(self_test_leaves_the_break)
