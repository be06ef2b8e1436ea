/* The per-thread detail message behind regcache_last_error(). */
#ifndef RC_LAST_ERROR_H
#define RC_LAST_ERROR_H

__attribute__((format(printf, 1, 2))) void rc_set_error(const char *fmt, ...);
void rc_clear_error(void);

/* Set the message and return `status`: every failing public call ends in
 * this (or in rc_set_error() before returning), so that the message
 * regcache_last_error() shows is always the call's own. */
__attribute__((format(printf, 2, 3))) int rc_fail(int status, const char *fmt, ...);

/* Prefix the message already set (by a lower layer) with more context. */
__attribute__((format(printf, 1, 2))) void rc_prefix_error(const char *fmt, ...);

#endif
