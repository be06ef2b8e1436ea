/* Host memory that the provider cannot pin as asked - unmapped, PROT_NONE,
 * or read-only while the access asks for local write - is a bad address:
 * the get fails with BAD_ADDRESS, names the range and the access, and the
 * unused entries already cached stay (counted by the provider too). */
#include "vm_env.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#define CACHED 8

static struct vm_dev dev;
static size_t page;

enum how { UNMAPPED, PROT_NONE_MAPPING, READ_ONLY_MAPPING };

/* Eight unused entries cached, then a get on memory made bad `how`. */
static void bad_address_keeps_entries(enum how how)
{
    regcache_t *c = vm_cache(dev.pd, VM_ACCESS_ALL, page);
    size_t len = 2 * CACHED * page;
    char *good = vm_pages(len);
    for (int i = 0; i < CACHED; i++) {
        regcache_entry_t *e;
        assert_int_equal(regcache_get(c, good + 2 * i * page, page, &e), REGCACHE_OK);
        regcache_put(c, e);
    }
    int before = vm_provider_mrs();
    char *bad = vm_pages(4 * page);
    if (how == UNMAPPED)
        vm_pages_free(bad, 4 * page);
    else
        assert_int_equal(mprotect(bad, 4 * page, how == PROT_NONE_MAPPING ? PROT_NONE : PROT_READ),
                         0);

    regcache_entry_t *e = (regcache_entry_t *)1;
    int rc = regcache_get(c, bad + page, page, &e);
    printf("bad_address: case %d: %s: %s\n", (int)how, regcache_err_name(rc),
           regcache_last_error());
    assert_int_equal(rc, REGCACHE_ERR_BAD_ADDRESS);
    assert_null(e);
    char range[64];
    snprintf(range, sizeof(range), "[%p, ", (void *)(bad + page));
    assert_non_null(strstr(regcache_last_error(), range));
    assert_non_null(strstr(regcache_last_error(), "local write, remote write, remote read"));
    struct regcache_stats s = vm_stats(c);
    assert_int_equal(s.entries, CACHED);
    assert_int_equal(s.evictions, 0);
    assert_int_equal(s.deregistrations, 0);
    assert_int_equal(vm_provider_mrs(), before);

    regcache_destroy(c);
    if (how != UNMAPPED)
        vm_pages_free(bad, 4 * page);
    vm_pages_free(good, len);
}

static void unmapped_memory(void **state)
{
    (void)state;
    bad_address_keeps_entries(UNMAPPED);
}

static void prot_none_mapping(void **state)
{
    (void)state;
    bad_address_keeps_entries(PROT_NONE_MAPPING);
}

static void read_only_mapping(void **state)
{
    (void)state;
    bad_address_keeps_entries(READ_ONLY_MAPPING);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(unmapped_memory),
        cmocka_unit_test(prot_none_mapping),
        cmocka_unit_test(read_only_mapping),
    };
    page = (size_t)sysconf(_SC_PAGESIZE);
    vm_dev_open(&dev);
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    vm_dev_close(&dev);
    return failed;
}
