#include "range_filter.h"

#include <stdlib.h>

#include "regcache.h"

#define FINE_SHIFT 21
#define COARSE_SHIFT 30
#define COARSE_BITS 12 /* log2 of RC_FILTER_COARSE_SLOTS */
/* The most chunks an entry or a query covers at one granularity. */
#define SPAN 16
#define FIRST_FINE_BITS 12
/* 16 MiB of counts at most: 4M slots, crowded only past 262k chunks. */
#define MAX_FINE_BITS 22
/* Grown when more than one slot in 16 is in use, so that a free of
 * unrelated memory finds its slot in use (and takes the slow path) less
 * than one time in 16; growing by 4x spaces the refills out. */
#define CROWDED_ABOVE(bits) (((size_t)1 << (bits)) / 16)
#define GROWTH 2
_Static_assert((MAX_FINE_BITS - FIRST_FINE_BITS) % GROWTH == 0,
               "growth steps land on the largest table");

static size_t slot_of(uintptr_t chunk, unsigned bits)
{
    return (size_t)(((uint64_t)chunk * 0x9e3779b97f4a7c15ull) >> (64 - bits));
}

static uintptr_t chunks(uintptr_t start, uintptr_t end, unsigned shift)
{
    return ((end - 1) >> shift) - (start >> shift) + 1;
}

/* Is the range counted (or looked up) in fine chunks? */
static bool fine(uintptr_t start, uintptr_t end)
{
    return chunks(start, end, FINE_SHIFT) <= SPAN;
}

static struct rc_filter_table *new_table(unsigned bits)
{
    struct rc_filter_table *t = calloc(1, sizeof(*t) + ((size_t)1 << bits) * sizeof(atomic_uint));
    if (t) {
        t->bits = bits;
        t->crowded_above = bits < MAX_FINE_BITS ? CROWDED_ABOVE(bits) : SIZE_MAX;
    }
    return t;
}

int rc_filter_init(struct rc_range_filter *f)
{
    struct rc_filter_table *t = new_table(FIRST_FINE_BITS);
    atomic_init(&f->fine, t);
    f->retired = NULL;
    return t ? REGCACHE_OK : REGCACHE_ERR_NO_MEMORY;
}

void rc_filter_fini(struct rc_range_filter *f)
{
    free(atomic_load_explicit(&f->fine, memory_order_relaxed));
    atomic_store_explicit(&f->fine, NULL, memory_order_relaxed);
    while (f->retired) {
        struct rc_filter_table *next = f->retired->retired_next;
        free(f->retired);
        f->retired = next;
    }
}

/* Writers hold the cache lock: a plain load and store suffices.  Returns
 * the count before. */
static unsigned bump(atomic_uint *n, int delta)
{
    unsigned was = atomic_load_explicit(n, memory_order_relaxed);
    atomic_store_explicit(n, was + (unsigned)delta, memory_order_relaxed);
    return was;
}

/* A counted range is never empty: its first chunk is bumped unconditionally
 * and the loop ends on its last, with no bound computed before it. */
static void bump_fine(struct rc_filter_table *t, uintptr_t start, uintptr_t end, int delta)
{
    unsigned bits = t->bits; /* read once: the counts' stores might alias it */
    for (uintptr_t c = start >> FINE_SHIFT, last = (end - 1) >> FINE_SHIFT;; c++) {
        unsigned was = bump(&t->n[slot_of(c, bits)], delta);
        if (delta > 0 && was == 0)
            t->occupied++;
        else if (delta < 0 && was == 1)
            t->occupied--;
        if (c == last)
            break;
    }
}

/* Fine chunks when the range covers few, else coarse ones, else `huge`.
 * Inlined into add and remove, so that delta is a constant in each. */
static inline __attribute__((always_inline)) void adjust(struct rc_range_filter *f, uintptr_t start,
                                                         uintptr_t end, int delta)
{
    if (fine(start, end)) {
        bump_fine(atomic_load_explicit(&f->fine, memory_order_relaxed), start, end, delta);
    } else if (chunks(start, end, COARSE_SHIFT) <= SPAN) {
        for (uintptr_t c = start >> COARSE_SHIFT; c <= (end - 1) >> COARSE_SHIFT; c++)
            bump(&f->coarse[slot_of(c, COARSE_BITS)], delta);
    } else {
        bump(&f->huge, delta);
    }
}

bool rc_filter_add(struct rc_range_filter *f, uintptr_t start, uintptr_t end)
{
    adjust(f, start, end, 1);
    struct rc_filter_table *t = atomic_load_explicit(&f->fine, memory_order_relaxed);
    return t->occupied > t->crowded_above;
}

void rc_filter_remove(struct rc_range_filter *f, uintptr_t start, uintptr_t end)
{
    adjust(f, start, end, -1);
}

static bool any(const atomic_uint *n, unsigned bits, uintptr_t start, uintptr_t end, unsigned shift)
{
    for (uintptr_t c = start >> shift; c <= (end - 1) >> shift; c++)
        if (atomic_load_explicit(&n[slot_of(c, bits)], memory_order_relaxed))
            return true;
    return false;
}

bool rc_filter_may_overlap(const struct rc_range_filter *f, uintptr_t start, uintptr_t end)
{
    if (!fine(start, end) || atomic_load_explicit(&f->huge, memory_order_relaxed))
        return true;
    const struct rc_filter_table *t = atomic_load_explicit(&f->fine, memory_order_acquire);
    return any(t->n, t->bits, start, end, FINE_SHIFT) ||
           any(f->coarse, COARSE_BITS, start, end, COARSE_SHIFT);
}

struct rc_filter_table *rc_filter_grow_begin(const struct rc_range_filter *f)
{
    const struct rc_filter_table *t = atomic_load_explicit(&f->fine, memory_order_relaxed);
    return new_table(t->bits + GROWTH);
}

bool rc_filter_grows_into(const struct rc_range_filter *f, const struct rc_filter_table *t)
{
    return atomic_load_explicit(&f->fine, memory_order_relaxed)->bits + GROWTH == t->bits;
}

void rc_filter_clear(struct rc_range_filter *f)
{
    struct rc_filter_table *t = atomic_load_explicit(&f->fine, memory_order_relaxed);
    for (size_t i = 0; i < (size_t)1 << t->bits; i++)
        atomic_store_explicit(&t->n[i], 0, memory_order_relaxed);
    t->occupied = 0;
    for (size_t i = 0; i < RC_FILTER_COARSE_SLOTS; i++)
        atomic_store_explicit(&f->coarse[i], 0, memory_order_relaxed);
    atomic_store_explicit(&f->huge, 0, memory_order_relaxed);
}

void rc_filter_refill(struct rc_filter_table *t, uintptr_t start, uintptr_t end)
{
    if (fine(start, end))
        bump_fine(t, start, end, 1);
}

void rc_filter_grow_end(struct rc_range_filter *f, struct rc_filter_table *t)
{
    struct rc_filter_table *old = atomic_load_explicit(&f->fine, memory_order_relaxed);
    atomic_store_explicit(&f->fine, t, memory_order_release);
    old->retired_next = f->retired;
    f->retired = old;
}
