/* Test bodies in forked children (see crash_child.h). */
#include "crash_child.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_sync.h"

bool crash_child_run(void (*body)(void *arg), void *arg, double seconds)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        abort();
    if (pid == 0) {
        static const int crashes[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT };
        for (size_t i = 0; i < sizeof crashes / sizeof crashes[0]; i++)
            signal(crashes[i], SIG_DFL);
        /* A hang ends the child too, should the parent's wait not. */
        alarm((unsigned)seconds + 1);
        body(arg);
        _exit(0);
    }
    int status;
    if (!child_wait(pid, seconds, &status)) {
        fprintf(stderr, "    the child hung\n");
        return false;
    }
    if (WIFSIGNALED(status))
        fprintf(stderr, "    the child died of signal %d\n", WTERMSIG(status));
    else if (WEXITSTATUS(status) != 0)
        fprintf(stderr, "    the child failed (exit %d)\n", WEXITSTATUS(status));
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}
