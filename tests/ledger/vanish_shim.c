/* Preloaded into regcache-stat by ledger_stat_any_process: a statistics
 * segment whose name ends in $REGCACHE_TEST_VANISH is removed just before
 * the tool opens it, as when its process ends between the listing of the
 * segments and their opening. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

int shm_open(const char *name, int oflag, mode_t mode)
{
    int (*real)(const char *, int, mode_t) =
        (int (*)(const char *, int, mode_t))dlsym(RTLD_NEXT, "shm_open");
    const char *vanish = getenv("REGCACHE_TEST_VANISH");
    size_t len = strlen(name), tail = vanish ? strlen(vanish) : 0;
    if (tail && len >= tail && !strcmp(name + len - tail, vanish)) {
        char path[512];
        snprintf(path, sizeof path, "/dev/shm%s", name);
        unlink(path);
    }
    return real(name, oflag, mode);
}
