/* The cache policy through the public API, with a fake backend that
 * describes made-up allocations. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "fake_backend.h"

#define KiB 1024ul
#define MiB (1024ul * 1024ul)
#define BASE ((uintptr_t)0x7f0000000000ull)
/* Allocation i: 1 MiB at a 64 KiB-aligned address, 2 MiB apart. */
#define ALLOC(i) (BASE + (uintptr_t)(i) * 2 * MiB)

struct fixture {
    struct fake_backend fb;
    struct regcache_params p;
    regcache_t *c;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    fake_init(&f->fb);
    fake_params(&f->fb, &f->p);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    regcache_destroy(f->c);
    /* Every registration the cache made is gone once it is destroyed. */
    assert_int_equal(atomic_load(&f->fb.live), 0);
    assert_int_equal(atomic_load(&f->fb.regs), atomic_load(&f->fb.deregs));
    free(f);
    return 0;
}

static void create(struct fixture *f)
{
    assert_int_equal(regcache_create(&f->p, &f->c), REGCACHE_OK);
}

static regcache_entry_t *get_ok(struct fixture *f, uintptr_t addr, size_t len)
{
    regcache_entry_t *e = NULL;
    assert_int_equal(regcache_get(f->c, (void *)addr, len, &e), REGCACHE_OK);
    assert_non_null(e);
    return e;
}

static struct fake_handle *handle(regcache_entry_t *e)
{
    return regcache_entry_handle(e);
}

static struct regcache_stats stats(struct fixture *f)
{
    struct regcache_stats s;
    assert_int_equal(regcache_get_stats(f->c, &s), REGCACHE_OK);
    return s;
}

static void miss_then_hit(void **state)
{
    struct fixture *f = *state;
    fake_alloc(&f->fb, ALLOC(0), MiB, 0, REGCACHE_MEM_DEVICE);
    create(f);
    regcache_entry_t *a = get_ok(f, ALLOC(0) + 4 * KiB, 4 * KiB);
    regcache_put(f->c, a);
    regcache_entry_t *b = get_ok(f, ALLOC(0) + 4 * KiB, 4 * KiB);
    assert_ptr_equal(regcache_entry_handle(a), regcache_entry_handle(b));
    regcache_put(f->c, b);
    struct regcache_stats s = stats(f);
    assert_int_equal(s.misses, 1);
    assert_int_equal(s.hits, 1);
    assert_int_equal(s.registrations, 1);
    assert_int_equal(s.entries, 1);
    assert_int_equal(s.bytes, MiB);
    assert_int_equal(atomic_load(&f->fb.regs), 1);
}

static void whole_allocation_serves_every_subrange(void **state)
{
    struct fixture *f = *state;
    fake_alloc(&f->fb, ALLOC(0) + 1000, MiB - 2000, 0, REGCACHE_MEM_DEVICE);
    create(f);
    regcache_entry_t *a = get_ok(f, ALLOC(0) + 4096, 100);
    uintptr_t start;
    size_t len;
    regcache_entry_range(a, &start, &len);
    /* The allocation rounded out to the 64 KiB alignment. */
    assert_int_equal(start, ALLOC(0));
    assert_int_equal(len, MiB);
    regcache_entry_t *b = get_ok(f, ALLOC(0) + MiB - 1000 - 64, 64);
    assert_ptr_equal(regcache_entry_handle(a), regcache_entry_handle(b));
    regcache_put(f->c, a);
    regcache_put(f->c, b);
    assert_int_equal(atomic_load(&f->fb.regs), 1);
    /* Bytes outside the allocation are not served even though the
     * registration covers them. */
    regcache_entry_t *e = NULL;
    assert_int_equal(regcache_get(f->c, (void *)(ALLOC(0) + 10), 10, &e), REGCACHE_ERR_NOT_GPU);
    assert_null(e);
}

