/* The host memory monitor: every way the pages of a cached host range leave
 * or are replaced invalidates its entry without regcache_invalidate() - the
 * backend deregisters it, and the next get over the new pages misses.  Real
 * mappings under the fake backend (which never touches them). */
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache_fixture.h"

/* Which sanitizer, if any, this test runs under. */
#if defined(__SANITIZE_THREAD__)
#define TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TSAN 1
#endif
#endif
#ifndef TSAN
#define TSAN 0
#endif

/* The sanitizers' allocators replace glibc's: free() keeps the chunk (a
 * quarantine) and realloc() copies, so those two ways exist only where
 * glibc allocates. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GLIBC_MALLOC 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define GLIBC_MALLOC 0
#endif
#endif
#ifndef GLIBC_MALLOC
#define GLIBC_MALLOC 1
#endif

#define LEN (4 * MiB)

static size_t page;
/* How the monitor hears of unmaps, as the environment asks
 * (REGCACHE_HOST_MONITOR=libc, uffd or ucm): one test per way.  Hooks
 * (libc's patched, or UCX's) see what the userfaultfd cannot, and the
 * other way round. */
static enum { LIBC, UFFD, UCM } by;
static const char *const monitored[] = { "host memory: monitored by patching libc",
                                         "host memory: monitored by userfaultfd",
                                         "host memory: monitored by UCX's memory events" };

static void create_host(struct fx *f)
{
    f->p.host_memory = 1;
    f->p.alignment = 4096;
    fx_create(f);
}

static char *anon(void *at, size_t len, int flags)
{
    char *p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
    assert_true(p != MAP_FAILED);
    return p;
}

/* One way of replacing the pages of [p, p + len): it returns where the
 * memory that replaces them lies (p itself for most), to get next. */
struct way {
    const char *name;
    char *(*make)(size_t len);
    char *(*replace)(char *p, size_t len);
    void (*undo)(char *p, size_t len);
};

static char *make_anon(size_t len)
{
    return anon(NULL, len, 0);
}

static void unmap(char *p, size_t len)
{
    assert_int_equal(munmap(p, len), 0);
}

/* The cache goes before the memory its entries were registered over. */
static void destroy_then_unmap(struct fx *f, char *p, size_t len)
{
    regcache_destroy(f->c);
    f->c = NULL;
    unmap(p, len);
}

static char *munmap_then_mmap(char *p, size_t len)
{
    unmap(p, len);
    return anon(p, len, MAP_FIXED_NOREPLACE);
}

/* The pages move away, grown past a page no mapping may grow into (a plain
 * MREMAP_MAYMOVE, as UCX's mremap hook passes on); new ones are mapped
 * where they were. */
static char *make_guarded(size_t len)
{
    char *p = anon(NULL, len + page, 0);
    assert_int_equal(mprotect(p + len, page, PROT_NONE), 0);
    return p;
}

static void unmap_guarded(char *p, size_t len)
{
    unmap(p, len + page);
}

static char *mremap_away(char *p, size_t len)
{
    char *q = mremap(p, len, 2 * len, MREMAP_MAYMOVE);
    assert_true(q != MAP_FAILED && q != p);
    unmap(q, 2 * len);
    return anon(p, len, MAP_FIXED_NOREPLACE);
}

static char *map_fixed_over(char *p, size_t len)
{
    return anon(p, len, MAP_FIXED);
}

static char *dontneed(char *p, size_t len)
{
    assert_int_equal(madvise(p, len, MADV_DONTNEED), 0);
    return p;
}

static char *madv_free(char *p, size_t len)
{
    assert_int_equal(madvise(p, len, MADV_FREE), 0);
    return p;
}

#if GLIBC_MALLOC
/* glibc serves a chunk this large with a mapping of its own, and unmaps
 * it from inside free(); the next one of the same size lands there. */
static char *make_malloc(size_t len)
{
    char *p = malloc(len);
    assert_non_null(p);
    return p;
}

static char *free_then_malloc(char *p, size_t len)
{
    free(p);
    return make_malloc(len);
}

static void free_chunk(char *p, size_t len)
{
    (void)len;
    free(p);
}

/* Grown past its mapping's end, the chunk moves (mremap from inside
 * libc): the old pages are gone. */
