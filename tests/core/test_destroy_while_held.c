/* regcache_destroy() of a cache whose entries are still held (the API
 * allows it: their handles become invalid).  The holds must die with the
 * cache: a later cache's entries, whose pool glibc's malloc may place
 * where the destroyed one's was, would otherwise look held to every scan,
 * survive regcache_flush() and stay registered after their memory is
 * freed.  And a record whose thread exited holding such a hold leaves the
 * scan of holds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cache_fixture.h"
#include "threads.h"

/* What a slot hold's handle points at: its slot (hit_path.c). */
static uintptr_t slot_of(regcache_entry_t *e)
{
    assert_int_equal((uintptr_t)e & 1, 1);
    return atomic_load((_Atomic uintptr_t *)((uintptr_t)e & ~(uintptr_t)7));
}

#define HELD FX_ALLOC(0)

static void holds_die_with_their_cache(void **state)
{
    struct fx *f = *state;
    fx_device_alloc(f, 0);
    fx_create(f);
    regcache_entry_t *held = fx_get(f, HELD, 4096);
    uintptr_t old_entry = slot_of(held);
    assert_int_not_equal(old_entry, 0);
    regcache_destroy(f->c);
    f->c = NULL;
    assert_int_equal(slot_of(held), 0);

    /* The next cache's entry (wherever malloc put its pool): unused after
     * its put, so a flush deregisters it, and so does a free of its memory
     * after it was registered again. */
    fx_create(f);
    regcache_entry_t *e = fx_get(f, HELD, 4096);
    print_message("the new entry %s the destroyed cache's held one\n",
                  slot_of(e) == old_entry ? "lies at the address of" : "does not lie at");
    regcache_put(f->c, e);
    long deregs = atomic_load(&f->fb.deregs);
    assert_int_equal(regcache_flush(f->c), REGCACHE_OK);
    fx_assert_stats(f, FX_STAT(entries, 0), NULL);
    assert_int_equal(atomic_load(&f->fb.deregs), deregs + 1);
    fx_use(f, HELD, 4096);
    regcache_notify_free((const void *)HELD, MiB);
    fx_assert_stats(f, FX_STAT(entries, 0), NULL);
    assert_int_equal(atomic_load(&f->fb.deregs), deregs + 2);
}

static void exited_holders_record_leaves_the_scan(void **state)
{
    struct fx *f = *state;
    fx_device_alloc(f, 0);
    fx_create(f);
    fx_use(f, HELD, 4096);
    size_t before = rc_thread_live_span();
    (void)fx_get_and_exit(f, HELD, 4096);
    assert_true(rc_thread_live_span() > before);
    regcache_destroy(f->c);
    f->c = NULL;
    assert_int_equal(rc_thread_live_span(), before);
}

FX_MAIN(holds_die_with_their_cache, exited_holders_record_leaves_the_scan)
