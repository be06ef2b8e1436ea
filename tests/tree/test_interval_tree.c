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
 * balance factor against the real heights, max_end); returns its height,
 * adds its size. */
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
    assert_int_equal(n->balance, hr - hl);
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
    /* The library's own check agrees. */
    assert_null(rc_itree_check(t));
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
    int cap; /* the most nodes live at once, at most POOL */
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
    *target = below(4) == 0 ? 0 : (int)below(m->cap + 1);
}

/* ops random operations on at most cap live nodes, the whole tree checked
 * every check_every of them. */
static void random_against_model(uint64_t seed, long ops, int cap, long check_every)
{
    struct model *m = calloc(1, sizeof(*m));
    int target = 0;
    long counts[3] = { 0 };

    assert_non_null(m);
    rng_state = seed;
    m->cap = cap;
    rc_itree_init(&m->tree);
    for (int i = 0; i < POOL; i++)
        m->slot[i] = m->pos[i] = i;
    new_phase(m, &target);
    for (long op = 1; op <= ops; op++) {
        /* Drift towards the target size, queries in between. */
        uint64_t r = below(100);
        int grow = m->nlive < target;

        if (r < 35) {
            model_query(m);
            counts[2]++;
        } else if (m->nlive < m->cap && (m->nlive == 0 || r < (grow ? 80 : 50))) {
            model_insert(m);
            counts[0]++;
        } else {
            model_remove(m);
            counts[1]++;
        }
        if (m->nlive == target || below(20000) == 0)
            new_phase(m, &target);
        if (op % check_every == 0)
            model_check(m);
    }
    model_check(m);
    /* The mix really exercised all three operations. */
    assert_true(counts[0] > ops / 5 && counts[1] > ops / 5 && counts[2] > ops / 5);
    print_message("random: %ld inserts, %ld removes, %ld queries, %d live at end\n", counts[0],
                  counts[1], counts[2], m->nlive);
    free(m);
}

static void test_random_against_model(void **state)
{
    (void)state;
    random_against_model(20261121, RANDOM_OPS, POOL, 250);
}

/* Small trees checked after every operation: a wrong balance factor or
 * max_end is caught by the operation that made it, before later ones can
 * happen to cover it up. */
static void test_random_small_checked_every_op(void **state)
{
    (void)state;
    random_against_model(7, 300000, 40, 1);
    random_against_model(8, 100000, 300, 1);
}

/* ---- rotations, one case at a time ----------------------------------- */

/* n's children, balance factor and max_end are as given. */
static void expect_node(const struct rc_itree_node *n, const struct rc_itree_node *left,
                        const struct rc_itree_node *right, int balance, uintptr_t max_end)
{
    assert_ptr_equal(n->left, left);
    assert_ptr_equal(n->right, right);
    assert_int_equal(n->balance, balance);
    assert_true(n->max_end == max_end);
}

/* Nodes a..h start at 10, 20, ... 80 and end 5 later, but for those named
 * in `wide`: the first ends at 1000, the next at 900 and so on, long
 * ranges whose ends max_end must follow through the rotations. */
static void build(struct rc_itree *t, struct rc_itree_node *nodes, const char *order,
                  const char *wide)
{
    rc_itree_init(t);
    for (int i = 0; i < 8; i++)
        set_range(&nodes[i], (uintptr_t)(i + 1) * 10, (uintptr_t)(i + 1) * 10 + 5);
    for (int i = 0; wide[i]; i++)
        nodes[wide[i] - 'a'].end = 1000 - 100 * (uintptr_t)i;
    for (const char *c = order; *c; c++) {
        rc_itree_insert(t, &nodes[*c - 'a']);
        check_tree(t);
    }
}

/* build(), then remove victim: the root left. */
static const struct rc_itree_node *built_without(struct rc_itree *t, struct rc_itree_node *nodes,
                                                 const char *order, const char *wide,
                                                 struct rc_itree_node *victim)
{
    build(t, nodes, order, wide);
    rc_itree_remove(t, victim);
    check_tree(t);
    return t->root;
}

/* Each insertion and deletion shape, with the balance factors (right height
 * minus left) and max_end it must leave, worked out by hand; and mirrors. */
