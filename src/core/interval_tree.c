/* AVL interval tree, see interval_tree.h.  Everything is iterative over the
 * parent links, so no operation needs a stack whatever the tree holds. */
#include "interval_tree.h"

static int height(const struct rc_itree_node *n)
{
    return n ? n->balance_or_height : 0;
}

/* The largest end in n's subtree, from its children's. */
static uintptr_t max_end_of(const struct rc_itree_node *n)
{
    uintptr_t max_end = n->end;
    if (n->left && n->left->max_end > max_end)
        max_end = n->left->max_end;
    if (n->right && n->right->max_end > max_end)
        max_end = n->right->max_end;
    return max_end;
}

/* Recompute n's height and max_end; its children's must already be right. */
static void pull(struct rc_itree_node *n)
{
    int hl = height(n->left), hr = height(n->right);
    n->max_end = max_end_of(n);
    n->balance_or_height = 1 + (hl > hr ? hl : hr);
}

/* Hang `to` where `from` hung under `parent` (NULL: the root). */
static void replace_child(struct rc_itree *t, struct rc_itree_node *parent,
                          struct rc_itree_node *from, struct rc_itree_node *to)
{
    if (!parent)
        t->root = to;
    else if (parent->left == from)
        parent->left = to;
    else
        parent->right = to;
    if (to)
        to->parent = parent;
}

/* Lift x's right child (lift_right) or left child above x; returns it.  One
 * body for both directions: they differ only in which links they swap. */
static struct rc_itree_node *rotate(struct rc_itree *t, struct rc_itree_node *x, int lift_right)
{
    struct rc_itree_node **x_side = lift_right ? &x->right : &x->left;
    struct rc_itree_node *y = *x_side;
    struct rc_itree_node **y_inner = lift_right ? &y->left : &y->right;

    *x_side = *y_inner;
    if (*x_side)
        (*x_side)->parent = x;
    replace_child(t, x->parent, x, y);
    *y_inner = x;
    x->parent = y;
    pull(x);
    pull(y);
    return y;
}

/* Restore the AVL bound at n, whose subtrees are valid AVL trees differing
 * in height by at most 2; returns the node now at n's place. */
static struct rc_itree_node *rebalance(struct rc_itree *t, struct rc_itree_node *n)
{
    int diff = height(n->left) - height(n->right);

    if (diff > 1 || diff < -1) {
        int heavy_right = diff < 0;
        struct rc_itree_node *c = heavy_right ? n->right : n->left;
        struct rc_itree_node *outer = heavy_right ? c->right : c->left;
        struct rc_itree_node *inner = heavy_right ? c->left : c->right;

        /* A taller inner grandchild would stay just as unbalanced after one
         * rotation at n: bring it outside first (double rotation). */
        if (height(outer) < height(inner))
            rotate(t, c, !heavy_right);
        return rotate(t, n, heavy_right);
    }
    pull(n);
    return n;
}

/* Above a subtree whose height came out as it was, only max_end can still
 * change: child's went from `was` to its value now.  A parent follows a
 * larger value with one compare, without reading its other child; only
 * where the child carried the parent's maximum and shrank is the parent
 * recomputed.  The walk stops at the first parent that keeps its value. */
static void propagate_max_end(struct rc_itree_node *child, uintptr_t was)
{
    for (struct rc_itree_node *p = child->parent; p; child = p, p = p->parent) {
        uintptr_t before = p->max_end;
        if (child->max_end > before)
            p->max_end = child->max_end;
        else if (child->max_end < was && was == before)
            p->max_end = max_end_of(p);
        if (p->max_end == before)
            return;
        was = before;
    }
}

/* After a change below n, fix heights, balance and max_end upwards.
 * Rebalancing stops at the first subtree whose height comes out as it was
 * (n's stored values are those of the subtree at n's place before the
 * change); above it only max_end can change, which propagate_max_end
 * follows without reading siblings - a new range at the right end raises
 * max_end all the way up, and rebalancing every level for it read a
 * sibling's line per level.  Not writing unchanged ancestors keeps their
 * lines clean in every core.  Rebalancing does not stop before it has
 * passed `past` (a node moved into a removed node's place: its own range
 * left a lower place and may have changed what is stored there). */
static void retrace(struct rc_itree *t, struct rc_itree_node *n, const struct rc_itree_node *past)
{
    while (n) {
        int height_before = n->balance_or_height;
        uintptr_t max_end_before = n->max_end;
        if (n == past)
            past = NULL;
        struct rc_itree_node *top = rebalance(t, n);
        if (!past && top->balance_or_height == height_before) {
            if (top->max_end != max_end_before)
                propagate_max_end(top, max_end_before);
            return;
        }
        n = top->parent;
    }
}

void rc_itree_init(struct rc_itree *t)
{
    t->root = NULL;
    t->count = 0;
}

void rc_itree_insert(struct rc_itree *t, struct rc_itree_node *n)
{
    struct rc_itree_node *parent = NULL, **link = &t->root;

    /* Equal starts go right, so a new duplicate follows the older ones. */
    while (*link) {
        parent = *link;
        link = n->start < parent->start ? &parent->left : &parent->right;
    }
    n->left = n->right = NULL;
    n->parent = parent;
    n->balance_or_height = 1;
    n->max_end = n->end;
    *link = n;
    t->count++;
    retrace(t, parent, NULL);
}

