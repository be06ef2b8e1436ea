/* The unmaps in flight (host_unmapping.h): a fixed table of slots, each
 * claimed by its end address (a compare-and-swap from 0), its start then
 * stored with its low bit set (page-aligned otherwise: never 0).  A reader
 * that finds an end without its start yet takes the slot for the whole
 * address space.  A thread starts its search at a slot of its own, hashed
 * from its thread-local storage, so that threads seldom write one line.
 * When every slot is taken, the hook counts itself in `unplaced` instead,
 * which meets everything. */
#include "host_unmapping.h"

#include <stdatomic.h>

#define SLOTS 64

struct slot {
    _Atomic uintptr_t end;
    _Atomic uintptr_t start; /* | 1 once stored */
};

static struct slot slots[SLOTS];
static atomic_uint unplaced;
/* Initial-exec: a hook must never enter the TLS resolver, which may
 * allocate.  Only its address is used. */
static _Thread_local char home __attribute__((tls_model("initial-exec")));

int rc_host_unmapping_begin(uintptr_t start, uintptr_t end)
{
    unsigned first = (unsigned)((uintptr_t)&home >> 12);
    for (unsigned i = 0; i < SLOTS; i++) {
        struct slot *s = &slots[(first + i) % SLOTS];
        uintptr_t free = 0;
        if (!atomic_load_explicit(&s->end, memory_order_relaxed) &&
            atomic_compare_exchange_strong_explicit(&s->end, &free, end, memory_order_seq_cst,
                                                    memory_order_relaxed)) {
            atomic_store_explicit(&s->start, start | 1, memory_order_seq_cst);
            atomic_thread_fence(memory_order_seq_cst);
            return (int)((first + i) % SLOTS);
        }
    }
    atomic_fetch_add_explicit(&unplaced, 1, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst);
    return -1;
}

void rc_host_unmapping_end(int token)
{
    if (token < 0) {
        atomic_fetch_sub_explicit(&unplaced, 1, memory_order_release);
        return;
    }
    atomic_store_explicit(&slots[token].start, 0, memory_order_release);
    atomic_store_explicit(&slots[token].end, 0, memory_order_release);
}

bool rc_host_unmapping_meets(uintptr_t start, uintptr_t end)
{
    if (atomic_load_explicit(&unplaced, memory_order_seq_cst))
        return true;
    for (unsigned i = 0; i < SLOTS; i++) {
        uintptr_t hi = atomic_load_explicit(&slots[i].end, memory_order_seq_cst);
        if (!hi || hi <= start)
            continue;
        uintptr_t lo = atomic_load_explicit(&slots[i].start, memory_order_seq_cst);
        if (!lo || (lo & ~(uintptr_t)1) < end)
            return true;
    }
    return false;
}

void rc_host_unmapping_forget(void)
{
    for (unsigned i = 0; i < SLOTS; i++) {
        atomic_store_explicit(&slots[i].start, 0, memory_order_relaxed);
        atomic_store_explicit(&slots[i].end, 0, memory_order_relaxed);
    }
    atomic_store_explicit(&unplaced, 0, memory_order_relaxed);
}
