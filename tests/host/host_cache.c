/* A cache watched by libc's hooks, for the host monitor's tests
 * (host_case.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "host_case.h"

void host_create_by_libc(struct fx *f)
{
    f->p.host_memory = 1;
    f->p.alignment = 4096;
    fx_create(f);
    const char *why = regcache_validation_reason(f->c);
    if (strstr(why, "host memory: monitored by patching libc"))
        return;
    if (SANITIZED && strstr(why, "free() of a 64 MiB block")) {
        printf("SKIP: a sanitizer's allocator: %s\n", why);
        exit(77);
    }
    fail_msg("not watched by libc's hooks: %s", why);
}
