/* Holding a thread at a system call, for tests that need another thread to
 * act at that moment: a seccomp filter (SECCOMP_RET_TRAP) on the calling
 * thread sends each call of one system call to a SIGSYS handler there,
 * which asks the test what to do.  The filter stays until the thread
 * exits: install it on a thread of the test's own. */
#ifndef SYSCALL_TRAP_H
#define SYSCALL_TRAP_H

/* What the test says to a trapped call with arguments args[0..5]: what it
 * returns (as the kernel does: -errno on failure), typically after
 * syscall_trap_pass() made it.  Runs in the SIGSYS handler of the trapped
 * thread. */
typedef long (*syscall_trap_fn)(const long args[6], void *arg);

/* Trap every call of system call `nr` by the calling thread from now on:
 * 0, or -1 with errno (no seccomp).  One trap per process. */
int syscall_trap_install(long nr, syscall_trap_fn on_call, void *arg);

/* Make the trapped system call with args on a helper thread outside the
 * filter: its result, or -errno. */
long syscall_trap_pass(const long args[6]);

#endif
