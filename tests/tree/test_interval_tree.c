/* The interval tree against a brute-force model, plus its edge cases. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "interval_tree.h"

/* ---- structural invariants ------------------------------------------- */

/* Deeper than any AVL tree of 2^64 nodes: a broken tree fails here rather
 * than overflowing the stack. */
#define MAX_DEPTH 96

/* Checks the subtree at n (parent link, start order within [lo, hi], AVL
 * height and balance, max_end); returns its height, adds its size. */
static int check_subtree(const struct rc_itree_node *n, const struct rc_itree_node *parent,
                         uintptr_t lo, uintptr_t hi, int depth, size_t *count)
{
    int hl, hr;
    uintptr_t max_end;

    if (!n)
        return 0;
    assert_true(depth < MAX_DEPTH);
    assert_ptr_equal(n->parent, parent);
    assert_true(n->start < n->end);
    assert_true(lo <= n->start && n->start <= hi);
    hl = check_subtree(n->left, n, lo, n->start, depth + 1, count);
    hr = check_subtree(n->right, n, n->start, hi, depth + 1, count);
    assert_true(hl - hr <= 1 && hr - hl <= 1);
    assert_int_equal(n->balance_or_height, 1 + (hl > hr ? hl : hr));
    max_end = n->end;
    if (n->left && n->left->max_end > max_end)
        max_end = n->left->max_end;
    if (n->right && n->right->max_end > max_end)
        max_end = n->right->max_end;
    assert_true(n->max_end == max_end);
    (*count)++;
    return 1 + (hl > hr ? hl : hr);
}

/* Full check of t; returns the tree's height. */
static int check_tree(const struct rc_itree *t)
{
    size_t count = 0;
    int h = check_subtree(t->root, NULL, 0, UINTPTR_MAX, 0, &count);

    assert_int_equal(count, t->count);
    return h;
}

/* ---- helpers shared by the focused tests --------------------------- */

#define MAX_SEEN 256

struct seen {
    struct rc_itree_node *nodes[MAX_SEEN];
    size_t n;
    size_t stop_after; /* 0: never stop */
    int stop_code;
};

static int record(struct rc_itree_node *n, void *arg)
{
    struct seen *s = arg;

    assert_true(s->n < MAX_SEEN);
    s->nodes[s->n++] = n;
    return s->n == s->stop_after ? s->stop_code : 0;
}

static size_t query(const struct rc_itree *t, uintptr_t start, uintptr_t end, struct seen *s)
{
    s->n = 0;
    s->stop_after = 0;
    assert_int_equal(rc_itree_visit_overlaps(t, start, end, record, s), 0);
    return s->n;
}

static void set_range(struct rc_itree_node *n, uintptr_t start, uintptr_t end)
{
    n->start = start;
    n->end = end;
}

/* ---- focused tests ---------------------------------------------------- */

static int fail_if_called(struct rc_itree_node *n, void *arg)
{
    (void)n;
    (void)arg;
    fail_msg("visitor called on an empty tree or an empty query");
    return 1;
}

static void count_node(struct rc_itree_node *n, void *arg)
{
    (void)n;
    ++*(size_t *)arg;
}

static void test_empty_tree(void **state)
{
    struct rc_itree t;
    size_t visits = 0;

    (void)state;
    rc_itree_init(&t);
    assert_null(t.root);
    assert_int_equal(t.count, 0);
    assert_int_equal(rc_itree_visit_overlaps(&t, 0, UINTPTR_MAX, fail_if_called, NULL), 0);
    rc_itree_visit_all(&t, count_node, &visits);
    assert_int_equal(visits, 0);
    assert_int_equal(check_tree(&t), 0);
}

