#include "last_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "regcache.h"

/* Per thread, so that a message explains the caller's own failure even when
 * other threads fail at the same time. */
#define MESSAGE 512
static _Thread_local char last_error[MESSAGE];

static void set(const char *fmt, va_list ap)
{
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
}

void rc_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set(fmt, ap);
    va_end(ap);
}

int rc_fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set(fmt, ap);
    va_end(ap);
    return status;
}

void rc_prefix_error(const char *fmt, ...)
{
    char detail[MESSAGE];
    snprintf(detail, sizeof(detail), "%s", last_error);
    va_list ap;
    va_start(ap, fmt);
    set(fmt, ap);
    va_end(ap);
    size_t n = strlen(last_error);
    /* Truncation keeps the front of the detail, which is what matters. */
    if (detail[0] && n + 2 < sizeof(last_error)) {
        memcpy(last_error + n, ": ", 2);
        n += 2;
        size_t k = strnlen(detail, sizeof(last_error) - n - 1);
        memcpy(last_error + n, detail, k);
        last_error[n + k] = '\0';
    }
}

void rc_clear_error(void)
{
    last_error[0] = '\0';
}

const char *regcache_last_error(void)
{
    return last_error;
}
