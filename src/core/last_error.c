#include <stdarg.h>
#include <stdio.h>

#include "last_error.h"
#include "regcache.h"

/* Per thread, so that a message explains the caller's own failure even when
 * other threads fail at the same time. */
static _Thread_local char last_error[256];

void rc_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
}

void rc_clear_error(void)
{
    last_error[0] = '\0';
}

const char *regcache_last_error(void)
{
    return last_error;
}
