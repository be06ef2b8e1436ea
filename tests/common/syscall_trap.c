/* The seccomp trap of a system call (syscall_trap.h).  The handler cannot
 * make the call itself (the filter would trap it again, with SIGSYS
 * blocked: the kernel would kill the process), so a helper thread, started
 * once per process, makes it: the handler hands it the arguments and waits
 * for the result, each way through a pipe (async-signal-safe, and nobody
 * spins meanwhile). */
#include "syscall_trap.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

static long trapped_nr;
static syscall_trap_fn handler_fn;
static void *handler_arg;

/* The helper's mailbox: a request is in `request` once a byte arrives on
 * to_helper, its result in `result` once one arrives on from_helper. */
static int to_helper[2], from_helper[2];
static pid_t helper_of; /* the process whose helper runs */
static long request[6];
static long result;

static void *helper(void *unused)
{
    (void)unused;
    for (;;) {
        char c;
        if (read(to_helper[0], &c, 1) != 1)
            continue; /* EINTR */
        long r = syscall(trapped_nr, request[0], request[1], request[2], request[3], request[4],
                         request[5]);
        result = r == -1 ? -errno : r;
        while (write(from_helper[1], &c, 1) != 1)
            ;
    }
    return NULL;
}

long syscall_trap_pass(const long args[6])
{
    memcpy(request, args, sizeof request);
    char c = 0;
    while (write(to_helper[1], &c, 1) != 1)
        ;
    while (read(from_helper[0], &c, 1) != 1)
        ;
    return result;
}

static void on_sigsys(int sig, siginfo_t *info, void *context)
{
    (void)sig;
    ucontext_t *uc = context;
    greg_t *r = uc->uc_mcontext.gregs;
    if (info->si_syscall != trapped_nr)
        return;
    const long args[6] = { r[REG_RDI], r[REG_RSI], r[REG_RDX], r[REG_R10], r[REG_R8], r[REG_R9] };
    int saved = errno;
    r[REG_RAX] = handler_fn(args, handler_arg);
    errno = saved;
}

/* The helper, once per process, with every signal blocked. */
static int start_helper(void)
{
    if (helper_of == getpid())
        return 0;
    if (pipe2(to_helper, O_CLOEXEC) != 0 || pipe2(from_helper, O_CLOEXEC) != 0)
        return -1;
    pthread_t t;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&t, NULL, helper, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return -1;
    pthread_detach(t);
    helper_of = getpid();
    return 0;
}

/* The filter: calls of nr (with arg0 first, where `at`) trap, any other
 * call goes on. */
static int filter(long nr, bool at, uint64_t arg0)
{
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 5),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)arg0, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0]) + 4),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)(arg0 >> 32), 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    /* Without `at`, the argument's checks are left out: the nr check
     * falls through to the trap. */
    struct sock_filter any[] = {
        code[0], code[1], code[2], code[3], BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 1),
        code[9], code[10]
    };
    struct sock_fprog prog = at ? (struct sock_fprog){ sizeof code / sizeof code[0], code }
                                : (struct sock_fprog){ sizeof any / sizeof any[0], any };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        return -1;
    return 0;
}

static int install(long nr, bool at, uint64_t arg0, syscall_trap_fn on_call, void *arg)
{
    trapped_nr = nr;
    handler_fn = on_call;
    handler_arg = arg;
    if (start_helper() != 0)
        return -1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigsys;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSYS, &sa, NULL) != 0)
        return -1;
    return filter(nr, at, arg0);
}

int syscall_trap_install(long nr, syscall_trap_fn on_call, void *arg)
{
    return install(nr, false, 0, on_call, arg);
}

int syscall_trap_install_at(long nr, uintptr_t arg0, syscall_trap_fn on_call, void *arg)
{
    return install(nr, true, arg0, on_call, arg);
}

int syscall_hold_open(struct syscall_hold *h)
{
    if (pipe(h->held) != 0)
        return -1;
    if (pipe(h->go) != 0) {
        close(h->held[0]);
        close(h->held[1]);
        return -1;
    }
    return 0;
}

/* In the trapped thread's SIGSYS handler: says it is held, then waits. */
long syscall_trap_hold(const long args[6], void *hold)
{
    struct syscall_hold *h = hold;
    char c = 0;
    ssize_t n = write(h->held[1], &c, 1);
    n = read(h->go[0], &c, 1);
    (void)n;
    return syscall_trap_pass(args);
}

int syscall_hold_wait(struct syscall_hold *h)
{
    char c;
    return read(h->held[0], &c, 1) == 1 ? 0 : -1;
}

int syscall_hold_release(struct syscall_hold *h)
{
    char c = 0;
    return write(h->go[1], &c, 1) == 1 ? 0 : -1;
}

void syscall_hold_close(struct syscall_hold *h)
{
    for (int i = 0; i < 2; i++) {
        close(h->held[i]);
        close(h->go[i]);
    }
}
