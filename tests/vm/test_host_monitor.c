/* The host memory monitor on a real provider: the target of an RDMA WRITE
 * is cached, its pages are replaced (munmap and mmap at the same address,
 * mremap, mmap(MAP_FIXED) over it, madvise(MADV_DONTNEED), free() and a
 * new malloc() at the same address, brk shrinking and growing again)
 * without any regcache_invalidate(), and the next get's WRITE lands in the
 * new pages; through libc's hooks, then through the userfaultfd.  Then all
 * of it again with UCX's libucm loaded and its unmap hooks live (patched
 * over libc's hooks, which patch themselves back on top), and through
 * UCX's own events: both it and the monitor see each event. */
#include "vm_env.h"

#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
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
#include <unistd.h>

#include <cmocka.h>

#define LEN ((size_t)4 << 20)

static struct vm_dev dev;
static size_t page;

static int setup(void **state)
{
    *state = vm_run_open(dev.pd, page, LEN);
    return 0;
}

static int teardown(void **state)
{
    vm_run_close(*state);
    return 0;
}

/* A get of dst and an RDMA WRITE of a fresh pattern into it through the
 * entry's rkey; the pattern must be what dst's pages now hold. */
static void write_into(struct vm_run *r, char *dst, size_t len, int seed)
{
    if (!vm_write_arrives(r, dst, len, seed))
        fail_msg("the WRITE (seed %d) did not arrive in the pages now at %p", seed, (void *)dst);
}

static char *anon(void *at, size_t len, int flags)
{
    char *p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
    if (p == MAP_FAILED) {
        int err = errno;
        char line[256];
        FILE *maps = fopen("/proc/self/maps", "r");
        while (maps && fgets(line, sizeof line, maps))
            if (strtoull(line, NULL, 16) <= (uintptr_t)at + len &&
                strtoull(strchr(line, '-') + 1, NULL, 16) >= (uintptr_t)at)
                fprintf(stderr, "  %s", line);
        if (maps)
            fclose(maps);
        fail_msg("mmap of %zu bytes at %p: %s", len, at, strerror(err));
    }
    return p;
}

/* One way of replacing the pages at p: returns where the new ones are. */
struct way {
    const char *name;
    char *(*make)(void);
    char *(*replace)(char *p);
    void (*undo)(char *p);
};

static char *make_pages(void)
{
    return anon(NULL, LEN, 0);
}

static void unmap(char *p)
{
    assert_int_equal(munmap(p, LEN), 0);
}

static char *munmap_then_mmap(char *p)
{
    unmap(p);
    return anon(p, LEN, MAP_FIXED_NOREPLACE);
}

/* A page that no mapping may grow into follows the pages: growing them
 * moves them (with a plain MREMAP_MAYMOVE, which UCX's mremap hook also
 * passes on). */
static char *make_guarded(void)
{
    char *p = anon(NULL, LEN + page, 0);
    assert_int_equal(mprotect(p + LEN, page, PROT_NONE), 0);
    return p;
}

static void unmap_guarded(char *p)
{
    assert_int_equal(munmap(p, LEN + page), 0);
}

static char *mremap_away(char *p)
{
    char *q = mremap(p, LEN, 2 * LEN, MREMAP_MAYMOVE);
    assert_true(q != MAP_FAILED && q != p);
    assert_int_equal(munmap(q, 2 * LEN), 0);
    return anon(p, LEN, MAP_FIXED_NOREPLACE);
}

static char *map_fixed_over(char *p)
{
    return anon(p, LEN, MAP_FIXED);
}

static char *dontneed(char *p)
{
    assert_int_equal(madvise(p, LEN, MADV_DONTNEED), 0);
    return p;
}

static char *make_malloc(void)
{
    char *p = malloc(LEN);
    assert_non_null(p);
    return p;
}

static char *free_then_malloc(char *p)
{
    uintptr_t was = (uintptr_t)p;
    free(p);
    char *q = make_malloc();
    if ((uintptr_t)q != was)
        fail_msg("the new chunk is at %p, not at %#jx", (void *)q, (uintmax_t)was);
    return q;
}

static void free_chunk(char *p)
{
    free(p);
}

static const struct way ways[] = {
    { "munmap_then_mmap", make_pages, munmap_then_mmap, unmap },
    { "mremap", make_guarded, mremap_away, unmap_guarded },
    { "mmap_fixed_over", make_pages, map_fixed_over, unmap },
    { "madvise_dontneed", make_pages, dontneed, unmap },
    { "free_then_malloc", make_malloc, free_then_malloc, free_chunk },
};

static void new_pages_get_the_data(void **state)
{
    struct vm_run *r = *state;
    for (size_t i = 0; i < sizeof ways / sizeof ways[0]; i++) {
        const struct way *w = &ways[i];
        print_message("%s\n", w->name);
        char *p = w->make();
        write_into(r, p, LEN, 2 * (int)i);
        p = w->replace(p);
        write_into(r, p, LEN, 2 * (int)i + 1);
        w->undo(p);
    }
    /* Each way's old pages at least (the new ones' release at the end may
     * still be on its way). */
    struct regcache_stats s = vm_stats(r->cache);
    assert_true(s.invalidations_monitor >= sizeof ways / sizeof ways[0]);
    assert_int_equal(s.invalidations_explicit, 0);
}

