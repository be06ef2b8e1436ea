/* The libc functions the host memory monitor patches, as the tests look at
 * them: each found in libc.so.6, and the first bytes of its entry. */
#ifndef LIBC_ENTRIES_H
#define LIBC_ENTRIES_H

#include <stdint.h>

#define LIBC_FNS 7
#define ENTRY_BYTES 16

extern const char *const libc_fn_names[LIBC_FNS];

/* libc.so.6's function `name`; fails the test when there is none. */
void *libc_fn(const char *name);

/* The first ENTRY_BYTES bytes of each function's entry. */
void libc_entries_read(uint8_t out[LIBC_FNS][ENTRY_BYTES]);

#endif
