/* Pinning the library in memory (see resident.h).
 *
 * Pinned on demand rather than linked with -z nodelete: a process that
 * loads the library, never creates a cache and unloads it (a framework
 * probing its plugins) gets its memory back; only once the library has
 * left a pointer into itself behind is unloading it unsafe. */
#include "resident.h"

#include <dlfcn.h>
#include <pthread.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void pin(void)
{
    Dl_info self;
    /* RTLD_NODELETE on an object already loaded marks it never to be
     * unloaded; the handle this takes is never closed either. */
    if (dladdr((void *)rc_stay_resident, &self) && self.dli_fname)
        (void)dlopen(self.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
}

void rc_stay_resident(void)
{
    pthread_once(&once, pin);
}