static void test_single_node(void **state)
{
    struct rc_itree t;
    struct rc_itree_node a;
    struct seen s;

    (void)state;
    rc_itree_init(&t);
    set_range(&a, 100, 200);
    rc_itree_insert(&t, &a);
    assert_int_equal(check_tree(&t), 1);
    assert_int_equal(a.max_end, 200);

    assert_int_equal(query(&t, 100, 200, &s), 1);
    assert_ptr_equal(s.nodes[0], &a);
    assert_int_equal(query(&t, 150, 151, &s), 1);       /* inside */
    assert_int_equal(query(&t, 0, UINTPTR_MAX, &s), 1); /* around */
    assert_int_equal(query(&t, 199, 300, &s), 1);       /* last byte */
    assert_int_equal(query(&t, 50, 101, &s), 1);        /* first byte */
    assert_int_equal(query(&t, 0, 100, &s), 0);         /* ends at start */
    assert_int_equal(query(&t, 200, 300, &s), 0);       /* starts at end */
    assert_int_equal(rc_itree_visit_overlaps(&t, 150, 150, fail_if_called, NULL), 0);
    assert_int_equal(rc_itree_visit_overlaps(&t, 160, 140, fail_if_called, NULL), 0);

    rc_itree_remove(&t, &a);
    assert_null(t.root);
    assert_int_equal(t.count, 0);
    assert_int_equal(query(&t, 0, UINTPTR_MAX, &s), 0);
}

static void test_touching_ranges_do_not_overlap(void **state)
{
    struct rc_itree t;
    struct rc_itree_node ab, bc;
    struct seen s;

    (void)state;
    rc_itree_init(&t);
    set_range(&ab, 0x1000, 0x2000);
    set_range(&bc, 0x2000, 0x3000);
    rc_itree_insert(&t, &bc);
    rc_itree_insert(&t, &ab);
    check_tree(&t);

    assert_int_equal(query(&t, 0x1000, 0x2000, &s), 1);
    assert_ptr_equal(s.nodes[0], &ab);
    assert_int_equal(query(&t, 0x2000, 0x2001, &s), 1);
    assert_ptr_equal(s.nodes[0], &bc);
    assert_int_equal(query(&t, 0x1fff, 0x2000, &s), 1);
    assert_ptr_equal(s.nodes[0], &ab);
    assert_int_equal(query(&t, 0x1fff, 0x2001, &s), 2);
    assert_ptr_equal(s.nodes[0], &ab);
    assert_ptr_equal(s.nodes[1], &bc);
    assert_int_equal(query(&t, 0x3000, 0x4000, &s), 0);
    assert_int_equal(query(&t, 0x0, 0x1000, &s), 0);
}

static void test_early_stop(void **state)
{
    struct rc_itree t;
    struct rc_itree_node nodes[10];
    struct seen s = { .stop_after = 3, .stop_code = -5 };

    (void)state;
    rc_itree_init(&t);
    for (int i = 9; i >= 0; i--) {
        set_range(&nodes[i], (uintptr_t)i * 10, (uintptr_t)i * 10 + 15);
        rc_itree_insert(&t, &nodes[i]);
    }
    check_tree(&t);
    assert_int_equal(rc_itree_visit_overlaps(&t, 0, 100, record, &s), -5);
    assert_int_equal(s.n, 3);
    for (int i = 0; i < 3; i++)
        assert_ptr_equal(s.nodes[i], &nodes[i]);

    /* Stopping at the last overlap still returns fn's value. */
    s.n = 0;
    s.stop_after = 2;
    s.stop_code = 1;
    assert_int_equal(rc_itree_visit_overlaps(&t, 25, 35, record, &s), 1);
    assert_int_equal(s.n, 2);
    assert_ptr_equal(s.nodes[0], &nodes[2]);
    assert_ptr_equal(s.nodes[1], &nodes[3]);
}

static void test_identical_ranges(void **state)
{
    enum { N = 100 };
    struct rc_itree t;
    struct rc_itree_node nodes[N];
    struct seen s;
    int found[N] = { 0 };

    (void)state;
    rc_itree_init(&t);
    for (int i = 0; i < N; i++) {
        set_range(&nodes[i], 0x10000, 0x20000);
        rc_itree_insert(&t, &nodes[i]);
    }
    check_tree(&t);
    assert_int_equal(query(&t, 0x1ffff, 0x20000, &s), N);
    for (size_t i = 0; i < s.n; i++)
        found[s.nodes[i] - nodes]++;
    for (int i = 0; i < N; i++)
        assert_int_equal(found[i], 1);

    /* Removing some identical nodes leaves exactly the others. */
    for (int i = 0; i < N; i += 3)
        rc_itree_remove(&t, &nodes[i]);
    check_tree(&t);
    assert_int_equal(query(&t, 0x10000, 0x10001, &s), N - (N + 2) / 3);
    for (size_t i = 0; i < s.n; i++)
        assert_int_not_equal((s.nodes[i] - nodes) % 3, 0);
}

