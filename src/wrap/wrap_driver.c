/* Reaching libcuda's own definitions past every wrapper (wrap.h): glibc's
 * dlsym, not the hook's, on the driver's handle, whose scope holds none of
 * the hook's exports of the same names.  Built into the library and the
 * preload hook alike. */
#include <dlfcn.h>
#include <stdatomic.h>

#include "real_dlsym.h"
#include "wrap.h"

/* libcuda's own definition of `symbol`, or NULL while the driver is not
 * loaded. */
static void *driver_symbol(const char *symbol)
{
    static _Atomic(void *) driver;
    static _Atomic(rc_dlsym_fn) real_dlsym;
    void *lib = atomic_load_explicit(&driver, memory_order_acquire);
    rc_dlsym_fn sym = atomic_load_explicit(&real_dlsym, memory_order_acquire);
    if (!lib) {
        /* Whoever handed a driver function to a wrapper has loaded the
         * driver.  Never closed; racing threads only raise its count. */
        lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (!lib)
            return NULL;
        atomic_store_explicit(&driver, lib, memory_order_release);
    }
    if (!sym) {
        sym = rc_cuda_real_dlsym();
        if (!sym)
            return NULL;
        atomic_store_explicit(&real_dlsym, sym, memory_order_release);
    }
    return sym(lib, symbol);
}

void *rc_wrap_driver_function(_Atomic(void *) *cache, const char *symbol)
{
    void *fn = atomic_load_explicit(cache, memory_order_acquire);
    if (!fn) {
        /* Racing threads find the same function: storing it twice is
         * harmless. */
        fn = driver_symbol(symbol);
        atomic_store_explicit(cache, fn, memory_order_release);
    }
    return fn;
}
