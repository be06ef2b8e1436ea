#include "range_filter.h"

#define FINE_SHIFT 21
#define COARSE_SHIFT 30
/* The most chunks an entry or a query covers at one granularity. */
#define SPAN 16

static unsigned slot_of(uintptr_t chunk)
{
    return (unsigned)(((uint64_t)chunk * 0x9e3779b97f4a7c15ull) >> 52) % RC_FILTER_SLOTS;
}

static uintptr_t chunks(uintptr_t start, uintptr_t end, unsigned shift)
{
    return ((end - 1) >> shift) - (start >> shift) + 1;
}

/* Writers hold the cache lock: a plain load and store suffices. */
static void bump(atomic_uint *n, int delta)
{
    atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + (unsigned)delta,
                          memory_order_relaxed);
}

static void adjust(struct rc_range_filter *f, uintptr_t start, uintptr_t end, int delta)
{
    atomic_uint *table = f->fine;
    unsigned shift = FINE_SHIFT;
    if (chunks(start, end, FINE_SHIFT) > SPAN) {
        table = f->coarse;
        shift = COARSE_SHIFT;
        if (chunks(start, end, COARSE_SHIFT) > SPAN) {
            bump(&f->huge, delta);
            return;
        }
    }
    for (uintptr_t c = start >> shift; c <= (end - 1) >> shift; c++)
        bump(&table[slot_of(c)], delta);
}

void rc_filter_add(struct rc_range_filter *f, uintptr_t start, uintptr_t end)
{
    adjust(f, start, end, 1);
}

void rc_filter_remove(struct rc_range_filter *f, uintptr_t start, uintptr_t end)
{
    adjust(f, start, end, -1);
}

static bool any(const atomic_uint *table, uintptr_t start, uintptr_t end, unsigned shift)
{
    for (uintptr_t c = start >> shift; c <= (end - 1) >> shift; c++)
        if (atomic_load_explicit(&table[slot_of(c)], memory_order_relaxed))
            return true;
    return false;
}

bool rc_filter_may_overlap(const struct rc_range_filter *f, uintptr_t start, uintptr_t end)
{
    if (chunks(start, end, FINE_SHIFT) > SPAN ||
        atomic_load_explicit(&f->huge, memory_order_relaxed))
        return true;
    return any(f->fine, start, end, FINE_SHIFT) || any(f->coarse, start, end, COARSE_SHIFT);
}
