/* The entry dump: regcache_foreach_entry() and regcache_print_entries().
 * The entries are copied under the cache lock and shown after it, so that
 * what the callback does (print to a pipe, call the library) never holds
 * up gets. */
#include <inttypes.h>
#include <stdlib.h>

#include "cache.h"
#include "last_error.h"
#include "threads.h"

/* The entries that hold slots name, sorted, to count each entry's. */
struct slot_holds {
    uintptr_t *v;
    size_t n, cap;
    bool short_of_memory;
};

static bool collect_slots(struct rc_thread *t, void *arg)
{
    struct slot_holds *h = arg;
    for (int i = 0; i < RC_HOLD_SLOTS; i++) {
        uintptr_t v = atomic_load_explicit(&t->holds[i], memory_order_acquire);
        if (!v)
            continue;
        if (h->n == h->cap) {
            size_t cap = h->cap ? 2 * h->cap : 64;
            uintptr_t *grown = realloc(h->v, cap * sizeof *grown);
            if (!grown)
                return h->short_of_memory = true;
            h->v = grown;
            h->cap = cap;
        }
        h->v[h->n++] = v & ~RC_HOLD_RAIL_MASK;
    }
    return false;
}

static int by_address(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return (x > y) - (x < y);
}

static unsigned slot_holds_of(const struct slot_holds *h, const struct regcache_entry *e)
{
    size_t lo = 0, hi = h->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (h->v[mid] < (uintptr_t)e)
            lo = mid + 1;
        else
            hi = mid;
    }
    unsigned n = 0;
    while (lo < h->n && h->v[lo++] == (uintptr_t)e)
        n++;
    return n;
}

struct copy {
    struct regcache_entry_info *info;
    size_t n, cap;
    uint64_t now;
    const struct slot_holds *slots;
};

static void copy_entry(struct rc_itree_node *node, void *arg)
{
    struct copy *k = arg;
    struct regcache_entry *e = rc_entry_of_node(node);
    if (e->state != RC_READY || k->n == k->cap)
        return;
    k->info[k->n++] = (struct regcache_entry_info){
        .start = e->node.start,
        .bytes = rc_entry_len(e),
        .device = e->device,
        .rails = atomic_load_explicit(&e->rails_ready, memory_order_relaxed),
        .holders = (atomic_load_explicit(&e->refs, memory_order_relaxed) & RC_COUNT_MASK) +
                   slot_holds_of(k->slots, e),
        .age_ns = rc_clock_ns_between(e->born, k->now),
    };
}

/* Copy the cache's ready entries into k (k->cap of them at most); false
 * when there were more (the caller grows k and asks again). */
static bool copy_entries(struct regcache *c, struct copy *k, struct slot_holds *slots)
{
    rc_lock(&c->lock);
    size_t in_tree = c->tree.count;
    if (in_tree <= k->cap) {
        /* Under the lock no entry is recycled: a slot's address that
         * equals an entry's is a hold of it. */
        slots->n = 0;
        rc_thread_visit(collect_slots, slots);
        if (slots->n)
            qsort(slots->v, slots->n, sizeof *slots->v, by_address);
        k->slots = slots;
        k->now = rc_clock_now_coarse();
        rc_itree_visit_all(&c->tree, copy_entry, k);
    }
    rc_unlock(&c->lock);
    return in_tree <= k->cap;
}

int regcache_foreach_entry(regcache_t *c, int (*cb)(void *arg, const struct regcache_entry_info *),
                           void *arg)
{
    if (!c || !cb)
        return rc_fail(REGCACHE_ERR_INVALID, "regcache_foreach_entry: %s is NULL",
                       !c ? "cache" : "cb");
    if (rc_forked(c))
        return rc_fail(REGCACHE_ERR_FORKED, "regcache_foreach_entry: the cache was created "
                                            "before fork(); create a new cache in the child");
    struct copy k = { 0 };
    struct slot_holds slots = { 0 };
    int rc = REGCACHE_OK;
    for (size_t cap = c->tree.count + 64;; cap *= 2) {
        free(k.info);
        k = (struct copy){ .info = malloc(cap * sizeof *k.info), .cap = cap };
        if (!k.info) {
            rc = rc_fail(REGCACHE_ERR_NO_MEMORY,
                         "regcache_foreach_entry: no memory to copy "
                         "%zu entries",
                         cap);
            break;
        }
        if (copy_entries(c, &k, &slots))
            break;
    }
    if (slots.short_of_memory)
        rc = rc_fail(REGCACHE_ERR_NO_MEMORY, "regcache_foreach_entry: no memory to read the "
                                             "threads' holds");
    for (size_t i = 0; rc == REGCACHE_OK && i < k.n; i++)
        rc = cb(arg, &k.info[i]);
    free(k.info);
    free(slots.v);
    return rc;
}

static int print_entry(void *arg, const struct regcache_entry_info *e)
{
    FILE *out = arg;
    char device[16];
    snprintf(device, sizeof device, e->device == REGCACHE_DEVICE_HOST ? "host" : "%d", e->device);
    return fprintf(out,
                   "  %#" PRIxPTR "-%#" PRIxPTR " %zu bytes device %s rails %#x holders %u age "
                   "%" PRIu64 " ms\n",
                   e->start, e->start + e->bytes, e->bytes, device, e->rails, e->holders,
                   e->age_ns / 1000000) < 0
               ? REGCACHE_ERR_BACKEND
               : REGCACHE_OK;
}

int regcache_print_entries(regcache_t *c, FILE *out)
{
    if (!c || !out)
        return rc_fail(REGCACHE_ERR_INVALID, "regcache_print_entries: %s is NULL",
                       !c ? "cache" : "out");
    struct regcache_stats s;
    regcache_get_stats(c, &s);
    if (fprintf(out, "regcache %s: %" PRIu64 " entries, %" PRIu64 " bytes\n", c->opts.name,
                s.entries, s.bytes) < 0)
        return rc_fail(REGCACHE_ERR_BACKEND, "regcache_print_entries: writing failed");
    int rc = regcache_foreach_entry(c, print_entry, out);
    if (rc == REGCACHE_ERR_BACKEND)
        rc_fail(rc, "regcache_print_entries: writing failed");
    return rc;
}
