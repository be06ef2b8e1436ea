/* AVL interval tree, see interval_tree.h.  Everything is iterative over the
 * parent links, so no operation needs a stack whatever the tree holds. */
#include "interval_tree.h"

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

/* Hang `to` where `from` hung under `parent` (NULL: the root). */
static void replace_child(struct rc_itree *t, struct rc_itree_node *parent,
                          struct rc_itree_node *from, struct rc_itree_node *to)
{
    *(parent ? &parent->child[parent->right == from] : &t->root) = to;
    if (to)
        to->parent = parent;
}

/* Lift x's child on `side` (0 left, 1 right) above x; returns it.  One
 * body for both sides: they differ only in which links they swap, and the
 * balance factors of the mirror image are the negated ones.  The new
 * factors come from the old ones alone, whatever they are, so a double
 * rotation is two of these and deletion's unusual shapes need no cases.
 * x's max_end must be right: the lifted node's becomes it, since the subtree
 * holds the same ranges; only x, now lower, reads its new children.
 * Inlined where side is a constant, so that no copy chooses fields or
 * multiplies signs at run time. */
static inline __attribute__((always_inline)) struct rc_itree_node *
rotate(struct rc_itree *t, struct rc_itree_node *x, int side)
{
    struct rc_itree_node *y = x->child[side], *inner = y->child[!side];
    int sign = 2 * side - 1;
    /* Factors seen from the lifted side: positive leans towards it. */
    int xb = sign * x->balance, yb = sign * y->balance;

    x->child[side] = inner;
    if (inner)
        inner->parent = x;
    replace_child(t, x->parent, x, y);
    y->child[!side] = x;
    x->parent = y;

    xb = xb - 1 - (yb > 0 ? yb : 0);
    yb = yb - 1 + (xb < 0 ? xb : 0);
    x->balance = sign * xb;
    y->balance = sign * yb;
    y->max_end = x->max_end;
    x->max_end = max_end_of(x);
    return y;
}

/* Restore the AVL bound at p, whose `side` is two levels taller than the
 * other; returns the node now at p's place.  The child on that side is
 * lifted, through a double rotation when it leans inwards: a single one
 * would hang its inner subtree, the tallest, under p at the same depth. */
static inline __attribute__((always_inline)) struct rc_itree_node *
lift(struct rc_itree *t, struct rc_itree_node *p, int side)
{
    struct rc_itree_node *c = p->child[side];

    if (c->balance == 1 - 2 * side)
        rotate(t, c, !side);
    return rotate(t, p, side);
}

/* lift() with side made a constant in each copy, one out of line per side
 * (four rotations are too large to inline wherever a walk may rotate). */
static __attribute__((noinline)) struct rc_itree_node *lift_left(struct rc_itree *t,
                                                                 struct rc_itree_node *p)
{
    return lift(t, p, 0);
}

static __attribute__((noinline)) struct rc_itree_node *lift_right(struct rc_itree *t,
                                                                  struct rc_itree_node *p)
{
    return lift(t, p, 1);
}

/* Callers whose side is a constant call the right copy directly. */
static inline struct rc_itree_node *rebalance(struct rc_itree *t, struct rc_itree_node *p, int side)
{
    return side ? lift_right(t, p) : lift_left(t, p);
}

void rc_itree_init(struct rc_itree *t)
{
    t->root = NULL;
    t->count = 0;
}

/* Insertion's walk up at p, whose `side` grew a level: true when p's
 * subtree grew too.  It stops growing at p when p was leaning the other
 * way (now balanced), or leaned this way, where the rotation restores the
 * height it had before the insertion.  Inlined with side a constant, so the
 * walk branches on the side once and then adds and compares constants. */
static inline __attribute__((always_inline)) int grown(struct rc_itree *t, struct rc_itree_node *p,
                                                       int side)
{
    int dir = 2 * side - 1;

    p->balance += dir;
    if (p->balance == 0)
        return 0;
    if (p->balance != dir) {
        rebalance(t, p, side);
        return 0;
    }
    return 1;
}

void rc_itree_insert(struct rc_itree *t, struct rc_itree_node *n)
{
    /* In locals: the stores below to max_end could alias n's fields. */
    uintptr_t start = n->start, end = n->end;
    struct rc_itree_node *parent = NULL, **link = &t->root;

    /* Equal starts go right, so a new duplicate follows the older ones.
     * Insertion only adds an end, so a max_end can only rise to it, and the
     * descent passes exactly the nodes whose subtree gains it: raising them
     * here costs a compare on a line being read anyway, where a walk back
     * up would chain a load per level (a new range at the right end raises
     * every one).  The rotations below need the rotated nodes' right.
     * The next link is picked by a compare the processor can predict, so
     * the next node's load need not wait for it: an index computed from
     * the compare (child[]) measured a few cycles slower per level. */
    while (*link) {
        parent = *link;
        if (parent->max_end < end)
            parent->max_end = end;
        link = start < parent->start ? &parent->left : &parent->right;
    }
    n->left = n->right = NULL;
    n->parent = parent;
    n->balance = 0;
    n->max_end = end;
    *link = n;
    t->count++;

    /* The subtree on the path grew by one level, up to the first ancestor
     * whose subtree did not. */
    for (struct rc_itree_node *c = n, *p = parent; p; c = p, p = p->parent)
        if (!(c == p->right ? grown(t, p, 1) : grown(t, p, 0)))
            return;
}