struct teardown {
    struct rc_itree *t;
    struct rc_itree_node *nodes;
    int *visits;
    int remove_every; /* remove the nodes whose index % this == 0 */
    int calls;
};

static void remove_visited(struct rc_itree_node *n, void *arg)
{
    struct teardown *td = arg;
    ptrdiff_t i = n - td->nodes;

    td->visits[i]++;
    if (i % td->remove_every == 0)
        rc_itree_remove(td->t, n);
    /* The tree must be whole between two visits, not only at the end. */
    if (++td->calls % 97 == 0)
        check_tree(td->t);
}

static void visit_all_removing(int remove_every)
{
    enum { N = 5000 };
    struct rc_itree t;
    struct rc_itree_node *nodes = calloc(N, sizeof(*nodes));
    int *visits = calloc(N, sizeof(*visits));
    struct teardown td = { &t, nodes, visits, remove_every, 0 };
    uint64_t x = 12345;
    size_t expect_left = 0;

    assert_non_null(nodes);
    assert_non_null(visits);
    rc_itree_init(&t);
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005u + 1442695040888963407u;
        set_range(&nodes[i], (x >> 33) % 512, (x >> 33) % 512 + 1 + (x >> 20) % 64);
        rc_itree_insert(&t, &nodes[i]);
        expect_left += i % remove_every != 0;
    }
    check_tree(&t);
    rc_itree_visit_all(&t, remove_visited, &td);
    for (int i = 0; i < N; i++)
        assert_int_equal(visits[i], 1);
    check_tree(&t);
    assert_int_equal(t.count, expect_left);
    if (expect_left == 0)
        assert_null(t.root);
    free(nodes);
    free(visits);
}

static void test_visit_all_removing_every_node(void **state)
{
    (void)state;
    visit_all_removing(1);
}

static void test_visit_all_removing_some_nodes(void **state)
{
    (void)state;
    visit_all_removing(2);
    visit_all_removing(7);
}

/* Sorted insertion degenerates an unbalanced tree into a list. */
static void test_sorted_inserts_stay_balanced(void **state)
{
    enum { N = 100000 };
    struct rc_itree t;
    struct rc_itree_node *nodes = calloc(N, sizeof(*nodes));
    struct seen s;
    int h, bound;

    (void)state;
    assert_non_null(nodes);
    rc_itree_init(&t);
    for (int i = 0; i < N / 2; i++) { /* ascending, then descending */
        set_range(&nodes[i], (uintptr_t)i * 8, (uintptr_t)i * 8 + 8);
        set_range(&nodes[N - 1 - i], (uintptr_t)(N - 1 - i) * 8, (uintptr_t)(N - 1 - i) * 8 + 8);
    }
    for (int i = 0; i < N / 2; i++)
        rc_itree_insert(&t, &nodes[i]);
    for (int i = N - 1; i >= N / 2; i--)
        rc_itree_insert(&t, &nodes[i]);
    h = check_tree(&t);
    /* AVL height bound 1.44 log2(n + 2), log2(100002) < 17. */
    bound = (int)(1.45 * 17);
    assert_true(h <= bound);
    assert_int_equal(query(&t, 8 * 777 + 7, 8 * 779 + 1, &s), 3);
    for (int i = 0; i < 3; i++)
        assert_ptr_equal(s.nodes[i], &nodes[777 + i]);

    for (int i = 0; i < N; i += 2)
        rc_itree_remove(&t, &nodes[i]);
    check_tree(&t);
    assert_int_equal(query(&t, 0, 8 * 10, &s), 5);
    for (int i = 1; i < N; i += 2)
        rc_itree_remove(&t, &nodes[i]);
    assert_null(t.root);
    assert_int_equal(check_tree(&t), 0);
    free(nodes);
}

/* ---- random operations against a brute-force model ----------------- */

#define POOL 2048
#define RANDOM_OPS 1000000
#define CHECK_EVERY 250

static uint64_t rng_state;

/* splitmix64: fixed seed, same sequence on every platform. */
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15u);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static uint64_t below(uint64_t n)
{
    return rnd() % n;
}