static void partial_registration_rounds_the_request(void **state)
{
    struct fixture *f = *state;
    fake_alloc(&f->fb, ALLOC(0), MiB, 0, REGCACHE_MEM_DEVICE);
    f->p.whole_allocation = 0;
    create(f);
    regcache_entry_t *a = get_ok(f, ALLOC(0) + 70 * KiB, 10 * KiB);
    uintptr_t start;
    size_t len;
    regcache_entry_range(a, &start, &len);
    assert_int_equal(start, ALLOC(0) + 64 * KiB);
    assert_int_equal(len, 64 * KiB);
    /* Inside the rounded range: a hit.  Beyond it: a new registration. */
    regcache_entry_t *b = get_ok(f, ALLOC(0) + 64 * KiB, 64 * KiB);
    assert_ptr_equal(regcache_entry_handle(a), regcache_entry_handle(b));
    regcache_entry_t *c = get_ok(f, ALLOC(0) + 100 * KiB, 64 * KiB);
    assert_ptr_not_equal(regcache_entry_handle(a), regcache_entry_handle(c));
    regcache_entry_range(c, &start, &len);
    assert_int_equal(start, ALLOC(0) + 64 * KiB);
    assert_int_equal(len, 128 * KiB);
    regcache_put(f->c, a);
    regcache_put(f->c, b);
    regcache_put(f->c, c);
    assert_int_equal(stats(f).entries, 2);
}

static void packed_allocations_are_never_merged(void **state)
{
    struct fixture *f = *state;
    /* Two 1000-byte allocations 1 KiB apart in one 64 KiB page, as the
     * driver packs them. */
    fake_alloc(&f->fb, ALLOC(0), 1000, 0, REGCACHE_MEM_DEVICE);
    fake_alloc(&f->fb, ALLOC(0) + 1024, 1000, 0, REGCACHE_MEM_DEVICE);
    create(f);
    regcache_entry_t *first_a = NULL, *first_b = NULL;
    for (int round = 0; round < 3; round++) {
        regcache_entry_t *a = get_ok(f, ALLOC(0), 1000);
        regcache_entry_t *b = get_ok(f, ALLOC(0) + 1024, 1000);
        assert_ptr_not_equal(regcache_entry_handle(a), regcache_entry_handle(b));
        if (round == 0) {
            first_a = a;
            first_b = b;
        }
        /* Each allocation keeps being served by its own entry. */
        assert_ptr_equal(regcache_entry_handle(a), regcache_entry_handle(first_a));
        assert_ptr_equal(regcache_entry_handle(b), regcache_entry_handle(first_b));
        uintptr_t sa, sb;
        regcache_entry_range(a, &sa, NULL);
        regcache_entry_range(b, &sb, NULL);
        assert_int_equal(sa, sb); /* same rounded page, separate entries */
        regcache_put(f->c, a);
        regcache_put(f->c, b);
    }
    struct regcache_stats s = stats(f);
    assert_int_equal(s.registrations, 2);
    assert_int_equal(s.hits, 4);
    /* Freeing one spares the other. */
    regcache_notify_free((void *)ALLOC(0), 1000);
    s = stats(f);
    assert_int_equal(s.entries, 1);
    assert_int_equal(s.invalidations_notify, 1);
    regcache_entry_t *b = get_ok(f, ALLOC(0) + 1024, 1000);
    assert_ptr_equal(regcache_entry_handle(b), regcache_entry_handle(first_b));
    regcache_put(f->c, b);
    assert_int_equal(stats(f).registrations, 2);
}

static void request_spanning_two_allocations_is_refused(void **state)
{
    struct fixture *f = *state;
    fake_alloc(&f->fb, ALLOC(0), MiB, 0, REGCACHE_MEM_DEVICE);
    fake_alloc(&f->fb, ALLOC(0) + MiB, MiB, 0, REGCACHE_MEM_DEVICE);
    create(f);
    regcache_entry_t *e = (void *)1;
    assert_int_equal(regcache_get(f->c, (void *)(ALLOC(0) + MiB - 10), 20, &e),
                     REGCACHE_ERR_RANGE);
    assert_null(e);
    assert_int_equal(atomic_load(&f->fb.regs), 0);
}

static void managed_and_host_memory(void **state)
{
    struct fixture *f = *state;
    fake_alloc(&f->fb, ALLOC(0), MiB, 0, REGCACHE_MEM_MANAGED);
    create(f);
    regcache_entry_t *e;
    assert_int_equal(regcache_get(f->c, (void *)ALLOC(0), 10, &e), REGCACHE_ERR_MANAGED);
    assert_string_not_equal(regcache_last_error(), "");
    assert_int_equal(regcache_get(f->c, (void *)ALLOC(5), 10, &e), REGCACHE_ERR_NOT_GPU);
    assert_int_equal(atomic_load(&f->fb.regs), 0);
}

