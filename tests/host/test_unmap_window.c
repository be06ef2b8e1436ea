/* The unmap window: a thread's unmap of a range is held at its system call
 * (a seccomp filter traps it, and its SIGSYS handler waits until the test
 * lets it go on) while another thread registers the range.  That
 * registration pins the pages about to go; once the unmap is let go and
 * new pages are mapped there, a get must not be served it.  Through hooks
 * (libc's, or UCX's where REGCACHE_HOST_MONITOR=ucm), each way pages
 * leave, over a range cached before the hold and over one never watched
 * before.  The userfaultfd cannot close the window (the kernel reports an
 * unmap after the pages are gone, a discard before they are): AUTO never
 * takes it. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "hang_alarm.h"
#include "host_fixture.h"
#include "syscall_trap.h"
#include "test_sync.h"

#define LEN (2 * MiB)

/* The held call's first argument, and its hold. */
static uintptr_t held_addr;
static struct syscall_hold hold;

/* One way of taking the pages of [p, p + LEN): the call the thread makes
 * (held), and what then maps new pages there. */
struct way {
    const char *name;
    int nr;
    bool (*take)(char *p); /* in the held thread: no cmocka there */
    void (*remap)(char *p);
    bool cached_before; /* an entry of the old pages before the hold */
};

static bool take_munmap(char *p)
{
    return munmap(p, LEN) == 0;
}

static bool take_dontneed(char *p)
{
    return madvise(p, LEN, MADV_DONTNEED) == 0;
}

static bool take_map_fixed(char *p)
{
    return mmap(p, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
           p;
}

/* Moved away, grown past a page no mapping may grow into. */
static bool take_mremap(char *p)
{
    char *q = mremap(p, LEN, 2 * LEN, MREMAP_MAYMOVE);
    return q != MAP_FAILED && q != p && munmap(q, 2 * LEN) == 0;
}

static void map_anew(char *p)
{
    hx_anon(p, LEN, MAP_FIXED_NOREPLACE);
}

static void nothing(char *p)
{
    (void)p; /* the next touch maps new pages */
}

static const struct way ways[] = {
    { "munmap", SYS_munmap, take_munmap, map_anew, true },
    { "munmap_of_a_range_never_watched", SYS_munmap, take_munmap, map_anew, false },
    { "madvise_dontneed", SYS_madvise, take_dontneed, nothing, true },
    { "mmap_fixed", SYS_mmap, take_map_fixed, nothing, true },
    { "mremap", SYS_mremap, take_mremap, map_anew, true },
};

struct unmapper {
    const struct way *w;
    char *p;
    bool took;
};

/* In the held thread: no cmocka there. */
static void unmap_held(void *arg)
{
    struct unmapper *u = arg;
    if (syscall_trap_install_at(u->w->nr, held_addr, syscall_trap_hold, &hold) != 0)
        abort();
    u->took = u->w->take(u->p);
}

static void registered_while_unmapping(void **state)
{
    struct fx *f = *state;
    const struct way *w = f->param;
    hx_create(f);
    /* A guard page after it: mremap cannot grow it in place. */
    char *p = hx_anon(NULL, LEN + hx_page, 0);
    assert_int_equal(mprotect(p + LEN, hx_page, PROT_NONE), 0);
    p[0] = 1;
    if (w->cached_before)
        fx_use(f, (uintptr_t)p, LEN);
    held_addr = (uintptr_t)p;
    assert_int_equal(syscall_hold_open(&hold), 0);
    hang_alarm(60, "the unmap held at its system call");
    struct unmapper u = { w, p, false };
    struct dthread t;
    dthread_start(&t, unmap_held, &u);
    assert_int_equal(syscall_hold_wait(&hold), 0);
    /* Held at the call: the old pages are still there. */
    fx_use(f, (uintptr_t)p, LEN);
    assert_int_equal(syscall_hold_release(&hold), 0);
    assert_true(dthread_join(&t, HANG_SECONDS));
    hang_alarm_off();
    assert_true(u.took);
    w->remap(p);
    p[0] = 2;
    fx_use(f, (uintptr_t)p, LEN);
    struct regcache_stats s = fx_stats(f);
    assert_int_equal(s.hits, 0);
    assert_int_equal(s.misses, w->cached_before ? 3 : 2);
    syscall_hold_close(&hold);
    hx_destroy_then_unmap(f, p, LEN + hx_page);
}

/* Where hooks cannot be proven (a sanitizer's allocator), AUTO leaves host
 * memory unmonitored rather than take the userfaultfd. */
static void auto_never_takes_the_userfaultfd(void **state)
{
    struct fx *f = *state;
    char *way = strdup(getenv("REGCACHE_HOST_MONITOR"));
    bool ucm = strcmp(way, "ucm") == 0;
    setenv("REGCACHE_HOST_MONITOR", "auto", 1);
    hx_create(f);
    setenv("REGCACHE_HOST_MONITOR", way, 1);
    free(way);
    const char *why = regcache_validation_reason(f->c);
    const char *hooks = ucm ? "monitored by UCX's memory events" : "monitored by patching libc";
    if (strstr(why, "monitored by userfaultfd") ||
        !strstr(why, HX_SANITIZED ? "host memory: not monitored" : hooks))
        fail_msg("%s", why);
}

int main(void)
{
#if !defined(__x86_64__)
    printf("SKIP: the held call's registers are read the x86-64 way\n");
    return 77;
#endif
    int status = hx_start();
    if (status == 77)
        return FX_RUN(fx_setup, fx_teardown, auto_never_takes_the_userfaultfd);
    if (status)
        return status;
    return fx_run(fx_setup, fx_teardown, "auto_never_takes_the_userfaultfd",
                  FX_FNS(auto_never_takes_the_userfaultfd), 1, registered_while_unmapping, ways,
                  sizeof ways / sizeof ways[0], sizeof ways[0]);
}
