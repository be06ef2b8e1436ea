#include "last_error.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "regcache.h"

/* Per thread, so that a message explains the caller's own failure even when
 * other threads fail at the same time. */
#define MESSAGE 512
static _Thread_local char last_error[MESSAGE];
/* Set when last_error no longer explains anything.  Every miss clears the
 * message twice (before each callback, to tell whether it left one), and
 * the buffer's address in a shared library costs a call to the dynamic
 * TLS lookup; this flag lives in the static TLS block like
 * rc_thread_current, one store away. */
static __thread bool cleared __attribute__((tls_model("initial-exec")));

static void set(const char *fmt, va_list ap)
{
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    cleared = false;
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
    snprintf(detail, sizeof(detail), "%s", regcache_last_error());
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
    cleared = true;
}

const char *regcache_last_error(void)
{
    return cleared ? "" : last_error;
}
