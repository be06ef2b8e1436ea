/* Holding a thread at a system call, for tests that need another thread to
 * act at that moment: a seccomp filter (SECCOMP_RET_TRAP) on the calling
 * thread sends each call of one system call to a SIGSYS handler there,
 * which asks the test what to do.  The filter stays until the thread
 * exits: install it on a thread of the test's own.  x86-64 only. */
#ifndef SYSCALL_TRAP_H
#define SYSCALL_TRAP_H

#include <stdint.h>

/* What the test says to a trapped call with arguments args[0..5]: what it
 * returns (as the kernel does: -errno on failure), typically after
 * syscall_trap_pass() made it.  Runs in the SIGSYS handler of the trapped
 * thread: async-signal-safe calls only. */
typedef long (*syscall_trap_fn)(const long args[6], void *arg);

/* Trap every call of system call `nr` by the calling thread from now on:
 * 0, or -1 with errno (no seccomp).  One trapped call at a time per
 * process; a later install (on another thread, once the last one's
 * trapped calls are done) replaces the number and the handler. */
int syscall_trap_install(long nr, syscall_trap_fn on_call, void *arg);

/* The same for the calls of `nr` whose first argument is arg0 only: the
 * thread's other calls of it (glibc's own, with every signal blocked as a
 * thread exits, when SIGSYS would kill the process) are not trapped. */
int syscall_trap_install_at(long nr, uintptr_t arg0, syscall_trap_fn on_call, void *arg);

/* Make the trapped system call with args on a helper thread outside the
 * filter: its result, or -errno.  Async-signal-safe. */
long syscall_trap_pass(const long args[6]);

/* A trapped call held until the test lets it go, so that another thread
 * acts while the call waits at the kernel's door: install
 * syscall_trap_hold as the handler with a struct syscall_hold as its
 * argument, then syscall_hold_wait() returns once the call is held and
 * syscall_hold_release() lets it run.  Two pipes; -1 with errno if
 * syscall_hold_open() cannot make them. */
struct syscall_hold {
    int held[2], go[2];
};
int syscall_hold_open(struct syscall_hold *h);
long syscall_trap_hold(const long args[6], void *hold);
int syscall_hold_wait(struct syscall_hold *h);
int syscall_hold_release(struct syscall_hold *h);
void syscall_hold_close(struct syscall_hold *h);

#endif