static void test_rotation_cases(void **state)
{
    struct rc_itree t;
    struct rc_itree_node n[8];
    struct rc_itree_node *a = &n[0], *b = &n[1], *c = &n[2], *d = &n[3], *e = &n[4], *f = &n[5],
                         *g = &n[6];

    (void)state;
    /* Insertion, single rotations: the lowered node keeps its long range,
     * the lifted one takes the subtree's max_end. */
    build(&t, n, "abc", "a");
    assert_ptr_equal(t.root, b);
    expect_node(b, a, c, 0, 1000);
    expect_node(a, NULL, NULL, 0, 1000);
    expect_node(c, NULL, NULL, 0, 35);
    build(&t, n, "cba", "c");
    assert_ptr_equal(t.root, b);
    expect_node(b, a, c, 0, 1000);
    expect_node(c, NULL, NULL, 0, 1000);
    expect_node(a, NULL, NULL, 0, 15);

    /* Insertion, double rotations of three nodes. */
    build(&t, n, "acb", "c");
    assert_ptr_equal(t.root, b);
    expect_node(b, a, c, 0, 1000);
    expect_node(a, NULL, NULL, 0, 15);
    build(&t, n, "cab", "a");
    assert_ptr_equal(t.root, b);
    expect_node(b, a, c, 0, 1000);
    expect_node(c, NULL, NULL, 0, 35);

    /* Insertion, double rotations whose lifted node has a child: the side
     * it is on decides the lowered nodes' factors.  e(b(a, c), f), then d
     * under c's right, or e(b(a, d), f), then c under d's left. */
    build(&t, n, "ebfacd", "d");
    assert_ptr_equal(t.root, c);
    expect_node(c, b, e, 0, 1000);
    expect_node(b, a, NULL, -1, 25);
    expect_node(e, d, f, 0, 1000);
    build(&t, n, "ebfadc", "c");
    assert_ptr_equal(t.root, d);
    expect_node(d, b, e, 0, 1000);
    expect_node(b, a, c, 0, 1000);
    expect_node(e, NULL, f, 1, 65);

    /* Deletion, the sibling balanced: one rotation keeps the height, the
     * lowered node leans towards the sibling's old inner child. */
    assert_ptr_equal(built_without(&t, n, "badce", "a", a), d); /* b(a, d(c, e)) */
    expect_node(d, b, e, -1, 55);
    expect_node(b, NULL, c, 1, 35);
    assert_ptr_equal(built_without(&t, n, "dbeac", "a", e), b); /* d(b(a, c), e) */
    expect_node(b, a, d, 1, 1000);
    expect_node(d, c, NULL, -1, 45);

    /* Deletion, the sibling leaning outwards: a single rotation. */
    assert_ptr_equal(built_without(&t, n, "bade", "a", a), d);
    expect_node(d, b, e, 0, 55);
    expect_node(b, NULL, NULL, 0, 25);

    /* Deletion, the sibling leaning inwards: a double rotation, its lifted
     * node childless or with a child on either side.  c(a(-, b), f(d, g))
     * with e under d's right, or c(a(-, b), f(e, g)) with d under e's left. */
    assert_ptr_equal(built_without(&t, n, "badc", "a", a), c);
    expect_node(c, b, d, 0, 45);
    assert_ptr_equal(built_without(&t, n, "cafbdge", "a", b), d);
    expect_node(d, c, f, 0, 1000);
    expect_node(c, a, NULL, -1, 1000);
    expect_node(f, e, g, 0, 75);
    assert_ptr_equal(built_without(&t, n, "cafbegd", "g", b), e);
    expect_node(e, c, f, 0, 1000);
    expect_node(c, a, d, 0, 45);
    expect_node(f, NULL, g, 1, 1000);

    /* A removed node with two children, its successor its right child. */
    assert_ptr_equal(built_without(&t, n, "bacd", "b", b), c); /* b(a, c(-, d)) */
    expect_node(c, a, d, 0, 45);

    /* The successor deeper: its end leaves its old ancestors, the removed
     * node's leaves the place the successor takes, even where the first
     * changes nothing. */
    assert_ptr_equal(built_without(&t, n, "dbfaceg", "de", d), e); /* d(b(a, c), f(e, g)) */
    expect_node(e, b, f, 0, 900);
    expect_node(f, NULL, g, 1, 75);
    assert_ptr_equal(built_without(&t, n, "dbfaceg", "d", d), e);
    expect_node(e, b, f, 0, 75);
}

/* ---- every small tree -------------------------------------------------- */