static char *realloc_moving(char *p, size_t len)
{
    /* The chunk's mapping ends a page past its header-shifted end: a
     * mapping right behind it (this one, or one that is there already)
     * leaves no room to grow in place. */
    char *keep = mmap((char *)(((uintptr_t)p + len + page) & ~(uintptr_t)(page - 1)), page,
                      PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    char *q = realloc(p, 16 * len);
    assert_true(q && q != p);
    if (keep != MAP_FAILED)
        unmap(keep, page);
    return q;
}

#endif

static const struct way ways[] = {
    { "munmap_then_mmap", make_anon, munmap_then_mmap, unmap },
    { "mremap", make_guarded, mremap_away, unmap_guarded },
    { "mmap_fixed_over", make_anon, map_fixed_over, unmap },
    { "madvise_dontneed", make_anon, dontneed, unmap },
    { "madvise_free", make_anon, madv_free, unmap },
#if GLIBC_MALLOC
    { "free_then_malloc", make_malloc, free_then_malloc, free_chunk },
    { "realloc_moving", make_malloc, realloc_moving, free_chunk },
#endif
};

/* The entry over the old pages is deregistered by the time a get can be
 * served again, and that get misses: no regcache_invalidate() anywhere. */
static void replaced_pages_invalidate(void **state)
{
    struct fx *f = *state;
    const struct way *w = f->param;
    create_host(f);
    char *p = w->make(LEN);
    p[0] = 1;
    fx_use(f, (uintptr_t)p, LEN);
    fx_assert_stats(f, FX_STAT(misses, 1), FX_STAT(entries, 1), FX_STAT(host_unmonitored, 0), NULL);
    char *q = w->replace(p, LEN);
    q[0] = 2;
    fx_use(f, (uintptr_t)q, LEN);
    fx_assert_stats(f, FX_STAT(misses, 2), FX_STAT(hits, 0), FX_STAT(deregistrations, 1),
                    FX_STAT(invalidations_monitor, 1), FX_STAT(invalidations_explicit, 0),
                    FX_STAT(invalidations_notify, 0), NULL);
    regcache_destroy(f->c);
    f->c = NULL;
    w->undo(q, LEN);
}

/* brk: the heap's end moves down and up again over a cached range.  In a
 * thread of its own, whose allocations (the cache's included) come from
 * its own arena, so that nothing else moves the break meanwhile. */
struct brk_run {
    struct fx *f;
    uint64_t deregs_after, misses_after;
};

static void *brk_shrink_thread(void *arg)
{
    struct brk_run *r = arg;
    struct regcache_entry *e;
    char *top = sbrk(0);
    size_t pad = (size_t)(-(uintptr_t)top & (page - 1));
    char *p = (char *)sbrk((intptr_t)(pad + 16 * page)) + pad;
    p[0] = 1;
    if (regcache_get(r->f->c, p, 16 * page, &e) == REGCACHE_OK)
        regcache_put(r->f->c, e);
    sbrk(-(intptr_t)(16 * page));
    sbrk((intptr_t)(16 * page));
    p[0] = 2;
    if (regcache_get(r->f->c, p, 16 * page, &e) == REGCACHE_OK)
        regcache_put(r->f->c, e);
    struct regcache_stats s;
    regcache_get_stats(r->f->c, &s);
    r->deregs_after = s.deregistrations;
    r->misses_after = s.misses;
    sbrk(-(intptr_t)(pad + 16 * page));
    return NULL;
}

static void brk_shrink_invalidates(void **state)
{
    struct fx *f = *state;
    create_host(f);
    struct brk_run r = { f, 0, 0 };
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, brk_shrink_thread, &r), 0);
    pthread_join(t, NULL);
    assert_int_equal(r.misses_after, 2);
    assert_int_equal(r.deregs_after, 1);
}

/* A held entry whose pages go leaves the cache at once (the next get
 * misses) and is deregistered at its put. */
static void held_entry_goes_at_its_put(void **state)
{
    struct fx *f = *state;
    create_host(f);
    char *p = make_anon(LEN);
    regcache_entry_t *held = fx_get(f, (uintptr_t)p, LEN);
    map_fixed_over(p, LEN);
    fx_use(f, (uintptr_t)p, LEN);
    fx_assert_stats(f, FX_STAT(misses, 2), FX_STAT(invalidations_monitor, 1), NULL);
    assert_int_equal(atomic_load(&f->fb.live), 2);
    regcache_put(f->c, held);
    assert_int_equal(atomic_load(&f->fb.live), 1);
    destroy_then_unmap(f, p, LEN);
}

