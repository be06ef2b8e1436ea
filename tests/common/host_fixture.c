/* The host monitor tests' fixture (host_fixture.h). */
#include "host_fixture.h"

#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

bool hx_by_hooks;
size_t hx_page;

void hx_create(struct fx *f)
{
    f->p.host_memory = 1;
    f->p.alignment = 4096;
    fx_create(f);
}

char *hx_anon(void *at, size_t len, int flags)
{
    char *p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
    assert_true(p != MAP_FAILED);
    return p;
}

void hx_destroy_then_unmap(struct fx *f, char *p, size_t len)
{
    regcache_destroy(f->c);
    f->c = NULL;
    assert_int_equal(munmap(p, len), 0);
}

bool hx_load_ucm(void)
{
    /* libucm leaves some of its symbols to libucs, whose start installs
     * ucm's hooks. */
    void *ucs = dlopen("libucs.so.0", RTLD_NOW | RTLD_GLOBAL);
    if (ucs && dlopen("libucm.so.0", RTLD_NOW | RTLD_GLOBAL))
        return true;
    printf("libucm.so.0: %s\n", dlerror());
    return false;
}

int hx_start(void)
{
    hx_page = (size_t)sysconf(_SC_PAGESIZE);
    const char *way = getenv("REGCACHE_HOST_MONITOR");
    if (!way || (strcmp(way, "libc") != 0 && strcmp(way, "uffd") != 0 && strcmp(way, "ucm") != 0)) {
        printf("run with REGCACHE_HOST_MONITOR=libc, uffd or ucm\n");
        return 1;
    }
    hx_by_hooks = strcmp(way, "uffd") != 0;
    if (getenv("UCM_FIRST") && !hx_load_ucm())
        return 1;
    void *state = NULL;
    fx_setup(&state);
    struct fx *f = state;
    hx_create(f);
    const char *why = strstr(regcache_validation_reason(f->c), "host memory: ");
    int status = why && strncmp(why, "host memory: monitored", 22) == 0 ? 0 : 1;
    if (status && hx_by_hooks && HX_SANITIZED) {
        printf("SKIP: a sanitizer's allocator: %s\n", why);
        status = 77;
    } else if (status) {
        printf("not monitored: %s\n", why ? why : regcache_validation_reason(f->c));
    }
    fx_teardown(&state);
    return status;
}
