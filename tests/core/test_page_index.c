/* The hit path's page index against a brute-force model: random adds and
 * removals of entries indexed under random pages, with long probe runs (few
 * pages hashing to many slots), growth, and deletion's backward shifts;
 * after every operation every page is looked up in both, and the slot found
 * must carry its entry's copies.  Removals go either way an eviction's may:
 * all at once, or unlisted and then forgotten or listed again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "entry.h"
#include "page_index.h"
#include "regcache.h"

#define SHIFT 16
#define PAGE ((uintptr_t)1 << SHIFT)
#define ENTRIES 512
#define PAGES 64 /* few pages, many entries: long runs and shared pages */
#define OPS 20000

struct model {
    struct regcache_entry *e; /* ENTRIES of them */
    bool live[ENTRIES];
    uintptr_t pages[ENTRIES][4]; /* pages each live entry is indexed under */
    unsigned npages[ENTRIES];
};

static uint32_t next(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* Does entry i cover [start, end) and is it indexed under start's page? */
static bool model_serves(const struct model *m, unsigned i, uintptr_t start, uintptr_t end)
{
    if (!m->live[i] || start < m->e[i].match_start || end > m->e[i].match_end)
        return false;
    for (unsigned k = 0; k < m->npages[i]; k++)
        if (m->pages[i][k] == start >> SHIFT)
            return true;
    return false;
}

/* Every page, with a request that some entries cover: the index finds one
 * exactly when the model has one, and only one the model would serve. */
static void compare(struct rc_page_index *idx, const struct model *m, uint32_t *seed)
{
    for (uintptr_t p = 0; p < PAGES; p++) {
        uintptr_t start = p * PAGE + next(seed) % PAGE, end = start + 1 + next(seed) % 4096;
        struct rc_probe probe;
        struct regcache_entry *found = rc_page_index_find(idx, start, end, &probe);
        bool any = false;
        for (unsigned i = 0; i < ENTRIES && !any; i++)
            any = model_serves(m, i, start, end);
        if (!found) {
            assert_false(any);
            continue;
        }
        unsigned i = (unsigned)(found - m->e);
        assert_true(i < ENTRIES);
        assert_true(model_serves(m, i, start, end));
        /* What the hit path takes from the slot instead of the entry. */
        rc_page_index_read_slot(&probe, true);
        assert_true(rc_page_index_unchanged(&probe));
        assert_int_equal(probe.stamp, atomic_load(&found->last_use));
        assert_int_equal(probe.rails, atomic_load(&found->rails_ready));
        assert_int_equal(probe.device_slot, found->device_slot);
        assert_int_equal(probe.buffer_id, found->buffer_id);
        assert_int_equal(probe.several, found->more != NULL);
    }
}

/* Any mapping list: the index only copies whether there is one. */
static const struct rc_mapping another_mapping;

static void add(struct rc_page_index *idx, struct model *m, unsigned i, uint32_t *seed)
{
    struct regcache_entry *e = &m->e[i];
    /* A match range around a few neighbouring pages: requests starting in
     * any of them may be served, and entries overlap each other. */
    uintptr_t first = next(seed) % PAGES, span = 1 + next(seed) % 3;
    atomic_store(&e->match_start, first * PAGE);
    atomic_store(&e->match_end, (first + span) * PAGE);
    /* Copies the slot must carry, different for each entry and each life. */
    atomic_store(&e->last_use, next(seed));
    atomic_store(&e->rails_ready, 1 + next(seed) % 15);
    e->device_slot = (int)(next(seed) % 8);
    e->buffer_id = next(seed);
    e->more = next(seed) % 2 ? &another_mapping : NULL;
    e->state = RC_READY;
    e->pages = e->pages_inline;
    e->npages = 0;
    e->pages_cap = RC_INLINE_PAGES;
    m->live[i] = true;
    m->npages[i] = 0;
    unsigned n = 1 + next(seed) % 4;
    for (unsigned k = 0; k < n; k++) {
        uintptr_t start = (first + next(seed) % span) * PAGE;
        assert_int_equal(rc_page_index_add(idx, e, start), REGCACHE_OK);
        bool known = false;
        for (unsigned j = 0; j < m->npages[i]; j++)
            known |= m->pages[i][j] == start >> SHIFT;
        if (!known)
            m->pages[i][m->npages[i]++] = start >> SHIFT;
    }
    /* The index lists each page once per entry, as the model does. */
    assert_int_equal(e->npages, m->npages[i]);
}

static void remove_entry(struct rc_page_index *idx, struct model *m, unsigned i)
{
    rc_page_index_remove_entry(idx, &m->e[i]);
    m->e[i].state = RC_FREE;
    m->live[i] = false;
}

/* An eviction's claim: the entry leaves the index but keeps its pages, and
 * then either goes (forgotten, and removing it later finds nothing to do)
 * or, held after all, is listed again under every page it had. */
static void unlist_entry(struct rc_page_index *idx, struct model *m, unsigned i, uint32_t *seed)
{
    struct regcache_entry *e = &m->e[i];
    rc_page_index_unlist(idx, e);
    m->live[i] = false;
    compare(idx, m, seed);
    if (next(seed) % 2) {
        rc_page_index_forget(e);
        assert_int_equal(e->npages, 0);
        rc_page_index_remove_entry(idx, e);
        e->state = RC_FREE;
        return;
    }
    rc_page_index_relist(idx, e);
    m->live[i] = true;
    assert_int_equal(e->npages, m->npages[i]);
}

static void random_operations_agree_with_the_model(void **state)
{
    (void)state;
    struct model *m = calloc(1, sizeof(*m));
    m->e = aligned_alloc(64, ENTRIES * sizeof(*m->e));
    memset(m->e, 0, ENTRIES * sizeof(*m->e));
    struct rc_page_index idx;
    assert_int_equal(rc_page_index_init(&idx, SHIFT), REGCACHE_OK);
    uint32_t seed = 2463534242u;
    for (int op = 0; op < OPS; op++) {
        unsigned i = next(&seed) % ENTRIES;
        if (m->live[i] && next(&seed) % 2)
            unlist_entry(&idx, m, i, &seed);
        else if (m->live[i])
            remove_entry(&idx, m, i);
        else
            add(&idx, m, i, &seed);
        rc_page_index_check(&idx);
        compare(&idx, m, &seed);
    }
    for (unsigned i = 0; i < ENTRIES; i++)
        if (m->live[i])
            remove_entry(&idx, m, i);
    compare(&idx, m, &seed);
    rc_page_index_fini(&idx);
    free(m->e);
    free(m);
}

/* n zeroed entries, entry i to serve page i. */
static struct regcache_entry *page_entries(unsigned n)
{
    struct regcache_entry *e = aligned_alloc(64, n * sizeof(*e));
    memset(e, 0, n * sizeof(*e));
    for (unsigned i = 0; i < n; i++) {
        atomic_store(&e[i].match_start, (uintptr_t)i * PAGE);
        atomic_store(&e[i].match_end, (uintptr_t)(i + 1) * PAGE);
        e[i].state = RC_READY;
        e[i].pages = e[i].pages_inline;
        e[i].pages_cap = RC_INLINE_PAGES;
    }
    return e;
}

/* Growth moves every slot to a table of twice the size: all entries stay
 * findable, through tables large enough to come from huge pages.  Every
 * table, small or huge, keeps each slot on a cache line of its own. */
static void growth_keeps_every_entry(void **state)
{
    (void)state;
    enum { N = 40000 };
    struct regcache_entry *e = page_entries(N);
    struct rc_page_index idx;
    assert_int_equal(rc_page_index_init(&idx, SHIFT), REGCACHE_OK);
    for (unsigned i = 0; i < N; i++) {
        assert_int_equal(rc_page_index_add(&idx, &e[i], (uintptr_t)i * PAGE + 100), REGCACHE_OK);
        assert_int_equal(rc_page_index_large(&idx), i + 1 >= RC_INDEX_LARGE);
        struct rc_probe probe = { .slot = NULL };
        assert_ptr_equal(
            rc_page_index_find(&idx, (uintptr_t)i * PAGE, (uintptr_t)i * PAGE + 1, &probe), &e[i]);
        assert_int_equal((uintptr_t)probe.slot % 64, 0);
    }
    for (unsigned i = 0; i < N; i++) {
        struct rc_probe probe;
        assert_ptr_equal(
            rc_page_index_find(&idx, (uintptr_t)i * PAGE + 7, (uintptr_t)i * PAGE + 99, &probe),
            &e[i]);
    }
    rc_page_index_check(&idx);
    for (unsigned i = 0; i < N; i++)
        rc_page_index_remove_entry(&idx, &e[i]);
    struct rc_probe probe;
    assert_null(rc_page_index_find(&idx, 5 * PAGE, 5 * PAGE + 1, &probe));
    rc_page_index_fini(&idx);
    free(e);
}

/* An owner that sets the mark (the driver's TAG_CHECK caches, at L1's
 * worth of slots) has a large index from that many listed pages on, and a
 * small one again below. */
static void large_from_the_owners_mark(void **state)
{
    (void)state;
    enum { MARK = 100 };
    struct regcache_entry *e = page_entries(MARK);
    struct rc_page_index idx;
    assert_int_equal(rc_page_index_init(&idx, SHIFT), REGCACHE_OK);
    rc_page_index_large_from(&idx, MARK);
    for (unsigned i = 0; i < MARK; i++) {
        assert_false(rc_page_index_large(&idx));
        assert_int_equal(rc_page_index_add(&idx, &e[i], (uintptr_t)i * PAGE), REGCACHE_OK);
    }
    assert_true(rc_page_index_large(&idx));
    rc_page_index_check(&idx);
    rc_page_index_remove_entry(&idx, &e[0]);
    assert_false(rc_page_index_large(&idx));
    rc_page_index_check(&idx);
    rc_page_index_fini(&idx);
    free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(random_operations_agree_with_the_model),
        cmocka_unit_test(growth_keeps_every_entry),
        cmocka_unit_test(large_from_the_owners_mark),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
