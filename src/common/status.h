/* The status codes of regcache.h, for checks inside the library. */
#ifndef RC_STATUS_H
#define RC_STATUS_H

#include <stdbool.h>

/* Is status one of REGCACHE_STATUS_TABLE's codes?  A backend callback may
 * return anything; only these may reach the caller. */
bool rc_status_known(int status);

#endif
