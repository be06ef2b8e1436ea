#include <dlfcn.h>
#include <stddef.h>

#include "hook_link.h"

typedef void *(*dlsym_fn)(void *, const char *);

/* The preload hook interposes dlsym, so look the hook up with glibc's own. */
static dlsym_fn real_dlsym(void)
{
    dlsym_fn fn = (dlsym_fn)dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34");
    return fn ? fn : (dlsym_fn)dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.2.5");
}

int rc_hook_active(void)
{
    dlsym_fn lookup = real_dlsym();
    if (!lookup)
        return 0;
    int (*active)(void) = (int (*)(void))lookup(RTLD_DEFAULT, "regcache_hook_active");
    return active ? active() : 0;
}