static void host_memory_when_enabled(void **state)
{
    struct fixture *f = *state;
    f->p.host_memory = 1;
    create(f);
    long page = sysconf(_SC_PAGESIZE);
    regcache_entry_t *e = get_ok(f, ALLOC(5) + 100, 10);
    uintptr_t start;
    size_t len;
    regcache_entry_range(e, &start, &len);
    assert_int_equal(start, ALLOC(5));
    assert_int_equal(len, (size_t)page);
    assert_int_equal(handle(e)->device, REGCACHE_DEVICE_HOST);
    regcache_put(f->c, e);
    /* No buffer id: a hit needs no query, and only invalidation drops it. */
    long queries = atomic_load(&f->fb.queries);
    regcache_put(f->c, get_ok(f, ALLOC(5) + 200, 10));
    assert_int_equal(atomic_load(&f->fb.queries), queries);
    assert_int_equal(regcache_invalidate(f->c, (void *)ALLOC(5), 1), REGCACHE_OK);
    assert_int_equal(stats(f).entries, 0);
    assert_int_equal(atomic_load(&f->fb.live), 0);
}

static void pinned_host_memory_is_tag_checked(void **state)
{
    struct fixture *f = *state;
    /* cuMemAllocHost memory: host memory that has a buffer id. */
    fake_alloc(&f->fb, ALLOC(0), MiB, REGCACHE_DEVICE_HOST, REGCACHE_MEM_HOST);
    f->p.host_memory = 1;
    f->p.validation = REGCACHE_VALIDATE_TAG_CHECK;
    create(f);
    regcache_put(f->c, get_ok(f, ALLOC(0) + 100, 10));
    regcache_put(f->c, get_ok(f, ALLOC(0) + 100, 10));
    assert_int_equal(stats(f).hits, 1);
    uint64_t id = fake_realloc(&f->fb, ALLOC(0));
    regcache_entry_t *e = get_ok(f, ALLOC(0) + 100, 10);
    assert_int_equal(handle(e)->device, REGCACHE_DEVICE_HOST);
    assert_int_equal(fake_id_at(&f->fb, ALLOC(0)), id);
    struct regcache_stats s = stats(f);
    assert_int_equal(s.invalidations_tag, 1);
    assert_int_equal(s.registrations, 2);
    assert_int_equal(atomic_load(&f->fb.live), 1);
    regcache_put(f->c, e);
}

static void held_entry_is_never_evicted(void **state)
{
    struct fixture *f = *state;
    for (int i = 0; i < 3; i++)
        fake_alloc(&f->fb, ALLOC(i), MiB, 0, REGCACHE_MEM_DEVICE);
    f->p.max_entries = 1;
    create(f);
    regcache_entry_t *a = get_ok(f, ALLOC(0), 10);
    regcache_entry_t *b = get_ok(f, ALLOC(1), 10);
    /* Both held: the limit binds unused entries only. */
    assert_int_equal(stats(f).entries, 2);
    assert_int_equal(handle(a)->magic, 0x5ca1ab1eu);
    regcache_put(f->c, a);
    /* a became unused while over the limit: it goes, b stays. */
    struct regcache_stats s = stats(f);
    assert_int_equal(s.entries, 1);
    assert_int_equal(s.evictions, 1);
    assert_int_equal(atomic_load(&f->fb.deregs), 1);
    assert_int_equal(handle(b)->magic, 0x5ca1ab1eu);
    regcache_put(f->c, b);
}

static void lru_order(void **state)
{
    struct fixture *f = *state;
    for (int i = 0; i < 4; i++)
        fake_alloc(&f->fb, ALLOC(i), MiB, 0, REGCACHE_MEM_DEVICE);
    f->p.max_entries = 3;
    create(f);
    regcache_entry_t *e[3];
    for (int i = 0; i < 3; i++)
        regcache_put(f->c, e[i] = get_ok(f, ALLOC(i), 10));
    /* Use 0 again: 1 is now the least recently used. */
    regcache_put(f->c, get_ok(f, ALLOC(0), 10));
    regcache_put(f->c, get_ok(f, ALLOC(3), 10));
    assert_int_equal(stats(f).evictions, 1);
    long regs = atomic_load(&f->fb.regs);
    /* 0 and 2 are still cached, 1 is not. */
    regcache_put(f->c, get_ok(f, ALLOC(0), 10));
    regcache_put(f->c, get_ok(f, ALLOC(2), 10));
    assert_int_equal(atomic_load(&f->fb.regs), regs);
    regcache_put(f->c, get_ok(f, ALLOC(1), 10));
    assert_int_equal(atomic_load(&f->fb.regs), regs + 1);
}

