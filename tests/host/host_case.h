/* What the tests of the host memory monitor share: the libc functions it
 * patches and their entries, and a cache watched the way the test asks. */
#ifndef HOST_CASE_H
#define HOST_CASE_H

#include <stdint.h>

#include "cache_fixture.h"

/* Whether a sanitizer's allocator replaces glibc's: it unmaps by system
 * call, so libc's self-test fails there. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#define LIBC_FNS 7
#define ENTRY_BYTES 16

extern const char *const libc_fn_names[LIBC_FNS];

/* libc.so.6's function `name`; fails the test when there is none. */
void *libc_fn(const char *name);

/* The first ENTRY_BYTES bytes of each function's entry. */
void libc_entries_read(uint8_t out[LIBC_FNS][ENTRY_BYTES]);

/* f's cache, with host memory, watched the way the environment asks
 * (REGCACHE_HOST_MONITOR=libc, uffd or ucm): fails the test when it is
 * not, or - where a sanitizer's allocator makes the hooks' self-test fail -
 * prints SKIP and the reason and exits 77. */
void host_create(struct fx *f);

/* UCX's libucm loaded, with its hooks installed, as UCX loads it; fails
 * the test when it cannot be. */
void host_load_ucm(void);

#endif
