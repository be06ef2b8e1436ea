/* glibc's own dlsym.  The preload hook interposes dlsym to hand out
 * wrappers of cuGetProcAddress; whoever must reach the real driver looks
 * dlsym up by version inside libc (libdl before glibc 2.34), where a
 * lookup scoped to that handle cannot find the hook's definition.  Used by
 * the CUDA seam, the in-process interception, libc's hooks and the
 * wrappers both hooks share: header-only, so that the preload hook builds
 * it too. */
#ifndef RC_REAL_DLSYM_H
#define RC_REAL_DLSYM_H

#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

typedef void *(*rc_dlsym_fn)(void *handle, const char *symbol);

/* glibc's dlsym, never an interposed one, or NULL when it cannot be found.
 * Opens and closes libc: callers keep what it returns. */
static inline rc_dlsym_fn rc_cuda_real_dlsym(void)
{
    static const struct {
        const char *lib, *version;
    } homes[] = { { "libc.so.6", "GLIBC_2.34" }, { "libdl.so.2", "GLIBC_2.2.5" } };
    for (size_t i = 0; i < sizeof homes / sizeof homes[0]; i++) {
        void *lib = dlopen(homes[i].lib, RTLD_NOW | RTLD_NOLOAD);
        if (!lib)
            continue;
        void *fn = dlvsym(lib, "dlsym", homes[i].version);
        dlclose(lib);
        if (fn) {
            rc_dlsym_fn out;
            memcpy(&out, &fn, sizeof out);
            return out;
        }
    }
    return NULL;
}

#endif
