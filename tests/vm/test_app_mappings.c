/* The monitor leaves the application's own mappings working, on a real
 * provider, under every way it hears of unmaps (libc's hooks, the
 * userfaultfd, UCX's events): a 64 KiB buffer inside a 2 MiB mapping is
 * the cached target of an RDMA WRITE; then the application's mremap of the
 * mapping's first 1 MiB to 2 MiB (MREMAP_MAYMOVE), its mprotect of a part
 * and its munmap of a part all work, and a WRITE into the pages the buffer
 * now has - moved, the same, or new - arrives there. */
#include "vm_env.h"

#include <dlfcn.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#define MAPPING ((size_t)2 << 20)
#define HALF (MAPPING / 2)
#define BUF ((size_t)64 << 10)
#define AT ((size_t)512 << 10) /* the buffer's offset in its mapping */

static struct vm_dev dev;
static const char *way;

static int setup(void **state)
{
    struct vm_run *r = vm_run_open(dev.pd, 4096, BUF);
    const char *why = regcache_validation_reason(r->cache);
    if (!strstr(why, "host memory: monitored by"))
        fail_msg("REGCACHE_HOST_MONITOR=%s: %s", way, why);
    *state = r;
    return 0;
}

static int teardown(void **state)
{
    vm_run_close(*state);
    return 0;
}

/* A get of dst and a WRITE of a fresh pattern into it: it must be what
 * dst's pages now hold. */
static void write_into(struct vm_run *r, char *dst, int seed)
{
    if (!vm_write_arrives(r, dst, BUF, seed))
        fail_msg("%s: the WRITE (seed %d) did not arrive in the pages now at %p", way, seed,
                 (void *)dst);
}

static char *mapping(void)
{
    char *m = mmap(NULL, MAPPING, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    return m;
}

static void mremap_of_the_mapping(void **state)
{
    struct vm_run *r = *state;
    char *m = mapping();
    write_into(r, m + AT, 1);
    char *q = mremap(m, HALF, MAPPING, MREMAP_MAYMOVE);
    if (q == MAP_FAILED)
        fail_msg("%s: mremap(1 MiB -> 2 MiB, MREMAP_MAYMOVE): %s", way, strerror(errno));
    write_into(r, q + AT, 2);
    if (q != m)
        assert_int_equal(munmap(m + HALF, HALF), 0);
    assert_int_equal(munmap(q, MAPPING), 0);
}

static void mprotect_of_a_part(void **state)
{
    struct vm_run *r = *state;
    char *m = mapping();
    write_into(r, m + AT, 3);
    assert_int_equal(mprotect(m + HALF, HALF, PROT_READ), 0);
    write_into(r, m + AT, 4);
    assert_int_equal(mprotect(m + HALF, HALF, PROT_READ | PROT_WRITE), 0);
    assert_int_equal(munmap(m, MAPPING), 0);
}

static void munmap_of_a_part(void **state)
{
    struct vm_run *r = *state;
    char *m = mapping();
    write_into(r, m + AT, 5);
    assert_int_equal(munmap(m + HALF, HALF), 0);
    write_into(r, m + AT, 6);
    assert_int_equal(munmap(m, HALF), 0);
    assert_true(mmap(m, HALF, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) == m);
    write_into(r, m + AT, 7);
    assert_int_equal(munmap(m, HALF), 0);
}

/* UCX's libucm loaded, as UCX loads it (libucs first). */
static int load_ucm(void)
{
    void *ucs = dlopen("libucs.so.0", RTLD_NOW | RTLD_GLOBAL);
    if (!ucs || !dlopen("libucm.so.0", RTLD_NOW | RTLD_GLOBAL)) {
        fprintf(stderr, "libucm: %s\n", dlerror());
        return 1;
    }
    return 0;
}

int main(void)
{
    vm_dev_open(&dev);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(mremap_of_the_mapping, setup, teardown),
        cmocka_unit_test_setup_teardown(mprotect_of_a_part, setup, teardown),
        cmocka_unit_test_setup_teardown(munmap_of_a_part, setup, teardown),
    };
    static const char *const ways[] = { "libc", "uffd", "ucm" };
    int failed = 0;
    for (size_t w = 0; w < sizeof ways / sizeof ways[0]; w++) {
        way = ways[w];
        if (strcmp(way, "ucm") == 0 && load_ucm())
            return 1;
        char name[64];
        snprintf(name, sizeof name, "app_mappings_%s", way);
        setenv("REGCACHE_HOST_MONITOR", way, 1);
        failed += cmocka_run_group_tests_name(name, tests, NULL, NULL);
    }
    if (!failed)
        printf("app_mappings: mremap, mprotect and munmap of watched mappings under libc, "
               "uffd and ucm\n");
    vm_dev_close(&dev);
    return failed ? 1 : 0;
}
