/* The alarm that reports a hang (hang_alarm.h). */
#include "hang_alarm.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

static const char *hung_what;

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

void hang_alarm(unsigned seconds, const char *what)
{
    hung_what = what;
    signal(SIGALRM, hung);
    alarm(seconds);
}

void hang_alarm_off(void)
{
    alarm(0);
}