struct model {
    struct rc_itree tree;
    struct rc_itree_node nodes[POOL];
    uint64_t expect[POOL];  /* == query id: the node should be visited */
    uint64_t visited[POOL]; /* == query id: the node was visited */
    /* A permutation of the node indices: the first nlive are in the tree,
     * the others free; pos is its inverse. */
    int slot[POOL];
    int pos[POOL];
    int nlive;
    uint64_t query_id;
    /* The address space of the current phase: [base, base + space). */
    uintptr_t base, space;
};

static void swap_slots(struct model *m, int p, int q)
{
    int a = m->slot[p], b = m->slot[q];

    m->slot[p] = b;
    m->pos[b] = p;
    m->slot[q] = a;
    m->pos[a] = q;
}

struct visit_check {
    struct model *m;
    uintptr_t start, end;
    size_t n, stop_after;
    uintptr_t last_start;
};

static int check_visit(struct rc_itree_node *n, void *arg)
{
    struct visit_check *v = arg;
    struct model *m = v->m;
    ptrdiff_t i = n - m->nodes;

    assert_true(i >= 0 && i < POOL);
    assert_true(m->expect[i] == m->query_id);  /* overlaps and is live */
    assert_true(m->visited[i] != m->query_id); /* not visited twice */
    m->visited[i] = m->query_id;
    assert_true(v->n == 0 || v->last_start <= n->start);
    v->last_start = n->start;
    return ++v->n == v->stop_after ? 1000 + (int)v->n : 0;
}

static uintptr_t min_uptr(uintptr_t a, uintptr_t b)
{
    return a < b ? a : b;
}

/* A range of at least one byte, often shaped after a live node (identical,
 * nested, enclosing, touching) so that those cases are common, otherwise in
 * the phase's space.  A live node may come from an earlier phase's space:
 * shapes stretch by at most the current space and never wrap around. */
static void random_range(struct model *m, uintptr_t *start, uintptr_t *end)
{
    uintptr_t s, e, len;
    uint64_t shape = below(100);

    if (m->nlive > 0 && shape < 40) {
        const struct rc_itree_node *o = &m->nodes[m->slot[below(m->nlive)]];

        s = o->start;
        e = o->end;
        if (shape < 15) {        /* identical */
        } else if (shape < 25) { /* nested */
            s += below(e - s);
            e = s + 1 + below(o->end - s);
        } else if (shape < 30) { /* enclosing */
            s -= below(min_uptr(s, m->space) + 1);
            e += below(min_uptr(UINTPTR_MAX - e, m->space) + 1);
        } else if (shape < 35 && e < UINTPTR_MAX) { /* touching after */
            s = e;
            e = s + 1 + below(min_uptr(UINTPTR_MAX - s, m->space));
        } else if (s > 0) { /* touching before */
            e = s;
            s = e - 1 - below(min_uptr(e, m->space));
        }
        *start = s;
        *end = e;
        return;
    }
    s = below(m->space);
    /* Mostly short ranges, sometimes long ones: many overlaps, some pruning. */
    len = shape < 90 ? 1 + below(m->space / 8 + 1) : 1 + below(m->space);
    if (len > m->space - s)
        len = m->space - s;
    *start = m->base + s;
    *end = m->base + s + len;
}

static void model_insert(struct model *m)
{
    uintptr_t start, end;
    int i;

    /* Shaped after live nodes only: the new one is not live yet. */
    random_range(m, &start, &end);
    swap_slots(m, m->nlive, m->nlive + (int)below(POOL - m->nlive));
    i = m->slot[m->nlive++];
    set_range(&m->nodes[i], start, end);
    rc_itree_insert(&m->tree, &m->nodes[i]);
}

static void model_remove(struct model *m)
{
    int i = m->slot[below(m->nlive)];

    rc_itree_remove(&m->tree, &m->nodes[i]);
    swap_slots(m, m->pos[i], --m->nlive);
}

