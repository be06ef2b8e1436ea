/* The per-thread detail message behind regcache_last_error(). */
#ifndef RC_LAST_ERROR_H
#define RC_LAST_ERROR_H

#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
void rc_set_error(const char *fmt, ...);
void rc_clear_error(void);

#endif
