/* What a call prints to stderr, for the tests of the REGCACHE_STATS dump. */
#ifndef CAPTURE_STDERR_H
#define CAPTURE_STDERR_H

#include <stddef.h>

#include "regcache.h"

/* regcache_destroy(cache), with what it printed to stderr in buf[n] (always
 * terminated).  Returns the number of bytes kept. */
size_t destroy_capturing_stderr(regcache_t *cache, char *buf, size_t n);

#endif
