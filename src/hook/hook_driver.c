/* Reaching libcuda's own definitions, past the hook's exports. */
#include <dlfcn.h>
#include <stdatomic.h>

#include "hook.h"

void *rc_hook_driver_symbol(const char *symbol)
{
    static _Atomic(void *) driver;
    void *lib = atomic_load_explicit(&driver, memory_order_acquire);
    if (lib == NULL) {
        /* Whoever handed a driver function to the hook has loaded the
         * driver.  Never closed; racing threads only raise its count. */
        lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (lib == NULL)
            return NULL;
        atomic_store_explicit(&driver, lib, memory_order_release);
    }
    return rc_hook_real_dlsym()(lib, symbol);
}

void *rc_hook_driver_function(_Atomic(void *) *cache, const char *symbol)
{
    void *fn = atomic_load_explicit(cache, memory_order_acquire);
    if (fn == NULL) {
        fn = rc_hook_driver_symbol(symbol);
        atomic_store_explicit(cache, fn, memory_order_release);
    }
    return fn;
}