static void max_bytes_budget(void **state)
{
    struct fixture *f = *state;
    for (int i = 0; i < 4; i++)
        fake_alloc(&f->fb, ALLOC(i), MiB, 0, REGCACHE_MEM_DEVICE);
    f->p.max_bytes = 2 * MiB;
    f->p.whole_allocation_max = MiB; /* register each allocation whole */
    create(f);
    for (int i = 0; i < 4; i++)
        regcache_put(f->c, get_ok(f, ALLOC(i), 10));
    struct regcache_stats s = stats(f);
    assert_int_equal(s.bytes, 2 * MiB);
    assert_int_equal(s.evictions, 2);
    assert_int_equal(s.peak_bytes, 2 * MiB);
    assert_int_equal(atomic_load(&f->fb.live), 2);
}

static void evict_and_retry_on_exhaustion(void **state)
{
    struct fixture *f = *state;
    static const int errnos[] = {ENOSPC, ENOMEM, EAGAIN, EFAULT};
    for (int i = 0; i < 3; i++)
        fake_alloc(&f->fb, ALLOC(i), MiB, 0, REGCACHE_MEM_DEVICE);
    create(f);
    for (size_t k = 0; k < sizeof(errnos) / sizeof(errnos[0]); k++) {
        regcache_put(f->c, get_ok(f, ALLOC(0), 10));
        regcache_put(f->c, get_ok(f, ALLOC(1), 10));
        f->fb.fail_errno = errnos[k];
        f->fb.fail_count = 1;
        long deregs = atomic_load(&f->fb.deregs);
        /* The backend refuses once; the cache evicts the least recently
         * used unused entry (ALLOC(0)) and succeeds on the retry. */
        regcache_entry_t *e = get_ok(f, ALLOC(2), 10);
        assert_int_equal(atomic_load(&f->fb.deregs), deregs + 1);
        regcache_put(f->c, e);
        regcache_flush(f->c);
    }
    struct regcache_stats s = stats(f);
    assert_int_equal(s.reg_failures, 4);
    assert_int_equal(s.evictions, 4);
}

static void exhaustion_with_everything_held(void **state)
{
    struct fixture *f = *state;
    for (int i = 0; i < 3; i++)
        fake_alloc(&f->fb, ALLOC(i), MiB, 0, REGCACHE_MEM_DEVICE);
    f->fb.capacity = 2 * MiB;
    create(f);
    regcache_entry_t *a = get_ok(f, ALLOC(0), 10);
    regcache_entry_t *b = get_ok(f, ALLOC(1), 10);
    regcache_entry_t *e = (void *)1;
    assert_int_equal(regcache_get(f->c, (void *)ALLOC(2), 10, &e), REGCACHE_ERR_NO_SPACE);
    assert_null(e);
    assert_string_not_equal(regcache_last_error(), "");
    assert_int_equal(atomic_load(&f->fb.live), 2);
    assert_int_equal(stats(f).entries, 2);
    /* Once one is released the same request evicts it and succeeds. */
    regcache_put(f->c, a);
    e = get_ok(f, ALLOC(2), 10);
    assert_int_equal(atomic_load(&f->fb.live), 2);
    regcache_put(f->c, e);
    regcache_put(f->c, b);
}

static void other_backend_errors_do_not_evict(void **state)
{
    struct fixture *f = *state;
    fake_alloc(&f->fb, ALLOC(0), MiB, 0, REGCACHE_MEM_DEVICE);
    fake_alloc(&f->fb, ALLOC(1), MiB, 0, REGCACHE_MEM_DEVICE);
    create(f);
    regcache_put(f->c, get_ok(f, ALLOC(0), 10));
    f->fb.fail_errno = EINVAL;
    f->fb.fail_count = 1;
    regcache_entry_t *e;
    assert_int_equal(regcache_get(f->c, (void *)ALLOC(1), 10, &e), REGCACHE_ERR_BACKEND);
    struct regcache_stats s = stats(f);
    assert_int_equal(s.evictions, 0);
    assert_int_equal(s.entries, 1);
    assert_int_equal(s.reg_failures, 1);
    /* The failed miss left nothing behind: the next get registers. */
    regcache_put(f->c, get_ok(f, ALLOC(1), 10));
    assert_int_equal(stats(f).entries, 2);
}