/* The monitor drops pageable host entries only: device memory that the
 * CUDA driver maps where libc unmapped something (here: a range the fake
 * driver calls device memory, between two watched host ranges) keeps its
 * entry, which the hooks and buffer ids look after. */
static void device_entries_are_not_the_monitors(void **state)
{
    struct fx *f = *state;
    create_host(f);
    char *p = make_anon(3 * LEN);
    char *gpu = p + LEN;
    fake_alloc(&f->fb, (uintptr_t)gpu, LEN, 0, REGCACHE_MEM_DEVICE);
    fx_use(f, (uintptr_t)p, LEN);
    fx_use(f, (uintptr_t)gpu, LEN);
    fx_use(f, (uintptr_t)p + 2 * LEN, LEN);
    unmap(gpu, LEN);
    anon(gpu, LEN, MAP_FIXED_NOREPLACE);
    fx_use(f, (uintptr_t)p, LEN); /* drains what the monitor heard */
    fx_use(f, (uintptr_t)gpu, LEN);
    fx_assert_stats(f, FX_STAT(misses, 3), FX_STAT(hits, 2), FX_STAT(invalidations_monitor, 0),
                    FX_STAT(deregistrations, 0), NULL);
    destroy_then_unmap(f, p, 3 * LEN);
}

/* Merged host ranges: the union of two entries is watched as a whole, and
 * the retired parts' deregistration leaves it watched. */
static void merged_union_stays_watched(void **state)
{
    struct fx *f = *state;
    create_host(f);
    char *p = make_anon(LEN);
    fx_use(f, (uintptr_t)p, LEN / 2);
    fx_use(f, (uintptr_t)p + LEN / 4, LEN / 2); /* merges: the first is retired */
    fx_assert_stats(f, FX_STAT(entries, 1), FX_STAT(deregistrations, 1), NULL);
    dontneed(p, page);
    fx_use(f, (uintptr_t)p, LEN);
    fx_assert_stats(f, FX_STAT(invalidations_monitor, 1), FX_STAT(deregistrations, 2), NULL);
    destroy_then_unmap(f, p, LEN);
}

/* System V shared memory, a shared mapping, may lose its pages through
 * another process: never watched, its entries keep the explicit contract
 * and are counted as such. */
static void shm_detach(void **state)
{
    struct fx *f = *state;
    create_host(f);
    int id = shmget(IPC_PRIVATE, LEN, IPC_CREAT | 0600);
    assert_true(id >= 0);
    char *p = shmat(id, NULL, 0);
    shmctl(id, IPC_RMID, NULL);
    assert_true(p != (void *)-1);
    regcache_entry_t *e = fx_get(f, (uintptr_t)p, LEN);
    regcache_put(f->c, e);
    fx_assert_stats(f, FX_STAT(host_unmonitored, 1), NULL);
    assert_int_equal(regcache_invalidate(f->c, p, LEN), REGCACHE_OK);
    fx_assert_stats(f, FX_STAT(host_unmonitored, 0), FX_STAT(deregistrations, 1), NULL);
    assert_int_equal(shmdt(p), 0);
}

/* Caches created after a fork() in the child get a monitor of the child's
 * own; the parent's goes on.  Only where glibc allocates: TSan cannot
 * follow a thread started in the child of a process with threads (it takes
 * the new thread for the parent's, whose stack glibc hands to it), and
 * ASan's allocator (gcc 12) does not take its locks around fork(): a lock
 * of one of its size classes held by a parent thread at the fork stays
 * held in the child (its monitor thread was seen waiting on a futex in
 * ASan's allocator region from its start), and the child's
 * unmap, which waits for that thread to read, never returns. */
