/* A test body run in a forked child, for tests whose failure may be a
 * crash: the crash ends the child and fails the case, instead of ending the
 * test program (or of cmocka's handlers carrying on inside the child). */
#ifndef CRASH_CHILD_H
#define CRASH_CHILD_H

#include <stdbool.h>

/* Run body(arg) in a child and wait for it (killing it after `seconds`):
 * whether it exited 0.  What it did instead (hung, died of a signal,
 * exited with a code naming the step that failed) is printed. */
bool crash_child_run(void (*body)(void *arg), void *arg, double seconds);

#endif
