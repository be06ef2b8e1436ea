/* Pageable host memory is registered rounded to params.alignment, clipped to
 * the mappings that hold it, and a miss that overlaps cached entries of
 * those mappings registers their union once: the entries it covers leave
 * the cache (unused ones at once, held ones at their put).  Real mappings
 * (the fake backend never touches them), fenced by PROT_NONE pages so that
 * each is a mapping of its own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache_fixture.h"

#define MAPPING (16 * MiB)
#define ALIGN (2 * MiB)

static size_t page;

/* A read-write mapping of len bytes between two PROT_NONE pages. */
static char *fenced_mapping(size_t len)
{
    char *p = mmap(NULL, len + 2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    assert_int_equal(mprotect(p + page, len, PROT_READ | PROT_WRITE), 0);
    return p + page;
}

static void unmap_fenced(char *p, size_t len)
{
    assert_int_equal(munmap(p - page, len + 2 * page), 0);
}

static void range_of(regcache_entry_t *e, uintptr_t *start, uintptr_t *end)
{
    size_t len;
    regcache_entry_range(e, start, &len);
    *end = *start + len;
}

static void create_host(struct fx *f, size_t alignment)
{
    f->p.host_memory = 1;
    f->p.alignment = alignment;
    fx_create(f);
}

/* Rounded to the alignment inside the mapping, clipped at its ends. */
static void rounded_to_alignment_within_the_mapping(void **state)
{
    struct fx *f = *state;
    create_host(f, ALIGN);
    char *m = fenced_mapping(MAPPING);
    uintptr_t s, e, lo = (uintptr_t)m, hi = lo + MAPPING;

    regcache_entry_t *mid = fx_get(f, (uintptr_t)m + MAPPING / 2 + 100, 10);
    range_of(mid, &s, &e);
    uintptr_t want = ((uintptr_t)m + MAPPING / 2 + 100) & ~(uintptr_t)(ALIGN - 1);
    assert_int_equal(s, want < lo ? lo : want);
    assert_int_equal(e, want + ALIGN > hi ? hi : want + ALIGN);
    regcache_put(f->c, mid);

    /* At either end the registration stops at the mapping's edge. */
    regcache_entry_t *first = fx_get(f, lo, 10), *last = fx_get(f, hi - 10, 10);
    range_of(first, &s, &e);
    assert_int_equal(s, lo);
    assert_true(e <= hi);
    range_of(last, &s, &e);
    assert_int_equal(e, hi);
    assert_true(s >= lo);
    regcache_put(f->c, first);
    regcache_put(f->c, last);
    assert_true(fx_stats(f).bytes <= MAPPING);
    regcache_destroy(f->c);
    f->c = NULL;
    unmap_fenced(m, MAPPING);
}

/* Two overlapping requests: the second registers the union, and the first
 * entry, unused, is deregistered. */
static void overlapping_unused_entries_merge(void **state)
{
    struct fx *f = *state;
    create_host(f, page);
    char *m = fenced_mapping(MAPPING);
    fx_use(f, (uintptr_t)m, 4 * page);
    regcache_entry_t *e = fx_get(f, (uintptr_t)m + 2 * page, 4 * page);
    uintptr_t s, end;
    range_of(e, &s, &end);
    assert_int_equal(s, (uintptr_t)m);
    assert_int_equal(end, (uintptr_t)m + 6 * page);
    fx_assert_stats(f, FX_STAT(entries, 1), FX_STAT(registrations, 2), FX_STAT(deregistrations, 1),
                    FX_STAT(bytes, 6 * page), NULL);
    assert_int_equal(atomic_load(&f->fb.live), 1);
    regcache_put(f->c, e);
    /* The union serves both requests. */
    fx_use(f, (uintptr_t)m, 6 * page);
    assert_int_equal(fx_stats(f).hits, 1);
    regcache_destroy(f->c);
    f->c = NULL;
    unmap_fenced(m, MAPPING);
}

/* A held entry merged into a union leaves the cache at once (no new hits)
 * and stays registered until its put. */
static void held_entries_live_until_their_put(void **state)
{
    struct fx *f = *state;
    create_host(f, page);
    char *m = fenced_mapping(MAPPING);
    regcache_entry_t *held = fx_get(f, (uintptr_t)m + page, 2 * page);
    fx_use(f, (uintptr_t)m + 4 * page, 2 * page);
    regcache_entry_t *u = fx_get(f, (uintptr_t)m, 8 * page);
    uintptr_t s, end;
    range_of(u, &s, &end);
    assert_int_equal(s, (uintptr_t)m);
    assert_int_equal(end, (uintptr_t)m + 8 * page);
    fx_assert_stats(f, FX_STAT(entries, 1), FX_STAT(deregistrations, 1), NULL);
    assert_int_equal(atomic_load(&f->fb.live), 2);
    /* The held one still serves its holder's transfer. */
    assert_int_equal(fx_handle(held)->start, (uintptr_t)m + page);
    regcache_put(f->c, held);
    assert_int_equal(atomic_load(&f->fb.live), 1);
    fx_assert_stats(f, FX_STAT(deregistrations, 2), NULL);
    /* Its range is now a hit on the union. */
    regcache_entry_t *again = fx_get(f, (uintptr_t)m + page, 2 * page);
    assert_ptr_equal(fx_handle(again), fx_handle(u));
    regcache_put(f->c, again);
    regcache_put(f->c, u);
    regcache_destroy(f->c);
    f->c = NULL;
    unmap_fenced(m, MAPPING);
}

/* What a request of 10 bytes at addr registers in the mapping [lo, hi). */
static size_t aligned_len(uintptr_t lo, uintptr_t hi, uintptr_t addr)
{
    uintptr_t s = addr & ~(uintptr_t)(ALIGN - 1), e = s + ALIGN;
    return (e > hi ? hi : e) - (s < lo ? lo : s);
}

/* Entries of another mapping never join: the union stays inside the
 * mappings that hold the request, each rounded on its own. */
static void other_mappings_stay_apart(void **state)
{
    struct fx *f = *state;
    create_host(f, ALIGN);
    char *m[2] = { fenced_mapping(MAPPING), fenced_mapping(MAPPING) };
    size_t want = 0;
    for (int i = 0; i < 4; i++) {
        uintptr_t lo = (uintptr_t)m[i & 1], addr = i < 2 ? lo + 100 : lo + MAPPING - 100;
        fx_use(f, addr, 10);
        want += aligned_len(lo, lo + MAPPING, addr);
    }
    fx_assert_stats(f, FX_STAT(entries, 4), FX_STAT(deregistrations, 0), FX_STAT(bytes, want),
                    NULL);
    char *a = m[0], *b = m[1];
    regcache_destroy(f->c);
    f->c = NULL;
    unmap_fenced(a, MAPPING);
    unmap_fenced(b, MAPPING);
}

/* 400 random sub-range gets over two 16 MiB mappings converge: at most two
 * registrations each, never more pinned than the mappings. */
static void random_sub_ranges_converge(void **state)
{
    struct fx *f = *state;
    create_host(f, ALIGN);
    char *m[2] = { fenced_mapping(MAPPING), fenced_mapping(MAPPING) };
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 400; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        size_t len = 1 + (size_t)(rng >> 40) % MiB;
        size_t off = (size_t)(rng & 0xffffffu) % (MAPPING - len);
        fx_use(f, (uintptr_t)m[i & 1] + off, len);
    }
    struct regcache_stats s = fx_stats(f);
    assert_true(s.entries <= 4);
    assert_true(s.peak_bytes <= 2 * MAPPING);
    assert_int_equal(atomic_load(&f->fb.live), (long)s.entries);
    regcache_destroy(f->c);
    f->c = NULL;
    unmap_fenced(m[0], MAPPING);
    unmap_fenced(m[1], MAPPING);
}

int main(void)
{
    page = (size_t)sysconf(_SC_PAGESIZE);
    return FX_RUN(fx_setup, fx_teardown, rounded_to_alignment_within_the_mapping,
                  overlapping_unused_entries_merge, held_entries_live_until_their_put,
                  other_mappings_stay_apart, random_sub_ranges_converge);
}
