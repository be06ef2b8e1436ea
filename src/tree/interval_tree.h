/* An intrusive interval tree over half-open address ranges [start, end): the
 * cache finds every registration that overlaps a range with it.  It is an
 * AVL tree ordered by start, augmented with the largest end of each subtree
 * so that a query skips subtrees that end before it begins.  The node lives
 * inside the caller's entry and the tree never allocates.  Equal and
 * overlapping ranges, identical ones included, may coexist: two allocations
 * can round to the same range.  Not thread safe: the caller serialises. */
#ifndef RC_INTERVAL_TREE_H
#define RC_INTERVAL_TREE_H

#include <stddef.h>
#include <stdint.h>

struct rc_itree_node {
    /* [start, end) with end > start: set before insert, never changed while
     * inserted. */
    uintptr_t start, end;
    uintptr_t max_end; /* the largest end in this subtree */
    /* child[0] is left and child[1] right: code for either side indexes by
     * side where it would otherwise branch on it. */
    union {
        struct {
            struct rc_itree_node *left, *right;
        };
        struct rc_itree_node *child[2];
    };
    struct rc_itree_node *parent;
    /* Height of the right subtree minus that of the left: -1, 0 or +1.  A
     * factor rather than a height, so that fixing the tree after a change
     * reads only the nodes on the changed path, never their siblings. */
    int balance;
};

struct rc_itree {
    struct rc_itree_node *root;
    size_t count; /* nodes in the tree */
};

void rc_itree_init(struct rc_itree *t);

/* O(log n).  n's links and augmentation are overwritten. */
void rc_itree_insert(struct rc_itree *t, struct rc_itree_node *n);

/* O(log n).  n must be in t. */
void rc_itree_remove(struct rc_itree *t, struct rc_itree_node *n);
/* Fetch into the cache the nodes next to n that its removal reads first
 * (a hint, ahead of the removal). */
void rc_itree_prefetch_remove(const struct rc_itree_node *n);

/* Call fn(node, arg) for every node overlapping [start, end), in ascending
 * order of start (equal starts in any order).  Stops early and returns fn's
 * value as soon as fn returns non-zero; returns 0 otherwise.  An empty query
 * (end <= start) overlaps nothing.  fn must not modify the tree.
 * Cost: O(log n + k) when the k overlaps are neighbours in start order, as
 * they are when ranges do not nest deeply; O(k log n) at worst, when many
 * short ranges that end before `start` lie between them. */
int rc_itree_visit_overlaps(const struct rc_itree *t, uintptr_t start, uintptr_t end,
                            int (*fn)(struct rc_itree_node *n, void *arg), void *arg);

/* Call fn(node, arg) once for every node, in ascending order of start.  fn
 * may remove the node it is given (teardown), but no other node. */
void rc_itree_visit_all(struct rc_itree *t, void (*fn)(struct rc_itree_node *n, void *arg),
                        void *arg);

/* Check every invariant of t (links, order, AVL balance, max_end, count):
 * NULL when they hold, else what is broken.  For tests and debug builds. */
const char *rc_itree_check(const struct rc_itree *t);

#endif
