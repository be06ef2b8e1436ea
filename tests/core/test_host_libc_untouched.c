/* A process whose caches take no host memory, or take it with the monitor
 * off, keeps libc as it was: not one byte of the functions the monitor
 * would patch changes, and none of the monitor's threads starts. */
#include <dirent.h>
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cache_fixture.h"

static const char *const patched[] = { "munmap", "mremap", "mmap",  "madvise",
                                       "brk",    "sbrk",   "shmat", "shmdt" };
#define N (sizeof patched / sizeof patched[0])
#define BYTES 16

static void entries(unsigned char (*out)[BYTES])
{
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    assert_non_null(libc);
    for (size_t i = 0; i < N; i++) {
        const unsigned char *fn = dlsym(libc, patched[i]);
        assert_non_null(fn);
        memcpy(out[i], fn, BYTES);
    }
    dlclose(libc);
}

/* Whether a thread of this process bears the name. */
static bool thread_named(const char *name)
{
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    bool found = false;
    for (struct dirent *t; !found && (t = readdir(d));) {
        char path[300], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", t->d_name);
        FILE *f = t->d_name[0] != '.' ? fopen(path, "r") : NULL;
        if (f && fgets(comm, sizeof comm, f))
            found = strncmp(comm, name, strlen(name)) == 0;
        if (f)
            fclose(f);
    }
    closedir(d);
    return found;
}

static void caches_without_host_memory(void **state)
{
    struct fx *f = *state;
    unsigned char before[N][BYTES], after[N][BYTES];
    entries(before);
    fx_device_allocs(f, 2);
    fx_create(f);
    fx_use(f, FX_ALLOC(0), 4096);
    struct regcache_params off = f->p;
    off.host_memory = 1;
    off.host_monitor = REGCACHE_HOST_MONITOR_OFF;
    regcache_t *c;
    assert_int_equal(regcache_create(&off, &c), REGCACHE_OK);
    regcache_entry_t *e;
    assert_int_equal(regcache_get(c, (const void *)FX_ALLOC(1), 4096, &e), REGCACHE_OK);
    regcache_put(c, e);
    regcache_destroy(c);
    entries(after);
    for (size_t i = 0; i < N; i++)
        if (memcmp(before[i], after[i], BYTES))
            fail_msg("libc's %s changed", patched[i]);
    assert_false(thread_named("regcache-mon"));
    assert_false(thread_named("regcache-uffd"));
}

int main(void)
{
    unsetenv("REGCACHE_HOST_MONITOR");
    unsetenv("REGCACHE_HOST_MEMORY");
    return FX_RUN(fx_setup, fx_teardown, caches_without_host_memory);
}