/* brk: in a thread of its own, whose allocations (the cache's and the
 * provider's included) come from its own arena, so that nothing else
 * moves the break while the test moves it. */
struct brk_case {
    struct vm_run *r;
    const char *failed;
};

static void *brk_thread(void *arg)
{
    struct brk_case *b = arg;
    size_t len = 64 * page;
    char *top = sbrk(0);
    size_t pad = (size_t)(-(uintptr_t)top & (page - 1));
    char *p = (char *)sbrk((intptr_t)(pad + len)) + pad;
    regcache_entry_t *e;
    for (int round = 0; round < 2 && !b->failed; round++) {
        if (round) {
            sbrk(-(intptr_t)len);
            sbrk((intptr_t)len);
        }
        if (regcache_get(b->r->cache, p, len, &e) != REGCACHE_OK) {
            b->failed = "get";
            break;
        }
        vm_fill(b->r->src, len, 40 + round);
        memset(p, 0, len);
        if (vm_rdma(&b->r->lb, IBV_WR_RDMA_WRITE, b->r->src, vm_lkey(b->r->src_entry), p,
                    vm_rkey(e), len) != IBV_WC_SUCCESS)
            b->failed = "the WRITE";
        else if (memcmp(p, b->r->src, len))
            b->failed = "the data of the WRITE after the break moved back";
        regcache_put(b->r->cache, e);
    }
    sbrk(-(intptr_t)(pad + len));
    return NULL;
}

static void brk_shrink_then_grow(void **state)
{
    struct brk_case b = { *state, NULL };
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, brk_thread, &b), 0);
    pthread_join(t, NULL);
    if (b.failed)
        fail_msg("brk: %s failed", b.failed);
}

/* Load UCX's libucm and make its unmap hooks live, as UCX does. */
typedef void (*ucm_cb)(int type, void *event, void *arg);
static atomic_int ucm_seen;

static void ucm_unmapped(int type, void *event, void *arg)
{
    (void)type, (void)event, (void)arg;
    atomic_fetch_add(&ucm_seen, 1);
}

static int load_ucm(void)
{
    void *ucs = dlopen("libucs.so.0", RTLD_NOW | RTLD_GLOBAL);
    void *ucm = ucs ? dlopen("libucm.so.0", RTLD_NOW | RTLD_GLOBAL) : NULL;
    int (*set)(int, int, ucm_cb, void *) =
        ucm ? (int (*)(int, int, ucm_cb, void *))(uintptr_t)dlsym(ucm, "ucm_set_event_handler")
            : NULL;
    if (!set || set(1 << 17 /* UCM_EVENT_VM_UNMAPPED */, 0, ucm_unmapped, NULL)) {
        fprintf(stderr, "libucm: %s\n", ucm ? "ucm_set_event_handler failed" : dlerror());
        return 1;
    }
    return 0;
}

/* A cache created now says it is monitored that way. */
static int monitored_by(const char *way)
{
    regcache_t *c = vm_cache(dev.pd, VM_ACCESS_ALL, page);
    const char *why = strstr(regcache_validation_reason(c), "host memory: monitored by");
    const char *said = strcmp(way, "libc") == 0   ? "patching libc"
                       : strcmp(way, "uffd") == 0 ? "userfaultfd"
                                                  : "UCX's memory events";
    int wrong = !why || !strstr(why, said);
    if (wrong)
        fprintf(stderr, "REGCACHE_HOST_MONITOR=%s: %s\n", way, regcache_validation_reason(c));
    regcache_destroy(c);
    return wrong;
}

int main(void)
{
    page = (size_t)sysconf(_SC_PAGESIZE);
    mallopt(M_MMAP_THRESHOLD, 1024 * 1024);
    vm_dev_open(&dev);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(new_pages_get_the_data, setup, teardown),
        cmocka_unit_test_setup_teardown(brk_shrink_then_grow, setup, teardown),
    };
    static const char *const ways[] = { "libc", "uffd", "ucm" };
    int failed = 0;
    for (int with_ucm = 0; with_ucm < 2; with_ucm++) {
        if (with_ucm && load_ucm())
            return 1;
        for (size_t w = 0; w < sizeof ways / sizeof ways[0] - !with_ucm; w++) {
            char name[64];
            snprintf(name, sizeof name, "host_monitor_%s%s", ways[w], with_ucm ? "_with_ucm" : "");
            setenv("REGCACHE_HOST_MONITOR", ways[w], 1);
            failed += monitored_by(ways[w]);
            failed += cmocka_run_group_tests_name(name, tests, NULL, NULL);
        }
    }
    if (!atomic_load(&ucm_seen)) {
        fprintf(stderr, "libucm saw no unmap\n");
        failed++;
    }
    printf("host_monitor: libucm saw %d unmaps\n", atomic_load(&ucm_seen));
    vm_dev_close(&dev);
    return failed ? 1 : 0;
}
