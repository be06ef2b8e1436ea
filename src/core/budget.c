/* Each device's budget: how many bytes and entries it may keep unused, and
 * the largest allocation it registers whole. */
#include <sched.h>
#include <stdint.h>

#include "bar1_budget.h"
#include "cache.h"

static size_t or_unlimited(size_t n)
{
    return n ? n : SIZE_MAX;
}

/* params.max_bytes, else what BAR1 can hold for a GPU, else (host memory,
 * no NVML) no limit. */
static void set_budget(struct regcache *c, int slot, struct rc_device *d)
{
    const struct regcache_params *p = &c->opts.params;
    size_t bytes = p->max_bytes;
    if (!bytes && slot != RC_HOST_SLOT)
        bytes = rc_bar1_budget(slot);
    bytes = or_unlimited(bytes);
    /* A quarter of the budget: an allocation larger than that, registered
     * whole for a small request, would crowd out everything else, and under
     * a budget smaller than itself it would be evicted at every put. */
    size_t whole = p->whole_allocation_max ? p->whole_allocation_max
                   : bytes == SIZE_MAX    ? SIZE_MAX
                                          : bytes / 4;
    d->whole_max = whole;
    atomic_store_explicit(&d->max_entries, or_unlimited(p->max_entries), memory_order_relaxed);
    atomic_store_explicit(&d->max_bytes, bytes, memory_order_relaxed);
}

struct rc_device *rc_device(struct regcache *c, int slot)
{
    struct rc_device *d = &c->dev[slot];
    int state = atomic_load_explicit(&d->budget_state, memory_order_acquire);
    if (__builtin_expect(state == 2, 1))
        return d;
    /* One thread reads the budget (NVML may take milliseconds); others wait
     * for it, without holding the cache lock. */
    if (state == 0 && atomic_compare_exchange_strong_explicit(&d->budget_state, &state, 1,
                                                              memory_order_acquire,
                                                              memory_order_acquire)) {
        set_budget(c, slot, d);
        atomic_store_explicit(&d->budget_state, 2, memory_order_release);
        return d;
    }
    while (atomic_load_explicit(&d->budget_state, memory_order_acquire) != 2)
        sched_yield();
    return d;
}