static void devices_have_separate_budgets(void **state)
{
    struct fixture *f = *state;
    fake_alloc(&f->fb, ALLOC(0), MiB, 0, REGCACHE_MEM_DEVICE);
    fake_alloc(&f->fb, ALLOC(1), MiB, 0, REGCACHE_MEM_DEVICE);
    fake_alloc(&f->fb, ALLOC(2), MiB, 1, REGCACHE_MEM_DEVICE);
    f->fb.capacity = MiB; /* per device */
    create(f);
    regcache_put(f->c, get_ok(f, ALLOC(2), 10)); /* device 1 */
    regcache_put(f->c, get_ok(f, ALLOC(0), 10)); /* device 0 */
    /* Device 0 is full: it evicts its own entry, never device 1's, even
     * though device 1's is older. */
    regcache_put(f->c, get_ok(f, ALLOC(1), 10));
    long regs = atomic_load(&f->fb.regs);
    regcache_put(f->c, get_ok(f, ALLOC(2), 10));
    assert_int_equal(atomic_load(&f->fb.regs), regs);
    assert_int_equal(stats(f).evictions, 1);
}

static void invalidate_unused_and_held(void **state)
{
    struct fixture *f = *state;
    fake_alloc(&f->fb, ALLOC(0), MiB, 0, REGCACHE_MEM_DEVICE);
    fake_alloc(&f->fb, ALLOC(1), MiB, 0, REGCACHE_MEM_DEVICE);
    create(f);
    regcache_put(f->c, get_ok(f, ALLOC(0), 10));
    regcache_entry_t *held = get_ok(f, ALLOC(1), 10);

    assert_int_equal(regcache_invalidate(f->c, (void *)ALLOC(0), 2 * MiB + 1), REGCACHE_OK);
    struct regcache_stats s = stats(f);
    assert_int_equal(s.invalidations_explicit, 2);
    assert_int_equal(s.entries, 0);
    /* The unused one is gone now; the held one stays registered... */
    assert_int_equal(atomic_load(&f->fb.deregs), 1);
    assert_int_equal(handle(held)->magic, 0x5ca1ab1eu);
    /* ...but is never served again. */
    regcache_entry_t *fresh = get_ok(f, ALLOC(1), 10);
    assert_ptr_not_equal(regcache_entry_handle(fresh), regcache_entry_handle(held));
    regcache_put(f->c, held);
    assert_int_equal(atomic_load(&f->fb.deregs), 2);
    regcache_put(f->c, fresh);
    assert_int_equal(stats(f).entries, 1);
}

static void notify_free_reaches_every_cache(void **state)
{
    struct fixture *f = *state;
    fake_alloc(&f->fb, ALLOC(0), MiB, 0, REGCACHE_MEM_DEVICE);
    create(f);
    regcache_t *other;
    assert_int_equal(regcache_create(&f->p, &other), REGCACHE_OK);
    regcache_put(f->c, get_ok(f, ALLOC(0), 10));
    regcache_entry_t *e;
    assert_int_equal(regcache_get(other, (void *)ALLOC(0), 10, &e), REGCACHE_OK);
    regcache_put(other, e);
    assert_int_equal(atomic_load(&f->fb.live), 2);
    regcache_notify_free((void *)(ALLOC(0) + 100), 1);
    assert_int_equal(atomic_load(&f->fb.live), 0);
    struct regcache_stats s;
    regcache_get_stats(other, &s);
    assert_int_equal(s.invalidations_notify, 1);
    assert_int_equal(stats(f).invalidations_notify, 1);
    regcache_destroy(other);
    /* A destroyed cache is no longer notified. */
    regcache_notify_free((void *)ALLOC(0), MiB);
}

