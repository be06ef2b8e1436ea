/* Reaching libcuda's own definitions, past the hook's exports. */
#include <dlfcn.h>
#include <stdatomic.h>

#include "hook.h"

void *rc_wrap_driver_symbol(const char *symbol)
{
    static _Atomic(void *) driver;
    void *lib = atomic_load_explicit(&driver, memory_order_acquire);
    if (!lib) {
        /* Whoever handed a driver function to the hook has loaded the
         * driver.  Never closed; racing threads only raise its count. */
        lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (!lib)
            return NULL;
        atomic_store_explicit(&driver, lib, memory_order_release);
    }
    return rc_hook_real_dlsym()(lib, symbol);
}
