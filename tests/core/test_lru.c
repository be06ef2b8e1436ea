/* The lazy LRU heap: exact least-recently-used order at eviction time,
 * held entries skipped, against a brute-force model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "entry.h"
#include "lru.h"
#include "page_index.h"
#include "regcache.h"

#define N 500

/* Where a claim takes its entry out of: these entries list no pages. */
static struct rc_page_index idx;

static int make_index(void **state)
{
    (void)state;
    return rc_page_index_init(&idx, 16);
}

static int free_index(void **state)
{
    (void)state;
    rc_page_index_fini(&idx);
    return 0;
}

static void stamp(struct regcache_entry *e, uint64_t t)
{
    atomic_store(&e->last_use, t);
}

static void pops_in_order_of_last_use(void **state)
{
    (void)state;
    struct regcache_entry *e = aligned_alloc(64, N * sizeof(*e));
    memset(e, 0, N * sizeof(*e));
    struct rc_lru lru;
    rc_lru_init(&lru, &idx);
    uint32_t seed = 7;
    for (int i = 0; i < N; i++) {
        seed = seed * 1103515245u + 12345u;
        stamp(&e[i], seed % 100000);
        assert_int_equal(rc_lru_push(&lru, &e[i]), REGCACHE_OK);
    }
    /* Uses after insertion: only the entries' stamps change, as put() does. */
    for (int i = 0; i < N; i += 3) {
        seed = seed * 1103515245u + 12345u;
        stamp(&e[i], 100000 + seed % 100000);
    }
    /* Every third entry is held and must be skipped. */
    for (int i = 1; i < N; i += 3)
        atomic_store(&e[i].refs, 1);

    uint64_t last = 0;
    int popped = 0;
    struct regcache_entry *v;
    while ((v = rc_lru_pop_unused(&lru, 1u << 30))) {
        uint64_t t = atomic_load(&v->last_use);
        assert_true(t >= last);
        /* No unused entry still in the heap was used earlier. */
        for (int i = 0; i < N; i++)
            if (e[i].heap_idx != RC_LRU_NONE && atomic_load(&e[i].refs) == 0)
                assert_true(atomic_load(&e[i].last_use) >= t);
        assert_int_equal(atomic_load(&v->refs), RC_DETACHED);
        last = t;
        popped++;
    }
    int held = 0;
    for (int i = 1; i < N; i += 3)
        held++;
    assert_int_equal(popped, N - held);
    assert_int_equal(lru.count, (size_t)held);
    rc_lru_fini(&lru);
    free(e);
}

static void remove_from_the_middle(void **state)
{
    (void)state;
    struct regcache_entry e[8];
    memset(e, 0, sizeof(e));
    struct rc_lru lru;
    rc_lru_init(&lru, &idx);
    for (int i = 0; i < 8; i++) {
        stamp(&e[i], (uint64_t)(10 - i));
        rc_lru_push(&lru, &e[i]);
    }
    rc_lru_remove(&lru, &e[7]); /* the oldest */
    rc_lru_remove(&lru, &e[3]);
    assert_int_equal(e[7].heap_idx, RC_LRU_NONE);
    static const int order[] = { 6, 5, 4, 2, 1, 0 };
    for (int i = 0; i < 6; i++)
        assert_ptr_equal(rc_lru_pop_unused(&lru, 1u << 30), &e[order[i]]);
    assert_null(rc_lru_pop_unused(&lru, 1u << 30));
    rc_lru_fini(&lru);
}

static void all_held_returns_null(void **state)
{
    (void)state;
    struct regcache_entry e[4];
    memset(e, 0, sizeof(e));
    struct rc_lru lru;
    rc_lru_init(&lru, &idx);
    for (int i = 0; i < 4; i++) {
        atomic_store(&e[i].refs, 2);
        rc_lru_push(&lru, &e[i]);
    }
    assert_null(rc_lru_pop_unused(&lru, 1u << 30));
    assert_int_equal(lru.count, 4);
    rc_lru_fini(&lru);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pops_in_order_of_last_use),
        cmocka_unit_test(remove_from_the_middle),
        cmocka_unit_test(all_held_returns_null),
    };
    return cmocka_run_group_tests(tests, make_index, free_index);
}
