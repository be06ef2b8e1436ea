/* A cache watched by libc's hooks, for the host monitor's tests
 * (host_case.h). */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "host_case.h"

void host_create(struct fx *f)
{
    static const char *const ways[][2] = {
        { "libc", "host memory: monitored by patching libc" },
        { "uffd", "host memory: monitored by userfaultfd" },
        { "ucm", "host memory: monitored by UCX's memory events" },
    };
    const char *asked = getenv("REGCACHE_HOST_MONITOR"), *expected = NULL;
    for (size_t i = 0; i < sizeof ways / sizeof ways[0]; i++)
        if (asked && strcmp(asked, ways[i][0]) == 0)
            expected = ways[i][1];
    if (!expected)
        fail_msg("REGCACHE_HOST_MONITOR=%s: not libc, uffd or ucm", asked ? asked : "");
    f->p.host_memory = 1;
    f->p.alignment = 4096;
    fx_create(f);
    const char *why = regcache_validation_reason(f->c);
    if (strstr(why, expected))
        return;
    if (HX_SANITIZED && strstr(why, "free() of a 64 MiB block")) {
        printf("SKIP: a sanitizer's allocator: %s\n", why);
        exit(77);
    }
    fail_msg("not watched as asked (%s): %s", asked, why);
}
