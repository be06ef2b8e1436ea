/* Two copies of the library in one process, as two middlewares that each
 * embed it (their symbols hidden, so neither can find the other's): the
 * second finds the hooks the first patched into libc and shares them
 * instead of patching on top.  Both copies' caches see every unmap; libc's
 * munmap keeps one patch (no copy patches on top of the other, round after
 * round); munmap never goes round the two copies' hooks for ever (alarm);
 * and the copy that joined has no unmap window either: a registration made
 * while an unmap is held at its system call is not served once new pages
 * are there.  The program does not link the library: it loads the built
 * one and a copy of it under another name, each RTLD_LOCAL. */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
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
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "hang_alarm.h"
#include "host_case.h"
#include "loaded_regcache.h"
#include "syscall_trap.h"

#define LEN ((size_t)4 << 20)
#define ROUNDS 4

/* Each copy's backend counts its registrations and deregistrations. */
struct copy {
    struct loaded_regcache api;
    struct regcache_backend backend;
    regcache_t *cache;
    atomic_int regs, deregs;
};

static int reg(void *arg, void *addr, size_t len, int device, int rail, void **handle)
{
    (void)len, (void)device, (void)rail;
    atomic_fetch_add(&((struct copy *)arg)->regs, 1);
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
    if (HX_SANITIZED && strstr(why, "free() of a 64 MiB block")) {
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

/* The first copy (which patches libc) and the second (which joins it),
 * open for the process's life. */
static struct copy a, b;

static int open_copies(void **state)
{
    (void)state;
    char dir[] = "/tmp/regcache-copies-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/libregcache-copy.so", dir);
    copy_library(path);
    open_copy(&a, REGCACHE_LIBRARY);
    open_copy(&b, path);
    unlink(path);
    rmdir(dir);
    return 0;
}

static int close_copies(void **state)
{
    (void)state;
    a.api.destroy(a.cache);
    b.api.destroy(b.cache);
    return 0;
}

/* Deregistrations come from each copy's monitor thread: the copy's count
 * reaches n (the hang alarm says when it never does). */
static void wait_for_deregs(struct copy *c, int n)
{
    while (atomic_load(&c->deregs) < n)
        usleep(1000);
}

static void copies_share_the_hooks(void **state)
{
    (void)state;
    hang_alarm(60, "mmap or munmap went round the two copies' hooks");
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
        wait_for_deregs(&a, round + 1);
        wait_for_deregs(&b, round + 1);
        if (atomic_load(&a.deregs) != round + 1 || atomic_load(&b.deregs) != round + 1)
            fail_msg("round %d: the first copy deregistered %d entries, the second %d", round,
                     atomic_load(&a.deregs), atomic_load(&b.deregs));
        if (memcmp(entry, patched, sizeof patched) != 0)
            fail_msg("round %d: munmap's entry was patched again", round);
    }
    hang_alarm_off();
    munmap(p, LEN);
}

/* The held unmap: its address, and the hold. */
static uintptr_t held_addr;
static struct syscall_hold hold;

/* In the held thread: no cmocka there. */
static void *unmap_held(void *p)
{
    if (syscall_trap_install_at(SYS_munmap, held_addr, syscall_trap_hold, &hold) != 0 ||
        munmap(p, LEN) != 0)
        abort();
    return NULL;
}

static void joined_copy_has_no_unmap_window(void **state)
{
    (void)state;
    hang_alarm(60, "the unmap held at its system call");
    char *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    p[0] = 1;
    held_addr = (uintptr_t)p;
    assert_int_equal(syscall_hold_open(&hold), 0);
    int regs = atomic_load(&b.regs);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, unmap_held, p), 0);
    assert_int_equal(syscall_hold_wait(&hold), 0);
    /* Held at the call: the old pages are still there, and the second
     * copy registers them. */
    use(&b, p);
    assert_int_equal(syscall_hold_release(&hold), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_true(mmap(p, LEN, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) == p);
    p[0] = 2;
    use(&b, p);
    if (atomic_load(&b.regs) != regs + 2)
        fail_msg("the second copy served the new pages a registration of the old ones");
    hang_alarm_off();
    syscall_hold_close(&hold);
    munmap(p, LEN);
}

int main(void)
{
    const struct CMUnitTest tests[] = { cmocka_unit_test(copies_share_the_hooks),
                                        cmocka_unit_test(joined_copy_has_no_unmap_window) };
    return cmocka_run_group_tests_name("two_copies", tests, open_copies, close_copies);
}
