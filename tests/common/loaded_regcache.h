/* libregcache.so as a plugin loader reaches it: dlopen() of the built
 * library and dlsym() of the functions a test calls, for tests that
 * dlclose() it again and so must not link it. */
#ifndef LOADED_REGCACHE_H
#define LOADED_REGCACHE_H

#include "regcache.h"

struct loaded_regcache {
    void *handle;
    int (*params_init)(struct regcache_params *);
    int (*create)(const struct regcache_params *, regcache_t **);
    void (*destroy)(regcache_t *);
    int (*get)(regcache_t *, const void *, size_t, regcache_entry_t **);
    void (*put)(regcache_t *, regcache_entry_t *);
    int (*validation_mode)(const regcache_t *);
    const char *(*validation_reason)(const regcache_t *);
};

/* dlopen(path, RTLD_NOW | RTLD_LOCAL) and every function: 0, or -1 with
 * the reason printed. */
int loaded_regcache_open(const char *path, struct loaded_regcache *lib);

#endif