void rc_itree_remove(struct rc_itree *t, struct rc_itree_node *n)
{
    struct rc_itree_node *lowest_changed, *moved = NULL;

    if (n->left && n->right) {
        /* n's in-order successor s takes n's place, which keeps the order. */
        struct rc_itree_node *s = n->right;

        while (s->left)
            s = s->left;
        if (s == n->right) {
            lowest_changed = s;
        } else {
            lowest_changed = s->parent;
            lowest_changed->left = s->right;
            if (s->right)
                s->right->parent = lowest_changed;
            s->right = n->right;
            n->right->parent = s;
        }
        s->left = n->left;
        n->left->parent = s;
        replace_child(t, n->parent, n, s);
        /* s stands where n stood: the retrace compares with n's values. */
        s->balance_or_height = n->balance_or_height;
        s->max_end = n->max_end;
        moved = s;
    } else {
        lowest_changed = n->parent;
        replace_child(t, n->parent, n, n->left ? n->left : n->right);
    }
    t->count--;
    retrace(t, lowest_changed, moved);
}

/* Walk down-left from n while the left subtree still holds a range ending
 * after `after`: the first node of n's subtree, in order, that a query
 * starting at `after` cannot skip.  With after == 0 it is the leftmost node,
 * since every end is above 0. */
static struct rc_itree_node *descend_left(struct rc_itree_node *n, uintptr_t after)
{
    while (n->left && n->left->max_end > after)
        n = n->left;
    return n;
}

/* The in-order next node above n once n's right subtree is done: the first
 * ancestor reached from its left side, or NULL at the end. */
static struct rc_itree_node *climb(struct rc_itree_node *n)
{
    while (n->parent && n == n->parent->right)
        n = n->parent;
    return n->parent;
}

int rc_itree_visit_overlaps(const struct rc_itree *t, uintptr_t start, uintptr_t end,
                            int (*fn)(struct rc_itree_node *n, void *arg), void *arg)
{
    struct rc_itree_node *n = t->root;

    if (end <= start || !n || n->max_end <= start)
        return 0;
    n = descend_left(n, start);
    /* In order, and never entering a subtree whose max_end is not past
     * start: what is skipped ends too early to overlap. */
    while (n) {
        int rc;

        /* Everything after n in order starts at or after n->start. */
        if (n->start >= end)
            return 0;
        if (n->end > start && (rc = fn(n, arg)) != 0)
            return rc;
        if (n->right && n->right->max_end > start)
            n = descend_left(n->right, start);
        else
            n = climb(n);
    }
    return 0;
}

void rc_itree_visit_all(struct rc_itree *t, void (*fn)(struct rc_itree_node *n, void *arg),
                        void *arg)
{
    struct rc_itree_node *n = t->root ? descend_left(t->root, 0) : NULL;

    while (n) {
        /* Take n's successor before fn may remove n.  Removal rotates nodes
         * but keeps the in-order sequence of the others, so the successor
         * found now is still the right next node afterwards. */
        struct rc_itree_node *next = n->right ? descend_left(n->right, 0) : climb(n);

        fn(n, arg);
        n = next;
    }
}

/* Deeper than any AVL tree of 2^64 nodes: a broken tree is reported rather
 * than overflowing the stack. */
#define MAX_DEPTH 96

/* Check the subtree at n (parent link, start order within [lo, hi], AVL
 * height and balance, max_end); returns its height, or -1 with *why set. */
static int check_subtree(const struct rc_itree_node *n, const struct rc_itree_node *parent,
                         uintptr_t lo, uintptr_t hi, int depth, size_t *count, const char **why)
{
    if (!n)
        return 0;
    if (depth >= MAX_DEPTH || n->parent != parent || n->start >= n->end || n->start < lo ||
        n->start > hi) {
        *why = depth >= MAX_DEPTH    ? "too deep"
               : n->parent != parent ? "parent link"
               : n->start >= n->end  ? "empty range"
                                     : "start order";
        return -1;
    }
    int hl = check_subtree(n->left, n, lo, n->start, depth + 1, count, why);
    int hr = hl < 0 ? -1 : check_subtree(n->right, n, n->start, hi, depth + 1, count, why);
    if (hl < 0 || hr < 0)
        return -1;
    uintptr_t max_end = n->end;
    if (n->left && n->left->max_end > max_end)
        max_end = n->left->max_end;
    if (n->right && n->right->max_end > max_end)
        max_end = n->right->max_end;
    int h = 1 + (hl > hr ? hl : hr);
    if (hl - hr > 1 || hr - hl > 1 || n->balance_or_height != h || n->max_end != max_end) {
        *why = n->max_end != max_end ? "max_end" : "AVL height or balance";
        return -1;
    }
    (*count)++;
    return h;
}

const char *rc_itree_check(const struct rc_itree *t)
{
    size_t count = 0;
    const char *why = NULL;
    if (check_subtree(t->root, NULL, 0, UINTPTR_MAX, 0, &count, &why) < 0)
        return why;
    return count == t->count ? NULL : "node count";
}
