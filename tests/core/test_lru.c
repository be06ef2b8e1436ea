/* The LRU order (its queue and lazy heap): exact least-recently-used order
 * at eviction time, held entries skipped, against a brute-force model. */
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
#include "threads.h"

#define N 500
#define ARITY 4 /* the heap's (lru.c) */

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
    while ((v = rc_lru_pop_unused(&lru, 1u << 30, UINT64_MAX))) {
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

/* The hints a prefetch takes: with nothing used or held since the pushes,
 * the entry a pop takes next, from the queue and from the heap alike, and
 * NULL once the LRU is empty; and of a queued one, the entry popped after
 * it. */
static void least_is_the_next_pop(void **state)
{
    (void)state;
    enum { M = 40 };
    struct regcache_entry *e = aligned_alloc(64, M * sizeof(*e));
    memset(e, 0, M * sizeof(*e));
    struct rc_lru lru;
    rc_lru_init(&lru, &idx);
    assert_null(rc_lru_least(&lru));
    /* Rising stamps queue; the falling ones after them go to the heap. */
    for (int i = 0; i < M; i++) {
        stamp(&e[i], i < M / 2 ? 1000 + (uint64_t)i : 999 - (uint64_t)i);
        assert_int_equal(rc_lru_push(&lru, &e[i]), REGCACHE_OK);
    }
    struct regcache_entry *after = NULL;
    int queued = 0;
    for (int i = 0; i < M; i++) {
        struct regcache_entry *hint = rc_lru_least(&lru);
        assert_non_null(hint);
        if (after)
            assert_ptr_equal(hint, after);
        after = rc_lru_after(hint);
        queued += after != NULL;
        assert_ptr_equal(rc_lru_pop_unused(&lru, 1u << 30, UINT64_MAX), hint);
    }
    assert_int_equal(queued, M / 2 - 1);
    assert_null(rc_lru_least(&lru));
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
        assert_ptr_equal(rc_lru_pop_unused(&lru, 1u << 30, UINT64_MAX), &e[order[i]]);
    assert_null(rc_lru_pop_unused(&lru, 1u << 30, UINT64_MAX));
    rc_lru_fini(&lru);
}

/* The queue's keys rise and its links agree; every heap node sits where
 * its entry says and no key is below its parent's; both add up to count. */
static void assert_lru(const struct rc_lru *lru)
{
    size_t queued = 0;
    const struct regcache_entry *prev = NULL;
    for (const struct regcache_entry *e = lru->head; e; prev = e, e = e->lru_next, queued++) {
        assert_int_equal(e->heap_idx, RC_LRU_QUEUED);
        assert_ptr_equal(e->lru_prev, prev ? prev : rc_lru_tail(lru));
        if (prev)
            assert_true(prev->queued_key < e->queued_key);
    }
    assert_ptr_equal(rc_lru_tail(lru), prev);
    for (size_t i = 0; i < lru->heaped; i++) {
        assert_int_equal(lru->heap[i].e->heap_idx, i);
        if (i)
            assert_true(lru->keys[(i - 1) / ARITY] <= lru->keys[i]);
    }
    assert_int_equal(queued + lru->heaped, lru->count);
}

/* Pushes, removals from anywhere, uses, holds and pops, mixed at random
 * over keys that repeat: the heap stays a heap, and each pop takes an
 * unused entry used no later than any other unused one. */
static void random_operations_keep_the_order(void **state)
{
    (void)state;
    struct regcache_entry *e = aligned_alloc(64, N * sizeof(*e));
    memset(e, 0, N * sizeof(*e));
    for (int i = 0; i < N; i++)
        e[i].heap_idx = RC_LRU_NONE;
    struct rc_lru lru;
    rc_lru_init(&lru, &idx);
    uint32_t seed = 11;
    uint64_t now = 1000;
    int pops = 0;
    for (int step = 0; step < 20000; step++) {
        seed = seed * 1103515245u + 12345u;
        struct regcache_entry *x = &e[(seed >> 8) % N];
        bool listed = x->heap_idx != RC_LRU_NONE;
        switch ((seed >> 20) % 8) {
        case 0:
        case 1:
        case 2:
            if (!listed) {
                atomic_store(&x->refs, 0);
                stamp(x, now - (seed >> 4) % 64);
                assert_int_equal(rc_lru_push(&lru, x), REGCACHE_OK);
            }
            break;
        case 3:
            if (listed && atomic_load(&x->last_use) < now - (seed >> 4) % 4)
                stamp(x, now - (seed >> 4) % 4);
            break;
        case 4:
            /* A hold; or its put, which uses the entry now. */
            if (listed && atomic_exchange(&x->refs, !atomic_load(&x->refs)))
                stamp(x, now);
            break;
        case 5:
            if (listed)
                rc_lru_remove(&lru, x);
            break;
        default: {
            struct regcache_entry *v = rc_lru_pop_unused(&lru, now, UINT64_MAX);
            if (!v)
                break;
            pops++;
            for (int i = 0; i < N; i++)
                if (e[i].heap_idx != RC_LRU_NONE && atomic_load(&e[i].refs) == 0)
                    assert_true(atomic_load(&e[i].last_use) >= atomic_load(&v->last_use));
            atomic_store(&v->refs, 0);
        }
        }
        if ((seed >> 12) % 16 == 0)
            now++;
        assert_lru(&lru);
    }
    assert_true(pops > 1000);
    rc_lru_fini(&lru);
    free(e);
}

/* An entry last used in the root's epoch, at any of the root's children,
 * competes with it: the use log tells which of the two is less recent. */
static void the_roots_epoch_at_any_child_follows_the_log(void **state)
{
    (void)state;
    struct regcache_entry e[ARITY + 1];
    struct rc_thread *t = rc_thread_self();
    assert_non_null(t);
    for (int at = 1; at <= ARITY; at++) {
        memset(e, 0, sizeof(e));
        struct rc_lru lru;
        rc_lru_init(&lru, &idx);
        for (int i = 0; i <= ARITY; i++) {
            stamp(&e[i], i == 0 || i == at ? 10 : 11);
            rc_lru_push(&lru, &e[i]);
        }
        rc_thread_log_use(t, &e[at]);
        rc_thread_log_use(t, &e[0]);
        assert_ptr_equal(rc_lru_pop_unused(&lru, 20, UINT64_MAX), &e[at]);
        rc_lru_fini(&lru);
    }
}

/* Keys pushed in rising order queue up; one pushed behind a later key
 * goes to the heap; an entry used since its push moves by its new key:
 * pops take the least key of either. */
static void queue_and_heap_pop_by_key(void **state)
{
    (void)state;
    struct regcache_entry e[4];
    memset(e, 0, sizeof(e));
    static const uint64_t keys[4] = { 5, 3, 7, 6 };
    struct rc_lru lru;
    rc_lru_init(&lru, &idx);
    for (int i = 0; i < 4; i++) {
        stamp(&e[i], keys[i]);
        assert_int_equal(rc_lru_push(&lru, &e[i]), REGCACHE_OK);
    }
    assert_ptr_equal(lru.head, &e[0]);
    assert_ptr_equal(rc_lru_tail(&lru), &e[2]);
    assert_int_equal(lru.heaped, 2);
    stamp(&e[0], 9);
    static const int order[] = { 1, 3, 2, 0 };
    for (int i = 0; i < 4; i++) {
        assert_ptr_equal(rc_lru_pop_unused(&lru, 20, UINT64_MAX), &e[order[i]]);
        assert_lru(&lru);
    }
    assert_int_equal(lru.count, 0);
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
    assert_null(rc_lru_pop_unused(&lru, 1u << 30, UINT64_MAX));
    assert_int_equal(lru.count, 4);
    rc_lru_fini(&lru);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pops_in_order_of_last_use),
        cmocka_unit_test(least_is_the_next_pop),
        cmocka_unit_test(remove_from_the_middle),
        cmocka_unit_test(random_operations_keep_the_order),
        cmocka_unit_test(the_roots_epoch_at_any_child_follows_the_log),
        cmocka_unit_test(queue_and_heap_pop_by_key),
        cmocka_unit_test(all_held_returns_null),
    };
    return cmocka_run_group_tests(tests, make_index, free_index);
}
