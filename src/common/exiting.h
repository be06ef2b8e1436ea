/* Whether the process is exiting, for the library's own threads (the host
 * memory monitor, the background registration workers): from then on they
 * start no call into the application (a callback, a custom backend), whose
 * libraries' destructors may have run or be about to.
 *
 * exit() runs the handlers registered with atexit() in the reverse order
 * of their registration, and the destructors of the loaded libraries after
 * every handler registered once main() began.  So the flag, set by a
 * handler registered when the first such thread starts, is up before any
 * library's destructor runs, and before the handlers registered earlier;
 * handlers registered later run before it.  A callback already under way
 * when it rises finishes. */
#ifndef RC_EXITING_H
#define RC_EXITING_H

#include <stdbool.h>

/* Register the handler, once: call before starting a thread that calls
 * the application.  Thread safe. */
void rc_exiting_watch(void);

/* Has exit() reached the handler?  One relaxed load. */
bool rc_exiting(void);

#endif
