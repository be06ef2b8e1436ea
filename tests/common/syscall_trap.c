/* The seccomp trap of a system call (syscall_trap.h).  The handler cannot
 * make the call itself (the filter would trap it again, with SIGSYS
 * blocked: the kernel would kill the process), so a helper thread started
 * at install makes it: the handler hands it the arguments through atomics
 * and spins until the result is back. */
#include "syscall_trap.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

static long trapped_nr;
static syscall_trap_fn handler_fn;
static void *handler_arg;

/* The helper's mailbox: 1 a request is in args, 2 its result is in result. */
static atomic_int mailbox;
static long request[6];
static long result;

static void *helper(void *unused)
{
    (void)unused;
    for (;;) {
        while (atomic_load(&mailbox) != 1)
            sched_yield();
        long r = syscall(trapped_nr, request[0], request[1], request[2], request[3], request[4],
                         request[5]);
        result = r == -1 ? -errno : r;
        atomic_store(&mailbox, 2);
    }
    return NULL;
}

long syscall_trap_pass(const long args[6])
{
    memcpy(request, args, sizeof request);
    atomic_store(&mailbox, 1);
    while (atomic_load(&mailbox) != 2)
        sched_yield();
    atomic_store(&mailbox, 0);
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

int syscall_trap_install(long nr, syscall_trap_fn on_call, void *arg)
{
    trapped_nr = nr;
    handler_fn = on_call;
    handler_arg = arg;
    pthread_t t;
    if (pthread_create(&t, NULL, helper, NULL) != 0)
        return -1;
    pthread_detach(t);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigsys;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSYS, &sa, NULL) != 0)
        return -1;
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = { sizeof filter / sizeof filter[0], filter };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        return -1;
    return 0;
}