static void model_query(struct model *m)
{
    struct visit_check v = { .m = m };
    size_t expected = 0;
    int rc;

    if (below(50) == 0) { /* everything in the space */
        v.start = m->base;
        v.end = m->base + m->space;
    } else {
        random_range(m, &v.start, &v.end);
    }
    m->query_id++;
    for (int p = 0; p < m->nlive; p++) {
        const struct rc_itree_node *n = &m->nodes[m->slot[p]];

        if (n->start < v.end && n->end > v.start) {
            m->expect[m->slot[p]] = m->query_id;
            expected++;
        }
    }
    if (expected > 0 && below(8) == 0)
        v.stop_after = 1 + below(expected);
    rc = rc_itree_visit_overlaps(&m->tree, v.start, v.end, check_visit, &v);
    if (v.stop_after) {
        assert_int_equal(rc, 1000 + (int)v.stop_after);
        assert_int_equal(v.n, v.stop_after);
        /* Those visited are the first in start order: no expected node left
         * out starts before the last one visited. */
        for (int p = 0; p < m->nlive; p++) {
            int i = m->slot[p];

            if (m->expect[i] == m->query_id && m->visited[i] != m->query_id)
                assert_true(m->nodes[i].start >= v.last_start);
        }
    } else {
        assert_int_equal(rc, 0);
        assert_int_equal(v.n, expected);
    }
}

static void mark_visited(struct rc_itree_node *n, void *arg)
{
    struct model *m = arg;
    ptrdiff_t i = n - m->nodes;

    assert_true(i >= 0 && i < POOL && m->pos[i] < m->nlive);
    assert_true(m->visited[i] != m->query_id);
    m->visited[i] = m->query_id;
}

static void model_check(struct model *m)
{
    check_tree(&m->tree);
    assert_int_equal(m->tree.count, m->nlive);
    m->query_id++;
    rc_itree_visit_all(&m->tree, mark_visited, m);
    for (int p = 0; p < m->nlive; p++)
        assert_true(m->visited[m->slot[p]] == m->query_id);
}

/* One phase: a target size to grow or shrink to, in one address space. */
static void new_phase(struct model *m, int *target)
{
    static const uintptr_t spaces[] = { 8, 64, 1024, (uintptr_t)1 << 20, (uintptr_t)1 << 40 };
    /* The bottom, the middle and the top of the address space: ends reach
     * UINTPTR_MAX and starts reach 0. */
    uint64_t where = below(3);

    m->space = spaces[below(sizeof(spaces) / sizeof(spaces[0]))];
    m->base = where == 0 ? 0 : where == 1 ? (uintptr_t)0x7f0000000000 : UINTPTR_MAX - m->space;
    *target = below(4) == 0 ? 0 : (int)below(POOL + 1);
}

static void test_random_against_model(void **state)
{
    struct model *m = calloc(1, sizeof(*m));
    int target = 0;
    long counts[3] = { 0 };

    (void)state;
    assert_non_null(m);
    rng_state = 20261121;
    rc_itree_init(&m->tree);
    for (int i = 0; i < POOL; i++)
        m->slot[i] = m->pos[i] = i;
    new_phase(m, &target);
    for (long op = 1; op <= RANDOM_OPS; op++) {
        /* Drift towards the target size, queries in between. */
        uint64_t r = below(100);
        int grow = m->nlive < target;

        if (r < 35) {
            model_query(m);
            counts[2]++;
        } else if (m->nlive < POOL && (m->nlive == 0 || r < (grow ? 80 : 50))) {
            model_insert(m);
            counts[0]++;
        } else {
            model_remove(m);
            counts[1]++;
        }
        if (m->nlive == target || below(20000) == 0)
            new_phase(m, &target);
        if (op % CHECK_EVERY == 0)
            model_check(m);
    }
    model_check(m);
    /* The mix really exercised all three operations. */
    assert_true(counts[0] > RANDOM_OPS / 5 && counts[1] > RANDOM_OPS / 5 &&
                counts[2] > RANDOM_OPS / 5);
    print_message("random: %ld inserts, %ld removes, %ld queries, %d live at end\n", counts[0],
                  counts[1], counts[2], m->nlive);
    free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_tree),
        cmocka_unit_test(test_single_node),
        cmocka_unit_test(test_touching_ranges_do_not_overlap),
        cmocka_unit_test(test_early_stop),
        cmocka_unit_test(test_identical_ranges),
        cmocka_unit_test(test_visit_all_removing_every_node),
        cmocka_unit_test(test_visit_all_removing_some_nodes),
        cmocka_unit_test(test_sorted_inserts_stay_balanced),
        cmocka_unit_test(test_random_against_model),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
