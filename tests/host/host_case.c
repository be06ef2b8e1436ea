/* What the host monitor's tests share (host_case.h). */
#include "host_case.h"

#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

const char *const libc_fn_names[LIBC_FNS] = { "munmap", "mremap", "mmap",  "madvise",
                                              "brk",    "sbrk",   "shmat", "shmdt" };

void *libc_fn(const char *name)
{
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    void *fn = libc ? dlsym(libc, name) : NULL;
    if (!fn)
        fail_msg("libc.so.6 has no %s", name);
    return fn;
}

void libc_entries_read(uint8_t out[LIBC_FNS][ENTRY_BYTES])
{
    for (int i = 0; i < LIBC_FNS; i++)
        memcpy(out[i], libc_fn(libc_fn_names[i]), ENTRY_BYTES);
}
