/* A process whose caches take no host memory, or take it with the monitor
 * off, keeps libc as it was: no entry patched, no monitor thread, whatever
 * way REGCACHE_HOST_MONITOR asks for other caches - also with UCX's libucm
 * loaded (UCM_FIRST=1), whose own patches stay as they were. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cmocka.h>

#include "host_case.h"

/* Whether a thread of this process is called `name`. */
static bool thread_named(const char *name)
{
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    bool found = false;
    struct dirent *t;
    while (!found && (t = readdir(d))) {
        char path[300], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", t->d_name);
        FILE *f = fopen(path, "r");
        if (f && fgets(comm, sizeof comm, f))
            found = strncmp(comm, name, strlen(name)) == 0;
        if (f)
            fclose(f);
    }
    closedir(d);
    return found;
}

static void no_host_memory_no_patch(void **state)
{
    struct fx *f = *state;
    uint8_t before[LIBC_FNS][ENTRY_BYTES], after[LIBC_FNS][ENTRY_BYTES];
    libc_entries_read(before);
    f->p.host_memory = 0;
    fx_create(f);
    fx_device_allocs(f, 2);
    fx_use(f, FX_ALLOC(0), MiB);
    fx_use(f, FX_ALLOC(1), MiB);
    libc_entries_read(after);
    for (int i = 0; i < LIBC_FNS; i++)
        if (memcmp(before[i], after[i], ENTRY_BYTES) != 0)
            fail_msg("%s's entry was patched", libc_fn_names[i]);
    assert_false(thread_named("regcache-mon"));
}

/* A cache whose field says OFF, with no variable to override it: its host
 * memory is its application's to invalidate, and nothing is patched for
 * it. */
static void monitor_off_no_patch(void **state)
{
    struct fx *f = *state;
    uint8_t before[LIBC_FNS][ENTRY_BYTES], after[LIBC_FNS][ENTRY_BYTES];
    libc_entries_read(before);
    char *way = strdup(getenv("REGCACHE_HOST_MONITOR"));
    unsetenv("REGCACHE_HOST_MONITOR");
    f->p.host_memory = 1;
    f->p.alignment = 4096;
    f->p.host_monitor = REGCACHE_HOST_MONITOR_OFF;
    fx_create(f);
    setenv("REGCACHE_HOST_MONITOR", way, 1);
    free(way);
    assert_non_null(strstr(regcache_validation_reason(f->c), "host memory: not monitored"));
    char *p = mmap(NULL, MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    fx_use(f, (uintptr_t)p, MiB);
    fx_assert_stats(f, FX_STAT(host_unmonitored, 1), NULL);
    libc_entries_read(after);
    for (int i = 0; i < LIBC_FNS; i++)
        if (memcmp(before[i], after[i], ENTRY_BYTES) != 0)
            fail_msg("%s's entry was patched", libc_fn_names[i]);
    assert_false(thread_named("regcache-mon"));
    regcache_destroy(f->c);
    f->c = NULL;
    munmap(p, MiB);
}

int main(void)
{
    if (getenv("UCM_FIRST"))
        if (!hx_load_ucm())
            return 1;
    return FX_RUN(fx_setup, fx_teardown, no_host_memory_no_patch, monitor_off_no_patch);
}