/* A range ending at `end` left the subtrees from p up to `stop` (excluded;
 * NULL: the root).  Only an ancestor whose max_end was that end can change,
 * and those form an unbroken run from p: the first that keeps its value
 * ends the walk, and so does one that keeps `end` from another range. */
static void drop_end(struct rc_itree_node *p, const struct rc_itree_node *stop, uintptr_t end)
{
    for (; p != stop && p->max_end == end; p = p->parent) {
        p->max_end = max_end_of(p);
        if (p->max_end == end)
            return;
    }
}

/* Deletion's walk up at *p, whose `side` lost a level: true when the
 * subtree now at *p (a rotation may have lifted another node there) lost a
 * level too.  It did not when *p was balanced (it now leans the other way
 * at its old height), nor after a rotation that keeps the height, when the
 * lifted sibling was balanced.  One that leaned towards the shorter side
 * loses a level, and so does a rotation of a leaning sibling.  Inlined with
 * side a constant, as grown() is. */
static inline __attribute__((always_inline)) int shrunk(struct rc_itree *t,
                                                        struct rc_itree_node **p, int side)
{
    int dir = 2 * side - 1;

    (*p)->balance -= dir;
    if ((*p)->balance == -dir)
        return 0;
    if ((*p)->balance != 0) {
        int kept = (*p)->child[!side]->balance == 0;

        *p = rebalance(t, *p, !side);
        return !kept;
    }
    return 1;
}

void rc_itree_remove(struct rc_itree *t, struct rc_itree_node *n)
{
    struct rc_itree_node *p = n->parent;
    int side; /* p's side whose subtree lost a level */

    if (n->left && n->right) {
        /* n's in-order successor s takes n's place, which keeps the order. */
        struct rc_itree_node *s = n->right;

        while (s->left)
            s = s->left;
        if (s == n->right) {
            p = s;
            side = 1;
        } else {
            p = s->parent;
            p->left = s->right;
            if (s->right)
                s->right->parent = p;
            s->right = n->right;
            n->right->parent = s;
            side = 0;
        }
        s->left = n->left;
        n->left->parent = s;
        replace_child(t, n->parent, n, s);
        /* s stands where n stood, with what stood below it: n's factor and,
         * but for n's own end, n's max_end. */
        s->balance = n->balance;
        s->max_end = n->max_end;
        /* s's end left the nodes between its two places, yet stays in s's
         * subtree: a walk stopping early below still has to look at s. */
        if (p != s)
            drop_end(p, s, s->end);
        drop_end(s, NULL, n->end);
    } else {
        side = p && n == p->right;
        replace_child(t, p, n, n->left ? n->left : n->right);
        drop_end(p, NULL, n->end);
    }
    t->count--;

    /* Every max_end is right again, as rotate needs.  Going up, the subtree
     * on the path is one level shorter, up to the first ancestor whose
     * subtree is not. */
    while (p && (side ? shrunk(t, &p, 1) : shrunk(t, &p, 0)) && p->parent) {
        side = p == p->parent->right;
        p = p->parent;
    }
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

/* rc_itree_visit_overlaps() from n, the first node that can overlap.  Out
 * of line, so that a query that overlaps nothing returns before the frame
 * this walk needs is set up. */
static __attribute__((noinline)) int visit_from(struct rc_itree_node *n, uintptr_t start,
                                                uintptr_t end,
                                                int (*fn)(struct rc_itree_node *n, void *arg),
                                                void *arg)
{
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

int rc_itree_visit_overlaps(const struct rc_itree *t, uintptr_t start, uintptr_t end,
                            int (*fn)(struct rc_itree_node *n, void *arg), void *arg)
{
    struct rc_itree_node *n = t->root;

    if (end <= start || !n || n->max_end <= start)
        return 0;
    return visit_from(descend_left(n, start), start, end, fn, arg);
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
 * balance factor and bound, max_end); returns its height, or -1 with *why
 * set.  Heights are recomputed here: the factors alone cannot be checked. */
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
    if (hr - hl > 1 || hl - hr > 1 || n->balance != hr - hl || n->max_end != max_end_of(n)) {
        *why = n->max_end != max_end_of(n) ? "max_end"
               : n->balance != hr - hl     ? "AVL balance factor"
                                           : "AVL bound";
        return -1;
    }
    (*count)++;
    return 1 + (hl > hr ? hl : hr);
}

const char *rc_itree_check(const struct rc_itree *t)
{
    size_t count = 0;
    const char *why = NULL;
    if (check_subtree(t->root, NULL, 0, UINTPTR_MAX, 0, &count, &why) < 0)
        return why;
    return count == t->count ? NULL : "node count";
}

void rc_itree_prefetch_remove(const struct rc_itree_node *n)
{
    if (n->parent)
        __builtin_prefetch(n->parent, 1);
    if (n->right)
        __builtin_prefetch(n->right, 1);
}
