#include <dlfcn.h>
#include <stddef.h>

#include "hook_detect.h"

/* A plain RTLD_DEFAULT lookup: the hook's own dlsym passes such lookups to
 * glibc untouched, so this finds the hook's export exactly when the hook is
 * in the process's global scope. */
int rc_hook_active(void)
{
    int (*active)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "regcache_hook_active");
    return active ? active() : 0;
}
