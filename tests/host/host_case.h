/* What the tests of the host memory monitor share: the libc functions it
 * patches and their entries, and a cache watched the way the test asks. */
#ifndef HOST_CASE_H
#define HOST_CASE_H

#include <stdint.h>

#include "cache_fixture.h"
#include "host_fixture.h"

#define LIBC_FNS 8
/* Where a patch of a function's entry may lie: after leading instructions
 * (an endbr64, a frame's set-up) the site can be past byte 16, as in
 * mremap and sbrk of a glibc built for indirect-branch tracking. */
#define ENTRY_BYTES 32

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

#endif
