/* A hang reported by alarm(): after `seconds` the process prints what
 * hung and exits 1, whatever the thread that hangs holds. */
#ifndef HANG_ALARM_H
#define HANG_ALARM_H

/* Arm the alarm; `what` (a string that outlives it) is printed when it
 * goes off. */
void hang_alarm(unsigned seconds, const char *what);

/* Disarm it. */
void hang_alarm_off(void);

#endif
