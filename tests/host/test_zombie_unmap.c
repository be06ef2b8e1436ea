/* A held entry that a merge replaced has left the cache but is still
 * registered for its holder.  When its pages are then unmapped, the
 * monitor finds it too: the holder is told at once (a leave notice, held,
 * for the unmap) as for an entry in the cache, and its put does not tell
 * it again. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

#include <cmocka.h>

#include "host_fixture.h"
#include "test_sync.h"

#define LEN (4 * MiB)
#define MAX_NOTES 8

struct notes {
    pthread_mutex_t lock;
    int n;
    struct regcache_leave at[MAX_NOTES];
};

static void record(void *arg, const struct regcache_leave *l)
{
    struct notes *ns = arg;
    pthread_mutex_lock(&ns->lock);
    if (ns->n < MAX_NOTES)
        ns->at[ns->n++] = *l;
    pthread_mutex_unlock(&ns->lock);
}

static int count(struct notes *ns)
{
    pthread_mutex_lock(&ns->lock);
    int n = ns->n;
    pthread_mutex_unlock(&ns->lock);
    return n;
}

static bool two(const void *arg)
{
    return count((struct notes *)arg) >= 2;
}

/* The notice of the entry registered over [start, start + len). */
static const struct regcache_leave *note_of(struct notes *ns, uintptr_t start, size_t len)
{
    for (int i = 0; i < count(ns); i++)
        if (ns->at[i].start == start && ns->at[i].len == len)
            return &ns->at[i];
    return NULL;
}

static void replaced_then_unmapped(void **state)
{
    struct fx *f = *state;
    static struct notes ns = { .lock = PTHREAD_MUTEX_INITIALIZER };
    f->p.on_leave = record;
    f->p.callback_arg = &ns;
    f->p.host_merge = REGCACHE_HOST_MERGE_ALL; /* AUTO: off, with on_leave */
    hx_create(f);
    char *p = hx_anon(NULL, LEN, 0);
    regcache_entry_t *held = fx_get(f, (uintptr_t)p, LEN / 2);
    /* Overlapping the held entry within its mapping: one registration of
     * the union replaces it. */
    fx_use(f, (uintptr_t)p + LEN / 4, LEN / 2);
    fx_assert_stats(f, FX_STAT(entries, 1), FX_STAT(misses, 2), NULL);
    assert_int_equal(count(&ns), 0);

    assert_int_equal(madvise(p, hx_page, MADV_DONTNEED), 0);
    /* The union's notice, and the replaced entry's before its put. */
    fx_use(f, (uintptr_t)p + LEN / 2, hx_page); /* catches up with the monitor */
    assert_true(wait_until(two, &ns, HANG_SECONDS));
    const struct regcache_leave *replaced = note_of(&ns, (uintptr_t)p, LEN / 2);
    assert_non_null(replaced);
    assert_int_equal(replaced->reason, REGCACHE_REASON_FREED_MONITOR);
    assert_int_equal(replaced->held, 1);
    const struct regcache_leave *merged = note_of(&ns, (uintptr_t)p, 3 * LEN / 4);
    assert_non_null(merged);
    assert_int_equal(merged->reason, REGCACHE_REASON_FREED_MONITOR);

    long live = atomic_load(&f->fb.live);
    regcache_put(f->c, held);
    assert_int_equal(atomic_load(&f->fb.live), live - 1);
    assert_int_equal(count(&ns), 2);
    hx_destroy_then_unmap(f, p, LEN);
}

int main(void)
{
    int status = hx_start();
    if (status)
        return status;
    return FX_RUN(fx_setup, fx_teardown, replaced_then_unmapped);
}