/* Advance p (of n elements) to the next permutation in lexicographic order;
 * 0 after the last. */
static int next_permutation(int *p, int n)
{
    int i = n - 2, j = n - 1;

    while (i >= 0 && p[i] >= p[i + 1])
        i--;
    if (i < 0)
        return 0;
    while (p[j] <= p[i])
        j--;
    int tmp = p[i];
    p[i] = p[j];
    p[j] = tmp;
    for (int lo = i + 1, hi = n - 1; lo < hi; lo++, hi--) {
        tmp = p[lo];
        p[lo] = p[hi];
        p[hi] = tmp;
    }
    return 1;
}

/* Every insertion order of up to 7 ranges, then each single node removed
 * from every tree that builds, the rest removed in insertion order: every
 * AVL shape of these sizes meets every deletion case.  dup_starts makes
 * starts repeat, so equal keys sit on both sides of a node. */
static void every_small_tree(int n, int dup_starts)
{
    struct rc_itree t;
    struct rc_itree_node nodes[8];
    int perm[8];
    long round = 0;

    for (int i = 0; i < n; i++)
        perm[i] = i;
    do {
        for (int victim = 0; victim < n; victim++, round++) {
            rc_itree_init(&t);
            for (int i = 0; i < n; i++) {
                int k = perm[i];
                uintptr_t start = (uintptr_t)(dup_starts ? k % 3 : k) * 10;

                /* Ends in no relation to starts, changing between rounds. */
                set_range(&nodes[k], start, start + 1 + (uintptr_t)((k * 37 + round) % 53));
                rc_itree_insert(&t, &nodes[k]);
                check_tree(&t);
            }
            rc_itree_remove(&t, &nodes[victim]);
            check_tree(&t);
            for (int i = 0; i < n; i++) {
                if (perm[i] != victim) {
                    rc_itree_remove(&t, &nodes[perm[i]]);
                    check_tree(&t);
                }
            }
            assert_null(t.root);
        }
    } while (next_permutation(perm, n));
}

static void test_every_small_tree(void **state)
{
    (void)state;
    for (int n = 1; n <= 7; n++) {
        every_small_tree(n, 0);
        every_small_tree(n, 1);
    }
}

/* ---- the cache's own pattern ------------------------------------------- */

/* New ranges above all others, the oldest removed, checked after every
 * operation: insertions at the right end and deletions at the left, the
 * rotations the cache makes most.  Ranges of mixed lengths, so the largest
 * end is not always the newest range's. */
static void test_fifo_window(void **state)
{
    enum { N = 4096 };
    static const int windows[] = { 1, 2, 3, 5, 8, 13, 31, 64, 100, 1000 };
    struct rc_itree t;
    struct rc_itree_node *nodes = calloc(N, sizeof(*nodes));
    struct seen s;

    (void)state;
    assert_non_null(nodes);
    rng_state = 99;
    for (size_t w = 0; w < sizeof(windows) / sizeof(windows[0]); w++) {
        int oldest = 0;

        rc_itree_init(&t);
        for (int i = 0; i < N; i++) {
            uintptr_t len = below(8) == 0 ? 1 + below(64 * 16) : 1 + below(16);

            set_range(&nodes[i], (uintptr_t)i * 16, (uintptr_t)i * 16 + len);
            rc_itree_insert(&t, &nodes[i]);
            check_tree(&t);
            /* Sometimes lag, sometimes catch up: the window breathes. */
            while (i + 1 - oldest > windows[w] || (oldest <= i && below(16) == 0)) {
                rc_itree_remove(&t, &nodes[oldest++]);
                check_tree(&t);
            }
            if (oldest <= i) {
                size_t k = query(&t, (uintptr_t)i * 16, (uintptr_t)i * 16 + 1, &s);

                assert_true(k >= 1);
                assert_ptr_equal(s.nodes[k - 1], &nodes[i]);
            }
        }
        while (oldest < N) {
            rc_itree_remove(&t, &nodes[oldest++]);
            check_tree(&t);
        }
        assert_null(t.root);
    }
    free(nodes);
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
        cmocka_unit_test(test_rotation_cases),
        cmocka_unit_test(test_every_small_tree),
        cmocka_unit_test(test_fifo_window),
        cmocka_unit_test(test_random_against_model),
        cmocka_unit_test(test_random_small_checked_every_op),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
