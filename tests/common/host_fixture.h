/* Tests of the host memory monitor: a cache of pageable host memory over
 * the fake backend (which never touches the memory), real mappings, and
 * the way the environment asks for (REGCACHE_HOST_MONITOR=libc, uffd or
 * ucm; UCM_FIRST=1 loads UCX's libucm first), so that each test file runs
 * once per way. */
#ifndef HOST_FIXTURE_H
#define HOST_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>

#include "cache_fixture.h"

/* Which sanitizer, if any, the test runs under.  Their allocators replace
 * glibc's and unmap by system call, so hooks (libc's or UCX's) cannot be
 * proven there: those ways are skipped, and say so. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HX_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define HX_SANITIZED 1
#endif
#endif
#ifndef HX_SANITIZED
#define HX_SANITIZED 0
#endif

/* The way under test: true for hooks (libc's or UCX's), false for the
 * userfaultfd. */
extern bool hx_by_hooks;
extern size_t hx_page;

/* f's cache of pageable host memory (host_memory on, 4 KiB alignment). */
void hx_create(struct fx *f);
/* An anonymous private read-write mapping (MAP_FIXED... in flags to place
 * it); fails the test when the kernel refuses. */
char *hx_anon(void *at, size_t len, int flags);
/* The cache goes before the memory its entries were registered over. */
void hx_destroy_then_unmap(struct fx *f, char *p, size_t len);

/* UCX's libucm loaded, with its hooks installed, as UCX loads it: true,
 * or false with why on stdout. */
bool hx_load_ucm(void);

/* Read the way from the environment (and load libucm where UCM_FIRST
 * asks) and check that it is there: 0, or the exit status main() returns
 * at once - 77 (a skip, said on stdout) for hooks under a sanitizer, 1
 * for a way that should be there and is not (said too). */
int hx_start(void);

#endif