#if GLIBC_MALLOC
static void fork_child_monitors_its_own(void **state)
{
    struct fx *f = *state;
    create_host(f);
    char *p = make_anon(LEN);
    fx_use(f, (uintptr_t)p, LEN);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        regcache_entry_t *e;
        struct regcache_params params = f->p;
        regcache_t *c;
        int ok = regcache_get(f->c, p, LEN, &e) == REGCACHE_ERR_FORKED &&
                 regcache_create(&params, &c) == REGCACHE_OK;
        for (int i = 0; ok && i < 2; i++) {
            ok = regcache_get(c, p, LEN, &e) == REGCACHE_OK;
            if (ok)
                regcache_put(c, e);
            map_fixed_over(p, LEN);
        }
        struct regcache_stats s;
        ok = ok && regcache_get_stats(c, &s) == REGCACHE_OK && s.misses == 2 &&
             s.invalidations_monitor >= 1 && strstr(regcache_validation_reason(c), monitored[by]);
        regcache_destroy(c);
        _exit(ok ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    map_fixed_over(p, LEN);
    fx_use(f, (uintptr_t)p, LEN);
    fx_assert_stats(f, FX_STAT(misses, 2), FX_STAT(invalidations_monitor, 1), NULL);
    destroy_then_unmap(f, p, LEN);
}
#endif

/* UCX's ucm installs its own hooks on the same calls: both it and the
 * monitor see each unmap.  With libc's hooks, in either order: ucm first
 * (UCM_FIRST=1: loaded before any cache), the monitor patches over ucm's
 * patch and calls on into it; ucm second (a cache was created before), its
 * patch calls the system itself, so the monitor patches again on top of it
 * at the next miss of host memory.  Not under TSan, whose own interceptors of
 * those calls ucm's patches do not survive. */
#if !TSAN
typedef void (*ucm_cb)(int type, void *event, void *arg);
static atomic_int seen;
static void count_unmapped(int type, void *event, void *arg)
{
    (void)type, (void)event;
    atomic_fetch_add((atomic_int *)arg, 1);
}

/* UCX's libucm loaded and its unmap hooks live, as UCX makes them. */
static void (*ucm_unset)(int, ucm_cb, void *);
static void load_ucm(void)
{
    if (ucm_unset)
        return;
    /* libucm leaves some of its symbols to libucs. */
    void *ucs = dlopen("libucs.so.0", RTLD_NOW | RTLD_GLOBAL);
    void *ucm = ucs ? dlopen("libucm.so.0", RTLD_NOW | RTLD_GLOBAL) : NULL;
    if (!ucm)
        fail_msg("libucm.so.0: %s", dlerror());
    int (*set)(int, int, ucm_cb, void *) =
        (int (*)(int, int, ucm_cb, void *))(uintptr_t)dlsym(ucm, "ucm_set_event_handler");
    ucm_unset = (void (*)(int, ucm_cb, void *))(uintptr_t)dlsym(ucm, "ucm_unset_event_handler");
    assert_true(set && ucm_unset);
    assert_int_equal(set(1 << 17 /* UCM_EVENT_VM_UNMAPPED */, 0, count_unmapped, &seen), 0);
}

static void coexists_with_ucm(void **state)
{
    struct fx *f = *state;
    load_ucm();
    create_host(f);
    char *p = make_anon(LEN);
    fx_use(f, (uintptr_t)p, LEN);
    unmap(p, LEN);
    assert_true(atomic_load(&seen) >= 1);
    anon(p, LEN, MAP_FIXED_NOREPLACE);
    fx_use(f, (uintptr_t)p, LEN);
    fx_assert_stats(f, FX_STAT(misses, 2), FX_STAT(invalidations_monitor, 1), NULL);
    ucm_unset(1 << 17, count_unmapped, &seen);
    ucm_unset = NULL;
    destroy_then_unmap(f, p, LEN);
}
#endif

static void reason_says_monitored(void **state)
{
    struct fx *f = *state;
    create_host(f);
    const char *why = regcache_validation_reason(f->c);
    if (!strstr(why, monitored[by]))
        fail_msg("%s", why);
}

/* The field, not the environment this test runs under. */
static void create_with_field(struct fx *f, int mode)
{
    f->p.host_monitor = mode;
    char *way = strdup(getenv("REGCACHE_HOST_MONITOR"));
    unsetenv("REGCACHE_HOST_MONITOR");
    create_host(f);
    setenv("REGCACHE_HOST_MONITOR", way, 1);
    free(way);
}

/* AUTO, with UCX's libucm loaded (UCM_FIRST=1): UCX's events, not a patch
 * of libc on top of UCX's; without it, libc's hooks; never the
 * userfaultfd, which changes how the mappings it watches merge (where a
 * sanitizer's allocator defeats the hooks: not monitored). */
static void auto_takes_ucx_events_where_loaded(void **state)
{
    struct fx *f = *state;
    create_with_field(f, REGCACHE_HOST_MONITOR_AUTO);
    const char *why = regcache_validation_reason(f->c);
    bool ucm = !TSAN && getenv("UCM_FIRST");
    if (!strstr(why, GLIBC_MALLOC ? monitored[ucm ? UCM : LIBC] : "host memory: not monitored"))
        fail_msg("AUTO%s: %s", ucm ? " with libucm loaded" : "", why);
}

/* Off: the documented explicit contract - a get after the pages were
 * replaced is served the old registration until regcache_invalidate(). */
static void off_keeps_the_explicit_contract(void **state)
{
    struct fx *f = *state;
    create_with_field(f, REGCACHE_HOST_MONITOR_OFF);
    assert_non_null(strstr(regcache_validation_reason(f->c), "host memory: not monitored"));
    char *p = make_anon(LEN);
    fx_use(f, (uintptr_t)p, LEN);
    fx_assert_stats(f, FX_STAT(host_unmonitored, 1), NULL);
    map_fixed_over(p, LEN);
    fx_use(f, (uintptr_t)p, LEN);
    fx_assert_stats(f, FX_STAT(hits, 1), FX_STAT(deregistrations, 0), NULL);
    assert_int_equal(regcache_invalidate(f->c, p, LEN), REGCACHE_OK);
    fx_assert_stats(f, FX_STAT(host_unmonitored, 0), NULL);
    destroy_then_unmap(f, p, LEN);
}

/* Whether the way asked for is there: hooks (libc's or UCX's) cannot see
 * free() where a sanitizer's allocator unmaps by system call (a skip, said
 * so); anywhere else every way must work. */
static int way_available(void)
{
    void *state;
    fx_setup(&state);
    struct fx *f = state;
    create_host(f);
    const char *why = strstr(regcache_validation_reason(f->c), "host memory: ");
    int ok = why && strstr(why, monitored[by]) == why;
    if (!ok && by != UFFD && !GLIBC_MALLOC) {
        printf("SKIP: a sanitizer's allocator: %s\n", why);
        ok = -1;
    } else if (!ok) {
        printf("not monitored: %s\n", why ? why : regcache_validation_reason(f->c));
    }
    fx_teardown(&state);
    return ok;
}

int main(void)
{
    page = (size_t)sysconf(_SC_PAGESIZE);
    const char *way = getenv("REGCACHE_HOST_MONITOR");
    static const char *const ways_asked[] = { "libc", "uffd", "ucm" };
    for (by = LIBC; by <= UCM && (!way || strcmp(way, ways_asked[by]) != 0); by++)
        ;
    if (by > UCM) {
        printf("run with REGCACHE_HOST_MONITOR=libc, uffd or ucm\n");
        return 1;
    }
#if !TSAN
    if (getenv("UCM_FIRST"))
        load_ucm();
#endif
    int available = way_available();
    if (available <= 0)
        return available < 0 ? 77 : 1;
    /* Large chunks from their own mappings, whatever the dynamic threshold
     * learnt. */
    mallopt(M_MMAP_THRESHOLD, 1024 * 1024);
#define TESTS                                                                       \
    brk_shrink_invalidates, held_entry_goes_at_its_put, merged_union_stays_watched, \
        device_entries_are_not_the_monitors, shm_detach, reason_says_monitored,     \
        off_keeps_the_explicit_contract, auto_takes_ucx_events_where_loaded NOT_UNDER_TSAN
#if TSAN
#define NOT_UNDER_TSAN
#elif !GLIBC_MALLOC
#define NOT_UNDER_TSAN , coexists_with_ucm
#else
#define NOT_UNDER_TSAN , fork_child_monitors_its_own, coexists_with_ucm
#endif
#define NAMES(...) #__VA_ARGS__
#define NAMES_OF(...) NAMES(__VA_ARGS__)
    return fx_run(fx_setup, fx_teardown, NAMES_OF(TESTS), FX_FNS(TESTS), FX_COUNT(TESTS),
                  replaced_pages_invalidate, ways, sizeof ways / sizeof ways[0], sizeof ways[0]);
}
