/* The alarm that reports a hang (hang_alarm.h). */
#include "hang_alarm.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *hung_what;
static _Atomic time_t deadline; /* CLOCK_MONOTONIC seconds; 0: disarmed */
static pid_t watchdog_of;       /* the process whose watchdog runs */

static void hung(int sig)
{
    (void)sig;
    static const char prefix[] = "hung (alarm): ";
    ssize_t n = write(STDERR_FILENO, prefix, sizeof prefix - 1);
    n = write(STDERR_FILENO, hung_what, strlen(hung_what));
    n = write(STDERR_FILENO, "\n", 1);
    (void)n;
    _exit(1);
}

static time_t now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec;
}

static void *watchdog(void *unused)
{
    (void)unused;
    struct timespec nap = { 0, 100 * 1000 * 1000 };
    for (;;) {
        time_t d = atomic_load(&deadline);
        if (d && now() >= d)
            hung(0);
        nanosleep(&nap, NULL);
    }
    return NULL;
}

void hang_alarm(unsigned seconds, const char *what)
{
    hung_what = what;
    atomic_store(&deadline, now() + (time_t)seconds + 1);
    if (watchdog_of != getpid()) {
        pthread_t t;
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        if (pthread_create(&t, NULL, watchdog, NULL) == 0) {
            pthread_detach(t);
            watchdog_of = getpid();
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    signal(SIGALRM, hung);
    alarm(seconds);
}

void hang_alarm_off(void)
{
    alarm(0);
    atomic_store(&deadline, 0);
}
