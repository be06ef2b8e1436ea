/* A hang reported as one: after `seconds` the process prints what hung and
 * exits 1, whatever the hung thread holds or blocks.  alarm() alone cannot
 * do it where every thread blocks SIGALRM (a thread spinning inside
 * pthread_create() does): a watchdog thread goes off too. */
#ifndef HANG_ALARM_H
#define HANG_ALARM_H

/* Arm it; `what` (a string that outlives it) is printed when it goes off.
 * In the child of a fork, arm it again: neither the alarm nor the
 * watchdog is inherited. */
void hang_alarm(unsigned seconds, const char *what);

/* Disarm it. */
void hang_alarm_off(void);

#endif
