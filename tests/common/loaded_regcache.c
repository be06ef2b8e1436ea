/* libregcache.so loaded at run time (see loaded_regcache.h). */
#include "loaded_regcache.h"

#include <dlfcn.h>
#include <stdio.h>

/* dlsym returns an object pointer; POSIX guarantees it converts. */
#define FIND(field, name)                                 \
    do {                                                  \
        *(void **)&lib->field = dlsym(lib->handle, name); \
        if (!lib->field) {                                \
            fprintf(stderr, "%s: no %s\n", path, name);   \
            return -1;                                    \
        }                                                 \
    } while (0)

int loaded_regcache_open(const char *path, struct loaded_regcache *lib)
{
    lib->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib->handle) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        return -1;
    }
    FIND(params_init, "regcache_params_init");
    FIND(create, "regcache_create");
    FIND(destroy, "regcache_destroy");
    FIND(get, "regcache_get");
    FIND(put, "regcache_put");
    FIND(validation_mode, "regcache_validation_mode");
    FIND(validation_reason, "regcache_validation_reason");
    return 0;
}
