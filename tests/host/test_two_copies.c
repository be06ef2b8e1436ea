/* Two copies of the library in one process, as two middlewares that each
 * embed it (their symbols hidden, so neither can find the other's): the
 * second finds the hooks the first patched into libc and shares them
 * instead of patching on top.  Both copies' caches see every unmap; libc's
 * munmap keeps one patch (no copy patches on top of the other, round after
 * round); and munmap never goes round the two copies' hooks for ever
 * (alarm).  The program does not link the library: it loads the built one
 * and a copy of it under another name, each RTLD_LOCAL. */
#include <dlfcn.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "hang_alarm.h"
#include "host_case.h"
#include "loaded_regcache.h"

#define LEN ((size_t)4 << 20)
#define ROUNDS 4

/* Each copy's backend counts its deregistrations. */
struct copy {
    struct loaded_regcache api;
    struct regcache_backend backend;
    regcache_t *cache;
    atomic_int deregs;
};

static int reg(void *arg, void *addr, size_t len, int device, int rail, void **handle)
{
    (void)arg, (void)len, (void)device, (void)rail;
    *handle = addr;
    return 0;
}

static void dereg(void *arg, void *handle)
{
    (void)handle;
    atomic_fetch_add(&((struct copy *)arg)->deregs, 1);
}

static int query(void *arg, const void *addr, size_t len, struct regcache_mem_info *info)
{
    (void)arg;
    info->base = (uintptr_t)addr;
    info->size = len;
    info->buffer_id = 0;
    info->device = REGCACHE_DEVICE_HOST;
    info->type = REGCACHE_MEM_HOST;
    return REGCACHE_OK;
}

/* The built library, copied to `to`. */
static void copy_library(const char *to)
{
    int in = open(REGCACHE_LIBRARY, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0700);
    assert_true(in >= 0 && out >= 0);
    char buf[1 << 16];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0)
        assert_int_equal(write(out, buf, (size_t)n), n);
    close(in);
    close(out);
}

static void open_copy(struct copy *c, const char *path)
{
    assert_int_equal(loaded_regcache_open(path, &c->api), 0);
    c->backend = (struct regcache_backend){ .reg = reg, .dereg = dereg, .arg = c, .query = query };
    struct regcache_params p;
    c->api.params_init(&p);
    p.backend = &c->backend;
    p.host_memory = 1;
    p.alignment = 4096;
    assert_int_equal(c->api.create(&p, &c->cache), REGCACHE_OK);
    const char *why = c->api.validation_reason(c->cache);
    if (SANITIZED && strstr(why, "free() of a 64 MiB block")) {
        printf("SKIP: a sanitizer's allocator: %s\n", why);
        exit(77);
    }
    if (!strstr(why, "host memory: monitored by patching libc"))
        fail_msg("%s: %s", path, why);
}

static void use(struct copy *c, void *p)
{
    regcache_entry_t *e;
    assert_int_equal(c->api.get(c->cache, p, LEN, &e), REGCACHE_OK);
    c->api.put(c->cache, e);
}

static void copies_share_the_hooks(void **state)
{
    (void)state;
    char dir[] = "/tmp/regcache-copies-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/libregcache-copy.so", dir);
    copy_library(path);
    static struct copy a, b;
    hang_alarm(60, "mmap or munmap went round the two copies' hooks");
    open_copy(&a, REGCACHE_LIBRARY);
    open_copy(&b, path);
    unlink(path);
    rmdir(dir);
    uint8_t *entry = libc_fn("munmap"), patched[ENTRY_BYTES];
    memcpy(patched, entry, sizeof patched);
    char *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    for (int round = 0; round < ROUNDS; round++) {
        use(&a, p);
        use(&b, p);
        /* Each copy's thread looks at the patches every 50 ms while it
         * watches a range: time for several looks. */
        usleep(120 * 1000);
        assert_int_equal(munmap(p, LEN), 0);
        assert_true(mmap(p, LEN, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) == p);
        use(&a, p);
        use(&b, p);
        if (atomic_load(&a.deregs) != round + 1 || atomic_load(&b.deregs) != round + 1)
            fail_msg("round %d: the first copy deregistered %d entries, the second %d", round,
                     atomic_load(&a.deregs), atomic_load(&b.deregs));
        if (memcmp(entry, patched, sizeof patched) != 0)
            fail_msg("round %d: munmap's entry was patched again", round);
    }
    hang_alarm_off();
    a.api.destroy(a.cache);
    b.api.destroy(b.cache);
    munmap(p, LEN);
}

int main(void)
{
    const struct CMUnitTest tests[] = { cmocka_unit_test(copies_share_the_hooks) };
    return cmocka_run_group_tests_name("two_copies", tests, NULL, NULL);
}