static void flush_spares_held_entries(void **state)
{
    struct fixture *f = *state;
    for (int i = 0; i < 3; i++)
        fake_alloc(&f->fb, ALLOC(i), MiB, 0, REGCACHE_MEM_DEVICE);
    create(f);
    regcache_put(f->c, get_ok(f, ALLOC(0), 10));
    regcache_put(f->c, get_ok(f, ALLOC(1), 10));
    regcache_entry_t *held = get_ok(f, ALLOC(2), 10);
    assert_int_equal(regcache_flush(f->c), REGCACHE_OK);
    struct regcache_stats s = stats(f);
    assert_int_equal(s.entries, 1);
    assert_int_equal(s.evictions, 0);
    assert_int_equal(s.deregistrations, 2);
    regcache_entry_t *again = get_ok(f, ALLOC(2), 10);
    assert_ptr_equal(regcache_entry_handle(again), regcache_entry_handle(held));
    regcache_put(f->c, again);
    regcache_put(f->c, held);
}

static void destroy_with_entries_held(void **state)
{
    struct fixture *f = *state;
    fake_alloc(&f->fb, ALLOC(0), MiB, 0, REGCACHE_MEM_DEVICE);
    fake_alloc(&f->fb, ALLOC(1), MiB, 0, REGCACHE_MEM_DEVICE);
    create(f);
    get_ok(f, ALLOC(0), 10);
    regcache_entry_t *zombie = get_ok(f, ALLOC(1), 10);
    regcache_invalidate(f->c, (void *)ALLOC(1), 1);
    (void)zombie;
    regcache_destroy(f->c);
    f->c = NULL;
    /* teardown checks that both registrations were released */
}

static void tag_check_catches_reallocation(void **state)
{
    struct fixture *f = *state;
    fake_alloc(&f->fb, ALLOC(0), MiB, 0, REGCACHE_MEM_DEVICE);
    f->p.validation = REGCACHE_VALIDATE_TAG_CHECK;
    create(f);
    assert_int_equal(regcache_validation_mode(f->c), REGCACHE_VALIDATE_TAG_CHECK);
    regcache_entry_t *a = get_ok(f, ALLOC(0), 10);
    regcache_put(f->c, a);
    /* Freed and reallocated at the same address behind the cache's back. */
    uint64_t id = fake_realloc(&f->fb, ALLOC(0));
    regcache_entry_t *b = get_ok(f, ALLOC(0), 10);
    assert_int_equal(handle(b)->id, id);
    struct regcache_stats s = stats(f);
    assert_int_equal(s.invalidations_tag, 1);
    assert_int_equal(s.registrations, 2);
    assert_int_equal(s.hits, 0);
    assert_int_equal(s.misses, 2);
    regcache_put(f->c, b);
    /* Freed for good: refused, and the stale entry is gone. */
    fake_free(&f->fb, ALLOC(0));
    regcache_entry_t *e;
    assert_int_equal(regcache_get(f->c, (void *)ALLOC(0), 10, &e), REGCACHE_ERR_NOT_GPU);
    assert_int_equal(stats(f).entries, 0);
    assert_int_equal(atomic_load(&f->fb.live), 0);
}

static void hooks_mode_skips_the_tag_check(void **state)
{
    struct fixture *f = *state;
    fake_alloc(&f->fb, ALLOC(0), MiB, 0, REGCACHE_MEM_DEVICE);
    f->p.validation = REGCACHE_VALIDATE_HOOKS;
    create(f);
    regcache_put(f->c, get_ok(f, ALLOC(0), 10));
    long queries = atomic_load(&f->fb.queries);
    for (int i = 0; i < 10; i++)
        regcache_put(f->c, get_ok(f, ALLOC(0), 10));
    assert_int_equal(atomic_load(&f->fb.queries), queries);
    assert_int_equal(stats(f).hits, 10);
}

static void *getter(void *arg)
{
    struct fixture *f = arg;
    regcache_entry_t *e = NULL;
    int rc = regcache_get(f->c, (void *)ALLOC(0), 10, &e);
    if (rc == REGCACHE_OK)
        regcache_put(f->c, e);
    return (void *)(intptr_t)rc;
}

static void slow_reg(void *arg)
{
    (void)arg;
    usleep(20000);
}

static void concurrent_misses_register_once(void **state)
{
    struct fixture *f = *state;
    fake_alloc(&f->fb, ALLOC(0), MiB, 0, REGCACHE_MEM_DEVICE);
    f->fb.during_reg = slow_reg;
    create(f);
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, getter, f);
    for (int i = 0; i < 8; i++) {
        void *rc;
        pthread_join(t[i], &rc);
        assert_int_equal((intptr_t)rc, REGCACHE_OK);
    }
    assert_int_equal(atomic_load(&f->fb.regs), 1);
    struct regcache_stats s = stats(f);
    assert_int_equal(s.misses, 1);
    assert_int_equal(s.hits, 7);
}

static void free_during_registration(void *arg)
{
    struct fixture *f = arg;
    /* Only the first registration races with a free. */
    f->fb.during_reg = NULL;
    regcache_notify_free((void *)ALLOC(0), MiB);
    fake_realloc(&f->fb, ALLOC(0));
}

static void invalidated_while_registering(void **state)
{
    struct fixture *f = *state;
    fake_alloc(&f->fb, ALLOC(0), MiB, 0, REGCACHE_MEM_DEVICE);
    f->fb.during_reg = free_during_registration;
    f->fb.during_reg_arg = f;
    create(f);
    /* The get that raced with the free is served once, and nothing of it
     * stays cached: its put deregisters it. */
    regcache_entry_t *e = get_ok(f, ALLOC(0), 10);
    assert_int_equal(stats(f).one_shots, 1);
    assert_int_equal(stats(f).entries, 0);
    regcache_put(f->c, e);
    assert_int_equal(atomic_load(&f->fb.live), 0);
    /* The next get registers the memory that lives there now. */
    e = get_ok(f, ALLOC(0), 10);
    assert_int_equal(handle(e)->id, fake_id_at(&f->fb, ALLOC(0)));
    assert_int_equal(atomic_load(&f->fb.regs), 2);
    regcache_put(f->c, e);
    assert_int_equal(stats(f).entries, 1);
}

static void fork_child_does_not_touch_registrations(void **state)
{
    struct fixture *f = *state;
    fake_alloc(&f->fb, ALLOC(0), MiB, 0, REGCACHE_MEM_DEVICE);
    create(f);
    regcache_put(f->c, get_ok(f, ALLOC(0), 10));
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        regcache_entry_t *e;
        int bad = 0;
        bad |= regcache_get(f->c, (void *)ALLOC(0), 10, &e) != REGCACHE_ERR_FORKED;
        bad |= regcache_flush(f->c) != REGCACHE_ERR_FORKED;
        bad |= regcache_invalidate(f->c, (void *)ALLOC(0), 1) != REGCACHE_ERR_FORKED;
        long deregs = atomic_load(&f->fb.deregs);
        regcache_destroy(f->c);
        bad |= atomic_load(&f->fb.deregs) != deregs;
        /* A cache created in the child works. */
        regcache_t *mine;
        bad |= regcache_create(&f->p, &mine) != REGCACHE_OK;
        bad |= regcache_get(mine, (void *)ALLOC(0), 10, &e) != REGCACHE_OK;
        regcache_put(mine, e);
        regcache_destroy(mine);
        _exit(bad);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* The parent's cache is untouched. */
    regcache_put(f->c, get_ok(f, ALLOC(0), 10));
    assert_int_equal(stats(f).hits, 1);
    assert_int_equal(atomic_load(&f->fb.deregs), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
        T(miss_then_hit),
        T(whole_allocation_serves_every_subrange),
        T(partial_registration_rounds_the_request),
        T(packed_allocations_are_never_merged),
        T(request_spanning_two_allocations_is_refused),
        T(managed_and_host_memory),
        T(host_memory_when_enabled),
        T(pinned_host_memory_is_tag_checked),
        T(held_entry_is_never_evicted),
        T(lru_order),
        T(max_bytes_budget),
        T(evict_and_retry_on_exhaustion),
        T(exhaustion_with_everything_held),
        T(other_backend_errors_do_not_evict),
        T(devices_have_separate_budgets),
        T(invalidate_unused_and_held),
        T(notify_free_reaches_every_cache),
        T(flush_spares_held_entries),
        T(destroy_with_entries_held),
        T(tag_check_catches_reallocation),
        T(hooks_mode_skips_the_tag_check),
        T(concurrent_misses_register_once),
        T(invalidated_while_registering),
        T(fork_child_does_not_touch_registrations),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
